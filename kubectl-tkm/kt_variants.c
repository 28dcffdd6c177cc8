/*
 * kt_variants.c - mixed fleets in kubectl-tkm: the nodes of each cache
 * grouped by the variant they use (from the node status entries' variants
 * and the GPU groups left without one), as text under the status table and
 * in the status document; and `kubectl tkm schedule`'s recipe. A node names
 * a variant by digest only: its target (platform, backend, arch, warp size)
 * is the one the cache status' variants list gives that digest ("?" when it
 * does not list it yet).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt-int.h"

/* One group of nodes: a variant (digest set) or a GPU type without one. */
struct vgroup {
    const struct tkm_api_variant_use *v;   /* the first node's (borrowed), NULL: without variant */
    const struct tkm_api_variant_count *t; /* v's target from the cache status, or NULL */
    const char *gpu_type, *reason;         /* without variant */
    size_t *nodes;                         /* matrix node indexes (owned) */
    size_t n_nodes, n_empty;
    long gpus;
};

struct vgroups {
    struct vgroup *g;
    size_t n, cap;
};

static void vgroups_release(struct vgroups *gs)
{
    for (size_t i = 0; i < gs->n; i++)
        free(gs->g[i].nodes);
    free(gs->g);
    memset(gs, 0, sizeof *gs);
}

static int same_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* The cache status' entry for variant digest d, or NULL. */
static const struct tkm_api_variant_count *target_of(const struct tkm_api_cache *c, const char *d)
{
    for (size_t i = 0; d && i < c->status.n_variants; i++)
        if (same_str(c->status.variants[i].digest, d))
            return &c->status.variants[i];
    return NULL;
}

/* The group matching v (or gpu_type/reason when v is NULL), made when absent. */
static struct vgroup *vgroup_get(struct vgroups *gs, const struct tkm_api_cache *c,
                                 const struct tkm_api_variant_use *v, const char *gpu_type,
                                 const char *reason)
{
    for (size_t i = 0; i < gs->n; i++) {
        struct vgroup *g = &gs->g[i];
        if (v ? g->v && same_str(g->v->digest, v->digest)
              : !g->v && same_str(g->gpu_type, gpu_type) && same_str(g->reason, reason))
            return g;
    }
    if (gs->n == gs->cap) {
        size_t nc = gs->cap ? gs->cap * 2 : 8;
        struct vgroup *w = realloc(gs->g, nc * sizeof *w);
        if (!w)
            return NULL;
        gs->g = w;
        gs->cap = nc;
    }
    gs->g[gs->n] = (struct vgroup){
        .v = v, .t = v ? target_of(c, v->digest) : NULL, .gpu_type = gpu_type, .reason = reason};
    return &gs->g[gs->n++];
}

static int vgroup_add(struct vgroup *g, size_t node, long gpus, int empty)
{
    if (g->n_nodes && g->nodes[g->n_nodes - 1] == node) { /* a node's second GPU group */
        g->gpus += gpus;
        return 0;
    }
    size_t *w = realloc(g->nodes, (g->n_nodes + 1) * sizeof *w);
    if (!w)
        return -ENOMEM;
    g->nodes = w;
    g->nodes[g->n_nodes++] = node;
    g->gpus += gpus;
    g->n_empty += empty ? 1 : 0;
    return 0;
}

static int no_variant(const char *reason)
{
    return reason && (!strcmp(reason, "NoVariant") || !strcmp(reason, "HostArchMismatch"));
}

static int vgroup_cmp(const void *x, const void *y)
{
    const struct vgroup *a = x, *b = y;
    if (!a->v != !b->v)
        return a->v ? -1 : 1; /* variants first */
    if (a->n_nodes != b->n_nodes)
        return a->n_nodes > b->n_nodes ? -1 : 1;
    return a->v ? strcmp(a->v->digest ? a->v->digest : "", b->v->digest ? b->v->digest : "")
                : strcmp(a->gpu_type ? a->gpu_type : "", b->gpu_type ? b->gpu_type : "");
}

/* The groups of row r: nodes where the cache is usable by variant, nodes with
 * GPUs no variant fits by GPU type and reason. */
static int row_groups(const struct kt_matrix *m, const struct kt_row *r, struct vgroups *gs)
{
    memset(gs, 0, sizeof *gs);
    for (size_t j = 0; j < m->n_nodes; j++) {
        const struct kt_cell *c = &r->cells[j];
        const struct tkm_api_node_cache *e = c->entry;
        int usable = c->state == KT_READY || c->state == KT_EXTRACTED || c->state == KT_IN_USE;
        if (!e || c->state == KT_PENDING)
            continue;
        for (size_t k = 0; usable && k < e->n_variants; k++) {
            struct vgroup *g = vgroup_get(gs, r->cache, &e->variants[k], NULL, NULL);
            if (!g || vgroup_add(g, j, (long)e->variants[k].n_gpu_ids, 0) < 0)
                return -ENOMEM;
        }
        for (size_t k = 0; k < e->n_incompatible; k++) {
            const struct tkm_api_gpu_group *ig = &e->incompatible[k];
            if (!no_variant(ig->reason))
                continue;
            struct vgroup *g = vgroup_get(gs, r->cache, NULL, ig->gpu_type, ig->reason);
            if (!g || vgroup_add(g, j, (long)ig->n_ids, e->fallback != NULL) < 0)
                return -ENOMEM;
        }
    }
    if (gs->n > 1)
        qsort(gs->g, gs->n, sizeof *gs->g, vgroup_cmp);
    return 0;
}

/* "cuda/90 linux/amd64 warp 32 (sha256:0123456789ab)" or "no variant: nvidia-a100 (NoVariant)". */
static void vgroup_name(const struct vgroup *g, char *out, size_t n)
{
    const struct tkm_api_variant_count *t = g->t;
    if (g->v)
        snprintf(out, n, "%s/%s %s warp %lld (%.19s)", t && t->backend ? t->backend : "?",
                 t && t->arch ? t->arch : "?", t && t->platform ? t->platform : "?",
                 t ? (long long)t->warp_size : 0LL, g->v->digest ? g->v->digest : "?");
    else
        snprintf(out, n, "no variant: %s (%s)", g->gpu_type ? g->gpu_type : "?",
                 g->reason ? g->reason : "?");
}

/* "node-a, node-b (empty volume) and 3 more". */
static void vgroup_nodes(const struct kt_matrix *m, const struct kt_row *r, const struct vgroup *g,
                         size_t cap, char *out, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < g->n_nodes && i < cap && o < n; i++) {
        const struct tkm_api_node_cache *e = r->cells[g->nodes[i]].entry;
        int w = snprintf(out + o, n - o, "%s%s%s", i ? ", " : "", m->nodes[g->nodes[i]].name,
                         !g->v && e && e->fallback ? " (empty volume)" : "");
        o += w > 0 ? (size_t)w : 0;
    }
    if (g->n_nodes > cap && o < n)
        snprintf(out + o, n - o, " and %zu more", g->n_nodes - cap);
}

int kt_render_variants(const struct kt_matrix *m, const struct kt_render_opts *o,
                       struct tkm_buf *out)
{
    struct kt_table t = {0};
    size_t rows = 0;
    int rc = kt__table_init(&t, 5);
    if (rc == 0)
        rc = kt__table_row(&t);
    if (rc == 0)
        rc = kt__table_set(&t, 0, "CACHE", NULL) | kt__table_set(&t, 1, "VARIANT", NULL) |
             kt__table_set(&t, 2, "NODES", NULL) | kt__table_set(&t, 3, "GPUS", NULL) |
             kt__table_set(&t, 4, "ON", NULL);
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        const struct kt_row *r = &m->rows[i];
        struct vgroups gs;
        char ref[320], name[256], nodes[2048], nn[32], ng[32];
        if ((rc = row_groups(m, r, &gs)) < 0) {
            vgroups_release(&gs);
            break;
        }
        kt_cache_ref(r->cache, ref, sizeof ref);
        for (size_t k = 0; rc == 0 && k < gs.n; k++) {
            const struct vgroup *g = &gs.g[k];
            vgroup_name(g, name, sizeof name);
            vgroup_nodes(m, r, g, o->wide ? SIZE_MAX : 5, nodes, sizeof nodes);
            snprintf(nn, sizeof nn, "%zu", g->n_nodes);
            snprintf(ng, sizeof ng, "%ld", g->gpus);
            rc = kt__table_row(&t);
            if (rc == 0)
                rc = kt__table_set(&t, 0, k ? "" : ref, NULL) |
                     kt__table_set(&t, 1, name, g->v ? NULL : kt_state_color(KT_INCOMPATIBLE)) |
                     kt__table_set(&t, 2, nn, NULL) | kt__table_set(&t, 3, ng, NULL) |
                     kt__table_set(&t, 4, nodes, NULL);
            rows++;
        }
        vgroups_release(&gs);
    }
    if (rc == 0 && rows)
        rc = tkm_buf_puts(out, "\nBy variant:\n");
    if (rc == 0 && rows)
        rc = kt__table_print(&t, o->color, out);
    kt__table_release(&t);
    return rc ? -ENOMEM : 0;
}

/* The row's "variants" and "withoutVariant" members into o (only when there are any). */
int kt__row_variants_json(const struct kt_matrix *m, const struct kt_row *r, json_t *o)
{
    struct vgroups gs;
    json_t *vs = json_array(), *nv = json_array();
    int rc = vs && nv ? row_groups(m, r, &gs) : -ENOMEM;
    for (size_t k = 0; rc == 0 && k < gs.n; k++) {
        const struct vgroup *g = &gs.g[k];
        json_t *names = json_array(), *e;
        for (size_t i = 0; names && i < g->n_nodes; i++)
            if (json_array_append_new(names, json_string(m->nodes[g->nodes[i]].name)) < 0)
                rc = -ENOMEM;
        const struct tkm_api_variant_count *t = g->t;
        if (g->v)
            e = json_pack("{s:s?,s:s?,s:s?,s:s?,s:I,s:o,s:I}", "digest", g->v->digest, "platform",
                          t ? t->platform : NULL, "backend", t ? t->backend : NULL, "arch",
                          t ? t->arch : NULL, "warpSize", (json_int_t)(t ? t->warp_size : 0),
                          "nodes", names, "gpus", (json_int_t)g->gpus);
        else
            e = json_pack("{s:s?,s:s?,s:o,s:I,s:I}", "gpuType", g->gpu_type, "reason", g->reason,
                          "nodes", names, "gpus", (json_int_t)g->gpus, "emptyVolumes",
                          (json_int_t)g->n_empty);
        if (!names || !e || json_array_append_new(g->v ? vs : nv, e) < 0)
            rc = -ENOMEM;
    }
    if (rc == 0 && json_array_size(vs) && json_object_set(o, "variants", vs) < 0)
        rc = -ENOMEM;
    if (rc == 0 && json_array_size(nv) && json_object_set(o, "withoutVariant", nv) < 0)
        rc = -ENOMEM;
    if (vs && nv)
        vgroups_release(&gs);
    json_decref(vs);
    json_decref(nv);
    return rc;
}

/* ---- schedule ----------------------------------------------------------------------- */

int kt_render_schedule(const struct tkm_api_cache *c, struct tkm_buf *out)
{
    char key[TKM_API_NODE_LABEL_MAX], ref[320], clean[TKM_API_NODE_LABEL_MAX];
    const char *label = c->status.node_label;
    int rc = 0;
    if (!label) {
        if (tkm_api_node_label(c->cluster ? NULL : c->meta.ns, c->meta.name, key, sizeof key) < 0)
            return -EINVAL;
        label = key;
    }
    kt__clean(label, clean, sizeof clean);
    kt_cache_ref(c, ref, sizeof ref);
    rc |= tkm_buf_printf(out,
                         "# Pods that mount %s%s%s, placed only on the nodes where it is usable:\n"
                         "# tkm-controller labels those Nodes %s=%s (%d node%s at the last "
                         "status).\n",
                         ref, c->meta.ns ? " in namespace " : "", c->meta.ns ? c->meta.ns : "",
                         clean, TKM_API_NODE_LABEL_VALUE,
                         c->status.has_counts ? (int)c->status.counts.compatible : 0,
                         c->status.has_counts && c->status.counts.compatible == 1 ? "" : "s");
    if (!c->status.node_label)
        rc |= tkm_buf_puts(out, "# Note: the cache's status names no nodeLabel yet: the controller "
                                "has not judged it, or\n# runs with --node-labels=false (then no "
                                "Node carries the label).\n");
    rc |= tkm_buf_printf(out,
                         "#\n"
                         "# Required: add to the pod template's spec (spec.template.spec of a "
                         "Deployment):\n"
                         "nodeSelector:\n"
                         "  %s: \"%s\"\n"
                         "---\n"
                         "# Or preferred: the scheduler picks such nodes first; elsewhere the pod "
                         "gets what the\n"
                         "# cache's whenIncompatible says (Empty: an empty cache, it compiles its "
                         "own kernels).\n"
                         "affinity:\n"
                         "  nodeAffinity:\n"
                         "    preferredDuringSchedulingIgnoredDuringExecution:\n"
                         "    - weight: 100\n"
                         "      preference:\n"
                         "        matchExpressions:\n"
                         "        - key: %s\n"
                         "          operator: In\n"
                         "          values: [\"%s\"]\n",
                         clean, TKM_API_NODE_LABEL_VALUE, clean, TKM_API_NODE_LABEL_VALUE);
    return rc ? -ENOMEM : 0;
}
