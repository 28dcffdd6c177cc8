/*
 * kt_render.c - `kubectl tkm status` as text: the cache x node matrix when
 * the node columns fit the width, else the nodes grouped by GPU type (and,
 * when even those do not fit, one line per cache and GPU type), with the
 * exceptions and reasons listed under the table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt-int.h"

/* ---- text helpers ------------------------------------------------------------------- */

void kt__clean(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (; s && *s && o + 1 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        out[o++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    if (n)
        out[o] = '\0';
}

int kt__table_init(struct kt_table *t, size_t ncols)
{
    memset(t, 0, sizeof *t);
    t->ncols = ncols;
    return 0;
}

void kt__table_release(struct kt_table *t)
{
    for (size_t i = 0; t->cells && i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t->colors);
    memset(t, 0, sizeof *t);
}

/* Appends an empty row; cells are set with kt__table_set. */
int kt__table_row(struct kt_table *t)
{
    if (t->nrows == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 16;
        char **c = calloc(nc * t->ncols, sizeof *c);
        const char **k = calloc(nc * t->ncols, sizeof *k);
        if (!c || !k) {
            free(c);
            free(k);
            return -ENOMEM;
        }
        if (t->cells) {
            memcpy(c, t->cells, t->nrows * t->ncols * sizeof *c);
            memcpy(k, t->colors, t->nrows * t->ncols * sizeof *k);
        }
        free(t->cells);
        free(t->colors);
        t->cells = c;
        t->colors = k;
        t->cap = nc;
    }
    t->nrows++;
    return 0;
}

/* Sets cell col of the last row to a cleaned copy of s, coloured color. */
int kt__table_set(struct kt_table *t, size_t col, const char *s, const char *color)
{
    char clean[1024];
    size_t i = (t->nrows - 1) * t->ncols + col;
    kt__clean(s ? s : "", clean, sizeof clean);
    free(t->cells[i]);
    t->cells[i] = strdup(clean);
    t->colors[i] = color;
    return t->cells[i] ? 0 : -ENOMEM;
}

size_t kt__table_width(const struct kt_table *t, size_t *w)
{
    size_t total = 0;
    for (size_t c = 0; c < t->ncols; c++) {
        w[c] = 0;
        for (size_t r = 0; r < t->nrows; r++) {
            size_t x = kt_text_width(t->cells[r * t->ncols + c]);
            w[c] = x > w[c] ? x : w[c];
        }
        total += w[c] + (c ? 3 : 0);
    }
    return total;
}

int kt__table_print(const struct kt_table *t, int color, struct tkm_buf *out)
{
    size_t *w = calloc(t->ncols + 1, sizeof *w);
    int rc = 0;
    if (!w)
        return -ENOMEM;
    kt__table_width(t, w);
    for (size_t r = 0; rc == 0 && r < t->nrows; r++) {
        size_t pad = 0;
        for (size_t c = 0; rc == 0 && c < t->ncols; c++) {
            const char *s = t->cells[r * t->ncols + c] ? t->cells[r * t->ncols + c] : "";
            const char *k = color ? t->colors[r * t->ncols + c] : NULL;
            int last = c + 1 == t->ncols;
            if (pad)
                rc = tkm_buf_printf(out, "%*s", (int)pad, "");
            if (rc == 0)
                rc = k && s[0] ? tkm_buf_printf(out, "\033[%sm%s\033[0m", k, s)
                               : tkm_buf_puts(out, s);
            pad = last ? 0 : w[c] - kt_text_width(s) + 3;
        }
        if (rc == 0)
            rc = tkm_buf_putc(out, '\n');
    }
    free(w);
    return rc;
}

static void short_digest(const char *d, char *out, size_t n)
{
    if (!d) {
        snprintf(out, n, "<none>");
        return;
    }
    snprintf(out, n, "%.19s", d); /* "sha256:" + 12 hex */
}

/* The left columns: [NAMESPACE] CACHE [HIT] [DIGEST IMAGE]. */
static size_t left_cols(const struct kt_render_opts *o)
{
    return 1 + (o->all_namespaces ? 1 : 0) + (o->hits ? 1 : 0) + (o->wide ? 2 : 0);
}

void kt_hit_text(const struct tkm_api_cache *c, char *out, size_t n)
{
    const struct tkm_api_compiles *k = &c->status.compiles;
    int64_t hits = k->pods_served - k->pods_compiled;
    if (!k->present || k->pods_served <= 0)
        snprintf(out, n, "-");
    else
        snprintf(out, n, "%lld/%lld", (long long)(hits < 0 ? 0 : hits), (long long)k->pods_served);
}

/* The left columns of row r, blank unless first; r NULL: the header. */
static int set_left(struct kt_table *t, const struct kt_row *r, const struct kt_render_opts *o,
                    int first)
{
    char ref[320], d[32], hit[48];
    const struct tkm_api_cache *k = r ? r->cache : NULL;
    const char *v[5] = {"NAMESPACE", "CACHE", "HIT", "DIGEST", "IMAGE"};
    int rc = 0;
    if (k) {
        kt_cache_ref(k, ref, sizeof ref);
        short_digest(k->status.resolved_digest, d, sizeof d);
        kt_hit_text(k, hit, sizeof hit);
        v[0] = first ? (k->meta.ns ? k->meta.ns : "") : "";
        v[1] = first ? ref : "";
        v[2] = first ? hit : "";
        v[3] = first ? d : "";
        v[4] = first ? k->spec.cache_image : "";
    }
    size_t c = 0;
    for (size_t i = 0; i < 5; i++)
        if ((i != 0 || o->all_namespaces) && (i != 2 || o->hits) && (i < 3 || o->wide))
            rc |= kt__table_set(t, c++, v[i], NULL);
    return rc ? -ENOMEM : 0;
}

void kt__cell_text(enum kt_state s, int pods, char *out, size_t n)
{
    if (s == KT_IN_USE)
        snprintf(out, n, "in use (%d)", pods);
    else
        snprintf(out, n, "%s", kt_state_text(s));
}

static int problem(enum kt_state s)
{
    return s == KT_PENDING || s == KT_INCOMPATIBLE || s == KT_UNVERIFIED || s == KT_FAILED;
}

/* ---- by node -------------------------------------------------------------------------- */

static int node_table(const struct kt_matrix *m, const struct kt_render_opts *o, struct kt_table *t)
{
    size_t lc = left_cols(o);
    int rc = kt__table_init(t, lc + m->n_nodes);
    if (rc == 0)
        rc = kt__table_row(t);
    if (rc == 0)
        rc = set_left(t, NULL, o, 1);
    for (size_t j = 0; rc == 0 && j < m->n_nodes; j++)
        rc = kt__table_set(t, lc + j, m->nodes[j].name, NULL);
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        const struct kt_row *r = &m->rows[i];
        rc = kt__table_row(t);
        if (rc == 0)
            rc = set_left(t, r, o, 1);
        for (size_t j = 0; rc == 0 && j < m->n_nodes; j++) {
            char txt[64];
            kt__cell_text(r->cells[j].state, r->cells[j].pods, txt, sizeof txt);
            rc = kt__table_set(t, lc + j, txt, kt_state_color(r->cells[j].state));
        }
    }
    return rc;
}

/* Lines "  tkc/x on node: reason" for every problem cell (capped). */
static int node_notes(const struct kt_matrix *m, const struct kt_render_opts *o,
                      struct tkm_buf *out)
{
    size_t shown = 0, total = 0, cap = o->wide ? SIZE_MAX : o->max_exceptions;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        const struct kt_row *r = &m->rows[i];
        for (size_t j = 0; rc == 0 && j < m->n_nodes; j++) {
            char ref[320], why[1024], clean[1024];
            if (!problem(r->cells[j].state))
                continue;
            if (total++ == 0)
                rc = tkm_buf_puts(out, "\nNot ready:\n");
            if (shown >= cap || rc)
                continue;
            shown++;
            kt_cache_ref(r->cache, ref, sizeof ref);
            kt_cell_reason(r, &r->cells[j], why, sizeof why);
            kt__clean(why, clean, sizeof clean);
            rc = tkm_buf_printf(out, "  %s on %s: %s: %s\n", ref, m->nodes[j].name,
                                kt_state_text(r->cells[j].state), clean);
        }
    }
    if (rc == 0 && total > shown)
        rc = tkm_buf_printf(out, "  ... and %zu more (-o wide lists all)\n", total - shown);
    return rc;
}

/* ---- by GPU type ---------------------------------------------------------------------- */

static int group_cmp(const void *x, const void *y)
{
    const struct kt_group *a = x, *b = y;
    if (a->n != b->n)
        return a->n < b->n ? 1 : -1;
    return strcmp(a->gpu_type, b->gpu_type);
}

int kt__groups(const struct kt_matrix *m, struct kt_group **out, size_t *n)
{
    struct kt_group *g = calloc(m->n_nodes + 1, sizeof *g);
    size_t k = 0;
    if (!g)
        return -ENOMEM;
    for (size_t j = 0; j < m->n_nodes; j++) {
        size_t i = 0;
        while (i < k && strcmp(g[i].gpu_type, m->nodes[j].gpu_type) != 0)
            i++;
        if (i == k) {
            g[k].gpu_type = m->nodes[j].gpu_type;
            g[k].label = m->nodes[j].gpu_label;
            k++;
        }
        g[i].n++;
    }
    qsort(g, k, sizeof *g, group_cmp);
    *out = g;
    *n = k;
    return 0;
}

/* How good a state is: in use best, absent worst. */
static int rank(int s)
{
    static const int r[KT_STATE_COUNT] = {
        [KT_IN_USE] = 7,       [KT_EXTRACTED] = 6,  [KT_READY] = 5,  [KT_PENDING] = 4,
        [KT_INCOMPATIBLE] = 3, [KT_UNVERIFIED] = 2, [KT_FAILED] = 1, [KT_ABSENT] = 0};
    return s >= 0 && s < KT_STATE_COUNT ? r[s] : -1;
}

/* Nodes per state of row r within group g; returns the dominant state. */
enum kt_state kt__group_counts(const struct kt_matrix *m, const struct kt_row *r,
                               const struct kt_group *g, size_t *cnt, int *pods)
{
    enum kt_state best = KT_ABSENT;
    memset(cnt, 0, KT_STATE_COUNT * sizeof *cnt);
    *pods = 0;
    for (size_t j = 0; j < m->n_nodes; j++) {
        if (strcmp(m->nodes[j].gpu_type, g->gpu_type) != 0)
            continue;
        cnt[r->cells[j].state]++;
        *pods += r->cells[j].state == KT_IN_USE ? r->cells[j].pods : 0;
    }
    /* ties go to the better state, so the worse nodes are the exceptions */
    for (int s = 0; s < KT_STATE_COUNT; s++)
        if (cnt[s] > cnt[best] || (cnt[s] && cnt[s] == cnt[best] && rank(s) > rank(best)))
            best = (enum kt_state)s;
    return best;
}

/* "ready", "in use (12 pods)", or "997 ready, 1 failed" when mixed. */
static void group_cell(const size_t *cnt, enum kt_state best, int pods, char *out, size_t n)
{
    size_t o = 0, kinds = 0;
    for (int s = 0; s < KT_STATE_COUNT; s++)
        kinds += cnt[s] ? 1 : 0;
    if (kinds <= 1) {
        if (best == KT_IN_USE)
            snprintf(out, n, "in use (%d pods)", pods);
        else
            snprintf(out, n, "%s", kt_state_text(best));
        return;
    }
    out[0] = '\0';
    /* by count, largest first; ties: the better state first */
    size_t done[KT_STATE_COUNT] = {0};
    for (size_t k = 0; k < kinds && o < n; k++) {
        int pick = -1;
        for (int s = 0; s < KT_STATE_COUNT; s++)
            if (cnt[s] && !done[s] &&
                (pick < 0 || cnt[s] > cnt[pick] || (cnt[s] == cnt[pick] && rank(s) > rank(pick))))
                pick = s;
        done[pick] = 1;
        int w = snprintf(out + o, n - o, "%s%zu %s", k ? ", " : "", cnt[pick],
                         pick == KT_ABSENT ? "unreported" : kt_state_text((enum kt_state)pick));
        if (w < 0)
            break;
        o += (size_t)w;
    }
}

static int group_table(const struct kt_matrix *m, const struct kt_group *g, size_t ng,
                       const struct kt_render_opts *o, struct kt_table *t)
{
    size_t lc = left_cols(o), cnt[KT_STATE_COUNT];
    int rc = kt__table_init(t, lc + ng);
    if (rc == 0)
        rc = kt__table_row(t);
    if (rc == 0)
        rc = set_left(t, NULL, o, 1);
    for (size_t j = 0; rc == 0 && j < ng; j++) {
        char h[160];
        snprintf(h, sizeof h, "%s \xc3\x97%zu", g[j].label, g[j].n);
        rc = kt__table_set(t, lc + j, h, NULL);
    }
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        const struct kt_row *r = &m->rows[i];
        rc = kt__table_row(t);
        if (rc == 0)
            rc = set_left(t, r, o, 1);
        for (size_t j = 0; rc == 0 && j < ng; j++) {
            char txt[256];
            int pods;
            enum kt_state best = kt__group_counts(m, r, &g[j], cnt, &pods);
            group_cell(cnt, best, pods, txt, sizeof txt);
            rc = kt__table_set(t, lc + j, txt, kt_state_color(best));
        }
    }
    return rc;
}

/* One line per cache and GPU type: for more GPU types than the width holds. */
static int long_table(const struct kt_matrix *m, const struct kt_group *g, size_t ng,
                      const struct kt_render_opts *o, struct kt_table *t)
{
    size_t lc = left_cols(o), cnt[KT_STATE_COUNT];
    int rc = kt__table_init(t, lc + 3);
    if (rc == 0)
        rc = kt__table_row(t);
    if (rc == 0)
        rc = set_left(t, NULL, o, 1);
    if (rc == 0)
        rc = kt__table_set(t, lc, "GPU TYPE", NULL) | kt__table_set(t, lc + 1, "NODES", NULL) |
             kt__table_set(t, lc + 2, "STATE", NULL);
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        for (size_t j = 0; rc == 0 && j < ng; j++) {
            char txt[256], nn[32];
            int pods;
            enum kt_state best = kt__group_counts(m, &m->rows[i], &g[j], cnt, &pods);
            group_cell(cnt, best, pods, txt, sizeof txt);
            snprintf(nn, sizeof nn, "%zu", g[j].n);
            rc = kt__table_row(t);
            if (rc == 0)
                rc = set_left(t, &m->rows[i], o, j == 0) | kt__table_set(t, lc, g[j].label, NULL) |
                     kt__table_set(t, lc + 1, nn, NULL) |
                     kt__table_set(t, lc + 2, txt, kt_state_color(best));
        }
    }
    return rc ? -ENOMEM : 0;
}

/* Under a grouped table: groups whose state is a problem (with the first
 * node's reason), then the nodes that differ from the rest of their group. */
static int group_notes(const struct kt_matrix *m, const struct kt_group *g, size_t ng,
                       const struct kt_render_opts *o, struct tkm_buf *out)
{
    size_t cnt[KT_STATE_COUNT], shown = 0, total = 0, cap = o->wide ? SIZE_MAX : o->max_exceptions;
    char ref[320], why[1024], clean[1024];
    int rc = 0, pods, header = 0;
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        const struct kt_row *r = &m->rows[i];
        kt_cache_ref(r->cache, ref, sizeof ref);
        for (size_t k = 0; rc == 0 && k < ng; k++) {
            enum kt_state best = kt__group_counts(m, r, &g[k], cnt, &pods);
            if (!problem(best))
                continue;
            size_t j = 0;
            while (j < m->n_nodes &&
                   (strcmp(m->nodes[j].gpu_type, g[k].gpu_type) != 0 || r->cells[j].state != best))
                j++;
            kt_cell_reason(r, &r->cells[j], why, sizeof why);
            kt__clean(why, clean, sizeof clean);
            if (!header++)
                rc = tkm_buf_puts(out, "\nNot ready, by GPU type:\n");
            if (rc == 0)
                rc =
                    tkm_buf_printf(out, "  %s  %s \xc3\x97%zu: %s: %s (e.g. %s)\n", ref, g[k].label,
                                   cnt[best], kt_state_text(best), clean, m->nodes[j].name);
        }
    }
    for (size_t i = 0; rc == 0 && i < m->n_rows; i++) {
        const struct kt_row *r = &m->rows[i];
        kt_cache_ref(r->cache, ref, sizeof ref);
        for (size_t k = 0; rc == 0 && k < ng; k++) {
            enum kt_state best = kt__group_counts(m, r, &g[k], cnt, &pods);
            for (size_t j = 0; rc == 0 && j < m->n_nodes; j++) {
                const struct kt_cell *c = &r->cells[j];
                if (strcmp(m->nodes[j].gpu_type, g[k].gpu_type) != 0 || c->state == best)
                    continue;
                if (total++ == 0)
                    rc = tkm_buf_puts(out, "\nExceptions (nodes unlike the rest of their GPU "
                                           "type):\n");
                if (shown >= cap || rc)
                    continue;
                shown++;
                kt_cell_reason(r, c, why, sizeof why);
                kt__clean(why, clean, sizeof clean);
                char txt[64];
                kt__cell_text(c->state, c->pods, txt, sizeof txt);
                if (c->state == KT_ABSENT)
                    snprintf(txt, sizeof txt, "unreported");
                rc = tkm_buf_printf(out, "  %s  %s (%s): %s%s%s\n", ref, m->nodes[j].name,
                                    g[k].label, txt, clean[0] ? ": " : "", clean);
            }
        }
    }
    if (rc == 0 && total > shown)
        rc = tkm_buf_printf(out,
                            "  ... and %zu more (-o wide lists all; kubectl tkm why CACHE "
                            "--node NODE explains one)\n",
                            total - shown);
    return rc;
}

int kt_render_status(const struct kt_matrix *m, const struct kt_render_opts *opts,
                     struct tkm_buf *out)
{
    struct kt_render_opts o = *opts;
    struct kt_table t = {0};
    struct kt_group *g = NULL;
    size_t ng = 0, *w = NULL;
    int rc;
    if (!o.max_exceptions)
        o.max_exceptions = 20;
    o.hits = 0;
    for (size_t i = 0; i < m->n_rows; i++)
        o.hits |= m->rows[i].cache->status.compiles.present;
    if (m->n_rows == 0)
        return tkm_buf_puts(out, "No TritonKernelCache found.\n");
    if (o.by != KT_BY_GPU_TYPE) {
        if ((rc = node_table(m, &o, &t)) < 0)
            goto out;
        if (!(w = calloc(t.ncols + 1, sizeof *w))) {
            rc = -ENOMEM;
            goto out;
        }
        if (o.by == KT_BY_NODE || o.width == 0 || kt__table_width(&t, w) <= o.width) {
            rc = kt__table_print(&t, o.color, out);
            if (rc == 0 && m->n_nodes == 0)
                rc = tkm_buf_puts(out, "\nNo node reports any of these caches yet "
                                       "(no TritonKernelCacheNodeStatus object).\n");
            if (rc == 0)
                rc = node_notes(m, &o, out);
            goto out;
        }
        kt__table_release(&t);
        free(w);
        w = NULL;
    }
    if ((rc = kt__groups(m, &g, &ng)) < 0 || (rc = group_table(m, g, ng, &o, &t)) < 0)
        goto out;
    if (!(w = calloc(t.ncols + 1, sizeof *w))) {
        rc = -ENOMEM;
        goto out;
    }
    if (o.width && kt__table_width(&t, w) > o.width) {
        kt__table_release(&t);
        if ((rc = long_table(m, g, ng, &o, &t)) < 0)
            goto out;
    }
    rc = kt__table_print(&t, o.color, out);
    if (rc == 0)
        rc = group_notes(m, g, ng, &o, out);
out:
    if (rc == 0)
        rc = kt_render_variants(m, &o, out);
    kt__table_release(&t);
    free(w);
    free(g);
    return rc;
}

/* ---- JSON --------------------------------------------------------------------------- */

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static json_t *row_json(const struct kt_matrix *m, const struct kt_row *r)
{
    const struct tkm_api_cache *c = r->cache;
    json_t *counts = json_object(), *nodes = json_array();
    json_t *o =
        json_pack("{s:s,s:o,s:s?,s:s?,s:o,s:s,s:s}", "kind",
                  c->cluster ? "TritonKernelCacheCluster" : "TritonKernelCache", "namespace",
                  str_or_null(c->meta.ns), "name", c->meta.name, "image", c->spec.cache_image,
                  "digest", str_or_null(c->status.resolved_digest), "verified",
                  kt_cache_cond(c, "Verified", NULL), "ready", kt_cache_cond(c, "Ready", NULL));
    if (!o || !counts || !nodes)
        goto fail;
    for (int s = 0; s < KT_STATE_COUNT; s++)
        if (json_object_set_new(counts, kt_state_json((enum kt_state)s),
                                json_integer((json_int_t)r->counts[s])) < 0)
            goto fail;
    if (json_object_set_new(counts, "pods", json_integer(r->pods)) < 0)
        goto fail;
    for (size_t j = 0; j < m->n_nodes; j++) {
        const struct kt_cell *cell = &r->cells[j];
        char why[1024];
        kt_cell_reason(r, cell, why, sizeof why);
        json_t *n = json_pack("{s:s,s:s,s:i}", "node", m->nodes[j].name, "state",
                              kt_state_json(cell->state), "pods", cell->pods);
        if (!n || (why[0] && json_object_set_new(n, "reason", json_string(why)) < 0) ||
            json_array_append_new(nodes, n) < 0)
            goto fail;
    }
    if (json_object_set_new(o, "counts", counts) < 0 || json_object_set_new(o, "nodes", nodes) < 0)
        goto fail2;
    if (kt__row_variants_json(m, r, o) < 0)
        goto fail2;
    if (c->status.compiles.present && /* only when counted: documents stay as they were */
        json_object_set_new(o, "compiles", tkm_api_compiles_json(&c->status.compiles)) < 0)
        goto fail2;
    return o;
fail:
    json_decref(counts);
    json_decref(nodes);
fail2:
    json_decref(o);
    return NULL;
}

json_t *kt_status_json(const struct kt_matrix *m)
{
    struct kt_group *g = NULL;
    size_t ng = 0;
    json_t *nodes = json_array(), *types = json_array(), *caches = json_array(), *doc = NULL;
    if (!nodes || !types || !caches || kt__groups(m, &g, &ng) < 0)
        goto out;
    for (size_t j = 0; j < m->n_nodes; j++)
        if (json_array_append_new(nodes, json_pack("{s:s,s:s,s:i}", "name", m->nodes[j].name,
                                                   "gpuType", m->nodes[j].gpu_type, "gpuCount",
                                                   m->nodes[j].gpu_count)) < 0)
            goto out;
    for (size_t k = 0; k < ng; k++)
        if (json_array_append_new(types,
                                  json_pack("{s:s,s:s,s:I}", "gpuType", g[k].gpu_type, "label",
                                            g[k].label, "nodes", (json_int_t)g[k].n)) < 0)
            goto out;
    for (size_t i = 0; i < m->n_rows; i++)
        if (json_array_append_new(caches, row_json(m, &m->rows[i])) < 0)
            goto out;
    doc = json_pack("{s:s,s:s,s:O,s:O,s:O}", "apiVersion", KT_DOC_API_VERSION, "kind",
                    "CacheStatus", "nodes", nodes, "gpuTypes", types, "caches", caches);
out:
    free(g);
    json_decref(nodes);
    json_decref(types);
    json_decref(caches);
    return doc;
}
