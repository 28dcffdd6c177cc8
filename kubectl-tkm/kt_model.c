/*
 * kt_model.c - kubectl-tkm's model: the state of a cache on a node, the
 * objects read from the apiserver, the cache x node matrix.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/util.h>

#include "kt.h"

static const struct {
    const char *text, *json, *color;
} states[KT_STATE_COUNT] = {
    [KT_ABSENT] = {"-", "absent", "2"},
    [KT_PENDING] = {"pending", "pending", "36"},
    [KT_READY] = {"ready", "ready", "32"},
    [KT_EXTRACTED] = {"extracted", "extracted", "32"},
    [KT_IN_USE] = {"in use", "inUse", "1;32"},
    [KT_INCOMPATIBLE] = {"incompatible", "incompatible", "33"},
    [KT_UNVERIFIED] = {"unverified", "unverified", "35"},
    [KT_FAILED] = {"failed", "failed", "1;31"},
};

const char *kt_state_text(enum kt_state s)
{
    return (unsigned)s < KT_STATE_COUNT ? states[s].text : "?";
}

const char *kt_state_json(enum kt_state s)
{
    return (unsigned)s < KT_STATE_COUNT ? states[s].json : "unknown";
}

const char *kt_state_color(enum kt_state s)
{
    return (unsigned)s < KT_STATE_COUNT ? states[s].color : NULL;
}

/* The reasons of a failed signature search (docs/security.md): the cache
 * is then unverified rather than failed. */
static int signature_reason(const char *error)
{
    static const char *const sig[] = {
        "NoSignature:",        "KeyMismatch:",  "SignatureForOtherImage:", "UnsupportedSignature:",
        "MalformedSignature:", "NoTrustedKey:", "PolicyBelowFloor:"};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(sig); i++)
        if (strncmp(error, sig[i], strlen(sig[i])) == 0)
            return 1;
    return 0;
}

static void short_digest(const char *d, char *out, size_t n)
{
    const char *h = d && strncmp(d, "sha256:", 7) == 0 ? d + 7 : d;
    snprintf(out, n, "%s%.12s", h != d ? "sha256:" : "", h ? h : "?");
}

enum kt_state kt_state_of(const struct tkm_api_node_cache *e, const char *pinned,
                          int verification_disabled, char *reason, size_t n)
{
    char a[32], b[32];
    if (n)
        reason[0] = '\0';
    if (!e) {
        snprintf(reason, n, "the node reports nothing for this cache");
        return KT_ABSENT;
    }
    if (pinned && e->digest && strcmp(pinned, e->digest) != 0) {
        short_digest(e->digest, a, sizeof a);
        short_digest(pinned, b, sizeof b);
        snprintf(reason, n, "the node reports %s, the cache is pinned at %s", a, b);
        return KT_PENDING;
    }
    int audit = e->error && strncmp(e->error, "Audit:", 6) == 0;
    if (e->error && e->error[0] && !audit) {
        snprintf(reason, n, "%s", e->error);
        return signature_reason(e->error) ? KT_UNVERIFIED : KT_FAILED;
    }
    if (e->n_compatible == 0) {
        if (e->n_incompatible > 0) {
            const struct tkm_api_gpu_group *g = &e->incompatible[0];
            snprintf(reason, n, "%s: %s", g->reason ? g->reason : "Incompatible",
                     g->message ? g->message : "no GPU of the node can use it");
            return KT_INCOMPATIBLE;
        }
        snprintf(reason, n, "not judged yet (the agent is still verifying it)");
        return KT_PENDING;
    }
    if (!e->verified && !verification_disabled && !audit) {
        snprintf(reason, n, "not verified on this node (no error reported yet)");
        return KT_UNVERIFIED;
    }
    if (audit)
        snprintf(reason, n, "%s", e->error);
    if (e->n_pods > 0)
        return KT_IN_USE;
    return e->extracted ? KT_EXTRACTED : KT_READY;
}

/* ---- the world ------------------------------------------------------------------ */

void kt_world_init(struct kt_world *w)
{
    memset(w, 0, sizeof *w);
}

void kt_world_release(struct kt_world *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_caches; i++)
        tkm_api_cache_release(&w->caches[i]);
    for (size_t i = 0; i < w->n_statuses; i++)
        tkm_api_nodestatus_release(&w->statuses[i]);
    free(w->caches);
    free(w->statuses);
    memset(w, 0, sizeof *w);
}

/* Appends the element at el (sz bytes) to an array that grows by doubling,
 * and zeroes el. -ENOMEM leaves el as it was. */
static int append(void **arr, size_t *n, size_t *cap, void *el, size_t sz)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void *p = realloc(*arr, nc * sz);
        if (!p)
            return -ENOMEM;
        *arr = p;
        *cap = nc;
    }
    memcpy((char *)*arr + (*n)++ * sz, el, sz);
    memset(el, 0, sz);
    return 0;
}

int kt_world_add_cache_take(struct kt_world *w, struct tkm_api_cache *c)
{
    int rc = append((void **)&w->caches, &w->n_caches, &w->cap_caches, c, sizeof *c);
    if (rc < 0) {
        tkm_api_cache_release(c);
        memset(c, 0, sizeof *c);
    }
    return rc;
}

int kt_world_add_status_take(struct kt_world *w, struct tkm_api_nodestatus *s)
{
    int rc = append((void **)&w->statuses, &w->n_statuses, &w->cap_statuses, s, sizeof *s);
    if (rc < 0) {
        tkm_api_nodestatus_release(s);
        memset(s, 0, sizeof *s);
    }
    return rc;
}

/* ---- helpers ---------------------------------------------------------------------- */

void kt_gpu_label(const char *gpu_type, char *out, size_t n)
{
    const char *t = gpu_type && gpu_type[0] ? gpu_type : "none";
    size_t o = 0;
    if (!strcmp(t, "none")) {
        snprintf(out, n, "NO GPU");
        return;
    }
    /* each "+"-joined type without its vendor word, upper case */
    while (*t && o + 1 < n) {
        const char *end = strchr(t, '+');
        size_t len = end ? (size_t)(end - t) : strlen(t);
        const char *dash = memchr(t, '-', len);
        const char *p = dash && dash + 1 < t + len ? dash + 1 : t;
        if (o && o + 1 < n)
            out[o++] = '+';
        for (; p < t + len && o + 1 < n; p++)
            out[o++] = (char)toupper((unsigned char)*p);
        t += len + (end ? 1 : 0);
    }
    out[o] = '\0';
}

void kt_cache_ref(const struct tkm_api_cache *c, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", c->cluster ? "tkcc" : "tkc", c->meta.name ? c->meta.name : "?");
}

const char *kt_cache_cond(const struct tkm_api_cache *c, const char *type,
                          const struct tkm_api_condition **out)
{
    if (out)
        *out = NULL;
    for (size_t i = 0; i < c->status.n_conditions; i++) {
        const struct tkm_api_condition *k = &c->status.conditions[i];
        if (k->type && !strcmp(k->type, type)) {
            if (out)
                *out = k;
            return k->status == TKM_API_COND_TRUE    ? "True"
                   : k->status == TKM_API_COND_FALSE ? "False"
                                                     : "Unknown";
        }
    }
    return "";
}

static int verification_disabled(const struct tkm_api_cache *c)
{
    const struct tkm_api_condition *k;
    kt_cache_cond(c, "Verified", &k);
    return c->spec.signature_policy.mode == TKM_API_SIG_DISABLED ||
           (k && k->reason && !strcmp(k->reason, "VerificationDisabled"));
}

void kt_cell_reason(const struct kt_row *r, const struct kt_cell *c, char *out, size_t n)
{
    kt_state_of(c->entry, r->cache->status.resolved_digest, verification_disabled(r->cache), out,
                n);
}

/* ---- the matrix ------------------------------------------------------------------- */

static const char *status_node(const struct tkm_api_nodestatus *s)
{
    return s->status.node_name ? s->status.node_name : s->meta.name ? s->meta.name : "";
}

static int node_cmp(const void *x, const void *y)
{
    return strcmp(((const struct kt_node *)x)->name, ((const struct kt_node *)y)->name);
}

static int str_cmp(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The node's GPU types, sorted, de-duplicated, joined with '+'. */
static void node_types(struct kt_node *nd)
{
    const char *t[16];
    size_t k = 0, o = 0;
    const struct tkm_api_node_status *st = nd->facts ? &nd->facts->status : NULL;
    for (size_t i = 0; st && i < st->n_gpus && k < TKM_ARRAY_SIZE(t); i++) {
        const char *g = st->gpus[i].gpu_type ? st->gpus[i].gpu_type : "unknown";
        size_t j = 0;
        while (j < k && strcmp(t[j], g) != 0)
            j++;
        if (j == k)
            t[k++] = g;
    }
    qsort(t, k, sizeof *t, str_cmp);
    nd->gpu_type[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        int r = snprintf(nd->gpu_type + o, sizeof nd->gpu_type - o, "%s%s", i ? "+" : "", t[i]);
        if (r < 0 || (size_t)r >= sizeof nd->gpu_type - o)
            break;
        o += (size_t)r;
    }
    if (!k)
        snprintf(nd->gpu_type, sizeof nd->gpu_type, "none");
    nd->gpu_count = st ? (int)st->n_gpus : 0;
    kt_gpu_label(nd->gpu_type, nd->gpu_label, sizeof nd->gpu_label);
}

static int build_nodes(const struct kt_world *w, struct kt_matrix *m)
{
    m->nodes = calloc(w->n_statuses + 1, sizeof *m->nodes);
    if (!m->nodes)
        return -ENOMEM;
    for (size_t i = 0; i < w->n_statuses; i++) {
        m->nodes[m->n_nodes].name = status_node(&w->statuses[i]);
        m->n_nodes++;
    }
    qsort(m->nodes, m->n_nodes, sizeof *m->nodes, node_cmp);
    size_t k = 0;
    for (size_t i = 0; i < m->n_nodes; i++)
        if (k == 0 || strcmp(m->nodes[k - 1].name, m->nodes[i].name) != 0)
            m->nodes[k++] = m->nodes[i];
    m->n_nodes = k;
    /* GPU facts: the cluster kind's object first, else any that lists GPUs */
    for (size_t i = 0; i < w->n_statuses; i++) {
        const struct tkm_api_nodestatus *s = &w->statuses[i];
        struct kt_node key = {.name = status_node(s)};
        struct kt_node *nd = bsearch(&key, m->nodes, m->n_nodes, sizeof *nd, node_cmp);
        if (nd && s->status.n_gpus &&
            (!nd->facts || (s->cluster && !nd->facts->cluster) ||
             (s->cluster == nd->facts->cluster && nd->facts->status.n_gpus == 0)))
            nd->facts = s;
    }
    for (size_t i = 0; i < m->n_nodes; i++)
        node_types(&m->nodes[i]);
    return 0;
}

static int cache_cmp(const void *x, const void *y)
{
    const struct kt_row *a = x, *b = y;
    const struct tkm_api_cache *p = a->cache, *q = b->cache;
    if (p->cluster != q->cluster)
        return p->cluster - q->cluster;
    int r = strcmp(p->meta.ns ? p->meta.ns : "", q->meta.ns ? q->meta.ns : "");
    return r ? r : strcmp(p->meta.name ? p->meta.name : "", q->meta.name ? q->meta.name : "");
}

static const struct tkm_api_node_cache *find_entry(const struct tkm_api_node_status *st,
                                                   const char *name)
{
    for (size_t i = 0; name && i < st->n_caches; i++)
        if (st->caches[i].name && !strcmp(st->caches[i].name, name))
            return &st->caches[i];
    return NULL;
}

/* Fills the cells of row r from the node status objects in its scope. */
static void fill_row(const struct kt_world *w, struct kt_matrix *m, struct kt_row *r)
{
    const struct tkm_api_cache *c = r->cache;
    int vd = verification_disabled(c);
    for (size_t i = 0; i < w->n_statuses; i++) {
        const struct tkm_api_nodestatus *s = &w->statuses[i];
        if (s->cluster != c->cluster ||
            (!c->cluster && strcmp(s->meta.ns ? s->meta.ns : "", c->meta.ns ? c->meta.ns : "")))
            continue;
        const struct tkm_api_node_cache *e = find_entry(&s->status, c->meta.name);
        struct kt_node key = {.name = status_node(s)};
        struct kt_node *nd = bsearch(&key, m->nodes, m->n_nodes, sizeof *nd, node_cmp);
        if (!e || !nd)
            continue;
        struct kt_cell *cell = &r->cells[nd - m->nodes];
        cell->entry = e;
        cell->src = s;
        cell->pods = (int)e->n_pods;
        cell->state = kt_state_of(e, c->status.resolved_digest, vd, NULL, 0);
    }
    for (size_t j = 0; j < m->n_nodes; j++) {
        r->counts[r->cells[j].state]++;
        r->pods += r->cells[j].state == KT_IN_USE ? r->cells[j].pods : 0;
    }
}

int kt_matrix_build(const struct kt_world *w, struct kt_matrix *m)
{
    memset(m, 0, sizeof *m);
    if (build_nodes(w, m) < 0)
        goto fail;
    m->rows = calloc(w->n_caches + 1, sizeof *m->rows);
    if (!m->rows)
        goto fail;
    for (size_t i = 0; i < w->n_caches; i++) {
        struct kt_row *r = &m->rows[m->n_rows];
        r->cache = &w->caches[i];
        r->cells = calloc(m->n_nodes + 1, sizeof *r->cells);
        if (!r->cells)
            goto fail;
        m->n_rows++;
    }
    qsort(m->rows, m->n_rows, sizeof *m->rows, cache_cmp);
    for (size_t i = 0; i < m->n_rows; i++)
        fill_row(w, m, &m->rows[i]);
    return 0;
fail:
    kt_matrix_release(m);
    return -ENOMEM;
}

void kt_matrix_release(struct kt_matrix *m)
{
    if (!m)
        return;
    for (size_t i = 0; m->rows && i < m->n_rows; i++)
        free(m->rows[i].cells);
    free(m->rows);
    free(m->nodes);
    memset(m, 0, sizeof *m);
}

/* ---- widths ------------------------------------------------------------------------- */

size_t kt_text_width(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

size_t kt_width_pick(const char *cols_env, int tty_cols)
{
    int64_t v;
    if (cols_env && tkm_parse_i64(cols_env, 1, 100000, &v) == 0)
        return (size_t)v;
    return tty_cols > 0 ? (size_t)tty_cols : 80;
}

/* ---- check ---------------------------------------------------------------------------- */

void kt_gpu_from_api(const struct tkm_api_gpu *a, struct tkm_gpu *g)
{
    int maj = -1, min = -1;
    memset(g, 0, sizeof *g);
    g->index = a->id;
    snprintf(g->vendor, sizeof g->vendor, "%s", a->vendor ? a->vendor : "unknown");
    snprintf(g->backend, sizeof g->backend, "%s",
             !strcmp(g->vendor, "nvidia") ? "cuda"
             : !strcmp(g->vendor, "amd")  ? "hip"
                                          : "");
    snprintf(g->name, sizeof g->name, "%s", a->product_name ? a->product_name : "");
    snprintf(g->gpu_type, sizeof g->gpu_type, "%s", a->gpu_type ? a->gpu_type : "unknown");
    snprintf(g->uuid, sizeof g->uuid, "%s", a->uuid ? a->uuid : "");
    snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", a->pci_bus_id ? a->pci_bus_id : "");
    snprintf(g->arch, sizeof g->arch, "%s", a->arch ? a->arch : "");
    g->cc_major = g->cc_minor = -1;
    if (a->compute_capability && sscanf(a->compute_capability, "%d.%d", &maj, &min) == 2) {
        g->cc_major = maj;
        g->cc_minor = min;
    }
    g->warp_size = a->warp_size;
    g->memory_bytes = a->memory_bytes > 0 ? (uint64_t)a->memory_bytes : 0;
    snprintf(g->driver_version, sizeof g->driver_version, "%s",
             a->driver_version ? a->driver_version : "");
    snprintf(g->cuda_version, sizeof g->cuda_version, "%s",
             a->cuda_driver_version ? a->cuda_driver_version : "");
    maj = min = 0;
    if (a->cuda_driver_version && sscanf(a->cuda_driver_version, "%d.%d", &maj, &min) >= 1 &&
        maj > 0)
        g->cuda_driver_version = maj * 1000 + min * 10;
    g->mig_mode = a->mig_mode ? 1 : 0;
    snprintf(g->source, sizeof g->source, "node");
    g->usable = a->arch && a->arch[0] && g->backend[0];
    if (!g->usable)
        snprintf(g->reason, sizeof g->reason, "the node's agent reports no usable arch for it");
}

int kt_check_run(const struct kt_matrix *m, const struct tkm_triton_summary *s, struct kt_check *c)
{
    memset(c, 0, sizeof *c);
    c->nodes = calloc(m->n_nodes + 1, sizeof *c->nodes);
    if (!c->nodes)
        return -ENOMEM;
    for (size_t i = 0; i < m->n_nodes; i++) {
        struct kt_check_node *cn = &c->nodes[c->n_nodes++];
        const struct kt_node *nd = &m->nodes[i];
        size_t ng = nd->facts ? nd->facts->status.n_gpus : 0;
        cn->node = nd;
        cn->v = calloc(ng + 1, sizeof *cn->v);
        if (!cn->v) {
            kt_check_release(c);
            return -ENOMEM;
        }
        for (size_t j = 0; j < ng; j++) {
            struct tkm_gpu g;
            kt_gpu_from_api(&nd->facts->status.gpus[j], &g);
            tkm_compat_check(s, &g, &cn->v[j]);
            cn->compatible |= cn->v[j].compatible;
        }
        cn->n_v = ng;
        c->n_compatible += cn->compatible ? 1 : 0;
    }
    return 0;
}

void kt_check_release(struct kt_check *c)
{
    if (!c)
        return;
    for (size_t i = 0; c->nodes && i < c->n_nodes; i++)
        free(c->nodes[i].v);
    free(c->nodes);
    memset(c, 0, sizeof *c);
}
