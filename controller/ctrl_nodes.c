/*
 * ctrl_nodes.c - the compact index of what nodes report.
 *
 * The node status objects are never kept as JSON: each is decoded once when
 * it arrives and reduced to one 12-byte struct ctrl_entry per cache it
 * mentions (cache id, digest id, flags, the id of the interned first reason
 * something is wrong), kept in one array per object sorted by cache id. An
 * update of a node status merges its old and new arrays by cache id and
 * notifies only the caches whose entries changed. A cache's reconcile finds
 * its entries by walking the objects of its namespace (or of the cluster
 * kind) with one binary search each: no per-cache list of entries is kept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/jscan.h>
#include <tkm/log.h>

#include "ctrl-int.h"

uint32_t ctrl_digest_id(const char *d)
{
    uint32_t v = 0;
    if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) < 7 + 16)
        return 0;
    for (int i = 0; i < 16; i++) {
        char ch = d[7 + i];
        unsigned x;
        if (ch >= '0' && ch <= '9')
            x = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            x = (unsigned)(ch - 'a' + 10);
        else
            return 0;
        if (i < 8)
            v = v << 4 | x;
    }
    return v ? v : 1;
}

int ctrl_cache_key(char *out, size_t n, const char *ns, const char *name)
{
    int w = snprintf(out, n, "%s/%s", ns ? ns : "", name);
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

/* ---- id tables ---------------------------------------------------------------- */

static int idtab_add(struct ctrl_idtab *t, void *p, uint32_t *id)
{
    if (t->n_fr) {
        *id = t->fr[--t->n_fr];
        t->v[*id] = p;
        return 0;
    }
    if (!t->n)
        t->n = 1; /* id 0 is never used */
    if (t->n >= t->cap) {
        if (t->cap >= CTRL_WHY_MAX)
            return -E2BIG;
        uint32_t nc = t->cap ? t->cap * 2 : 16;
        void **v = realloc(t->v, (size_t)nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        t->v = v;
        uint32_t *fr = realloc(t->fr, (size_t)nc * sizeof *fr);
        if (!fr)
            return -ENOMEM;
        t->fr = fr;
        t->cap = nc;
    }
    *id = t->n++;
    t->v[*id] = p;
    return 0;
}

static void idtab_del(struct ctrl_idtab *t, uint32_t id)
{
    t->v[id] = NULL;
    t->fr[t->n_fr++] = id;
}

static void idtab_release(struct ctrl_idtab *t)
{
    free(t->v);
    free(t->fr);
    memset(t, 0, sizeof *t);
}

/* ---- interned why strings ----------------------------------------------------------- */

/* The parts of a why string: reason, message, profile (each NUL-terminated). */
struct why_parts {
    const char *p[3];
    size_t l[3];
};

static uint32_t why_hash(const struct why_parts *w)
{
    uint32_t h = 2166136261u;
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < w->l[k]; i++)
            h = (h ^ (unsigned char)w->p[k][i]) * 16777619u;
        h = (h ^ 0xffu) * 16777619u;
    }
    return h;
}

static int why_is(const char *s, const struct why_parts *w)
{
    for (int k = 0; k < 3; k++) {
        if (strlen(s) != w->l[k] || memcmp(s, w->p[k], w->l[k]) != 0)
            return 0;
        s += w->l[k] + 1;
    }
    return 1;
}

const char *ctrl_why_profile(const char *why)
{
    if (!why)
        return "";
    why += strlen(why) + 1;
    return why + strlen(why) + 1;
}

static struct ctrl_why *why_at(const struct ctrl_nodes *n, uint32_t id)
{
    return n->whys.v[id];
}

const char *ctrl_why_str(const struct ctrl_nodes *n, uint32_t why)
{
    return why && why < n->whys.n && n->whys.v[why] ? why_at(n, why)->s : NULL;
}

static int why_rehash(struct ctrl_nodes *n, uint32_t nb)
{
    uint32_t *b = calloc(nb, sizeof *b);
    if (!b)
        return -ENOMEM;
    for (uint32_t id = 1; id < n->whys.n; id++) {
        struct ctrl_why *w = n->whys.v[id];
        if (!w)
            continue;
        w->next = b[w->hash & (nb - 1)];
        b[w->hash & (nb - 1)] = id;
    }
    free(n->why_bkt);
    n->why_bkt = b;
    n->n_bkt = nb;
    return 0;
}

/* The id of "reason\0message\0profile\0" (a reference taken: why_unref). */
static int why_ref(struct ctrl_nodes *n, const struct why_parts *wp, uint32_t *out)
{
    uint32_t h = why_hash(wp), id;
    if (n->n_bkt)
        for (id = n->why_bkt[h & (n->n_bkt - 1)]; id; id = why_at(n, id)->next) {
            struct ctrl_why *w = why_at(n, id);
            if (w->hash == h && why_is(w->s, wp)) {
                w->refs++;
                *out = id;
                return 0;
            }
        }
    if (n->n_whys >= n->n_bkt && why_rehash(n, n->n_bkt ? n->n_bkt * 2 : 64) < 0)
        return -ENOMEM;
    struct ctrl_why *w = malloc(sizeof *w + wp->l[0] + wp->l[1] + wp->l[2] + 3);
    if (!w)
        return -ENOMEM;
    w->refs = 1;
    w->hash = h;
    char *d = w->s;
    for (int k = 0; k < 3; k++) {
        memcpy(d, wp->p[k], wp->l[k]);
        d[wp->l[k]] = 0;
        d += wp->l[k] + 1;
    }
    int rc = idtab_add(&n->whys, w, &id);
    if (rc < 0) {
        free(w);
        return rc;
    }
    w->next = n->why_bkt[h & (n->n_bkt - 1)];
    n->why_bkt[h & (n->n_bkt - 1)] = id;
    n->n_whys++;
    *out = id;
    return 0;
}

static void why_unref(struct ctrl_nodes *n, uint32_t id)
{
    if (!id)
        return;
    struct ctrl_why *w = why_at(n, id);
    if (--w->refs)
        return;
    uint32_t *p = &n->why_bkt[w->hash & (n->n_bkt - 1)];
    while (*p != id)
        p = &why_at(n, *p)->next;
    *p = w->next;
    idtab_del(&n->whys, id);
    n->n_whys--;
    free(w);
}

/* ---- namespace groups ------------------------------------------------------------- */

static struct ctrl_nsgroup *group_ref(struct ctrl_nodes *n, int cluster, const char *ns)
{
    struct ctrl_nsgroup *g = cluster ? &n->cgroup : tkm_strmap_get(&n->groups, ns);
    if (!g) {
        size_t nl = strlen(ns) + 1;
        g = calloc(1, sizeof *g + nl); /* the namespace after the struct: the map's key */
        if (!g)
            return NULL;
        g->ns = memcpy(g + 1, ns, nl);
        if (tkm_strmap_put(&n->groups, g->ns, g, NULL) < 0) {
            free(g);
            return NULL;
        }
    }
    g->refs++;
    return g;
}

static void group_unref(struct ctrl_nodes *n, struct ctrl_nsgroup *g)
{
    if (!g || --g->refs || g == &n->cgroup)
        return;
    tkm_strmap_del(&n->groups, g->ns);
    free(g->objs);
    free(g);
}

static int group_add(struct ctrl_nsgroup *g, struct ctrl_nsobj *o)
{
    if (g->n == g->cap) {
        uint32_t nc = g->cap ? g->cap * 2 : 8;
        struct ctrl_gslot *v = realloc(g->objs, (size_t)nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        g->objs = v;
        g->cap = nc;
    }
    o->gpos = g->n;
    g->objs[g->n++] = (struct ctrl_gslot){o, o->ents, o->n_ents};
    return 0;
}

static void group_del(struct ctrl_nsgroup *g, struct ctrl_nsobj *o)
{
    struct ctrl_gslot last = g->objs[--g->n];
    g->objs[o->gpos] = last;
    last.o->gpos = o->gpos;
}

/* ---- caches ------------------------------------------------------------------------ */

void ctrl_nodes_init(struct ctrl_nodes *n)
{
    memset(n, 0, sizeof *n);
    tkm_api_nsscan_init(&n->scan);
    tkm_buf_init(&n->profile, 64u * 1024u);
    tkm_jscan_init(&n->js);
    n->cgroup.ns = "";
    for (int i = 0; i < 3; i++)
        n->mark[i] = 1;
}

struct ctrl_cidx *ctrl_nodes_cache(struct ctrl_nodes *n, const char *key, int create)
{
    struct ctrl_cidx *c = tkm_strmap_get(&n->caches, key);
    size_t kl = strlen(key) + 1;
    if (c || !create)
        return c;
    c = calloc(1, sizeof *c + kl); /* the key after the struct: the map's key */
    if (!c)
        return NULL;
    c->key = memcpy(c + 1, key, kl);
    c->owner = n;
    const char *slash = strchr(key, '/');
    if (slash) {
        char ns[300];
        size_t l = (size_t)(slash - key);
        if (l >= sizeof ns)
            goto fail;
        memcpy(ns, key, l);
        ns[l] = 0;
        if (!(c->group = group_ref(n, l == 0, ns)))
            goto fail;
    }
    if (idtab_add(&n->cidx, c, &c->id) < 0)
        goto fail;
    if (tkm_strmap_put(&n->caches, c->key, c, NULL) < 0) {
        idtab_del(&n->cidx, c->id);
        goto fail;
    }
    return c;
fail:
    group_unref(n, c->group);
    free(c);
    return NULL;
}

void ctrl_nodes_cache_gc(struct ctrl_nodes *n, struct ctrl_cidx *c)
{
    if (!c || c->n || c->rec)
        return;
    tkm_strmap_del(&n->caches, c->key);
    idtab_del(&n->cidx, c->id);
    group_unref(n, c->group);
    free(c);
}

/* The entry of cache id in o, or NULL. *hint: where the last object had it
 * (objects of one namespace mostly list the same caches, so it is mostly
 * at the same position: one probe instead of a binary search). */
static const struct ctrl_entry *ents_find(const struct ctrl_gslot *o, uint32_t id, size_t *hint)
{
    size_t lo = 0, hi = o->n_ents;
    if (*hint < hi) {
        uint32_t v = o->ents[*hint].cache;
        if (v == id)
            return &o->ents[*hint];
        if (v < id)
            lo = *hint + 1;
        else
            hi = *hint;
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t v = o->ents[mid].cache;
        if (v == id) {
            *hint = mid;
            return &o->ents[mid];
        }
        if (v < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int ctrl_cidx_foreach(const struct ctrl_cidx *c, ctrl_entry_fn fn, void *data)
{
    if (!c || !c->n || !c->group)
        return 0;
    const struct ctrl_nsgroup *g = c->group;
    uint32_t seen = 0;
    size_t hint = 0;
    for (uint32_t i = 0; i < g->n && seen < c->n; i++) {
        const struct ctrl_entry *e = ents_find(&g->objs[i], c->id, &hint);
        if (!e)
            continue;
        seen++;
        int rc = fn(e, g->objs[i].o, ctrl_why_str(c->owner, e->why), data);
        if (rc)
            return rc;
    }
    return 0;
}

const struct ctrl_entry *ctrl_nodes_entry(const struct ctrl_nodes *n, const struct ctrl_cidx *c,
                                          const char *node)
{
    char key[600];
    size_t hint = 0;
    if (!c || !c->group)
        return NULL;
    int cluster = c->group == &n->cgroup;
    snprintf(key, sizeof key, "%s%s%s%s", cluster ? "c:" : "", cluster ? "" : c->group->ns,
             cluster ? "" : "/", node);
    const struct ctrl_nsobj *o = tkm_strmap_get(&n->objs, key);
    if (!o)
        return NULL;
    struct ctrl_gslot g = {(struct ctrl_nsobj *)o, o->ents, o->n_ents};
    return ents_find(&g, c->id, &hint);
}

int ctrl_nodes_node_entries(const struct ctrl_nodes *n, const char *node, ctrl_entry_fn fn,
                            void *data)
{
    char key[600];
    const char *k;
    void *v;
    int rc = 0;
    for (size_t pos = 0, first = 1; !rc; first = 0) {
        const struct ctrl_nsgroup *g;
        if (first) {
            g = &n->cgroup;
            snprintf(key, sizeof key, "c:%s", node);
        } else if (tkm_strmap_next(&n->groups, &pos, &k, &v)) {
            g = v;
            snprintf(key, sizeof key, "%s/%s", g->ns, node);
        } else {
            break;
        }
        const struct ctrl_nsobj *o = tkm_strmap_get(&n->objs, key);
        for (uint32_t i = 0; o && !rc && i < o->n_ents; i++)
            rc = fn(&o->ents[i], o, ctrl_why_str(n, o->ents[i].why), data);
    }
    return rc;
}

/* ---- entries ------------------------------------------------------------------------ */

static void ents_free(struct ctrl_nodes *n, struct ctrl_entry *v, size_t k)
{
    for (size_t i = 0; i < k; i++)
        why_unref(n, v[i].why);
    free(v);
}

/* Appends s to b with tabs, newlines and other control characters as '?'
 * (a node's strings must not forge profile lines). */
static int profile_str(struct tkm_buf *b, const char *s)
{
    int bad = 0;
    for (; s && *s; s++)
        bad |= tkm_buf_putc(b, (unsigned char)*s < 0x20 ? '?' : *s) < 0;
    return bad;
}

/* The variant profile of an entry (ctrl_why_profile): one line per variant
 * used, "V<digest>\t<gpus>\n" (its target is the index's: ctrl_agg), then
 * one per GPU type left without a variant, "N<gpuType>\n", then, when the
 * node reports compiles (issue 25), "C<podsServed>\t<podsCompiled>\t
 * <tritonKernels>\t<inductorEntries>\t<vllmEntries>\t<bytes>\t<since>\n" and
 * one "K<name>\t<pods>\n" per top kernel (the scan checked the names:
 * [A-Za-z0-9_.-], and since: RFC 3339, so neither forges a line). */
static int profile_of(const struct tkm_api_nsscan_entry *nc, struct tkm_buf *b)
{
    int bad = 0;
    for (size_t i = 0; i < nc->n_variants; i++) {
        const struct tkm_api_nsscan_variant *v = &nc->variants[i];
        bad |= (tkm_buf_putc(b, 'V') < 0) | profile_str(b, v->digest) |
               (tkm_buf_printf(b, "\t%zu\n", v->n_gpu_ids) < 0);
    }
    for (size_t i = 0; i < nc->n_incompatible; i++) {
        const struct tkm_api_nsscan_group *g = &nc->incompatible[i];
        if (g->gpu_type && g->reason &&
            (strcmp(g->reason, "NoVariant") == 0 || strcmp(g->reason, "HostArchMismatch") == 0))
            bad |= (tkm_buf_putc(b, 'N') < 0) | profile_str(b, g->gpu_type) |
                   (tkm_buf_putc(b, '\n') < 0);
    }
    const struct tkm_api_compiles *c = &nc->compiles;
    if (c->present)
        bad |= tkm_buf_printf(b, "C%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%s\n",
                              (long long)c->pods_served, (long long)c->pods_compiled,
                              (long long)c->triton_kernels, (long long)c->inductor_entries,
                              (long long)c->vllm_entries, (long long)c->bytes,
                              c->since ? c->since : "") < 0;
    for (size_t i = 0; c->present && i < c->n_top; i++)
        bad |= tkm_buf_printf(b, "K%s\t%lld\n", c->top[i].name, (long long)c->top[i].pods) < 0;
    return bad ? -ENOMEM : 0;
}

static int why_of(struct ctrl_nodes *n, const struct tkm_api_nsscan_entry *nc, uint32_t *id)
{
    const char *r = "", *m = "";
    *id = 0;
    if (nc->error && *nc->error) {
        r = "NodeError";
        m = nc->error;
    } else if (nc->n_compatible == 0 && nc->n_incompatible > 0) {
        r = nc->incompatible_reason ? nc->incompatible_reason : "Incompatible";
        m = nc->incompatible_message ? nc->incompatible_message : "";
    }
    tkm_buf_reset(&n->profile);
    if ((nc->n_variants || nc->n_incompatible || nc->compiles.present) &&
        profile_of(nc, &n->profile) < 0)
        return -ENOMEM;
    if (!*r && !n->profile.len)
        return 0;
    size_t ml = strlen(m);
    struct why_parts wp = {{r, m, n->profile.len ? n->profile.data : ""},
                           {strlen(r), ml > 300 ? 300 : ml, n->profile.len}};
    return why_ref(n, &wp, id);
}

static int fill_entry(struct ctrl_nodes *n, struct ctrl_entry *e,
                      const struct tkm_api_nsscan_entry *nc)
{
    uint32_t why;
    e->digest = ctrl_digest_id(nc->digest);
    e->flags = (nc->verified ? CTRL_E_VERIFIED : 0) | (nc->extracted ? CTRL_E_EXTRACTED : 0) |
               (nc->error && *nc->error ? CTRL_E_ERROR : 0) |
               (nc->n_compatible ? CTRL_E_COMPAT : 0) | (nc->n_incompatible ? CTRL_E_INCOMPAT : 0) |
               (nc->n_pods ? CTRL_E_PODS : 0) | (nc->fallback ? CTRL_E_EMPTY : 0) |
               (nc->prefetch != TKM_API_PREFETCH_NONE ? CTRL_E_PREFETCH : 0);
    int rc = why_of(n, nc, &why);
    e->why = why;
    return rc;
}

static int entry_same(const struct ctrl_entry *a, const struct ctrl_entry *b)
{
    /* interned: equal strings have equal ids */
    return a->digest == b->digest && a->flags == b->flags && a->why == b->why;
}

static struct ctrl_cidx *cidx_of(const struct ctrl_nodes *n, const struct ctrl_entry *e)
{
    return n->cidx.v[e->cache];
}

static void notify(struct ctrl_nodes *n, const char *key)
{
    if (n->changed)
        n->changed(key, n->data);
}

/* Replaces o's entries with nv (taken, sorted by cache id, no duplicates),
 * counting and notifying (the caches whose entries changed, then the node
 * when any did). Cannot fail. */
static void swap_entries(struct ctrl_nodes *n, struct ctrl_nsobj *o, struct ctrl_entry *nv,
                         size_t nn)
{
    size_t i = 0, j = 0;
    int changed = 0;
    struct ctrl_entry *ov = o->ents;
    size_t on = o->n_ents;
    while (i < on || j < nn) {
        int cmp = i >= on                     ? 1
                  : j >= nn                   ? -1
                  : ov[i].cache < nv[j].cache ? -1
                  : ov[i].cache > nv[j].cache ? 1
                                              : 0;
        if (cmp < 0) { /* gone */
            struct ctrl_cidx *c = cidx_of(n, &ov[i]);
            c->n--;
            n->n_entries--;
            notify(n, c->key);
            changed = 1;
            /* not dropped yet: ids must stay unique until the merge is done */
            i++;
        } else if (cmp > 0) { /* new */
            struct ctrl_cidx *c = cidx_of(n, &nv[j]);
            c->n++;
            n->n_entries++;
            notify(n, c->key);
            changed = 1;
            j++;
        } else {
            if (!entry_same(&ov[i], &nv[j])) {
                notify(n, cidx_of(n, &nv[j])->key);
                changed = 1;
            }
            i++;
            j++;
        }
    }
    o->ents = nv;
    o->n_ents = (uint32_t)nn;
    o->group->objs[o->gpos].ents = nv;
    o->group->objs[o->gpos].n_ents = o->n_ents;
    /* Caches left without entries (and without a reconciler) go now. */
    for (i = 0; i < on; i++)
        ctrl_nodes_cache_gc(n, cidx_of(n, &ov[i]));
    ents_free(n, ov, on);
    if (changed && n->node_entries_changed)
        n->node_entries_changed(o->node, n->data);
}

static struct ctrl_nsobj *obj_get_or_new(struct ctrl_nodes *n, int cluster, const char *ns,
                                         const char *name, const char *uid, uint64_t now_ms)
{
    char key[600];
    snprintf(key, sizeof key, "%s%s%s%s", cluster ? "c:" : "", cluster ? "" : ns,
             cluster ? "" : "/", name);
    struct ctrl_nsobj *o = tkm_strmap_get(&n->objs, key);
    if (o) {
        if (uid && strcmp(o->uid, uid) != 0) {
            char *u = strdup(uid);
            if (u) {
                free(o->uid_own);
                o->uid = o->uid_own = u;
            }
        }
        return o;
    }
    if (cluster)
        ns = "";
    if (!uid)
        uid = "";
    size_t nl = strlen(ns) + 1, ml = strlen(name) + 1, ul = strlen(uid) + 1, kl = strlen(key) + 1;
    o = calloc(1, sizeof *o + nl + ml + ul + kl);
    if (!o)
        return NULL;
    memcpy(o->buf, ns, nl);
    memcpy(o->buf + nl, name, ml);
    memcpy(o->buf + nl + ml, uid, ul);
    memcpy(o->buf + nl + ml + ul, key, kl);
    o->ns = o->buf;
    o->node = o->buf + nl;
    o->uid = o->buf + nl + ml;
    o->key = o->buf + nl + ml + ul;
    o->cluster = cluster;
    o->seen_ms = now_ms;
    if (!(o->group = group_ref(n, cluster, o->ns)))
        goto fail;
    if (group_add(o->group, o) < 0) {
        group_unref(n, o->group);
        goto fail;
    }
    if (tkm_strmap_put(&n->objs, o->key, o, NULL) < 0) {
        group_del(o->group, o);
        group_unref(n, o->group);
        goto fail;
    }
    return o;
fail:
    free(o);
    return NULL;
}

static int cmp_ent_id(const void *a, const void *b)
{
    uint32_t x = ((const struct ctrl_entry *)a)->cache, y = ((const struct ctrl_entry *)b)->cache;
    return x < y ? -1 : x > y;
}

/* What tkm_api_nodestatus_scan's entry callback builds: the new entries of
 * one object. */
struct build {
    struct ctrl_nodes *n;
    int cluster;
    int mismatch; /* the object is of the other kind, or has no name */
    struct ctrl_entry *v;
    size_t k, cap;
};

/* One status.caches member (the scanner has validated the whole object). Caches
 * met for the first time get an index (dropped again by the caller's gc when
 * the object fails). */
static int build_entry(const struct tkm_api_nsscan_head *h, const struct tkm_api_nsscan_entry *e,
                       void *data)
{
    struct build *b = data;
    char key[600];
    if (h->cluster != b->cluster || !h->name) {
        b->mismatch = 1;
        return 1; /* stop */
    }
    if (!b->v) {
        b->cap = h->n_caches ? h->n_caches : 1;
        if (!(b->v = calloc(b->cap, sizeof *b->v)))
            return -ENOMEM;
    }
    if (b->k == b->cap) /* n_caches counts every member: cannot happen */
        return -EOVERFLOW;
    if (ctrl_cache_key(key, sizeof key, h->cluster ? "" : h->ns, e->name) < 0)
        return 0;
    struct ctrl_cidx *c = ctrl_nodes_cache(b->n, key, 1);
    if (!c)
        return -ENOMEM;
    b->v[b->k].cache = c->id;
    if (fill_entry(b->n, &b->v[b->k], e) < 0)
        return -ENOMEM;
    b->k++;
    return 0;
}

/* b's entries sorted by cache id, without duplicates. */
static void build_finish(struct build *b)
{
    struct ctrl_entry *v = b->v;
    size_t k = b->k;
    /* The apiserver writes the caches sorted by name, and ids mostly follow
     * the order caches were first seen in: mostly sorted already (no qsort,
     * whose merge buffer is a malloc per event at 100+ entries). */
    size_t unsorted = 0;
    for (size_t i = 1; i < k && !unsorted; i++)
        unsorted = v[i - 1].cache > v[i].cache;
    if (unsorted)
        qsort(v, k, sizeof *v, cmp_ent_id);
    size_t w = 0; /* a name twice in one object (the scanner refuses that): the last one counts */
    for (size_t i = 0; i < k; i++) {
        if (w && v[w - 1].cache == v[i].cache) {
            why_unref(b->n, v[w - 1].why);
            v[w - 1] = v[i];
        } else {
            v[w++] = v[i];
        }
    }
    b->k = w;
}

/* Drops the indexes build_entry made for caches that got no entry. */
static int gc_empty(const char *key, void *val, void *data)
{
    (void)key;
    struct ctrl_cidx *c = val;
    if (!c->n && !c->rec) {
        struct ctrl_cidx ***list = data;
        **list = c;
        (*list)++;
    }
    return 0;
}

static void gc_unused_caches(struct ctrl_nodes *n)
{
    struct ctrl_cidx **v = calloc(n->caches.count ? n->caches.count : 1, sizeof *v), **p = v;
    if (!v)
        return;
    ctrl_map_each(&n->caches, gc_empty, &p);
    for (struct ctrl_cidx **q = v; q < p; q++)
        ctrl_nodes_cache_gc(n, *q);
    free(v);
}

int ctrl_nodes_upsert(struct ctrl_nodes *n, int cluster, const char *json, size_t len,
                      uint64_t now_ms)
{
    struct tkm_api_nsscan_head h;
    struct tkm_err err = {0};
    struct build b = {.n = n, .cluster = cluster};
    int rc = tkm_api_nodestatus_scan(&n->scan, json, len, &h, build_entry, &b, &err);
    if (rc >= 0 && (b.mismatch || h.cluster != cluster || !h.name)) {
        rc = -EPROTO;
        tkm_err_set(&err, rc, "not a %s",
                    cluster ? "TritonKernelCacheNodeStatusCluster" : "TritonKernelCacheNodeStatus");
    }
    if (rc < 0) {
        ents_free(n, b.v, b.k);
        if (rc == -ENOMEM || rc == -EOVERFLOW) {
            gc_unused_caches(n); /* (entries are built only once the whole object is valid) */
            return -ENOMEM;
        }
        /* Name what we can from the raw object to report it. */
        json_t *j = json_loadb(json, len, 0, NULL);
        json_t *md = json_object_get(j, "metadata");
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *ns = json_string_value(json_object_get(md, "namespace"));
        const char *uid = json_string_value(json_object_get(md, "uid"));
        const char *rv = json_string_value(json_object_get(md, "resourceVersion"));
        struct ctrl_nsobj *o =
            name ? obj_get_or_new(n, cluster, ns ? ns : "", name, uid, now_ms) : NULL;
        if (o) {
            o->mark = n->mark[cluster];
            if (!o->bad_rv || !rv || strcmp(o->bad_rv, rv) != 0) {
                free(o->bad_rv);
                o->bad_rv = strdup(rv ? rv : "");
                if (n->invalid)
                    n->invalid(o, tkm_err_str(&err), n->data);
            }
        }
        json_decref(j);
        return 0;
    }
    struct ctrl_nsobj *o = obj_get_or_new(n, cluster, h.ns ? h.ns : "", h.name, h.uid, now_ms);
    if (!o) {
        ents_free(n, b.v, b.k);
        gc_unused_caches(n);
        return -ENOMEM;
    }
    build_finish(&b);
    o->mark = n->mark[cluster];
    free(o->bad_rv);
    o->bad_rv = NULL;
    swap_entries(n, o, b.v, b.k);
    return 0;
}

static void obj_free(struct ctrl_nodes *n, struct ctrl_nsobj *o)
{
    ents_free(n, o->ents, o->n_ents);
    free(o->uid_own);
    free(o->bad_rv);
    free(o);
}

static void obj_remove(struct ctrl_nodes *n, struct ctrl_nsobj *o)
{
    swap_entries(n, o, NULL, 0);
    tkm_strmap_del(&n->objs, o->key);
    group_del(o->group, o);
    group_unref(n, o->group);
    obj_free(n, o);
}
void ctrl_nodes_remove(struct ctrl_nodes *n, int cluster, const char *ns, const char *name)
{
    char key[600];
    snprintf(key, sizeof key, "%s%s%s%s", cluster ? "c:" : "", cluster ? "" : ns,
             cluster ? "" : "/", name);
    struct ctrl_nsobj *o = tkm_strmap_get(&n->objs, key);
    if (o)
        obj_remove(n, o);
}

void ctrl_nodes_list_begin(struct ctrl_nodes *n, int kind)
{
    n->mark[kind]++;
    if (!n->mark[kind])
        n->mark[kind] = 1;
}

struct stale {
    struct ctrl_nodes *n;
    int kind;
    char **keys;
    size_t nk, cap;
};

static int collect_stale(const char *key, void *val, void *data)
{
    struct stale *s = data;
    unsigned mark =
        s->kind == 2 ? ((struct ctrl_node *)val)->mark : ((struct ctrl_nsobj *)val)->mark;
    if (s->kind != 2 && ((struct ctrl_nsobj *)val)->cluster != s->kind)
        return 0;
    if (mark == s->n->mark[s->kind])
        return 0;
    if (s->nk == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        char **v = realloc(s->keys, nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        s->keys = v;
        s->cap = nc;
    }
    s->keys[s->nk] = strdup(key);
    if (!s->keys[s->nk])
        return -ENOMEM;
    s->nk++;
    return 0;
}

void ctrl_nodes_list_end(struct ctrl_nodes *n, int kind)
{
    struct stale s = {.n = n, .kind = kind};
    if (ctrl_map_each(kind == 2 ? &n->nodes : &n->objs, collect_stale, &s) < 0)
        tkm_warn("controller: out of memory pruning vanished objects (kept)");
    for (size_t i = 0; i < s.nk; i++) {
        if (kind == 2) {
            ctrl_nodes_node_remove(n, s.keys[i]);
        } else {
            struct ctrl_nsobj *o = tkm_strmap_get(&n->objs, s.keys[i]);
            if (o)
                obj_remove(n, o);
        }
        free(s.keys[i]);
    }
    free(s.keys);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The label keys of a Node's metadata (raw: validated JSON, or NULL) under
 * the controller's prefixes into one block: n_labels pointers, sorted, then
 * the strings. *out NULL when there are none. 0, -ENOMEM, -EPROTO. */
static int labels_read(struct ctrl_nodes *n, const char *raw, size_t len, char ***out,
                       uint32_t *count)
{
    struct tkm_jscan_member md, lb, m;
    struct tkm_buf keys = TKM_BUF_INIT(1u << 20);
    size_t root, pos, k = 0;
    int rc = 0;
    *out = NULL;
    *count = 0;
    if (!raw || !len)
        return 0;
    if (tkm_jscan_validate(&n->js, raw, len, "Node", NULL) < 0)
        return -EPROTO;
    root = tkm_jscan_ws(raw, len, 0);
    if (raw[root] != '{' || !tkm_jscan_member(raw, len, root, "metadata", &md) ||
        !tkm_jscan_member(raw, len, md.val, "labels", &lb) || raw[lb.val] != '{')
        return 0;
    for (pos = lb.val; tkm_jscan_next(raw, len, &pos, &m);) {
        size_t at = keys.len;
        if (tkm_jscan_str(raw, m.key, m.key_len, &keys) < 0) {
            rc = -ENOMEM;
            break;
        }
        if (strncmp(keys.data + at, TKM_API_NODE_LABEL_NS, strlen(TKM_API_NODE_LABEL_NS)) &&
            strncmp(keys.data + at, TKM_API_NODE_LABEL_CLUSTER, strlen(TKM_API_NODE_LABEL_CLUSTER)))
            keys.len = at; /* not ours */
        else
            k++;
    }
    if (rc == 0 && k) {
        char **v = malloc(k * sizeof *v + keys.len);
        if (!v) {
            rc = -ENOMEM;
        } else {
            char *str = (char *)(v + k);
            memcpy(str, keys.data, keys.len);
            for (size_t i = 0, off = 0; i < k; i++, off += strlen(str + off) + 1)
                v[i] = str + off;
            qsort(v, k, sizeof *v, cmp_str_ptr);
            *out = v;
            *count = (uint32_t)k;
        }
    }
    tkm_buf_release(&keys);
    return rc;
}

int ctrl_node_has_label(const struct ctrl_node *nd, const char *key)
{
    return nd && nd->n_labels &&
           bsearch(&key, nd->labels, nd->n_labels, sizeof *nd->labels, cmp_str_ptr) != NULL;
}

static int labels_same(char **a, uint32_t na, char **b, uint32_t nb)
{
    if (na != nb)
        return 0;
    for (uint32_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return 0;
    return 1;
}

int ctrl_nodes_node_upsert(struct ctrl_nodes *n, const char *name, const char *uid, const char *raw,
                           size_t len, int *changed_out)
{
    struct ctrl_node *nd = tkm_strmap_get(&n->nodes, name);
    int dummy;
    int *ch = changed_out ? changed_out : &dummy;
    *ch = 0;
    char **labels;
    uint32_t n_labels;
    if (!nd) {
        size_t nl = strlen(name) + 1;
        nd = calloc(1, sizeof *nd + nl);
        if (!nd || tkm_strmap_put(&n->nodes, memcpy(nd->name, name, nl), nd, NULL) < 0) {
            free(nd);
            return -ENOMEM;
        }
        *ch = 1;
    }
    nd->mark = n->mark[2];
    if (!nd->uid || strcmp(nd->uid, uid ? uid : "") != 0) {
        char *u = strdup(uid ? uid : "");
        if (!u)
            return -ENOMEM;
        free(nd->uid);
        nd->uid = u;
    }
    int rc = labels_read(n, raw, len, &labels, &n_labels);
    if (rc == -ENOMEM)
        return rc;
    if (rc == 0 && !labels_same(labels, n_labels, nd->labels, nd->n_labels)) {
        free(nd->labels);
        nd->labels = labels;
        nd->n_labels = n_labels;
        *ch = 1;
    } else {
        free(labels);
    }
    return 0;
}

void ctrl_nodes_node_remove(struct ctrl_nodes *n, const char *name)
{
    struct ctrl_node *nd = tkm_strmap_del(&n->nodes, name);
    if (!nd)
        return;
    if (n->node_gone) /* before the free: name may be nd->name */
        n->node_gone(name, n->data);
    free(nd->uid);
    free(nd->labels);
    free(nd);
}

void ctrl_nodes_release(struct ctrl_nodes *n)
{
    /* the keys are in the values: the maps go before them */
    struct tkm_strmap objs = n->objs, caches = n->caches, groups = n->groups, nodes = n->nodes;
    memset(&n->objs, 0, sizeof n->objs);
    memset(&n->caches, 0, sizeof n->caches);
    memset(&n->groups, 0, sizeof n->groups);
    memset(&n->nodes, 0, sizeof n->nodes);
    void *v;
    for (size_t pos = 0; tkm_strmap_next(&objs, &pos, NULL, &v);)
        obj_free(n, v);
    for (size_t pos = 0; tkm_strmap_next(&caches, &pos, NULL, &v);)
        free(v);
    for (size_t pos = 0; tkm_strmap_next(&groups, &pos, NULL, &v);) {
        free(((struct ctrl_nsgroup *)v)->objs);
        free(v);
    }
    for (size_t pos = 0; tkm_strmap_next(&nodes, &pos, NULL, &v);) {
        free(((struct ctrl_node *)v)->uid);
        free(((struct ctrl_node *)v)->labels);
        free(v);
    }
    tkm_strmap_release(&objs);
    tkm_strmap_release(&caches);
    tkm_strmap_release(&groups);
    tkm_strmap_release(&nodes);
    tkm_api_nsscan_release(&n->scan);
    tkm_buf_release(&n->profile);
    tkm_jscan_release(&n->js);
    free(n->cgroup.objs);
    for (uint32_t id = 1; id < n->whys.n; id++)
        free(n->whys.v[id]); /* none left once the objects are gone; NULL-safe */
    idtab_release(&n->whys);
    idtab_release(&n->cidx);
    free(n->why_bkt);
    n->why_bkt = NULL;
    n->n_bkt = n->n_whys = 0;
    n->n_entries = 0;
}
