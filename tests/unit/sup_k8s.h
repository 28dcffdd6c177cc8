/*
 * sup_k8s.h - synchronous forms of libk8sclient's verbs, for tests and the
 * e2e programs only (the daemons use the _async verbs on their loop).
 *
 * Each runs the client's loop until its one request is done: never call one
 * from inside a loop callback. *out (optional) gets an owned reference
 * (json_decref()) on success, NULL on failure; st (optional) gets the report
 * of a request that was sent and failed. A request the verb refuses before
 * sending returns its error at once, and its reason is in the log (stderr):
 * read it with sup_stderr_begin()/sup_stderr_end(). Return 0 or the
 * negative errno.
 */
#ifndef TKM_TEST_SUP_K8S_H
#define TKM_TEST_SUP_K8S_H

#include <k8s/client.h>

int sup_k8s_get(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                const char *name, const char *subresource, json_t **out, struct k8s_status *st);
int sup_k8s_create(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *obj,
                   json_t **out, struct k8s_status *st);
int sup_k8s_delete(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                   const char *name, const struct k8s_delete_opts *o, json_t **out,
                   struct k8s_status *st);
int sup_k8s_patch(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                  const char *name, json_t *patch, const struct k8s_patch_opts *o, json_t **out,
                  struct k8s_status *st);
int sup_k8s_apply(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *obj,
                  const struct k8s_apply_opts *o, json_t **out, struct k8s_status *st);

/* Sends stderr (where tkm_log writes) to a temporary file until
 * sup_stderr_end(), which puts stderr back and returns what was written
 * (owned, free(); NULL if it could not be read). begin returns 0 or -1. */
struct sup_stderr {
    int saved, fd;
};
int sup_stderr_begin(struct sup_stderr *s);
char *sup_stderr_end(struct sup_stderr *s);

#endif
