/*
 * kt_why.c - `kubectl tkm why CACHE [--node NODE]`: the chain from the tag to
 * the pods, each step with the object and field it was read from. The chain
 * is built once as JSON (kt_why_json, -o json|yaml) and the text is rendered
 * from it, so both say the same. When pods were counted (status.compiles,
 * issue 25), a "compiles" step says how many pods compiled beside the cache,
 * and the document's "compiles" member lists the kernels they keep
 * compiling, which the text names with the advice to re-capture.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt-int.h"

static int step(json_t *arr, const char *name, const char *value, const char *source,
                const char *state)
{
    json_t *o =
        json_pack("{s:s,s:s,s:s}", "step", name, "value", value ? value : "-", "source", source);
    if (!o || (state && json_object_set_new(o, "state", json_string(state)) < 0)) {
        json_decref(o);
        return -ENOMEM;
    }
    return json_array_append_new(arr, o) < 0 ? -ENOMEM : 0;
}

/* One line for a compiles summary: "3 of 10 pods served compiled beside the
 * cache since T: 12 Triton kernels, 1 Inductor entry, 0 vLLM entries, 4096 bytes". */
static void compiles_text(const struct tkm_api_compiles *k, const char *what, char *out, size_t n)
{
    snprintf(out, n,
             "%lld of %lld pods served compiled beside the %s%s%s: %lld Triton kernel%s, %lld "
             "Inductor entr%s, %lld vLLM entr%s, %lld bytes",
             (long long)k->pods_compiled, (long long)k->pods_served, what,
             k->since ? " since " : "", k->since ? k->since : "", (long long)k->triton_kernels,
             k->triton_kernels == 1 ? "" : "s", (long long)k->inductor_entries,
             k->inductor_entries == 1 ? "y" : "ies", (long long)k->vllm_entries,
             k->vllm_entries == 1 ? "y" : "ies", (long long)k->bytes);
}

/* "sha256:abcd..." after "verified with key " in the Verified message, or "". */
static void key_id(const char *msg, char *out, size_t n)
{
    const char *p = msg ? strstr(msg, "verified with key ") : NULL;
    size_t len;
    out[0] = '\0';
    if (!p)
        return;
    p += strlen("verified with key ");
    len = strcspn(p, " ;,()");
    snprintf(out, n, "%.*s", (int)len, p);
}

static int cache_steps(const struct tkm_api_cache *c, json_t *arr)
{
    char src[512], v[2048], key[160];
    const struct tkm_api_condition *k;
    const char *kind = c->cluster ? "TritonKernelCacheCluster" : "TritonKernelCache";
    int rc;
    if (c->cluster)
        snprintf(src, sizeof src, "%s %s", kind, c->meta.name);
    else
        snprintf(src, sizeof src, "%s %s/%s", kind, c->meta.ns ? c->meta.ns : "", c->meta.name);
    snprintf(v, sizeof v, "%s spec.cacheImage", src);
    rc = step(arr, "tag", c->spec.cache_image, v, NULL);
    snprintf(v, sizeof v, "%s status.resolvedDigest", src);
    rc |= step(arr, "digest",
               c->status.resolved_digest ? c->status.resolved_digest
                                         : "not pinned yet (tkm-controller pins it)",
               v, NULL);
    const char *vs = kt_cache_cond(c, "Verified", &k);
    key_id(k ? k->message : NULL, key, sizeof key);
    if (k)
        snprintf(v, sizeof v, "%s %s%s%s: %s", vs, k->reason ? k->reason : "",
                 key[0] ? ", key " : "", key, k->message ? k->message : "");
    else
        snprintf(v, sizeof v, "no Verified condition yet");
    char s2[600];
    snprintf(s2, sizeof s2, "%s status.conditions[Verified]", src);
    rc |= step(arr, "signature", v, s2, NULL);
    vs = kt_cache_cond(c, "Ready", &k);
    if (k)
        snprintf(v, sizeof v, "%s %s: %s", vs, k->reason ? k->reason : "",
                 k->message ? k->message : "");
    else
        snprintf(v, sizeof v, "no Ready condition yet");
    snprintf(s2, sizeof s2, "%s status.conditions[Ready]", src);
    rc |= step(arr, "ready", v, s2, NULL);
    if (c->status.compiles.present) {
        compiles_text(&c->status.compiles, "cache", v, sizeof v);
        snprintf(s2, sizeof s2, "%s status.compiles", src);
        rc |= step(arr, "compiles", v, s2, NULL);
    }
    return rc ? -ENOMEM : 0;
}

/* "NVIDIA H200 (nvidia-h200, arch 90)" for GPU id, from the node's gpus[]. */
static void gpu_desc(const struct kt_cell *c, int32_t id, char *out, size_t n)
{
    const struct tkm_api_node_status *st = &c->src->status;
    for (size_t i = 0; i < st->n_gpus; i++)
        if (st->gpus[i].id == id) {
            const struct tkm_api_gpu *g = &st->gpus[i];
            snprintf(out, n, "%s (%s, arch %s)", g->product_name ? g->product_name : "GPU",
                     g->gpu_type ? g->gpu_type : "unknown", g->arch ? g->arch : "unknown");
            return;
        }
    snprintf(out, n, "not in the node's gpus[]");
}

static int gpu_steps(const struct kt_cell *c, const char *src, json_t *arr)
{
    const struct tkm_api_node_cache *e = c->entry;
    char name[32], d[256], v[2048], s[700];
    int rc = 0;
    for (int pass = 0; pass < 2; pass++) {
        const struct tkm_api_gpu_group *gs = pass ? e->incompatible : e->compatible;
        size_t ng = pass ? e->n_incompatible : e->n_compatible;
        snprintf(s, sizeof s, "%s.%s, status.gpus", src,
                 pass ? "incompatibleGPUs" : "compatibleGPUs");
        for (size_t i = 0; i < ng; i++)
            for (size_t j = 0; j < gs[i].n_ids; j++) {
                snprintf(name, sizeof name, "GPU %d", gs[i].ids[j]);
                gpu_desc(c, gs[i].ids[j], d, sizeof d);
                if (pass)
                    snprintf(v, sizeof v, "%s: incompatible: %s: %s", d,
                             gs[i].reason ? gs[i].reason : "Incompatible",
                             gs[i].message ? gs[i].message : "");
                else
                    snprintf(v, sizeof v, "%s: compatible", d);
                rc |= step(arr, name, v, s, pass ? "incompatible" : "compatible");
            }
    }
    if (e->n_compatible + e->n_incompatible == 0)
        rc |= step(arr, "GPUs", "not judged yet", src, NULL);
    return rc ? -ENOMEM : 0;
}

static int node_steps(const struct kt_row *r, const struct kt_cell *c, json_t *arr)
{
    const struct tkm_api_node_cache *e = c->entry;
    const struct tkm_api_nodestatus *o = c->src;
    const char *pin = r->cache->status.resolved_digest;
    char src[600], s[700], v[2048], txt[64];
    int rc = 0;
    snprintf(src, sizeof src, "%s %s%s%s status.caches[\"%s\"]",
             o->cluster ? "TritonKernelCacheNodeStatusCluster" : "TritonKernelCacheNodeStatus",
             o->meta.ns ? o->meta.ns : "", o->meta.ns ? "/" : "", o->meta.name, e->name);
    snprintf(v, sizeof v, "%s (%s)", e->digest ? e->digest : "none",
             !e->digest || !pin        ? "nothing to compare"
             : !strcmp(e->digest, pin) ? "the pinned digest"
                                       : "NOT the pinned digest: the node has not caught up");
    snprintf(s, sizeof s, "%s.digest", src);
    rc |= step(arr, "digest", v, s, NULL);
    snprintf(s, sizeof s, "%s.verified", src);
    rc |= step(arr, "signature", e->verified ? "verified on the node" : "not verified on the node",
               s, NULL);
    rc |= gpu_steps(c, src, arr);
    snprintf(s, sizeof s, "%s.extracted", src);
    rc |= step(arr, "extraction",
               e->extracted ? "extracted into the node's store" : "not extracted", s, NULL);
    struct tkm_buf pods = TKM_BUF_INIT(64 * 1024);
    for (size_t i = 0; i < e->n_pods; i++)
        rc |= tkm_buf_printf(&pods, "%s%s/%s", i ? ", " : "", e->pods[i].ns ? e->pods[i].ns : "",
                             e->pods[i].name ? e->pods[i].name : "?");
    snprintf(s, sizeof s, "%s.pods", src);
    rc |= step(arr, "pods", e->n_pods ? pods.data : "none", s, NULL);
    tkm_buf_release(&pods);
    snprintf(s, sizeof s, "%s.error", src);
    rc |= step(arr, "error", e->error ? e->error : "none", s, NULL);
    if (e->compiles.present) {
        struct tkm_buf k = TKM_BUF_INIT(4096);
        compiles_text(&e->compiles, "cache on this node", v, sizeof v);
        rc |= tkm_buf_puts(&k, v);
        for (size_t i = 0; i < e->compiles.n_top; i++)
            rc |= tkm_buf_printf(&k, "%s%s (%lld)",
                                 i ? ", " : "; most compiled: ", e->compiles.top[i].name,
                                 (long long)e->compiles.top[i].pods);
        snprintf(s, sizeof s, "%s.compiles", src);
        rc |= step(arr, "compiles", k.data, s, NULL);
        tkm_buf_release(&k);
    }
    if (e->fail_reason) { /* the last failed Materialize here, until one succeeds */
        snprintf(v, sizeof v, "%s at %s", e->fail_message ? e->fail_message : e->fail_reason,
                 e->fail_time ? e->fail_time : "an unknown time");
        snprintf(s, sizeof s, "%s.lastFailure", src);
        rc |= step(arr, "failure", v, s, NULL);
    }
    kt__cell_text(c->state, c->pods, txt, sizeof txt);
    kt_cell_reason(r, c, v, sizeof v);
    char sv[2200];
    snprintf(sv, sizeof sv, "%s%s%s", txt, v[0] ? ": " : "", v);
    rc |=
        step(arr, "state", sv, "kubectl-tkm (docs/kubectl-tkm.md#states)", kt_state_json(c->state));
    return rc ? -ENOMEM : 0;
}

/* Without a node: how many nodes are in each state, and up to 5 names. */
static json_t *node_summary(const struct kt_matrix *m, const struct kt_row *r)
{
    json_t *o = json_array();
    for (int s = KT_STATE_COUNT - 1; o && s >= 0; s--) {
        json_t *names = json_array(), *g;
        if (!r->counts[s] || !names) {
            json_decref(names);
            continue;
        }
        for (size_t j = 0; j < m->n_nodes && json_array_size(names) < 5; j++)
            if (r->cells[j].state == (enum kt_state)s)
                json_array_append_new(names, json_string(m->nodes[j].name));
        g = json_pack("{s:s,s:I,s:o}", "state", kt_state_json((enum kt_state)s), "nodes",
                      (json_int_t)r->counts[s], "examples", names);
        if (!g || json_array_append_new(o, g) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

json_t *kt_why_json(const struct kt_matrix *m, size_t row, size_t node)
{
    const struct kt_row *r = &m->rows[row];
    json_t *steps = json_array(), *doc = NULL, *ns = NULL;
    if (!steps || cache_steps(r->cache, steps) < 0)
        goto fail;
    doc = json_pack("{s:s,s:s,s:{s:s,s:o,s:s},s:O}", "apiVersion", KT_DOC_API_VERSION, "kind",
                    "CacheWhy", "cache", "kind",
                    r->cache->cluster ? "TritonKernelCacheCluster" : "TritonKernelCache",
                    "namespace", r->cache->meta.ns ? json_string(r->cache->meta.ns) : json_null(),
                    "name", r->cache->meta.name, "steps", steps);
    if (!doc)
        goto fail;
    if (r->cache->status.compiles.present &&
        json_object_set_new(doc, "compiles", tkm_api_compiles_json(&r->cache->status.compiles)) < 0)
        goto fail;
    if (node == (size_t)-1) {
        if (json_object_set_new(doc, "nodes", node_summary(m, r)) < 0)
            goto fail;
    } else {
        const struct kt_cell *c = &r->cells[node];
        ns = json_array();
        if (!ns || (c->entry && node_steps(r, c, ns) < 0) ||
            json_object_set_new(doc, "node", json_string(m->nodes[node].name)) < 0 ||
            json_object_set_new(doc, "nodeState", json_string(kt_state_json(c->state))) < 0 ||
            json_object_set(doc, "nodeSteps", ns) < 0)
            goto fail;
    }
    json_decref(steps);
    json_decref(ns);
    return doc;
fail:
    json_decref(steps);
    json_decref(ns);
    json_decref(doc);
    return NULL;
}

static int steps_text(const json_t *arr, int color, struct tkm_buf *out)
{
    size_t i;
    json_t *s;
    int rc = 0;
    json_array_foreach(arr, i, s)
    {
        char v[4096], src[1024];
        const char *st = json_string_value(json_object_get(s, "state"));
        const char *k = NULL;
        if (st && color) {
            for (int x = 0; x < KT_STATE_COUNT; x++)
                if (!strcmp(st, kt_state_json((enum kt_state)x)))
                    k = kt_state_color((enum kt_state)x);
            if (!strcmp(st, "compatible"))
                k = kt_state_color(KT_READY);
        }
        kt__clean(json_string_value(json_object_get(s, "value")), v, sizeof v);
        kt__clean(json_string_value(json_object_get(s, "source")), src, sizeof src);
        rc |= tkm_buf_printf(out, "  %-11s %s%s%s%s\n  %-11s from %s\n",
                             json_string_value(json_object_get(s, "step")), k ? "\033[" : "",
                             k ? k : "", k ? "m" : "", v, "", src);
        if (k)
            rc |= tkm_buf_puts(out, "\033[0m");
    }
    return rc ? -ENOMEM : 0;
}

/* The kernels pods keep compiling (compiles.topKernels: name, pods), and the advice. */
static int kernels_text(const json_t *compiles, struct tkm_buf *out)
{
    const json_t *top = json_object_get(compiles, "topKernels"), *k;
    size_t i;
    int rc = 0;
    if (!json_integer_value(json_object_get(compiles, "podsCompiled")))
        return 0;
    if (json_array_size(top)) {
        rc |= tkm_buf_puts(out, "kernels pods keep compiling (pods that compiled each):\n");
        json_array_foreach(top, i, k)
        {
            char name[300];
            const char *nm = json_string_value(json_object_get(k, "name"));
            kt__clean(nm ? nm : "?", name, sizeof name);
            rc |= tkm_buf_printf(out, "  %-40s %lld\n", name,
                                 (long long)json_integer_value(json_object_get(k, "pods")));
        }
    }
    rc |= tkm_buf_puts(out, "The cache misses what these pods compile: re-capture it from the "
                            "workload with tkmctl capture (docs/capture.md) and roll the new "
                            "image out.\n");
    return rc ? -ENOMEM : 0;
}

int kt_render_why(const struct kt_matrix *m, size_t row, size_t node, int color,
                  struct tkm_buf *out)
{
    char ref[320];
    json_t *doc = kt_why_json(m, row, node), *a;
    const struct kt_row *r = &m->rows[row];
    size_t i;
    int rc = 0;
    if (!doc)
        return -ENOMEM;
    kt_cache_ref(r->cache, ref, sizeof ref);
    rc |= tkm_buf_printf(out, "%s%s%s\n", ref, r->cache->meta.ns ? " in namespace " : "",
                         r->cache->meta.ns ? r->cache->meta.ns : "");
    rc |= steps_text(json_object_get(doc, "steps"), color, out);
    rc |= kernels_text(json_object_get(doc, "compiles"), out);
    if (node != (size_t)-1) {
        const struct kt_cell *c = &r->cells[node];
        rc |= tkm_buf_printf(out, "node %s (%d GPU%s: %s)\n", m->nodes[node].name,
                             m->nodes[node].gpu_count, m->nodes[node].gpu_count == 1 ? "" : "s",
                             m->nodes[node].gpu_type);
        if (!c->entry)
            rc |= tkm_buf_puts(out, "  the node reports nothing for this cache (its agent has "
                                    "not seen it, or runs elsewhere)\n");
        rc |= steps_text(json_object_get(doc, "nodeSteps"), color, out);
    } else {
        rc |= tkm_buf_printf(out, "nodes (%zu)\n", m->n_nodes);
        json_array_foreach(json_object_get(doc, "nodes"), i, a)
        {
            struct tkm_buf names = TKM_BUF_INIT(4096);
            size_t k, n = (size_t)json_integer_value(json_object_get(a, "nodes"));
            json_t *x;
            json_array_foreach(json_object_get(a, "examples"), k, x) rc |=
                tkm_buf_printf(&names, "%s%s", k ? ", " : "", json_string_value(x));
            const char *sj = json_string_value(json_object_get(a, "state")), *stxt = sj;
            for (int y = 0; sj && y < KT_STATE_COUNT; y++)
                if (!strcmp(sj, kt_state_json((enum kt_state)y)))
                    stxt = kt_state_text((enum kt_state)y);
            rc |=
                tkm_buf_printf(out, "  %-13s %zu (%s%s)\n", stxt, n, names.data,
                               n > json_array_size(json_object_get(a, "examples")) ? ", ..." : "");
            tkm_buf_release(&names);
        }
        rc |= tkm_buf_puts(out, "Run with --node NODE for one node's chain.\n");
    }
    json_decref(doc);
    return rc ? -ENOMEM : 0;
}
