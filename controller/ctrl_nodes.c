/*
 * ctrl_nodes.c - the compact index of what nodes report.
 *
 * The node status objects are never kept as JSON: each is decoded once when
 * it arrives and reduced to one 48-byte struct ctrl_entry per cache it
 * mentions (digest id, flags, GPU and pod counts, the first reason something
 * is wrong). Entries are linked into the index of their cache, so a cache's
 * reconciler reads exactly its entries, and an update of one node status
 * notifies only the caches whose entries changed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>

#include "ctrl-int.h"

struct ctrl_node {
    char *uid;
    unsigned mark;
};

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

void ctrl_nodes_init(struct ctrl_nodes *n)
{
    memset(n, 0, sizeof *n);
    for (int i = 0; i < 3; i++)
        n->mark[i] = 1;
}

struct ctrl_cidx *ctrl_nodes_cache(struct ctrl_nodes *n, const char *key, int create)
{
    struct ctrl_cidx *c = ctrl_map_get(&n->caches, key);
    if (c || !create)
        return c;
    c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (ctrl_map_put(&n->caches, key, c, &c->key) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

void ctrl_nodes_cache_gc(struct ctrl_nodes *n, struct ctrl_cidx *c)
{
    if (!c || c->n || c->rec)
        return;
    ctrl_map_del(&n->caches, c->key);
    free(c->entries);
    free(c);
}

static int cidx_link(struct ctrl_cidx *c, struct ctrl_entry *e)
{
    if (c->n >= CTRL_POS_MAX)
        return -E2BIG;
    if (c->n == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 4;
        struct ctrl_entry **v = realloc(c->entries, ncap * sizeof *v);
        if (!v)
            return -ENOMEM;
        c->entries = v;
        c->cap = ncap;
    }
    e->cache = c;
    e->pos = (uint32_t)c->n;
    c->entries[c->n++] = e;
    return 0;
}

static void cidx_unlink(struct ctrl_entry *e)
{
    struct ctrl_cidx *c = e->cache;
    struct ctrl_entry *last = c->entries[--c->n];
    c->entries[e->pos] = last;
    last->pos = e->pos;
}

static void ents_free(struct ctrl_entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].why);
    free(v);
}

static char *why_of(const struct tkm_api_node_cache *nc)
{
    const char *r = NULL, *m = NULL;
    if (nc->error && *nc->error) {
        r = "NodeError";
        m = nc->error;
    } else if (nc->n_compatible == 0 && nc->n_incompatible > 0) {
        r = nc->incompatible[0].reason ? nc->incompatible[0].reason : "Incompatible";
        m = nc->incompatible[0].message ? nc->incompatible[0].message : "";
    } else {
        return NULL;
    }
    size_t rl = strlen(r), ml = strlen(m);
    if (ml > 300)
        ml = 300;
    char *w = malloc(rl + ml + 2);
    if (!w)
        return NULL;
    memcpy(w, r, rl + 1);
    memcpy(w + rl + 1, m, ml);
    w[rl + 1 + ml] = 0;
    return w;
}

static int fill_entry(struct ctrl_entry *e, const struct tkm_api_node_cache *nc)
{
    e->digest = ctrl_digest_id(nc->digest);
    e->flags = (nc->verified ? CTRL_E_VERIFIED : 0) | (nc->extracted ? CTRL_E_EXTRACTED : 0) |
               (nc->error && *nc->error ? CTRL_E_ERROR : 0) |
               (nc->n_compatible ? CTRL_E_COMPAT : 0) | (nc->n_incompatible ? CTRL_E_INCOMPAT : 0) |
               (nc->n_pods ? CTRL_E_PODS : 0);
    e->why = why_of(nc);
    if (!e->why &&
        (e->flags & CTRL_E_ERROR || (!(e->flags & CTRL_E_COMPAT) && e->flags & CTRL_E_INCOMPAT)))
        return -ENOMEM;
    return 0;
}

static int entry_same(const struct ctrl_entry *a, const struct ctrl_entry *b)
{
    if (a->digest != b->digest || a->flags != b->flags)
        return 0;
    if (!a->why || !b->why)
        return a->why == b->why;
    size_t al = strlen(a->why), bl = strlen(b->why);
    return al == bl && strcmp(a->why, b->why) == 0 && strcmp(a->why + al + 1, b->why + bl + 1) == 0;
}

static const char *ent_key(const struct ctrl_entry *e)
{
    return e->cache->key;
}

static void notify(struct ctrl_nodes *n, const char *key)
{
    if (n->changed)
        n->changed(key, n->data);
}

/* Replaces o's entries with nv (taken), linking and notifying. nv's entries
 * have cache set (not linked yet), sorted by key. */
static int swap_entries(struct ctrl_nodes *n, struct ctrl_nsobj *o, struct ctrl_entry *nv,
                        size_t nn)
{
    size_t i = 0, j = 0;
    struct ctrl_entry *ov = o->ents;
    size_t on = o->n_ents;
    int rc = 0;
    while (i < on || j < nn) {
        int cmp = i >= on ? 1 : j >= nn ? -1 : strcmp(ent_key(&ov[i]), ent_key(&nv[j]));
        if (cmp < 0) { /* gone */
            struct ctrl_cidx *c = ov[i].cache;
            cidx_unlink(&ov[i]);
            notify(n, c->key);
            n->n_entries--;
            ctrl_nodes_cache_gc(n, c);
            i++;
        } else if (cmp > 0) { /* new */
            nv[j].obj = o;
            if (cidx_link(nv[j].cache, &nv[j]) < 0) {
                rc = -ENOMEM;
                nv[j].cache = NULL;
            } else {
                n->n_entries++;
                notify(n, nv[j].cache->key);
            }
            j++;
        } else { /* both: take the slot over */
            int same = entry_same(&ov[i], &nv[j]);
            nv[j].obj = o;
            nv[j].pos = ov[i].pos;
            nv[j].cache->entries[nv[j].pos] = &nv[j];
            if (!same)
                notify(n, nv[j].cache->key);
            i++;
            j++;
        }
    }
    /* Entries that failed to link are dropped from the array. */
    size_t k = 0;
    for (j = 0; j < nn; j++) {
        if (!nv[j].cache) {
            free(nv[j].why);
            continue;
        }
        if (k != j) {
            nv[k] = nv[j];
            nv[k].cache->entries[nv[k].pos] = &nv[k];
        }
        k++;
    }
    ents_free(ov, on);
    o->ents = nv;
    o->n_ents = k;
    return rc;
}

static char *xstrdup(const char *s)
{
    return strdup(s ? s : "");
}

static struct ctrl_nsobj *obj_get_or_new(struct ctrl_nodes *n, int cluster, const char *ns,
                                         const char *name, const char *uid, uint64_t now_ms)
{
    char key[600];
    snprintf(key, sizeof key, "%s%s%s%s", cluster ? "c:" : "", cluster ? "" : ns,
             cluster ? "" : "/", name);
    struct ctrl_nsobj *o = ctrl_map_get(&n->objs, key);
    if (o) {
        if (uid && strcmp(o->uid, uid) != 0) {
            char *u = xstrdup(uid);
            if (u) {
                free(o->uid);
                o->uid = u;
            }
        }
        return o;
    }
    o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->key = xstrdup(key);
    o->ns = xstrdup(cluster ? "" : ns);
    o->node = xstrdup(name);
    o->uid = xstrdup(uid);
    o->cluster = cluster;
    o->seen_ms = now_ms;
    if (!o->key || !o->ns || !o->node || !o->uid || ctrl_map_put(&n->objs, key, o, NULL) < 0) {
        free(o->key);
        free(o->ns);
        free(o->node);
        free(o->uid);
        free(o);
        return NULL;
    }
    return o;
}

static int build_entries(struct ctrl_nodes *n, const struct tkm_api_nodestatus *d,
                         struct ctrl_entry **out, size_t *nout)
{
    const struct tkm_api_node_status *st = &d->status;
    struct ctrl_entry *v = st->n_caches ? calloc(st->n_caches, sizeof *v) : NULL;
    size_t k = 0;
    if (st->n_caches && !v)
        return -ENOMEM;
    for (size_t i = 0; i < st->n_caches; i++) {
        char key[600];
        if (ctrl_cache_key(key, sizeof key, d->cluster ? "" : d->meta.ns, st->caches[i].name) < 0)
            continue;
        struct ctrl_cidx *c = ctrl_nodes_cache(n, key, 1);
        if (!c || fill_entry(&v[k], &st->caches[i]) < 0) {
            ents_free(v, k + 1);
            return -ENOMEM;
        }
        v[k++].cache = c;
    }
    *out = v;
    *nout = k;
    return 0;
}

int ctrl_nodes_upsert(struct ctrl_nodes *n, int cluster, const char *json, size_t len,
                      uint64_t now_ms)
{
    struct tkm_api_nodestatus d = {0};
    struct tkm_err err = {0};
    struct ctrl_entry *nv = NULL;
    size_t nn = 0;
    int rc = tkm_api_nodestatus_decode(json, len, &d, &err);
    if (rc == 0 && (d.cluster != cluster || !d.meta.name)) {
        rc = -EPROTO;
        tkm_err_set(&err, rc, "not a %s",
                    cluster ? "TritonKernelCacheNodeStatusCluster" : "TritonKernelCacheNodeStatus");
    }
    if (rc < 0) {
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
                o->bad_rv = xstrdup(rv);
                if (n->invalid)
                    n->invalid(o, tkm_err_str(&err), n->data);
            }
        }
        json_decref(j);
        tkm_api_nodestatus_release(&d);
        return rc == -ENOMEM ? rc : 0;
    }
    struct ctrl_nsobj *o =
        obj_get_or_new(n, cluster, d.meta.ns ? d.meta.ns : "", d.meta.name, d.meta.uid, now_ms);
    if (!o || build_entries(n, &d, &nv, &nn) < 0) {
        tkm_api_nodestatus_release(&d);
        return -ENOMEM;
    }
    o->mark = n->mark[cluster];
    free(o->bad_rv);
    o->bad_rv = NULL;
    rc = swap_entries(n, o, nv, nn);
    tkm_api_nodestatus_release(&d);
    return rc;
}

static void obj_free(struct ctrl_nsobj *o)
{
    free(o->key);
    free(o->ns);
    free(o->node);
    free(o->uid);
    free(o->bad_rv);
    free(o);
}

static void obj_remove(struct ctrl_nodes *n, struct ctrl_nsobj *o)
{
    swap_entries(n, o, NULL, 0);
    ctrl_map_del(&n->objs, o->key);
    obj_free(o);
}

void ctrl_nodes_remove(struct ctrl_nodes *n, int cluster, const char *ns, const char *name)
{
    char key[600];
    snprintf(key, sizeof key, "%s%s%s%s", cluster ? "c:" : "", cluster ? "" : ns,
             cluster ? "" : "/", name);
    struct ctrl_nsobj *o = ctrl_map_get(&n->objs, key);
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
    if (ctrl_map_foreach(kind == 2 ? &n->nodes : &n->objs, collect_stale, &s) < 0)
        tkm_warn("controller: out of memory pruning vanished objects (kept)");
    for (size_t i = 0; i < s.nk; i++) {
        if (kind == 2) {
            ctrl_nodes_node_remove(n, s.keys[i]);
        } else {
            struct ctrl_nsobj *o = ctrl_map_get(&n->objs, s.keys[i]);
            if (o)
                obj_remove(n, o);
        }
        free(s.keys[i]);
    }
    free(s.keys);
}

int ctrl_nodes_node_upsert(struct ctrl_nodes *n, const char *name, const char *uid)
{
    struct ctrl_node *nd = ctrl_map_get(&n->nodes, name);
    if (!nd) {
        nd = calloc(1, sizeof *nd);
        if (!nd || ctrl_map_put(&n->nodes, name, nd, NULL) < 0) {
            free(nd);
            return -ENOMEM;
        }
    }
    nd->mark = n->mark[2];
    if (!nd->uid || strcmp(nd->uid, uid ? uid : "") != 0) {
        char *u = xstrdup(uid);
        if (!u)
            return -ENOMEM;
        free(nd->uid);
        nd->uid = u;
    }
    return 0;
}

void ctrl_nodes_node_remove(struct ctrl_nodes *n, const char *name)
{
    struct ctrl_node *nd = ctrl_map_del(&n->nodes, name);
    if (!nd)
        return;
    free(nd->uid);
    free(nd);
    if (n->node_gone)
        n->node_gone(name, n->data);
}

static int free_obj_cb(const char *key, void *val, void *data)
{
    (void)key;
    (void)data;
    struct ctrl_nsobj *o = val;
    ents_free(o->ents, o->n_ents);
    obj_free(o);
    return 0;
}

static int free_cidx_cb(const char *key, void *val, void *data)
{
    (void)key;
    (void)data;
    struct ctrl_cidx *c = val;
    free(c->entries);
    free(c);
    return 0;
}

static int free_node_cb(const char *key, void *val, void *data)
{
    (void)key;
    (void)data;
    struct ctrl_node *nd = val;
    free(nd->uid);
    free(nd);
    return 0;
}

void ctrl_nodes_release(struct ctrl_nodes *n)
{
    ctrl_map_foreach(&n->objs, free_obj_cb, NULL);
    ctrl_map_foreach(&n->caches, free_cidx_cb, NULL);
    ctrl_map_foreach(&n->nodes, free_node_cb, NULL);
    ctrl_map_release(&n->objs);
    ctrl_map_release(&n->caches);
    ctrl_map_release(&n->nodes);
}
