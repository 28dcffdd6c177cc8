/* sup_k8s.c - see sup_k8s.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sup_k8s.h"

#define SYNC(call)                                                                                 \
    struct k8s_sync w = {.st = st};                                                                \
    return k8s_sync_wait(c, (call), &w, out)

int sup_k8s_get(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                const char *name, const char *subresource, json_t **out, struct k8s_status *st)
{
    SYNC(k8s_get_async(c, r, ns, name, subresource, k8s_sync_cb, &w));
}

int sup_k8s_create(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *obj,
                   json_t **out, struct k8s_status *st)
{
    SYNC(k8s_create_async(c, r, ns, obj, k8s_sync_cb, &w));
}

int sup_k8s_delete(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                   const char *name, const struct k8s_delete_opts *o, json_t **out,
                   struct k8s_status *st)
{
    SYNC(k8s_delete_async(c, r, ns, name, o, k8s_sync_cb, &w));
}

int sup_k8s_patch(struct k8s_client *c, const struct k8s_resource *r, const char *ns,
                  const char *name, json_t *patch, const struct k8s_patch_opts *o, json_t **out,
                  struct k8s_status *st)
{
    SYNC(k8s_patch_async(c, r, ns, name, patch, o, k8s_sync_cb, &w));
}

int sup_k8s_apply(struct k8s_client *c, const struct k8s_resource *r, const char *ns, json_t *obj,
                  const struct k8s_apply_opts *o, json_t **out, struct k8s_status *st)
{
    SYNC(k8s_apply_async(c, r, ns, obj, o, k8s_sync_cb, &w));
}

int sup_stderr_begin(struct sup_stderr *s)
{
    FILE *tmp = tmpfile();
    s->saved = tmp ? dup(STDERR_FILENO) : -1;
    s->fd = tmp ? dup(fileno(tmp)) : -1;
    if (tmp)
        fclose(tmp);
    fflush(stderr);
    if (s->saved >= 0 && s->fd >= 0 && dup2(s->fd, STDERR_FILENO) >= 0)
        return 0;
    if (s->saved >= 0)
        close(s->saved);
    if (s->fd >= 0)
        close(s->fd);
    s->saved = s->fd = -1;
    return -1;
}

char *sup_stderr_end(struct sup_stderr *s)
{
    if (s->saved < 0)
        return NULL;
    fflush(stderr);
    dup2(s->saved, STDERR_FILENO);
    close(s->saved);
    off_t n = lseek(s->fd, 0, SEEK_END);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (text && pread(s->fd, text, (size_t)n, 0) != n) {
        free(text);
        text = NULL;
    }
    if (text)
        text[n] = '\0';
    close(s->fd);
    s->saved = s->fd = -1;
    return text;
}
