/*
 * yaml_out.h - a JSON document written as YAML, the way `kubectl -o yaml`
 * prints objects: block style, keys in the document's order, no line
 * wrapping, and every string that a YAML reader would take for another type
 * (a number, a bool, null, a timestamp, the empty string, ...) double-quoted,
 * so that the YAML reads back as the same JSON.
 *
 * Ownership: doc is borrowed; the text is appended to out (caller-owned).
 */
#ifndef TKM_YAML_OUT_H
#define TKM_YAML_OUT_H

#include <jansson.h>

struct tkm_buf;

/* One YAML document (with no "---" marker) for doc. Returns 0, -ENOMEM, or
 * the buffer's error (-E2BIG past its max). */
int tkm_yaml_from_json(const json_t *doc, struct tkm_buf *out);

/* 1 when s must be quoted to read back as a string (exposed for tests). */
int tkm_yaml_needs_quotes(const char *s);

#endif
