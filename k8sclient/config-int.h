/* config-int.h - helpers shared by config.c, exec.c and client.c. */
#ifndef K8S_CONFIG_INT_H
#define K8S_CONFIG_INT_H

#include <stddef.h>

#include <tkm/buf.h>
#include <tkm/err.h>

/* Trims surrounding whitespace of a token read from a file, in place. */
void k8s__trim(struct tkm_buf *b);

/* RFC 3339 "2026-11-21T23:40:01Z" (fraction and offset allowed) to Unix
 * seconds; -EINVAL when malformed. */
int k8s__parse_time(const char *s, long long *out);

#endif
