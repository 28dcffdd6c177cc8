/* nodestatus.c - TritonKernelCacheNodeStatus / ...Cluster: release, status apply (the decoder
 * is nodestatus_scan.c's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api-int.h"

#define KIND         "TritonKernelCacheNodeStatus"
#define KIND_CLUSTER "TritonKernelCacheNodeStatusCluster"

/* ---- release ---------------------------------------------------------------- */

static void groups_release(struct tkm_api_gpu_group *g, size_t n)
{
    for (size_t i = 0; g && i < n; i++) {
        free(g[i].ids);
        free(g[i].gpu_type);
        free(g[i].reason);
        free(g[i].message);
    }
    free(g);
}

static void node_cache_release(struct tkm_api_node_cache *c)
{
    free(c->name);
    free(c->digest);
    groups_release(c->compatible, c->n_compatible);
    groups_release(c->incompatible, c->n_incompatible);
    for (size_t i = 0; i < c->n_pods; i++) {
        free(c->pods[i].ns);
        free(c->pods[i].name);
        free(c->pods[i].uid);
        free(c->pods[i].volume_id);
    }
    free(c->pods);
    free(c->error);
    free(c->last_updated);
    free(c->fail_reason);
    free(c->fail_message);
    free(c->fail_time);
    for (size_t i = 0; i < c->n_variants; i++) {
        struct tkm_api_variant_use *v = &c->variants[i];
        free(v->digest);
        free(v->gpu_ids);
    }
    free(c->variants);
    free(c->fallback);
    tkm_api_compiles_release(&c->compiles);
}

static void gpu_release(struct tkm_api_gpu *g)
{
    char *s[] = {g->gpu_type,
                 g->vendor,
                 g->product_name,
                 g->arch,
                 g->compute_capability,
                 g->driver_version,
                 g->cuda_driver_version,
                 g->rocm_version,
                 g->uuid,
                 g->pci_bus_id};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        free(s[i]);
}

void tkm_api_node_status_release(struct tkm_api_node_status *st)
{
    free(st->node_name);
    for (size_t i = 0; i < st->n_gpus; i++)
        gpu_release(&st->gpus[i]);
    free(st->gpus);
    for (size_t i = 0; i < st->n_caches; i++)
        node_cache_release(&st->caches[i]);
    free(st->caches);
    free(st->last_updated);
    memset(st, 0, sizeof *st);
}

void tkm_api_nodestatus_release(struct tkm_api_nodestatus *n)
{
    tkm__api_meta_release(&n->meta);
    tkm_api_node_status_release(&n->status);
    n->cluster = 0;
}

/* ---- apply -------------------------------------------------------------------- */

const char *tkm_api_prefetch_state_name(enum tkm_api_prefetch_state s)
{
    return s == TKM_API_PREFETCH_WAITING   ? "Waiting"
           : s == TKM_API_PREFETCH_PULLING ? "Pulling"
                                           : NULL;
}

static json_t *gpu_encode(const struct tkm_api_gpu *g)
{
    json_t *o = json_object();
    if (!o || tkm__api_set_int(o, "id", g->id) || tkm__api_set_str(o, "gpuType", g->gpu_type) ||
        tkm__api_set_str(o, "vendor", g->vendor) ||
        tkm__api_set_str(o, "productName", g->product_name) ||
        tkm__api_set_str(o, "arch", g->arch) ||
        tkm__api_set_str(o, "computeCapability", g->compute_capability) ||
        (g->warp_size && tkm__api_set_int(o, "warpSize", g->warp_size)) ||
        tkm__api_set_str(o, "driverVersion", g->driver_version) ||
        tkm__api_set_str(o, "cudaDriverVersion", g->cuda_driver_version) ||
        tkm__api_set_str(o, "rocmVersion", g->rocm_version) ||
        (g->memory_bytes && tkm__api_set_int(o, "memoryBytes", g->memory_bytes)) ||
        tkm__api_set_str(o, "uuid", g->uuid) || tkm__api_set_str(o, "pciBusId", g->pci_bus_id) ||
        tkm__api_set_bool(o, "migMode", g->mig_mode)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *ids_encode(const int32_t *ids, size_t n)
{
    json_t *arr = json_array();
    for (size_t k = 0; arr && k < n; k++)
        if (json_array_append_new(arr, json_integer(ids[k]))) {
            json_decref(arr);
            arr = NULL;
        }
    return arr;
}

static json_t *groups_encode(const struct tkm_api_gpu_group *g, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = json_object(), *ids = ids_encode(g[i].ids, g[i].n_ids);
        int bad = !o || !ids;
        if (bad || json_object_set(o, "ids", ids) ||
            tkm__api_set_str(o, "gpuType", g[i].gpu_type) ||
            tkm__api_set_str(o, "reason", g[i].reason) ||
            tkm__api_set_str(o, "message", g[i].message)) {
            json_decref(o);
            o = NULL;
        }
        json_decref(ids);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

/* A list of n objects, entry i filled by fill(o, base + i * size); NULL on ENOMEM. */
static json_t *list_encode(const void *base, size_t n, size_t size,
                           int (*fill)(json_t *o, const void *e))
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = json_object();
        if (!o || fill(o, (const char *)base + i * size)) {
            json_decref(o);
            o = NULL;
        }
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

static int pod_fill(json_t *o, const void *e)
{
    const struct tkm_api_pod_ref *p = e;
    return tkm__api_set_str(o, "namespace", p->ns) || tkm__api_set_str(o, "name", p->name) ||
           tkm__api_set_str(o, "uid", p->uid) || tkm__api_set_str(o, "volumeId", p->volume_id);
}

/* variants[]: digest, gpuIds (the target is the index's: docs/api.md). */
static int variant_fill(json_t *o, const void *e)
{
    const struct tkm_api_variant_use *v = e;
    return tkm__api_set_str(o, "digest", v->digest) ||
           tkm__api_set_new(o, "gpuIds", ids_encode(v->gpu_ids, v->n_gpu_ids));
}

static json_t *node_cache_encode(const struct tkm_api_node_cache *c)
{
    json_t *o = json_object(), *f = NULL;
    if (o && c->fail_reason &&
        (!(f = json_object()) || tkm__api_set_str(f, "reason", c->fail_reason) ||
         tkm__api_set_str(f, "message", c->fail_message) ||
         tkm__api_set_str(f, "time", c->fail_time))) {
        json_decref(f);
        json_decref(o);
        return NULL;
    }
    if (!o || tkm__api_set_str(o, "digest", c->digest) ||
        tkm__api_set_bool(o, "verified", c->verified) ||
        tkm__api_set_bool(o, "extracted", c->extracted) ||
        tkm__api_set_new(o, "compatibleGPUs", groups_encode(c->compatible, c->n_compatible)) ||
        tkm__api_set_new(o, "incompatibleGPUs",
                         groups_encode(c->incompatible, c->n_incompatible)) ||
        tkm__api_set_new(o, "pods", list_encode(c->pods, c->n_pods, sizeof *c->pods, pod_fill)) ||
        (c->n_variants && tkm__api_set_new(o, "variants",
                                           list_encode(c->variants, c->n_variants,
                                                       sizeof *c->variants, variant_fill))) ||
        tkm__api_set_str(o, "fallback", c->fallback) ||
        tkm__api_set_str(o, "prefetch", tkm_api_prefetch_state_name(c->prefetch)) ||
        (c->compiles.present &&
         tkm__api_set_new(o, "compiles", tkm_api_compiles_json(&c->compiles))) ||
        tkm__api_set_str(o, "error", c->error) ||
        tkm__api_set_str(o, "lastUpdated", c->last_updated)) {
        json_decref(f);
        json_decref(o);
        return NULL;
    }
    if (f && tkm__api_set_new(o, "lastFailure", f)) { /* f taken either way */
        json_decref(o);
        return NULL;
    }
    return o;
}

static int cache_ptr_cmp(const void *a, const void *b)
{
    return strcmp((*(const struct tkm_api_node_cache *const *)a)->name,
                  (*(const struct tkm_api_node_cache *const *)b)->name);
}

/* status.caches, keys in name order. */
static int caches_encode(const struct tkm_api_node_status *st, json_t *status, struct tkm_err *err)
{
    const struct tkm_api_node_cache **v = NULL;
    json_t *caches = json_object();
    int rc = caches ? tkm__api_alloc(st->n_caches, sizeof *v, (void **)&v, err)
                    : tkm_err_set(err, -ENOMEM, "status.caches: out of memory");
    for (size_t i = 0; rc == 0 && i < st->n_caches; i++) {
        v[i] = &st->caches[i];
        if (!v[i]->name || !*v[i]->name)
            rc = tkm_err_set(err, -EINVAL, "status.caches[%zu]: the cache name is required", i);
    }
    if (rc == 0 && st->n_caches > 1)
        qsort(v, st->n_caches, sizeof *v, cache_ptr_cmp);
    for (size_t i = 0; rc == 0 && i < st->n_caches; i++) {
        if (i && strcmp(v[i]->name, v[i - 1]->name) == 0)
            rc = tkm_err_set(err, -EINVAL, "status.caches: \"%s\" appears twice", v[i]->name);
        else if (tkm__api_set_new(caches, v[i]->name, node_cache_encode(v[i])))
            rc = tkm_err_set(err, -ENOMEM, "status.caches: out of memory");
    }
    if (rc == 0 && json_object_set(status, "caches", caches))
        rc = tkm_err_set(err, -ENOMEM, "status.caches: out of memory");
    json_decref(caches);
    free(v);
    return rc;
}

/* gpuTypes: the distinct GPU types in order of first appearance, ",". */
static int gpu_types(const struct tkm_api_node_status *st, struct tkm_buf *b)
{
    for (size_t i = 0; i < st->n_gpus; i++) {
        const char *t = st->gpus[i].gpu_type;
        int seen = !t;
        for (size_t k = 0; !seen && k < i; k++)
            seen = st->gpus[k].gpu_type && strcmp(st->gpus[k].gpu_type, t) == 0;
        if (!seen && ((b->len && tkm_buf_putc(b, ',')) || tkm_buf_puts(b, t)))
            return -E2BIG;
    }
    return 0;
}

static int status_fill(const struct tkm_api_node_status *st, json_t *s, struct tkm_err *err)
{
    struct tkm_buf types = TKM_BUF_INIT(256);
    json_t *gpus = json_array();
    int rc = gpus ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < st->n_gpus; i++)
        rc = json_array_append_new(gpus, gpu_encode(&st->gpus[i])) ? -ENOMEM : 0;
    if (rc == 0 && gpu_types(st, &types))
        rc = tkm_err_set(err, -EINVAL, "status.gpuTypes: longer than 256 characters");
    else if (rc == 0 && (tkm__api_set_str(s, "nodeName", st->node_name) ||
                         tkm__api_set_int(s, "gpuCount", (int64_t)st->n_gpus) ||
                         tkm__api_set_str(s, "gpuTypes", types.len ? types.data : "") ||
                         tkm__api_set_int(s, "cacheCount", (int64_t)st->n_caches) ||
                         json_object_set(s, "gpus", gpus)))
        rc = -ENOMEM;
    if (rc == -ENOMEM)
        tkm_err_set(err, rc, "status: out of memory");
    if (rc == 0)
        rc = caches_encode(st, s, err);
    if (rc == 0 && tkm__api_set_str(s, "lastUpdated", st->last_updated))
        rc = tkm_err_set(err, -ENOMEM, "status: out of memory");
    json_decref(gpus);
    tkm_buf_release(&types);
    return rc;
}

int tkm_api_node_status_apply(const struct tkm_api_node_status *st, const char *ns,
                              const char *node_uid, json_t **out, struct tkm_err *err)
{
    struct tkm_err local = {0};
    json_t *o = NULL, *s = NULL, *owners = NULL;
    const char *kind = ns ? KIND : KIND_CLUSTER;
    int rc;
    *out = NULL;
    if (!err)
        err = &local;
    if (!st->node_name || !node_uid || !*node_uid)
        return tkm_err_set(err, -EINVAL,
                           "%s apply body: nodeName and the Node's uid (owner) are required", kind);
    if ((rc = tkm__api_object(kind, st->node_name, ns, &o, err)))
        return rc;
    owners = json_pack("[{s:s,s:s,s:s,s:s}]", "apiVersion", "v1", "kind", "Node", "name",
                       st->node_name, "uid", node_uid);
    s = json_object();
    if (!owners || !s || json_object_set(json_object_get(o, "metadata"), "ownerReferences", owners))
        rc = tkm_err_set(err, -ENOMEM, "%s apply body: out of memory", kind);
    if (rc == 0)
        rc = status_fill(st, s, err);
    if (rc == 0 && json_object_set(o, "status", s))
        rc = tkm_err_set(err, -ENOMEM, "%s apply body: out of memory", kind);
    json_decref(owners);
    json_decref(s);
    if (rc)
        json_decref(o);
    else
        *out = o;
    return rc;
}
