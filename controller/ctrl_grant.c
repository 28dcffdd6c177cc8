/*
 * ctrl_grant.c - staged prefetch: the pull slots tkm-controller hands out per
 * cache (tkm-config prefetchSlots; docs/prefetch.md has the design and why).
 *
 * The state is a small set of granted node names with the time each was
 * granted; everything else comes from the node status entries (the flag
 * CTRL_E_PREFETCH: the agent says prefetch Waiting or Pulling). Nothing is
 * written per node while it waits: the grants travel in the cache status the
 * agents already watch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl-int.h"

struct slot {
    uint64_t since_ms; /* when granted */
    int expired;       /* the timeout passed while it still said Waiting/Pulling */
    char node[];
};

struct ctrl_grant {
    uint32_t digest; /* the digest id the set is for */
    struct slot **v; /* owned, sorted by node name */
    size_t n, cap;
    uint32_t granted, waiting; /* as last updated */
};

struct ctrl_grant *ctrl_grant_new(void)
{
    return calloc(1, sizeof(struct ctrl_grant));
}

static void clear(struct ctrl_grant *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->v[i]);
    g->n = 0;
    g->granted = g->waiting = 0;
}

void ctrl_grant_free(struct ctrl_grant *g)
{
    if (!g)
        return;
    clear(g);
    free(g->v);
    free(g);
}

void ctrl_grant_counts(const struct ctrl_grant *g, uint32_t *granted, uint32_t *waiting)
{
    *granted = g ? g->granted : 0;
    *waiting = g ? g->waiting : 0;
}

/* The position of node in g (found: *at; else where it goes). */
static int find(const struct ctrl_grant *g, const char *node, size_t *at)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->v[mid]->node, node);
        if (c == 0) {
            *at = mid;
            return 1;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return 0;
}

static int add(struct ctrl_grant *g, const char *node, uint64_t now_ms)
{
    size_t at, len = strlen(node);
    if (find(g, node, &at))
        return 0;
    if (g->n == g->cap) {
        size_t nc = g->cap ? g->cap * 2 : 8;
        struct slot **v = realloc(g->v, nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        g->v = v;
        g->cap = nc;
    }
    struct slot *s = malloc(sizeof *s + len + 1);
    if (!s)
        return -ENOMEM;
    s->since_ms = now_ms;
    s->expired = 0;
    memcpy(s->node, node, len + 1);
    memmove(&g->v[at + 1], &g->v[at], (g->n - at) * sizeof *g->v);
    g->v[at] = s;
    g->n++;
    return 0;
}

static void at_digest(struct ctrl_grant *g, uint32_t digest)
{
    if (g->digest != digest) {
        clear(g);
        g->digest = digest;
    }
}

int ctrl_grant_seed(struct ctrl_grant *g, uint32_t digest, const char *node, uint64_t now_ms)
{
    at_digest(g, digest);
    return add(g, node, now_ms);
}

/* The nodes of one cache whose entry at the digest says Waiting/Pulling. */
struct walk {
    uint32_t digest;
    const char **names; /* borrowed from the index (valid during the update) */
    size_t n, cap;
    int extracted; /* some node has the digest extracted */
    int rc;
};

static int walk_one(const struct ctrl_entry *e, const struct ctrl_nsobj *o, const char *why,
                    void *data)
{
    (void)why;
    struct walk *w = data;
    if (e->digest != w->digest)
        return 0;
    if (e->flags & CTRL_E_EXTRACTED)
        w->extracted = 1;
    if (!(e->flags & CTRL_E_PREFETCH))
        return 0;
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        const char **v = realloc(w->names, nc * sizeof *v);
        if (!v) {
            w->rc = -ENOMEM;
            return 1;
        }
        w->names = v;
        w->cap = nc;
    }
    w->names[w->n++] = o->node;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int listed(const struct walk *w, const char *node)
{
    return w->n && bsearch(&node, w->names, w->n, sizeof *w->names, cmp_name) != NULL;
}

/* Drops the slots whose node no longer waits or pulls; times out the rest. */
static void prune(struct ctrl_grant *g, const struct walk *w, uint64_t timeout_ms, uint64_t now_ms)
{
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++) {
        struct slot *s = g->v[i];
        if (!listed(w, s->node)) {
            free(s);
            continue;
        }
        if (!s->expired && now_ms - s->since_ms >= timeout_ms)
            s->expired = 1;
        g->v[k++] = s;
    }
    g->n = k;
}

static int out_fill(const struct ctrl_grant *g, unsigned slots, size_t listed_n,
                    struct tkm_api_prefetch_grants *out)
{
    memset(out, 0, sizeof *out);
    out->present = 1;
    out->slots = (int32_t)slots;
    out->waiting = (int32_t)(listed_n - g->granted);
    if (g->granted && !(out->granted = calloc(g->granted, sizeof *out->granted)))
        return -ENOMEM;
    for (size_t i = 0; i < g->n; i++) {
        if (g->v[i]->expired)
            continue;
        if (!(out->granted[out->n_granted] = strdup(g->v[i]->node)))
            return -ENOMEM;
        out->n_granted++;
    }
    return 0;
}

int ctrl_grant_update(struct ctrl_grant *g, const struct ctrl_cidx *x, uint32_t digest,
                      unsigned slots, uint64_t timeout_ms, uint64_t now_ms,
                      struct tkm_api_prefetch_grants *out, uint64_t *next_ms)
{
    struct walk w = {.digest = digest};
    uint32_t live = 0;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (next_ms)
        *next_ms = 0;
    if (slots > TKM_API_PREFETCH_SLOTS_MAX)
        slots = TKM_API_PREFETCH_SLOTS_MAX;
    at_digest(g, slots ? digest : 0);
    if (!slots || !digest)
        return 0;
    if (!timeout_ms)
        timeout_ms = TKM_API_PREFETCH_GRANT_TIMEOUT_MS;
    if (x)
        ctrl_cidx_foreach(x, walk_one, &w);
    if ((rc = w.rc))
        goto out;
    if (w.n > 1)
        qsort(w.names, w.n, sizeof *w.names, cmp_name);
    prune(g, &w, timeout_ms, now_ms);
    for (size_t i = 0; i < g->n; i++)
        live += !g->v[i]->expired;
    /* the first pull of a digest goes alone: a pull-through mirror fetches
     * each concurrent miss from the upstream (docs/prefetch.md) */
    uint32_t limit = w.extracted ? slots : 1;
    for (size_t i = 0; i < w.n && live < limit; i++) {
        size_t at;
        if ((i && strcmp(w.names[i], w.names[i - 1]) == 0) || find(g, w.names[i], &at))
            continue;
        if ((rc = add(g, w.names[i], now_ms)))
            goto out;
        live++;
    }
    g->granted = live;
    g->waiting = (uint32_t)(w.n - live);
    rc = out_fill(g, slots, w.n, out);
    for (size_t i = 0; next_ms && i < g->n; i++) {
        uint64_t left = g->v[i]->since_ms + timeout_ms - now_ms;
        if (!g->v[i]->expired && (!*next_ms || left < *next_ms))
            *next_ms = left;
    }
out:
    free(w.names);
    return rc;
}
