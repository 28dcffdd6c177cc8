/*
 * declared.c - the agent's decoded index of caches and the declaration check
 * for Materialize (agent/declared.h).
 */
#include "declared.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tkm/grpc.h>
#include <tkm/log.h>

void agent_verdicts_release(struct agent_verdicts *vs)
{
    free(vs->v);
    free(vs->code);
    free(vs->variant);
    memset(vs, 0, sizeof *vs);
}

void agent_cache_variants_clear(struct agent_cache *ac)
{
    for (size_t i = 0; ac->vars && i < ac->variants.n; i++) {
        tkm_triton_summary_release(&ac->vars[i].summary);
        free(ac->vars[i].layer_digest);
    }
    free(ac->vars);
    ac->vars = NULL;
    tkm_variant_set_release(&ac->variants);
}

void agent_cache_destroy(struct agent_cache *ac)
{
    if (!ac)
        return;
    tkm_api_cache_release(&ac->c);
    tkm_triton_summary_release(&ac->summary);
    agent_verdicts_release(&ac->verdicts);
    agent_cache_variants_clear(ac);
    free(ac->layer_digest);
    free(ac->inputs);
    free(ac->verified_inputs);
    free(ac->bad);
    free(ac->key);
    free(ac);
}

void agent_index_init(struct agent_index *x, struct agent_cache **live)
{
    memset(x, 0, sizeof *x);
    x->live = live;
    *live = NULL;
}

void agent_index_release(struct agent_index *x)
{
    const char *k;
    void *v;
    size_t pos = 0;
    while (tkm_strmap_next(&x->by_key, &pos, &k, &v))
        agent_cache_destroy(v); /* the map does not read its keys again */
    tkm_strmap_release(&x->by_key);
    tkm_strmap_release(&x->by_image);
    if (x->live)
        *x->live = NULL;
    x->n_live = 0;
}

struct agent_cache *agent_index_get(const struct agent_index *x, const char *key)
{
    return tkm_strmap_get(&x->by_key, key);
}

/* ---- the chains by image and the live list ------------------------------------------------- */

static void image_unlink(struct agent_index *x, struct agent_cache *ac)
{
    const char *img = ac->c.spec.cache_image;
    struct agent_cache *head = img ? tkm_strmap_get(&x->by_image, img) : NULL;
    if (head == ac) {
        if (ac->img_next)
            tkm_strmap_put(&x->by_image, ac->img_next->c.spec.cache_image, ac->img_next, NULL);
        else
            tkm_strmap_del(&x->by_image, img);
    } else {
        for (struct agent_cache *p = head; p; p = p->img_next)
            if (p->img_next == ac) {
                p->img_next = ac->img_next;
                break;
            }
    }
    ac->img_next = NULL;
}

static int image_link(struct agent_index *x, struct agent_cache *ac)
{
    const char *img = ac->c.spec.cache_image;
    ac->img_next = tkm_strmap_get(&x->by_image, img);
    int rc = tkm_strmap_put(&x->by_image, img, ac, NULL);
    if (rc < 0)
        ac->img_next = NULL;
    return rc;
}

static void live_link(struct agent_index *x, struct agent_cache *ac)
{
    ac->next = *x->live;
    *x->live = ac;
    ac->live = 1;
    x->n_live++;
}

static void live_unlink(struct agent_index *x, struct agent_cache *ac)
{
    for (struct agent_cache **pp = x->live; *pp; pp = &(*pp)->next)
        if (*pp == ac) {
            *pp = ac->next;
            break;
        }
    ac->next = NULL;
    ac->live = 0;
    x->n_live--;
}

/* ---- events ------------------------------------------------------------------------------ */

/* What a change of which re-verifies: the spec and the pinned digest (not the
 * controller's other status fields). *out owned. */
static char *cache_inputs(const char *json, size_t len, const char *digest)
{
    json_error_t je;
    json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    json_t *in =
        json_pack("{s:O?,s:s?}", "spec", o ? json_object_get(o, "spec") : NULL, "digest", digest);
    char *s = in ? json_dumps(in, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(in);
    json_decref(o);
    return s;
}

static int refuse(struct agent_cache *ac, const struct k8s_obj *obj, struct tkm_err *de,
                  struct tkm_err *err)
{
    int cluster = !obj->ns[0];
    tkm_err_prefix(de, "%s %s%s%s cannot be used",
                   cluster ? "TritonKernelCacheCluster" : "TritonKernelCache", obj->ns,
                   cluster ? "" : "/", obj->name);
    free(ac->bad);
    ac->bad = strdup(tkm_err_str(de));
    return tkm_err_set(err, ac->bad ? de->code : -ENOMEM, "%s", tkm_err_str(de));
}

int agent_index_apply(struct agent_index *x, const struct k8s_obj *obj, struct agent_cache **entry,
                      struct tkm_err *err)
{
    struct tkm_api_cache c = {0};
    struct tkm_err de = {0};
    char *inputs = NULL;
    struct agent_cache *ac = tkm_strmap_get(&x->by_key, obj->key);
    if (entry)
        *entry = NULL;
    if (!ac) {
        if (!(ac = calloc(1, sizeof *ac)) || !(ac->key = strdup(obj->key)) ||
            tkm_strmap_put(&x->by_key, ac->key, ac, NULL) < 0) {
            agent_cache_destroy(ac);
            return tkm_err_set(err, -ENOMEM, "out of memory");
        }
    }
    if (entry)
        *entry = ac;
    int rc = tkm_api_cache_decode(obj->json, obj->json_len, &c, &de);
    if (rc < 0)
        return rc == -ENOMEM ? tkm_err_set(err, rc, "out of memory") : refuse(ac, obj, &de, err);
    if (!c.meta.deletion_timestamp &&
        !(inputs = cache_inputs(obj->json, obj->json_len, c.status.resolved_digest))) {
        tkm_api_cache_release(&c);
        return tkm_err_set(err, -ENOMEM, "out of memory");
    }
    free(ac->bad);
    ac->bad = NULL;
    if (ac->c.spec.cache_image)
        image_unlink(x, ac);
    tkm_api_cache_release(&ac->c);
    ac->c = c;
    if (image_link(x, ac) < 0)
        tkm_err("agent: index: out of memory: %s is not found by its image", ac->key);
    if (c.meta.deletion_timestamp) {
        ac->deleting = 1;
        if (!ac->live)
            return AGENT_INDEX_SAME;
        live_unlink(x, ac);
        return AGENT_INDEX_GONE;
    }
    ac->deleting = 0;
    int changed = !ac->live || !ac->inputs || strcmp(ac->inputs, inputs) != 0;
    free(ac->inputs);
    ac->inputs = inputs;
    if (!ac->live)
        live_link(x, ac);
    return changed ? AGENT_INDEX_INPUTS : AGENT_INDEX_SAME;
}

int agent_index_add(struct agent_index *x, struct agent_cache *ac)
{
    int rc = tkm_strmap_put(&x->by_key, ac->key, ac, NULL);
    if (rc == 0)
        live_link(x, ac);
    return rc;
}

struct agent_cache *agent_index_take(struct agent_index *x, const char *key)
{
    struct agent_cache *ac = tkm_strmap_del(&x->by_key, key);
    if (!ac)
        return NULL;
    if (ac->c.spec.cache_image)
        image_unlink(x, ac);
    if (ac->live)
        live_unlink(x, ac);
    return ac;
}

/* ---- the declaration check ------------------------------------------------------------------ */

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

/* An entry found by name: refused when its current object does not decode. */
static int take(struct agent_cache *ac, struct agent_cache **found, struct tkm_err *err)
{
    if (ac->bad || !ac->c.meta.name)
        return tkm_err_set(err, -EPROTO, "%s",
                           ac->bad ? ac->bad : "the cache's object could not be decoded");
    *found = ac;
    return 0;
}

static int find_by_name(const struct agent_index *x, const char *pod_ns, const char *name,
                        struct agent_cache **found, struct tkm_err *err)
{
    char key[600];
    struct agent_cache *ac;
    int n = snprintf(key, sizeof key, "%s/%s", pod_ns, name);
    if (n > 0 && (size_t)n < sizeof key && (ac = agent_index_get(x, key)) != NULL)
        return take(ac, found, err);
    if ((ac = agent_index_get(x, name)) != NULL)
        return take(ac, found, err);
    return tkm_err_set(err, -EACCES,
                       "cache \"%s\" is not declared for namespace \"%s\": no TritonKernelCache "
                       "%s/%s and no TritonKernelCacheCluster %s",
                       name, pod_ns, pod_ns, name, name);
}

static int find_by_image(const struct agent_index *x, const char *pod_ns, const char *image,
                         struct agent_cache **found, struct tkm_err *err)
{
    struct agent_cache *mine = NULL, *cl = NULL;
    for (struct agent_cache *p = tkm_strmap_get(&x->by_image, image); p; p = p->img_next) {
        struct agent_cache **best = p->c.cluster ? &cl : &mine;
        if (p->bad || (!p->c.cluster && strcmp(p->c.meta.ns, pod_ns) != 0))
            continue; /* another namespace's cache never matches */
        if (!*best || strcmp(p->c.meta.name, (*best)->c.meta.name) < 0)
            *best = p;
    }
    if ((*found = mine ? mine : cl) != NULL)
        return 0;
    return tkm_err_set(err, -EACCES,
                       "image \"%s\" is not declared for namespace \"%s\": no cache in namespace "
                       "%s or cluster-wide declares image %s",
                       image, pod_ns, pod_ns, image);
}

int agent_declared_find(const struct agent_index *x, const char *pod_ns,
                        const struct agent_materialize_req *req, struct agent_cache **found,
                        struct tkm_err *err)
{
    *found = NULL;
    if (!pod_ns || !*pod_ns)
        return tkm_err_set(err, -EINVAL, "no pod namespace to look the cache up for");
    if (req->cache_name && !req->cache_image)
        return find_by_name(x, pod_ns, req->cache_name, found, err);
    if (req->cache_image && !req->cache_name)
        return find_by_image(x, pod_ns, req->cache_image, found, err);
    return tkm_err_set(err, -EINVAL,
                       "the request must name exactly one of cacheName and "
                       "cacheImage");
}
