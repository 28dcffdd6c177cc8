/* ctl_json.h - tkmctl's --json output: one document per command on stdout. */
#ifndef TKMCTL_CTL_JSON_H
#define TKMCTL_CTL_JSON_H

#include <jansson.h>

/* Prints j (indented, one line feed after) and releases it: 0. NULL (out of
 * memory while building it), or a j that cannot be written, prints nothing: -1. */
int ctl_json_print(json_t *j);

/* An image label's value as JSON: its number when it is a non-negative
 * integer, else the string; null when s is NULL (the label is absent). */
json_t *ctl_json_label(const char *s);

#endif
