/* client-int.h - the client's internals shared by client.c, rest.c and events.c. */
#ifndef K8S_CLIENT_INT_H
#define K8S_CLIENT_INT_H

#include <k8s/client.h>
#include <k8s/status.h>

/* Fills st with a client-side error (no request was sent): code 0,
 * transport 0, rc and message. Returns rc. */
int k8s__status_local(struct k8s_status *st, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What identifies a file's content cheaply: a rotated file (a new inode from
 * a rename or the kubelet's symlink swap, or a rewrite) changes it. */
struct k8s__file_stamp {
    uint64_t dev, ino;
    int64_t size, mtime_ns;
};
/* 0 or -errno from stat(2). */
int k8s__file_stamp_get(const char *path, struct k8s__file_stamp *out);
int k8s__file_stamp_eq(const struct k8s__file_stamp *a, const struct k8s__file_stamp *b);
/* How many times a changed CA file was taken (tests, logs). */
unsigned k8s__client_ca_reloads(const struct k8s_client *c);

#endif
