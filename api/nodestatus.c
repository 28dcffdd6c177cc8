/* nodestatus.c - TritonKernelCacheNodeStatus / ...Cluster: decode, status apply. */
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

/* ---- decode ------------------------------------------------------------------ */

static int gpu_decode(const json_t *e, const char *p, struct tkm_api_gpu *g, struct tkm_err *err)
{
    int rc;
    if (!json_is_object(e))
        return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
    if ((rc = tkm__api_i32(e, p, "id", &g->id, err)) ||
        (rc = tkm__api_str(e, p, "gpuType", &g->gpu_type, err)) ||
        (rc = tkm__api_str(e, p, "vendor", &g->vendor, err)) ||
        (rc = tkm__api_str(e, p, "productName", &g->product_name, err)) ||
        (rc = tkm__api_str(e, p, "arch", &g->arch, err)) ||
        (rc = tkm__api_str(e, p, "computeCapability", &g->compute_capability, err)) ||
        (rc = tkm__api_i32(e, p, "warpSize", &g->warp_size, err)) ||
        (rc = tkm__api_str(e, p, "driverVersion", &g->driver_version, err)) ||
        (rc = tkm__api_str(e, p, "cudaDriverVersion", &g->cuda_driver_version, err)) ||
        (rc = tkm__api_str(e, p, "rocmVersion", &g->rocm_version, err)) ||
        (rc = tkm__api_int(e, p, "memoryBytes", 0, INT64_MAX, &g->memory_bytes, err)) ||
        (rc = tkm__api_str(e, p, "uuid", &g->uuid, err)) ||
        (rc = tkm__api_str(e, p, "pciBusId", &g->pci_bus_id, err)) ||
        (rc = tkm__api_bool(e, p, "migMode", &g->mig_mode, err)))
        return rc;
    if (!json_object_get(e, "id"))
        return tkm_err_set(err, -EPROTO, "%s.id: missing", p);
    return 0;
}

static int groups_decode(const json_t *c, const char *path, const char *key, int with_reason,
                         struct tkm_api_gpu_group **out, size_t *n, struct tkm_err *err)
{
    const json_t *arr, *ids;
    size_t cnt, nids;
    char p[512], ip[560];
    int rc;
    if ((rc = tkm__api_arr(c, path, key, 64, &arr, &cnt, err)) ||
        (rc = tkm__api_alloc(cnt, sizeof **out, (void **)out, err)))
        return rc;
    for (size_t i = 0; i < cnt; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_gpu_group *g = &(*out)[i];
        snprintf(p, sizeof p, "%s.%s[%zu]", path, key, i);
        *n = i + 1;
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        if ((rc = tkm__api_arr(e, p, "ids", 64, &ids, &nids, err)) ||
            (rc = tkm__api_alloc(nids, sizeof *g->ids, (void **)&g->ids, err)) ||
            (rc = tkm__api_str(e, p, "gpuType", &g->gpu_type, err)) ||
            (with_reason && (rc = tkm__api_str(e, p, "reason", &g->reason, err))) ||
            (with_reason && (rc = tkm__api_str(e, p, "message", &g->message, err))))
            return rc;
        for (size_t k = 0; k < nids; k++) {
            const json_t *id = json_array_get(ids, k);
            json_int_t v = json_integer_value(id);
            snprintf(ip, sizeof ip, "%s.ids[%zu]", p, k);
            if (!json_is_integer(id) || v < 0 || v > INT32_MAX)
                return tkm_err_set(err, -EPROTO, "%s: expected a GPU id (an integer >= 0)", ip);
            g->ids[k] = (int32_t)v;
            g->n_ids = k + 1;
        }
    }
    return 0;
}

static int pods_decode(const json_t *c, const char *path, struct tkm_api_node_cache *nc,
                       struct tkm_err *err)
{
    const json_t *arr;
    size_t cnt;
    char p[512];
    int rc;
    if ((rc = tkm__api_arr(c, path, "pods", 1024, &arr, &cnt, err)) ||
        (rc = tkm__api_alloc(cnt, sizeof *nc->pods, (void **)&nc->pods, err)))
        return rc;
    for (size_t i = 0; i < cnt; i++) {
        const json_t *e = json_array_get(arr, i);
        struct tkm_api_pod_ref *r = &nc->pods[i];
        snprintf(p, sizeof p, "%s.pods[%zu]", path, i);
        nc->n_pods = i + 1;
        if (!json_is_object(e))
            return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
        if ((rc = tkm__api_str(e, p, "namespace", &r->ns, err)) ||
            (rc = tkm__api_str(e, p, "name", &r->name, err)) ||
            (rc = tkm__api_str(e, p, "uid", &r->uid, err)) ||
            (rc = tkm__api_str(e, p, "volumeId", &r->volume_id, err)))
            return rc;
    }
    return 0;
}

static int node_cache_decode(const char *name, const json_t *c, struct tkm_api_node_cache *nc,
                             struct tkm_err *err)
{
    char p[400];
    int rc;
    snprintf(p, sizeof p, "status.caches[\"%.300s\"]", name);
    if (!(nc->name = strdup(name)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if (!json_is_object(c))
        return tkm_err_set(err, -EPROTO, "%s: expected an object", p);
    if ((rc = tkm__api_str(c, p, "digest", &nc->digest, err)) ||
        (rc = tkm__api_bool(c, p, "verified", &nc->verified, err)) ||
        (rc = tkm__api_bool(c, p, "extracted", &nc->extracted, err)) ||
        (rc = groups_decode(c, p, "compatibleGPUs", 0, &nc->compatible, &nc->n_compatible, err)) ||
        (rc = groups_decode(c, p, "incompatibleGPUs", 1, &nc->incompatible, &nc->n_incompatible,
                            err)) ||
        (rc = pods_decode(c, p, nc, err)) || (rc = tkm__api_str(c, p, "error", &nc->error, err)) ||
        (rc = tkm__api_str(c, p, "lastUpdated", &nc->last_updated, err)))
        return rc;
    return 0;
}

static int cache_cmp(const void *a, const void *b)
{
    return strcmp(((const struct tkm_api_node_cache *)a)->name,
                  ((const struct tkm_api_node_cache *)b)->name);
}

static int caches_decode(const json_t *status, struct tkm_api_node_status *st, struct tkm_err *err)
{
    const json_t *caches, *v;
    const char *k;
    int rc = tkm__api_obj(status, "status", "caches", &caches, err);
    size_t n = caches ? json_object_size(caches) : 0;
    if (rc)
        return rc;
    if (n > 512)
        return tkm_err_set(err, -EPROTO, "status.caches: %zu entries, more than the 512 allowed",
                           n);
    if ((rc = tkm__api_alloc(n, sizeof *st->caches, (void **)&st->caches, err)))
        return rc;
    json_object_foreach((json_t *)caches, k, v)
    {
        rc = node_cache_decode(k, v, &st->caches[st->n_caches++], err);
        if (rc)
            return rc;
    }
    if (st->n_caches > 1)
        qsort(st->caches, st->n_caches, sizeof *st->caches, cache_cmp);
    return 0;
}

static int status_decode(const json_t *root, struct tkm_api_node_status *st, struct tkm_err *err)
{
    const json_t *status, *gpus;
    size_t n;
    char p[64];
    int rc;
    if ((rc = tkm__api_obj(root, "", "status", &status, err)) || !status)
        return rc;
    if ((rc = tkm__api_str(status, "status", "nodeName", &st->node_name, err)) ||
        (rc = tkm__api_arr(status, "status", "gpus", 64, &gpus, &n, err)) ||
        (rc = tkm__api_alloc(n, sizeof *st->gpus, (void **)&st->gpus, err)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        snprintf(p, sizeof p, "status.gpus[%zu]", i);
        st->n_gpus = i + 1;
        if ((rc = gpu_decode(json_array_get(gpus, i), p, &st->gpus[i], err)))
            return rc;
    }
    if ((rc = caches_decode(status, st, err)) ||
        (rc = tkm__api_str(status, "status", "lastUpdated", &st->last_updated, err)))
        return rc;
    return 0;
}

int tkm_api_nodestatus_decode(const char *json, size_t len, struct tkm_api_nodestatus *out,
                              struct tkm_err *err)
{
    json_t *root = NULL;
    memset(out, 0, sizeof *out);
    int rc = tkm__api_parse(json, len, KIND, KIND_CLUSTER, &root, &out->cluster, &out->meta, err);
    if (rc == 0)
        rc = status_decode(root, &out->status, err);
    if (rc) {
        tkm_err_prefix(err, "%s %s", out->cluster ? KIND_CLUSTER : KIND,
                       out->meta.name ? out->meta.name : "(unnamed)");
        tkm_api_nodestatus_release(out);
    }
    json_decref(root);
    return rc;
}

/* ---- apply -------------------------------------------------------------------- */

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

static json_t *groups_encode(const struct tkm_api_gpu_group *g, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = json_object(), *ids = json_array();
        int bad = !o || !ids;
        for (size_t k = 0; !bad && k < g[i].n_ids; k++)
            bad = json_array_append_new(ids, json_integer(g[i].ids[k])) != 0;
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

static json_t *pods_encode(const struct tkm_api_pod_ref *p, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = json_object();
        if (!o || tkm__api_set_str(o, "namespace", p[i].ns) ||
            tkm__api_set_str(o, "name", p[i].name) || tkm__api_set_str(o, "uid", p[i].uid) ||
            tkm__api_set_str(o, "volumeId", p[i].volume_id)) {
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

static json_t *node_cache_encode(const struct tkm_api_node_cache *c)
{
    json_t *o = json_object();
    if (!o || tkm__api_set_str(o, "digest", c->digest) ||
        tkm__api_set_bool(o, "verified", c->verified) ||
        tkm__api_set_bool(o, "extracted", c->extracted) ||
        tkm__api_set_new(o, "compatibleGPUs", groups_encode(c->compatible, c->n_compatible)) ||
        tkm__api_set_new(o, "incompatibleGPUs",
                         groups_encode(c->incompatible, c->n_incompatible)) ||
        tkm__api_set_new(o, "pods", pods_encode(c->pods, c->n_pods)) ||
        tkm__api_set_str(o, "error", c->error) ||
        tkm__api_set_str(o, "lastUpdated", c->last_updated)) {
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
