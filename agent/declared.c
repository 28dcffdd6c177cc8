/*
 * declared.c - the declaration check for Materialize (agent/declared.h).
 */
#include "declared.h"

#include <errno.h>
#include <string.h>

#include <tkm/grpc.h>
#include <tkm/log.h>

static const struct k8s_obj *inf_get(void *ctx, const char *ns, const char *name)
{
    return k8s_informer_get(ctx, ns, name);
}

static int inf_foreach(void *ctx, int (*fn)(const struct k8s_obj *obj, void *data), void *data)
{
    return k8s_informer_foreach(ctx, fn, data);
}

void agent_objsrc_informer(struct agent_objsrc *src, const struct k8s_informer *inf)
{
    src->get = inf_get;
    src->foreach = inf_foreach;
    src->ctx = (void *)inf; /* only ever read through the informer's const API */
}

void agent_declared_release(struct agent_declared *d)
{
    if (!d)
        return;
    tkm_api_cache_release(&d->cache);
    memset(d, 0, sizeof *d);
}

int agent_declared_grpc_code(int rc)
{
    switch (rc) {
    case 0:
        return TKM_GRPC_OK;
    case -EACCES:
        return TKM_GRPC_PERMISSION_DENIED;
    case -EPROTO:
        return TKM_GRPC_FAILED_PRECONDITION;
    case -EINVAL:
        return TKM_GRPC_INVALID_ARGUMENT;
    default:
        return TKM_GRPC_INTERNAL;
    }
}

/* Decodes obj into found. */
static int take(const struct k8s_obj *obj, int cluster, struct agent_declared *found,
                struct tkm_err *err)
{
    int rc = tkm_api_cache_decode(obj->json, obj->json_len, &found->cache, err);
    if (rc < 0) {
        tkm_err_prefix(err, "%s %s%s%s cannot be used",
                       cluster ? "TritonKernelCacheCluster" : "TritonKernelCache",
                       cluster ? "" : obj->ns, cluster ? "" : "/", obj->name);
        return rc;
    }
    found->cluster = cluster;
    found->ns = cluster ? "" : obj->ns;
    found->name = obj->name;
    found->obj = obj;
    return 0;
}

static int find_by_name(const struct agent_objsrc *tkc, const struct agent_objsrc *tkcc,
                        const char *pod_ns, const char *name, struct agent_declared *found,
                        struct tkm_err *err)
{
    const struct k8s_obj *o = tkc->get(tkc->ctx, pod_ns, name);
    if (o && strcmp(o->ns, pod_ns) == 0)
        return take(o, 0, found, err);
    if ((o = tkcc->get(tkcc->ctx, NULL, name)) != NULL)
        return take(o, 1, found, err);
    return tkm_err_set(err, -EACCES,
                       "cache \"%s\" is not declared for namespace \"%s\": no TritonKernelCache "
                       "%s/%s and no TritonKernelCacheCluster %s",
                       name, pod_ns, pod_ns, name, name);
}

struct image_scan {
    const char *ns; /* NULL: cluster objects */
    const char *image;
    const struct k8s_obj *best;
    int rc; /* -ENOMEM seen */
};

static int image_fn(const struct k8s_obj *obj, void *data)
{
    struct image_scan *s = data;
    struct tkm_api_cache c = {0};
    struct tkm_err err = {0};
    int rc;
    if (s->ns && strcmp(obj->ns, s->ns) != 0)
        return 0; /* another namespace's cache never matches */
    if (s->best && strcmp(obj->name, s->best->name) >= 0)
        return 0; /* cannot win: save the decoding */
    rc = tkm_api_cache_decode(obj->json, obj->json_len, &c, &err);
    if (rc == -ENOMEM)
        return s->rc = -ENOMEM;
    if (rc < 0)
        tkm_warn("agent: declared: skipping %s: %s", obj->key, tkm_err_str(&err));
    else if (c.spec.cache_image && strcmp(c.spec.cache_image, s->image) == 0)
        s->best = obj;
    tkm_api_cache_release(&c);
    return 0;
}

static int find_by_image(const struct agent_objsrc *tkc, const struct agent_objsrc *tkcc,
                         const char *pod_ns, const char *image, struct agent_declared *found,
                         struct tkm_err *err)
{
    struct image_scan s = {.ns = pod_ns, .image = image};
    tkc->foreach (tkc->ctx, image_fn, &s);
    if (s.rc < 0)
        return tkm_err_set(err, s.rc, "out of memory looking for image %s", image);
    if (s.best)
        return take(s.best, 0, found, err);
    s = (struct image_scan){.ns = NULL, .image = image};
    tkcc->foreach (tkcc->ctx, image_fn, &s);
    if (s.rc < 0)
        return tkm_err_set(err, s.rc, "out of memory looking for image %s", image);
    if (s.best)
        return take(s.best, 1, found, err);
    return tkm_err_set(err, -EACCES,
                       "image \"%s\" is not declared for namespace \"%s\": no cache in namespace "
                       "%s or cluster-wide declares image %s",
                       image, pod_ns, pod_ns, image);
}

int agent_declared_find(const struct agent_objsrc *tkc, const struct agent_objsrc *tkcc,
                        const char *pod_ns, const struct agent_materialize_req *req,
                        struct agent_declared *found, struct tkm_err *err)
{
    int rc;
    memset(found, 0, sizeof *found);
    if (!pod_ns || !*pod_ns)
        return tkm_err_set(err, -EINVAL, "no pod namespace to look the cache up for");
    if (req->cache_name && !req->cache_image)
        rc = find_by_name(tkc, tkcc, pod_ns, req->cache_name, found, err);
    else if (req->cache_image && !req->cache_name)
        rc = find_by_image(tkc, tkcc, pod_ns, req->cache_image, found, err);
    else
        rc = tkm_err_set(err, -EINVAL,
                         "the request must name exactly one of cacheName and "
                         "cacheImage");
    if (rc < 0)
        agent_declared_release(found);
    return rc;
}
