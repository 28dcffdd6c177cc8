/*
 * test_ctrl.c - tkm-controller's pure parts: the compact node
 * status index (which caches an update notifies, relists, garbage, interned
 * reasons, cache ids, iteration across namespaces, a random model check and
 * its bytes per entry), the
 * aggregation into conditions/counts/failedNodes and the SQLite state
 * (across a reopen). The registry steps are verify jobs: test_api_verify.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/buf.h>

#include <sqlite3.h>

#include "test.h"
#include "ctrl-int.h"

#define DA "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DB "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* A node status object: caches given as a JSON object text. */
static char *ns_json(const char *ns, const char *node, const char *caches)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
             "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"uid\":\"u-%s\","
             "\"resourceVersion\":\"%d\"},\"status\":{\"nodeName\":\"%s\",\"caches\":%s}}",
             node, ns, node, rand(), node, caches);
    return buf;
}

static const char *compat(const char *d)
{
    static char b[8][256];
    static int i;
    i = (i + 1) % 8;
    snprintf(b[i], sizeof b[i],
             "{\"digest\":\"%s\",\"verified\":true,\"extracted\":true,"
             "\"compatibleGPUs\":[{\"ids\":[0,1],\"gpuType\":\"nvidia-h200\"}]}",
             d);
    return b[i];
}

static const char *incompat(const char *d, const char *reason)
{
    static char b[8][300];
    static int i;
    i = (i + 1) % 8;
    snprintf(b[i], sizeof b[i],
             "{\"digest\":\"%s\",\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-a100\","
             "\"reason\":\"%s\",\"message\":\"sm_80\"}]}",
             d, reason);
    return b[i];
}

struct notes {
    char keys[64][64];
    int n, invalid, gone;
};

static void on_changed(const char *key, void *data)
{
    struct notes *n = data;
    if (n->n < 64)
        snprintf(n->keys[n->n++], 64, "%s", key);
}
static void on_invalid(const struct ctrl_nsobj *o, const char *msg, void *data)
{
    (void)o;
    (void)msg;
    ((struct notes *)data)->invalid++;
}
static void on_gone(const char *node, void *data)
{
    (void)node;
    ((struct notes *)data)->gone++;
}

static int upsert(struct ctrl_nodes *n, const char *ns, const char *node, const char *caches)
{
    const char *j = ns_json(ns, node, caches);
    return ctrl_nodes_upsert(n, 0, j, strlen(j), 0);
}

/* What ctrl_cidx_foreach hands out, copied. */
struct got_ent {
    const char *node; /* borrowed from the index, like why */
    const char *ns;
    int cluster;
    uint32_t digest, flags;
    const char *why; /* borrowed from the index */
};
struct got {
    struct got_ent v[1024];
    int n;
};

static int got_one(const struct ctrl_entry *e, const struct ctrl_nsobj *o, const char *why,
                   void *data)
{
    struct got *g = data;
    if (g->n >= (int)(sizeof g->v / sizeof g->v[0]))
        return -E2BIG;
    struct got_ent *x = &g->v[g->n++];
    x->node = o->node;
    x->ns = o->ns;
    x->cluster = o->cluster;
    x->digest = e->digest;
    x->flags = e->flags;
    x->why = why;
    return 0;
}

/* The entries of c (NULL: none); returns how many. */
static int collect(const struct ctrl_cidx *c, struct got *g)
{
    g->n = 0;
    ASSERT_EQ(ctrl_cidx_foreach(c, got_one, g), 0);
    return g->n;
}

static int stop_at_first(const struct ctrl_entry *e, const struct ctrl_nsobj *o, const char *why,
                         void *data)
{
    (void)e;
    (void)o;
    (void)why;
    (void)data;
    return 42;
}

/* "n<k>" -> k */
static int atoi_node(const char *s)
{
    ASSERT(s[0] == 'n');
    return (int)strtol(s + 1, NULL, 10);
}

TEST(nodes_update_notifies_only_changed_caches)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[1024];
    ctrl_nodes_init(&n);
    n.changed = on_changed;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"a\":%s,\"b\":%s,\"c\":%s}", compat(DA), compat(DA), compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "node-1", c), 0);
    ASSERT_EQ(seen.n, 3);
    ASSERT_UEQ(ctrl_nodes_cache(&n, "ml/a", 0)->n, 1);
    /* same facts again: nobody is notified */
    seen.n = 0;
    ASSERT_EQ(upsert(&n, "ml", "node-1", c), 0);
    ASSERT_EQ(seen.n, 0);
    /* b becomes incompatible, c disappears, d appears: b, c, d notified, not a */
    snprintf(c, sizeof c, "{\"a\":%s,\"b\":%s,\"d\":%s}", compat(DA), incompat(DA, "ArchMismatch"),
             compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "node-1", c), 0);
    ASSERT_EQ(seen.n, 3);
    ASSERT_STREQ(seen.keys[0], "ml/b");
    ASSERT_STREQ(seen.keys[1], "ml/c");
    ASSERT_STREQ(seen.keys[2], "ml/d");
    ASSERT_NULL(ctrl_nodes_cache(&n, "ml/c", 0)); /* no entries, no rec: dropped */
    struct got g = {0};
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "ml/b", 0), &g), 1);
    ASSERT_EQ(g.v[0].flags & (CTRL_E_COMPAT | CTRL_E_INCOMPAT), CTRL_E_INCOMPAT);
    ASSERT_STREQ(g.v[0].why, "ArchMismatch");
    ASSERT_STREQ(g.v[0].why + strlen(g.v[0].why) + 1, "sm_80");
    ASSERT_UEQ(n.n_entries, 3);
    /* removal notifies each of its caches */
    seen.n = 0;
    ctrl_nodes_remove(&n, 0, "ml", "node-1");
    ASSERT_EQ(seen.n, 3);
    ASSERT_UEQ(n.n_entries, 0);
    ctrl_nodes_release(&n);
}

TEST(nodes_many_nodes_one_cache_iteration_stays_consistent)
{
    struct ctrl_nodes n;
    char node[32], c[512];
    ctrl_nodes_init(&n);
    for (int i = 0; i < 50; i++) {
        snprintf(node, sizeof node, "n%d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    for (int i = 0; i < 50; i += 3) { /* remove every third node */
        snprintf(node, sizeof node, "n%d", i);
        ctrl_nodes_remove(&n, 0, "ml", node);
    }
    struct ctrl_cidx *x = ctrl_nodes_cache(&n, "ml/x", 0);
    ASSERT_UEQ(x->n, 33);
    struct got g = {0};
    ASSERT_EQ(collect(x, &g), 33);
    int seen[50] = {0};
    for (int i = 0; i < g.n; i++) {
        int k = atoi_node(g.v[i].node);
        ASSERT(k % 3 != 0);
        ASSERT_EQ(seen[k]++, 0);
        ASSERT_UEQ(g.v[i].digest, ctrl_digest_id(DA));
    }
    ctrl_nodes_release(&n);
}

TEST(nodes_garbage_keeps_previous_entries_and_reports_once)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[512];
    ctrl_nodes_init(&n);
    n.invalid = on_invalid;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    const char *bad =
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
        "\"metadata\":{\"name\":\"n1\",\"namespace\":\"ml\",\"resourceVersion\":\"9\"},"
        "\"status\":{\"gpus\":[{\"id\":99999999999}]}}";
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, bad, strlen(bad), 0), 0);
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, bad, strlen(bad), 0), 0);
    ASSERT_EQ(seen.invalid, 1); /* once per resourceVersion */
    ASSERT_UEQ(ctrl_nodes_cache(&n, "ml/x", 0)->n, 1);
    const char *junk = "{\"kind\":\"TritonKernelCacheNodeStatus\",\"metadata\":{}}";
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, junk, strlen(junk), 0), 0);
    const char *notjson = "{{{";
    ASSERT_EQ(ctrl_nodes_upsert(&n, 0, notjson, 3, 0), 0);
    ctrl_nodes_release(&n);
}

TEST(nodes_relist_removes_vanished_objects_and_nodes)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[512];
    ctrl_nodes_init(&n);
    n.node_gone = on_gone;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_EQ(upsert(&n, "ml", "n2", c), 0);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n1", "u1", NULL, 0, NULL), 0);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n2", "u2", NULL, 0, NULL), 0);
    ctrl_nodes_list_begin(&n, 0);
    ASSERT_EQ(upsert(&n, "ml", "n2", c), 0);
    ctrl_nodes_list_end(&n, 0);
    ASSERT_UEQ(ctrl_nodes_cache(&n, "ml/x", 0)->n, 1);
    ctrl_nodes_list_begin(&n, 2);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n2", "u2", NULL, 0, NULL), 0);
    ctrl_nodes_list_end(&n, 2);
    ASSERT_EQ(seen.gone, 1);
    ASSERT_NULL(tkm_strmap_get(&n.nodes, "n1"));
    ASSERT_NOT_NULL(tkm_strmap_get(&n.nodes, "n2"));
    ctrl_nodes_release(&n);
}

/* A node status object of either kind, caches given as a JSON object text
 * (owned: free). */
static char *obj_json(int cluster, const char *ns, const char *node, const char *caches)
{
    size_t len = strlen(caches) + 512;
    char *b = malloc(len);
    ASSERT_NOT_NULL(b);
    if (cluster)
        snprintf(b, len,
                 "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":"
                 "\"TritonKernelCacheNodeStatusCluster\",\"metadata\":{\"name\":\"%s\","
                 "\"uid\":\"u-%s\",\"resourceVersion\":\"%d\"},\"status\":{\"nodeName\":\"%s\","
                 "\"caches\":%s}}",
                 node, node, rand(), node, caches);
    else
        snprintf(b, len,
                 "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
                 "\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"uid\":\"u-%s\","
                 "\"resourceVersion\":\"%d\"},\"status\":{\"nodeName\":\"%s\",\"caches\":%s}}",
                 node, ns, node, rand(), node, caches);
    return b;
}

static int upsert_kind(struct ctrl_nodes *n, int cluster, const char *ns, const char *node,
                       const char *caches)
{
    char *j = obj_json(cluster, ns, node, caches);
    int rc = ctrl_nodes_upsert(n, cluster, j, strlen(j), 0);
    free(j);
    return rc;
}

TEST(nodes_same_reason_on_many_nodes_is_stored_once)
{
    struct ctrl_nodes n;
    char node[32], c[512];
    ctrl_nodes_init(&n);
    for (int i = 0; i < 900; i++) {
        snprintf(node, sizeof node, "n%d", i);
        snprintf(c, sizeof c, "{\"x\":%s,\"y\":%s}", incompat(DA, "ArchMismatch"),
                 incompat(DA, "ArchMismatch"));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    ASSERT_UEQ(n.n_entries, 1800);
    ASSERT_UEQ(n.n_whys, 1); /* 1800 entries, one string */
    struct got g = {0};
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "ml/x", 0), &g), 900);
    for (int i = 1; i < g.n; i++)
        ASSERT(g.v[i].why == g.v[0].why); /* the same bytes, not copies */
    ASSERT_STREQ(g.v[0].why, "ArchMismatch");
    /* another reason on one node: a second string; back: freed again */
    snprintf(c, sizeof c, "{\"x\":%s,\"y\":%s}", incompat(DA, "WarpSizeMismatch"),
             incompat(DA, "ArchMismatch"));
    ASSERT_EQ(upsert(&n, "ml", "n7", c), 0);
    ASSERT_UEQ(n.n_whys, 2);
    snprintf(c, sizeof c, "{\"x\":%s,\"y\":%s}", incompat(DA, "ArchMismatch"),
             incompat(DA, "ArchMismatch"));
    ASSERT_EQ(upsert(&n, "ml", "n7", c), 0);
    ASSERT_UEQ(n.n_whys, 1);
    /* a long message is cut to 300 bytes: two messages equal in those intern as one */
    char longm[2][700];
    for (int k = 0; k < 2; k++) {
        memset(longm[k], 'm', 400);
        snprintf(longm[k] + 400, 300, "%d", k);
        snprintf(c, sizeof c, "{\"z\":{\"digest\":\"%s\",\"error\":\"%.*s\"}}", DA,
                 (int)sizeof c - 80, longm[k]);
        snprintf(node, sizeof node, "long%d", k);
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    ASSERT_UEQ(n.n_whys, 2);
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "ml/z", 0), &g), 2);
    ASSERT_UEQ(strlen(g.v[0].why + strlen(g.v[0].why) + 1), 300);
    ctrl_nodes_remove(&n, 0, "ml", "long0");
    ctrl_nodes_remove(&n, 0, "ml", "long1");
    /* the last entry holding it goes: so does the string */
    for (int i = 0; i < 899; i++) {
        snprintf(node, sizeof node, "n%d", i);
        ctrl_nodes_remove(&n, 0, "ml", node);
        ASSERT_UEQ(n.n_whys, 1);
    }
    uint32_t last = 0;
    struct ctrl_nsobj *o = tkm_strmap_get(&n.objs, "ml/n899");
    ASSERT_NOT_NULL(o);
    last = o->ents[0].why;
    ASSERT_STREQ(ctrl_why_str(&n, last), "ArchMismatch");
    ctrl_nodes_remove(&n, 0, "ml", "n899");
    ASSERT_UEQ(n.n_whys, 0);
    ASSERT_NULL(ctrl_why_str(&n, last));
    ASSERT_UEQ(n.n_entries, 0);
    ASSERT_UEQ(n.caches.count, 0);
    ctrl_nodes_release(&n);
}

TEST(nodes_cache_ids_are_reused)
{
    struct ctrl_nodes n;
    char c[1024];
    ctrl_nodes_init(&n);
    snprintf(c, sizeof c, "{\"a\":%s,\"b\":%s,\"c\":%s}", compat(DA), compat(DA), compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    uint32_t ida = ctrl_nodes_cache(&n, "ml/a", 0)->id;
    uint32_t idb = ctrl_nodes_cache(&n, "ml/b", 0)->id;
    uint32_t idc = ctrl_nodes_cache(&n, "ml/c", 0)->id;
    ASSERT(ida && idb && idc && ida != idb && idb != idc && ida != idc);
    uint32_t slots = n.cidx.n;
    /* b goes (no entries, no reconciler): its id is free ... */
    snprintf(c, sizeof c, "{\"a\":%s,\"c\":%s}", compat(DA), compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_NULL(ctrl_nodes_cache(&n, "ml/b", 0));
    ASSERT_NULL(n.cidx.v[idb]);
    /* ... and the next new cache takes it; the table does not grow */
    snprintf(c, sizeof c, "{\"a\":%s,\"c\":%s,\"d\":%s}", compat(DA), compat(DA), compat(DB));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    struct ctrl_cidx *d = ctrl_nodes_cache(&n, "ml/d", 0);
    ASSERT_UEQ(d->id, idb);
    ASSERT_UEQ(n.cidx.n, slots);
    struct got g = {0};
    ASSERT_EQ(collect(d, &g), 1);
    ASSERT_UEQ(g.v[0].digest, ctrl_digest_id(DB));
    /* a cache with a reconciler keeps its index (and id) without entries */
    struct ctrl_cidx *a = ctrl_nodes_cache(&n, "ml/a", 0);
    a->rec = &g;
    snprintf(c, sizeof c, "{\"c\":%s,\"d\":%s}", compat(DA), compat(DB));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT(ctrl_nodes_cache(&n, "ml/a", 0) == a);
    ASSERT_UEQ(a->n, 0);
    ASSERT_EQ(collect(a, &g), 0);
    a->rec = NULL;
    ctrl_nodes_cache_gc(&n, a);
    ASSERT_NULL(ctrl_nodes_cache(&n, "ml/a", 0));
    ctrl_nodes_release(&n);
}

TEST(nodes_iteration_per_namespace_and_cluster_kind)
{
    struct ctrl_nodes n;
    char node[32], c[512];
    ctrl_nodes_init(&n);
    /* the same cache name "x" in ns a (3 nodes), ns b (2 nodes), cluster kind (4 nodes) */
    for (int i = 0; i < 4; i++) {
        snprintf(node, sizeof node, "n%d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
        if (i < 3)
            ASSERT_EQ(upsert_kind(&n, 0, "a", node, c), 0);
        if (i < 2) {
            snprintf(c, sizeof c, "{\"x\":%s}", compat(DB));
            ASSERT_EQ(upsert_kind(&n, 0, "b", node, c), 0);
        }
        snprintf(c, sizeof c, "{\"x\":%s}", incompat(DA, "ArchMismatch"));
        ASSERT_EQ(upsert_kind(&n, 1, NULL, node, c), 0);
    }
    struct got g = {0};
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "a/x", 0), &g), 3);
    for (int i = 0; i < g.n; i++) {
        ASSERT_STREQ(g.v[i].ns, "a");
        ASSERT_EQ(g.v[i].cluster, 0);
        ASSERT_UEQ(g.v[i].digest, ctrl_digest_id(DA));
    }
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "b/x", 0), &g), 2);
    for (int i = 0; i < g.n; i++) {
        ASSERT_STREQ(g.v[i].ns, "b");
        ASSERT_UEQ(g.v[i].digest, ctrl_digest_id(DB));
    }
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "/x", 0), &g), 4);
    for (int i = 0; i < g.n; i++) {
        ASSERT_EQ(g.v[i].cluster, 1);
        ASSERT_STREQ(g.v[i].ns, "");
        ASSERT_STREQ(g.v[i].why, "ArchMismatch");
    }
    ASSERT_UEQ(n.n_entries, 9);
    /* a cache nobody reports: an index (a reconciler's) with nothing to walk */
    struct ctrl_cidx *y = ctrl_nodes_cache(&n, "a/y", 1);
    ASSERT_NOT_NULL(y);
    ASSERT_EQ(collect(y, &g), 0);
    ASSERT_EQ(collect(NULL, &g), 0);
    ctrl_nodes_cache_gc(&n, y);
    /* fn's non-zero return stops the walk and is returned */
    ASSERT_EQ(ctrl_cidx_foreach(ctrl_nodes_cache(&n, "/x", 0), stop_at_first, &g), 42);
    /* namespace b empties: its group goes, a's and the cluster kind's stay */
    ctrl_nodes_remove(&n, 0, "b", "n0");
    ctrl_nodes_remove(&n, 0, "b", "n1");
    ASSERT_NULL(ctrl_nodes_cache(&n, "b/x", 0));
    ASSERT_NULL(tkm_strmap_get(&n.groups, "b"));
    ASSERT_NOT_NULL(tkm_strmap_get(&n.groups, "a"));
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "a/x", 0), &g), 3);
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "/x", 0), &g), 4);
    ctrl_nodes_release(&n);
}

TEST(nodes_entry_moves_between_caches)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    char c[512];
    ctrl_nodes_init(&n);
    n.changed = on_changed;
    n.data = &seen;
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_EQ(upsert(&n, "ml", "n2", c), 0);
    seen.n = 0;
    /* n1 now reports y instead of x: x loses it, y gets it, both are told */
    snprintf(c, sizeof c, "{\"y\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_EQ(seen.n, 2);
    int sx = strcmp(seen.keys[0], "ml/x") == 0 || strcmp(seen.keys[1], "ml/x") == 0;
    int sy = strcmp(seen.keys[0], "ml/y") == 0 || strcmp(seen.keys[1], "ml/y") == 0;
    ASSERT(sx && sy);
    struct got g = {0};
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "ml/x", 0), &g), 1);
    ASSERT_STREQ(g.v[0].node, "n2");
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "ml/y", 0), &g), 1);
    ASSERT_STREQ(g.v[0].node, "n1");
    /* n2 moves too: x is dropped, y has both */
    ASSERT_EQ(upsert(&n, "ml", "n2", c), 0);
    ASSERT_NULL(ctrl_nodes_cache(&n, "ml/x", 0));
    ASSERT_EQ(collect(ctrl_nodes_cache(&n, "ml/y", 0), &g), 2);
    ASSERT_UEQ(n.n_entries, 2);
    ctrl_nodes_release(&n);
}

/* ---- the index against a brute-force model -------------------------------------- */

#define M_OBJS   1000
#define M_CACHES 100
#define M_GROUPS 3 /* ns a, ns b, the cluster kind */

/* Object k: the cluster kind for k % 5 == 4, else ns a (k % 5 < 2) or b. */
static int m_group(int k)
{
    return k % 5 == 4 ? 2 : k % 5 < 2 ? 0 : 1;
}
static const char *const m_ns[M_GROUPS] = {"a", "b", ""};

/* Variants of an entry (0: absent). 6: an error naming the node (many strings). */
#define M_VARIANTS 7

static void m_cache_json(struct tkm_buf *b, int v, int k)
{
    switch (v) {
    case 1:
        tkm_buf_puts(b, compat(DA));
        break;
    case 2:
        tkm_buf_puts(b, compat(DB));
        break;
    case 3:
        tkm_buf_puts(b, incompat(DA, "ArchMismatch"));
        break;
    case 4:
        tkm_buf_puts(b, incompat(DB, "WarpSizeMismatch"));
        break;
    case 5:
        tkm_buf_printf(b, "{\"digest\":\"%s\",\"error\":\"disk full\"}", DA);
        break;
    default:
        tkm_buf_printf(b, "{\"digest\":\"%s\",\"error\":\"bad node n%d\"}", DA, k);
        break;
    }
}

/* The entry variant v of object k should be: digest, flags, and why as
 * reason and message (message NULL for v 6: "bad node n<k>"). */
static void m_expect(int v, uint32_t *digest, uint32_t *flags, const char **reason,
                     const char **msg)
{
    static const uint32_t ok = CTRL_E_VERIFIED | CTRL_E_EXTRACTED | CTRL_E_COMPAT;
    *digest = ctrl_digest_id(v == 2 || v == 4 ? DB : DA);
    *flags = v <= 2 ? ok : v <= 4 ? CTRL_E_INCOMPAT : CTRL_E_ERROR;
    *reason = v <= 2 ? NULL : v == 3 ? "ArchMismatch" : v == 4 ? "WarpSizeMismatch" : "NodeError";
    *msg = v <= 2 ? NULL : v <= 4 ? "sm_80" : v == 5 ? "disk full" : NULL;
}

struct model {
    unsigned char st[M_OBJS][M_CACHES];
    unsigned char notified[M_GROUPS][M_CACHES];
    int bad_note;
};

static void m_on_changed(const char *key, void *data)
{
    struct model *m = data;
    const char *slash = strchr(key, '/');
    int g = slash == key ? 2 : key[0] == 'a' ? 0 : 1;
    int c = (int)strtol(slash + 2, NULL, 10); /* "<ns>/c<i>" */
    if (m->notified[g][c]++)
        m->bad_note++; /* twice for one update */
}

static int m_upsert(struct ctrl_nodes *n, struct model *m, int k, const unsigned char *row)
{
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    char node[32];
    int first = 1;
    tkm_buf_puts(&b, "{");
    for (int c = 0; c < M_CACHES; c++) {
        if (!row[c])
            continue;
        tkm_buf_printf(&b, "%s\"c%d\":", first ? "" : ",", c);
        m_cache_json(&b, row[c], k);
        first = 0;
    }
    tkm_buf_puts(&b, "}");
    ASSERT_NOT_NULL(b.data);
    snprintf(node, sizeof node, "n%d", k);
    int g = m_group(k);
    int rc = upsert_kind(n, g == 2, m_ns[g], node, b.data);
    tkm_buf_release(&b);
    memcpy(m->st[k], row, M_CACHES);
    return rc;
}

static void m_remove(struct ctrl_nodes *n, struct model *m, int k)
{
    char node[32];
    int g = m_group(k);
    snprintf(node, sizeof node, "n%d", k);
    ctrl_nodes_remove(n, g == 2, m_ns[g], node);
    memset(m->st[k], 0, M_CACHES);
}

/* Compares the whole index with the model, and the caches notified by the
 * last step with those whose model entry changed (before: the rows then). */
static void m_check(const struct ctrl_nodes *n, struct model *m, unsigned char (*before)[M_CACHES])
{
    static struct got g;
    size_t total = 0;
    char key[64], gw[64];
    ASSERT_EQ(m->bad_note, 0);
    for (int gi = 0; gi < M_GROUPS; gi++)
        for (int c = 0; c < M_CACHES; c++) {
            int want = 0, changed = 0;
            for (int k = 0; k < M_OBJS; k++) {
                if (m_group(k) != gi)
                    continue;
                want += m->st[k][c] != 0;
                changed |= before && before[k][c] != m->st[k][c];
            }
            if (before)
                ASSERT_EQ(m->notified[gi][c], changed);
            total += (size_t)want;
            snprintf(key, sizeof key, "%s/c%d", m_ns[gi], c);
            const struct ctrl_cidx *x = tkm_strmap_get(&n->caches, key);
            if (!want) {
                ASSERT_NULL(x); /* no entries, no reconciler: dropped */
                continue;
            }
            ASSERT_NOT_NULL(x);
            ASSERT_UEQ(x->n, want);
            ASSERT_EQ(collect(x, &g), want);
            for (int i = 0; i < g.n; i++) {
                int k = atoi_node(g.v[i].node);
                uint32_t d, f;
                const char *r, *msg, *w = g.v[i].why;
                ASSERT(k >= 0 && k < M_OBJS && m_group(k) == gi);
                ASSERT(m->st[k][c] != 0);
                m_expect(m->st[k][c], &d, &f, &r, &msg);
                ASSERT_UEQ(g.v[i].digest, d);
                ASSERT_UEQ(g.v[i].flags, f);
                if (!r) {
                    ASSERT_NULL(w);
                    continue;
                }
                ASSERT_NOT_NULL(w);
                ASSERT_STREQ(w, r);
                if (msg) {
                    ASSERT_STREQ(w + strlen(w) + 1, msg);
                } else {
                    snprintf(gw, sizeof gw, "bad node n%d", k);
                    ASSERT_STREQ(w + strlen(w) + 1, gw);
                }
            }
        }
    ASSERT_UEQ(n->n_entries, total);
    memset(m->notified, 0, sizeof m->notified);
}

TEST_TIMEOUT(nodes_random_model_1000x100, 600)
{
    static struct model m;
    static unsigned char before[M_OBJS][M_CACHES];
    static struct ctrl_nodes n;
    unsigned char row[M_CACHES];
    srand(1234);
    memset(&m, 0, sizeof m);
    ctrl_nodes_init(&n);
    n.changed = m_on_changed;
    n.data = &m;
    for (int k = 0; k < M_OBJS; k++) {
        for (int c = 0; c < M_CACHES; c++)
            row[c] = rand() % 10 < 7 ? (unsigned char)(1 + rand() % (M_VARIANTS - 1)) : 0;
        memcpy(before, m.st, sizeof before);
        ASSERT_EQ(m_upsert(&n, &m, k, row), 0);
        if (k % 50 == 49) /* the full comparison is O(index): every 50th fill step */
            m_check(&n, &m, before);
        else
            memset(m.notified, 0, sizeof m.notified);
    }
    m_check(&n, &m, NULL);
    /* 600 random steps; 60 under valgrind, where each step's full check of the
     * 100,000-entry index costs about 0.5 s */
    int steps = tkm_test_timeout_scale() > 1 ? 60 : 600;
    for (int step = 0; step < steps; step++) {
        int k = rand() % M_OBJS, op = rand() % 20;
        memcpy(before, m.st, sizeof before);
        memcpy(row, m.st[k], sizeof row);
        if (op < 12) { /* a few entries change, appear or go */
            for (int i = 1 + rand() % 5; i > 0; i--)
                row[rand() % M_CACHES] = (unsigned char)(rand() % M_VARIANTS);
            ASSERT_EQ(m_upsert(&n, &m, k, row), 0);
        } else if (op < 14) { /* a heartbeat: nothing changes, nobody is told */
            ASSERT_EQ(m_upsert(&n, &m, k, row), 0);
        } else if (op < 17) {
            m_remove(&n, &m, k);
        } else {
            for (int c = 0; c < M_CACHES; c++)
                row[c] = rand() % 10 < 5 ? (unsigned char)(rand() % M_VARIANTS) : 0;
            ASSERT_EQ(m_upsert(&n, &m, k, row), 0);
        }
        m_check(&n, &m, before);
    }
    /* every string interned once: the distinct whys of the model */
    unsigned char used[M_OBJS + 8] = {0};
    size_t distinct = 0;
    for (int k = 0; k < M_OBJS; k++)
        for (int c = 0; c < M_CACHES; c++) {
            int v = m.st[k][c];
            int slot = v >= 3 && v <= 5 ? M_OBJS + v : v == 6 ? k : -1;
            if (slot >= 0 && !used[slot]) {
                used[slot] = 1;
                distinct++;
            }
        }
    ASSERT_UEQ(n.n_whys, distinct);
    for (int k = 0; k < M_OBJS; k++) {
        m_remove(&n, &m, k);
        memset(m.notified, 0, sizeof m.notified);
    }
    m_check(&n, &m, NULL);
    ASSERT_UEQ(n.n_whys, 0);
    ASSERT_UEQ(n.caches.count, 0);
    ctrl_nodes_release(&n);
}

static size_t map_bytes(const struct tkm_strmap *m, size_t val_size)
{
    return tkm_strmap_bytes(m) + m->count * val_size;
}

struct bytes_acc {
    size_t total;
};

static int acc_key(const char *key, void *val, void *data)
{
    (void)val;
    ((struct bytes_acc *)data)->total += strlen(key) + 1;
    return 0;
}

static int acc_obj(const char *key, void *val, void *data)
{
    const struct ctrl_nsobj *o = val;
    struct bytes_acc *a = data;
    a->total += strlen(key) + 1 + sizeof *o + strlen(o->ns) + strlen(o->node) + 3 +
                (o->uid_own ? strlen(o->uid_own) : strlen(o->uid)) +
                (o->bad_rv ? strlen(o->bad_rv) + 1 : 0) + o->n_ents * sizeof *o->ents;
    return 0;
}

static int acc_group(const char *key, void *val, void *data)
{
    const struct ctrl_nsgroup *g = val;
    ((struct bytes_acc *)data)->total += strlen(key) + 1 + g->cap * sizeof *g->objs;
    return 0;
}

/* The bytes the index holds on the heap (its structs, arrays, strings and
 * map tables, not malloc's own overhead): what bytes per entry is measured
 * with. */
static size_t nodes_bytes(const struct ctrl_nodes *n)
{
    struct bytes_acc a = {0};
    a.total = map_bytes(&n->objs, 0) + map_bytes(&n->caches, sizeof(struct ctrl_cidx)) +
              map_bytes(&n->groups, sizeof(struct ctrl_nsgroup)) +
              map_bytes(&n->nodes, sizeof(struct ctrl_node)) +
              n->cgroup.cap * sizeof(struct ctrl_gslot) +
              (size_t)n->cidx.cap * (sizeof(void *) + sizeof(uint32_t)) +
              (size_t)n->whys.cap * (sizeof(void *) + sizeof(uint32_t)) +
              (size_t)n->n_bkt * sizeof(uint32_t);
    ctrl_map_each(&n->objs, acc_obj, &a);
    ctrl_map_each(&n->caches, acc_key, &a);
    ctrl_map_each(&n->groups, acc_group, &a);
    ctrl_map_each(&n->nodes, acc_key, &a);
    for (uint32_t id = 1; id < n->whys.n; id++) {
        const struct ctrl_why *w = n->whys.v[id];
        if (w) {
            size_t rl = strlen(w->s);
            a.total += sizeof *w + rl + strlen(w->s + rl + 1) + 2;
        }
    }
    return a.total;
}

TEST_TIMEOUT(nodes_bytes_per_entry, 300)
{
    /* 1000 node status objects x 100 caches, as at the bench cluster: a
     * tenth of the entries carry a reason (the same on every node). */
    static struct ctrl_nodes n;
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    char node[32];
    ctrl_nodes_init(&n);
    for (int k = 0; k < 1000; k++) {
        tkm_buf_reset(&b);
        tkm_buf_puts(&b, "{");
        for (int c = 0; c < 100; c++) {
            tkm_buf_printf(&b, "%s\"cache-%03d\":", c ? "," : "", c);
            tkm_buf_puts(&b, c % 10 ? compat(DA) : incompat(DA, "ArchMismatch"));
        }
        tkm_buf_puts(&b, "}");
        ASSERT_NOT_NULL(b.data);
        snprintf(node, sizeof node, "node-%04d", k);
        ASSERT_EQ(upsert_kind(&n, 0, "tkm-system", node, b.data), 0);
    }
    tkm_buf_release(&b);
    ASSERT_UEQ(n.n_entries, 100000);
    size_t bytes = nodes_bytes(&n);
    double per = (double)bytes / (double)n.n_entries;
    printf("# index: %zu entries, %zu bytes, %.2f bytes per entry (struct ctrl_entry: %zu)\n",
           n.n_entries, bytes, per, sizeof(struct ctrl_entry));
    ASSERT(per >= (double)sizeof(struct ctrl_entry)); /* the measure sees the entries */
    ASSERT(per < 16.0); /* the target: about 12 plus the per-object share */
    /* what a reconcile pays to read its entries (printed, not asserted: the
     * machine is shared): the aggregation of every cache */
    struct ctrl_verdict v = {.verified = TKM_API_COND_TRUE,
                             .reason = "SignatureVerified",
                             .message = "ok",
                             .usable = 1,
                             .digest = DA};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int c = 0; c < 100; c++) {
        char key[64];
        struct tkm_api_cache_status st = {0};
        snprintf(key, sizeof key, "tkm-system/cache-%03d", c);
        ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, key, 0), &v, 1, NULL, 0,
                                 "2026-01-01T00:00:00Z", &st),
                  0);
        ASSERT_EQ(st.counts.nodes, 1000);
        ASSERT_EQ(st.counts.incompatible, c % 10 ? 0 : 1000);
        tkm_api_cache_status_release(&st);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("# ctrl_agg_build of a cache of 1000 nodes: %.1f us\n",
           ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / 100);
    ctrl_nodes_release(&n);
}

static const struct tkm_api_condition *cond(const struct tkm_api_cache_status *st, const char *t)
{
    for (size_t i = 0; i < st->n_conditions; i++)
        if (strcmp(st->conditions[i].type, t) == 0)
            return &st->conditions[i];
    return NULL;
}

TEST(agg_counts_ready_failed_nodes_capped)
{
    struct ctrl_nodes n;
    char node[32], c[512];
    struct tkm_api_cache_status st = {0};
    ctrl_nodes_init(&n);
    for (int i = 0; i < 3; i++) {
        snprintf(node, sizeof node, "ok-%d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    for (int i = 0; i < 20; i++) {
        snprintf(node, sizeof node, "old-gpu-%02d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", incompat(DA, "ArchMismatch"));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    snprintf(c, sizeof c, "{\"x\":{\"digest\":\"%s\",\"error\":\"disk full\"}}", DA);
    ASSERT_EQ(upsert(&n, "ml", "broken", c), 0);
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DB)); /* still on another digest */
    ASSERT_EQ(upsert(&n, "ml", "behind", c), 0);
    struct ctrl_verdict v = {.verified = TKM_API_COND_TRUE,
                             .reason = "SignatureVerified",
                             .message = "ok",
                             .usable = 1,
                             .digest = DA};
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &v, 7, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    ASSERT_EQ(st.counts.nodes, 25);
    ASSERT_EQ(st.counts.compatible, 3);
    ASSERT_EQ(st.counts.incompatible, 20);
    ASSERT_EQ(st.counts.failed, 1);
    ASSERT_UEQ(st.n_failed_nodes, CTRL_MAX_FAILED);
    ASSERT_STREQ(st.failed_nodes[0].node, "broken"); /* failures first */
    ASSERT_STREQ(st.failed_nodes[1].node, "old-gpu-00");
    ASSERT_STREQ(st.failed_nodes[1].reason, "ArchMismatch");
    const struct tkm_api_condition *r = cond(&st, "Ready");
    ASSERT_EQ(r->status, TKM_API_COND_TRUE);
    ASSERT_EQ(r->observed_generation, 7);
    ASSERT_STRCONTAINS(r->message, "usable on 3 of 25 nodes");
    ASSERT_STRCONTAINS(r->message, "20 incompatible");
    ASSERT_STRCONTAINS(r->message, "and 17 more");
    ASSERT_STRCONTAINS(r->message, "failedNodes lists 16, and 5 more");
    ASSERT_EQ(cond(&st, "Degraded")->status, TKM_API_COND_TRUE);
    ASSERT_STRCONTAINS(cond(&st, "Degraded")->message, "broken: NodeError: disk full");
    ASSERT_EQ(cond(&st, "Progressing")->status, TKM_API_COND_TRUE); /* "behind" */
    ASSERT_STREQ(cond(&st, "Progressing")->reason, "RollingOut");
    tkm_api_cache_status_release(&st);
    ctrl_nodes_release(&n);
}

TEST(agg_not_ready_reasons_and_transition_times)
{
    struct ctrl_nodes n;
    char c[512];
    struct tkm_api_cache_status st = {0}, st2 = {0};
    ctrl_nodes_init(&n);
    struct ctrl_verdict bad = {.verified = TKM_API_COND_FALSE,
                               .reason = "KeyMismatch",
                               .message = "signature does not verify",
                               .digest = DA};
    ASSERT_EQ(ctrl_agg_build(NULL, &bad, 1, NULL, 0, "2026-01-01T00:00:00Z", &st), 0);
    ASSERT_EQ(cond(&st, "Verified")->status, TKM_API_COND_FALSE);
    ASSERT_STREQ(cond(&st, "Ready")->reason, "NotVerified");
    ASSERT_STRCONTAINS(cond(&st, "Ready")->message, "KeyMismatch: signature does not verify");
    /* later, same facts: lastTransitionTime stays */
    ASSERT_EQ(
        ctrl_agg_build(NULL, &bad, 1, st.conditions, st.n_conditions, "2026-02-02T00:00:00Z", &st2),
        0);
    ASSERT_STREQ(cond(&st2, "Ready")->last_transition_time, "2026-01-01T00:00:00Z");
    tkm_api_cache_status_release(&st2);
    memset(&st2, 0, sizeof st2);
    /* verified now, every node incompatible: NoCompatibleNode; Ready's time stays
     * (still False), Verified's moves (False -> True) */
    snprintf(c, sizeof c, "{\"x\":%s}", incompat(DA, "WarpSizeMismatch"));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    struct ctrl_verdict ok = {.verified = TKM_API_COND_TRUE,
                              .reason = "SignatureVerified",
                              .message = "ok",
                              .usable = 1,
                              .digest = DA};
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &ok, 2, st.conditions,
                             st.n_conditions, "2026-03-03T00:00:00Z", &st2),
              0);
    ASSERT_STREQ(cond(&st2, "Ready")->reason, "NoCompatibleNode");
    ASSERT_STRCONTAINS(cond(&st2, "Ready")->message, "n1: WarpSizeMismatch: sm_80");
    ASSERT_STREQ(cond(&st2, "Ready")->last_transition_time, "2026-01-01T00:00:00Z");
    ASSERT_STREQ(cond(&st2, "Verified")->last_transition_time, "2026-03-03T00:00:00Z");
    ASSERT_EQ(cond(&st2, "Degraded")->status, TKM_API_COND_FALSE);
    tkm_api_cache_status_release(&st);
    tkm_api_cache_status_release(&st2);
    ctrl_nodes_release(&n);
}

TEST(state_persists_across_reopen)
{
    struct ctrl_state *s = NULL;
    struct tkm_err err = {0};
    char d[CTRL_DIGEST_MAX];
    struct ctrl_verify_rec r = {.ok = 1, .reason = "SignatureVerified", .key_id = "sha256:ab12"},
                           out;
    ASSERT_EQ(ctrl_state_open(tkm_test_tmpdir(), &s, &err), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v1", d), 0);
    ASSERT_EQ(ctrl_state_pin_put(s, "u1", "r/x:v1", DA), 0);
    ASSERT_EQ(ctrl_state_pin_put(s, "u1", "r/x:v2", DB), 0); /* replaces */
    ASSERT_EQ(ctrl_state_verify_put(s, "u1", DB, "fp1", &r), 0);
    ctrl_state_close(s);
    s = NULL;
    ASSERT_EQ(ctrl_state_open(tkm_test_tmpdir(), &s, &err), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v1", d), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v2", d), 1);
    ASSERT_STREQ(d, DB);
    ASSERT_EQ(ctrl_state_verify_get(s, "u1", DB, "fp2", &out), 0); /* another policy */
    ASSERT_EQ(ctrl_state_verify_get(s, "u1", DB, "fp1", &out), 1);
    ASSERT_EQ(out.ok, 1);
    ASSERT_STREQ(out.key_id, "sha256:ab12");
    ASSERT_EQ(ctrl_state_forget(s, "u1"), 0);
    ASSERT_EQ(ctrl_state_pin_get(s, "u1", "r/x:v2", d), 0);
    ctrl_state_close(s);
}

TEST(state_memory_stays_small_with_1000_caches)
{
    /* The page cache is capped (64 KiB) and not allocated in bulk: 1000
     * caches' pins and verifications (many more pages than the 16 cached) cost
     * SQLite ~80 KB of heap, not the ~280 KB of its defaults here. */
    struct ctrl_state *s = NULL;
    struct tkm_err err = {0};
    char uid[64], d[CTRL_DIGEST_MAX];
    struct ctrl_verify_rec r = {.ok = 1, .reason = "SignatureVerified", .key_id = "sha256:ab12"};
    snprintf(r.message, sizeof r.message, "%s verified with key sha256:ab12 (spec.signaturePolicy)",
             DA);
    ASSERT_EQ(ctrl_state_open(tkm_test_tmpdir(), &s, &err), 0);
    for (int i = 0; i < 1000; i++) {
        snprintf(uid, sizeof uid, "%08d-1111-2222-3333-444444444444", i);
        ASSERT_EQ(ctrl_state_pin_put(s, uid, "127.0.0.1:5000/bench/cache:sm90", DA), 0);
        ASSERT_EQ(ctrl_state_verify_put(s, uid, DA, "fp1", &r), 0);
    }
    for (int i = 0; i < 1000; i += 7) { /* still all there */
        snprintf(uid, sizeof uid, "%08d-1111-2222-3333-444444444444", i);
        ASSERT_EQ(ctrl_state_pin_get(s, uid, "127.0.0.1:5000/bench/cache:sm90", d), 1);
        ASSERT_STREQ(d, DA);
    }
    ASSERT(sqlite3_memory_used() < 128 * 1024);
    ctrl_state_close(s);
}

TEST(state_bad_dir_is_a_clear_error)
{
    struct ctrl_state *s = NULL;
    struct tkm_err err = {0};
    ASSERT(ctrl_state_open("/nonexistent/dir/x", &s, &err) < 0);
    ASSERT_STRCONTAINS(err.msg, "/nonexistent/dir/x/controller.db");
    ASSERT_NULL(s);
}

TEST(digest_id)
{
    ASSERT_EQ(sizeof(struct ctrl_entry), 12);
    ASSERT_UEQ(ctrl_digest_id(DA), 0xaaaaaaaau);
    ASSERT_UEQ(ctrl_digest_id("sha256:0000000000000000aaaa"), 1); /* valid, never 0 */
    ASSERT_EQ(ctrl_digest_id("sha256:aaaaaaaaaaaaaaaX"), 0);      /* the 16 are checked */
    ASSERT(ctrl_digest_id(DA) != 0);
    ASSERT(ctrl_digest_id(DA) != ctrl_digest_id(DB));
    ASSERT_EQ(ctrl_digest_id(NULL), 0);
    ASSERT_EQ(ctrl_digest_id("sha256:xyz"), 0);
    ASSERT_EQ(ctrl_digest_id("md5:aaaaaaaaaaaaaaaaaaaaaa"), 0);
}

TEST(settle_waits_for_quiet_entries_up_to_the_max_delay)
{
    uint64_t settle = 250, max = 5000, dirty = 0;
    /* Entries never changed, or quiet for the settle time: write now. */
    ASSERT_EQ(ctrl_settle_wait(settle, max, 0, &dirty, 1000), 0);
    ASSERT_EQ(ctrl_settle_wait(settle, max, 1000, &dirty, 1250), 0);
    ASSERT_EQ(dirty, 0);
    /* A change 100 ms ago: wait the 150 ms left, remembering the first. */
    ASSERT_EQ(ctrl_settle_wait(settle, max, 10000, &dirty, 10100), 150);
    ASSERT_EQ(dirty, 10100);
    /* Reports keep coming every 100 ms: never quiet, but written once the
     * first unwritten change is 5 s old (and the wait never passes that). */
    ASSERT_EQ(ctrl_settle_wait(settle, max, 14900, &dirty, 15000), 100);
    ASSERT_EQ(ctrl_settle_wait(settle, max, 15000, &dirty, 15050), 50);
    ASSERT_EQ(ctrl_settle_wait(settle, max, 15050, &dirty, 15100), 0);
    ASSERT_EQ(dirty, 10100);
    /* Settling off: always now. */
    settle = 0;
    dirty = 0;
    ASSERT_EQ(ctrl_settle_wait(settle, max, 20000, &dirty, 20001), 0);
    ASSERT_EQ(dirty, 0);
}

/* ---- issue 24: variants, GPU types without one, Node labels ---------------------------- */

/* A compatible entry using the given variants (JSON list text). */
static const char *with_variants(const char *d, const char *variants, const char *incomp)
{
    static char b[4][1024];
    static int i;
    i = (i + 1) % 4;
    snprintf(b[i], sizeof b[i],
             "{\"digest\":\"%s\",\"verified\":true,\"extracted\":true,"
             "\"compatibleGPUs\":[{\"ids\":[0,1],\"gpuType\":\"nvidia-h200\"}],"
             "\"variants\":%s%s%s}",
             d, variants, incomp ? ",\"incompatibleGPUs\":" : "", incomp ? incomp : "");
    return b[i];
}

/* A node names a variant by digest (and its GPUs); the target is the index's (INDEX below). */
#define V90 "{\"digest\":\"sha256:90\",\"gpuIds\":[0,1]}"
#define V80 "{\"digest\":\"sha256:80\",\"gpuIds\":[2]}"
static const struct ctrl_variant INDEX[] = {{"sha256:80", "linux/arm64", "cuda", "80", 32},
                                            {"sha256:90", "linux/amd64", "cuda", "90", 32}};

/* ctrl_agg_build of cache ml/x into st: 1 when a node named a variant v's index lacks, 0 when
 * none did, -1 when the build failed. */
static int agg_unknown(struct ctrl_nodes *n, struct ctrl_verdict *v,
                       struct tkm_api_cache_status *st)
{
    int unknown = 0, *was = v->unknown;
    v->unknown = &unknown;
    int rc =
        ctrl_agg_build(ctrl_nodes_cache(n, "ml/x", 0), v, 1, NULL, 0, "2026-01-01T00:00:00Z", st);
    v->unknown = was;
    return rc < 0 ? -1 : unknown;
}

TEST(agg_variants_nodes_gpus_and_types_without_variant)
{
    struct ctrl_nodes n;
    char node[32], c[2048];
    struct tkm_api_cache_status st = {0};
    ctrl_nodes_init(&n);
    for (int i = 0; i < 3; i++) { /* 3 nodes on sm90 */
        snprintf(node, sizeof node, "h200-%d", i);
        snprintf(c, sizeof c, "{\"x\":%s}", with_variants(DA, "[" V90 "]", NULL));
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    /* a mixed node: sm90 and sm80 (arm64) variants, and an MI300X without one */
    snprintf(c, sizeof c, "{\"x\":%s}",
             with_variants(DA, "[" V90 "," V80 "]",
                           "[{\"ids\":[3],\"gpuType\":\"amd-mi300x\",\"reason\":\"NoVariant\","
                           "\"message\":\"no variant for gfx942\"}]"));
    ASSERT_EQ(upsert(&n, "ml", "mixed", c), 0);
    /* two A100 nodes served empty (no variant), one H100 node of another CPU */
    for (int i = 0; i < 2; i++) {
        snprintf(node, sizeof node, "a100-%d", i);
        snprintf(c, sizeof c,
                 "{\"x\":{\"digest\":\"%s\",\"fallback\":\"Empty\",\"incompatibleGPUs\":[{\"ids\":"
                 "[0],\"gpuType\":\"nvidia-a100\",\"reason\":\"NoVariant\",\"message\":\"m\"}]}}",
                 DA);
        ASSERT_EQ(upsert(&n, "ml", node, c), 0);
    }
    snprintf(c, sizeof c,
             "{\"x\":{\"digest\":\"%s\",\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":"
             "\"nvidia-gh200\",\"reason\":\"HostArchMismatch\",\"message\":\"m\"}]}}",
             DA);
    ASSERT_EQ(upsert(&n, "ml", "gh200", c), 0);
    /* behind (another digest) and failed: their variants do not count */
    snprintf(c, sizeof c, "{\"x\":%s}", with_variants(DB, "[" V90 "]", NULL));
    ASSERT_EQ(upsert(&n, "ml", "behind", c), 0);
    snprintf(c, sizeof c,
             "{\"x\":{\"digest\":\"%s\",\"error\":\"disk\",\"compatibleGPUs\":[{\"ids\":[0]}],"
             "\"variants\":[" V90 "]}}",
             DA);
    ASSERT_EQ(upsert(&n, "ml", "broken", c), 0);
    /* 3 identical h200 nodes share one interned string (with the behind and broken ones: 6) */
    ASSERT(n.n_whys <= 6);
    int unknown = 0;
    struct ctrl_verdict v = {.verified = TKM_API_COND_TRUE,
                             .reason = "SignatureVerified",
                             .message = "ok",
                             .usable = 1,
                             .digest = DA,
                             .variants = INDEX,
                             .n_variants = 2,
                             .unknown = &unknown};
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &v, 1, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    ASSERT_EQ(unknown, 0);
    ASSERT_UEQ(st.n_variants, 2);
    ASSERT_STREQ(st.variants[0].digest, "sha256:90"); /* most nodes first */
    ASSERT_EQ(st.variants[0].nodes, 4);
    ASSERT_EQ(st.variants[0].gpus, 8);
    ASSERT_EQ(st.variants[0].warp_size, 32);
    ASSERT_STREQ(st.variants[0].platform, "linux/amd64"); /* the target: the index's */
    ASSERT_STREQ(st.variants[0].arch, "90");
    ASSERT_STREQ(st.variants[1].platform, "linux/arm64");
    ASSERT_STREQ(st.variants[1].backend, "cuda");
    ASSERT_EQ(st.variants[1].nodes, 1);
    ASSERT_EQ(st.variants[1].gpus, 1);
    ASSERT_UEQ(st.n_gpu_types_without_variant, 3);
    ASSERT_STREQ(st.gpu_types_without_variant[0], "amd-mi300x"); /* sorted */
    ASSERT_STREQ(st.gpu_types_without_variant[1], "nvidia-a100");
    ASSERT_STREQ(st.gpu_types_without_variant[2], "nvidia-gh200");
    ASSERT_STREQ(st.variant_summary, "cuda/90: 4 nodes; cuda/80 linux/arm64: 1 node; none for: "
                                     "amd-mi300x, nvidia-a100, nvidia-gh200");
    /* the counts are as before: the Empty nodes are incompatible, the failed one failed */
    ASSERT_EQ(st.counts.compatible, 4);
    ASSERT_EQ(st.counts.incompatible, 3);
    ASSERT_EQ(st.counts.failed, 1);
    ASSERT_STREQ(st.failed_nodes[0].reason, "NodeError");
    ASSERT_STREQ(st.failed_nodes[1].node, "a100-0");
    ASSERT_STREQ(st.failed_nodes[1].reason, "NoVariant");
    tkm_api_cache_status_release(&st);
    /* a node forging a profile line through a tab in its strings gains nothing */
    snprintf(c, sizeof c, "{\"x\":%s}",
             with_variants(DA,
                           "[{\"digest\":\"sha256:f\\n"
                           "Vsha256:evil\\tlinux/amd64\\tcuda\\t1\\t32"
                           "\\t64\",\"gpuIds\":[0]}]",
                           NULL));
    ASSERT_EQ(upsert(&n, "ml", "forger", c), 0);
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &v, 1, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    for (size_t i = 0; i < st.n_variants; i++)
        ASSERT(strcmp(st.variants[i].digest, "sha256:evil") != 0);
    /* ... its digest is none of the index's: not trusted, it counts as not caught up */
    ASSERT_EQ(unknown, 1);
    ASSERT_EQ(st.counts.compatible, 4);
    ASSERT_EQ(st.variants[0].nodes, 4);
    /* behind and forger */
    ASSERT_STRCONTAINS(st.conditions[2].message, "2 of 10 nodes have not reported the pinned");
    tkm_api_cache_status_release(&st);
    /* a variant the index does not list (a node's claim, or an index read before a restart):
     * the same; once the index lists it, it counts with its target */
    snprintf(c, sizeof c, "{\"x\":%s}",
             with_variants(DA, "[{\"digest\":\"sha256:a0\",\"gpuIds\":[0,1]}]", NULL));
    ASSERT_EQ(upsert(&n, "ml", "forger", c), 0);
    ASSERT_EQ(agg_unknown(&n, &v, &st), 1);
    ASSERT_EQ(st.counts.compatible, 4);
    ASSERT_UEQ(st.n_variants, 2);
    tkm_api_cache_status_release(&st);
    struct ctrl_variant index3[] = {
        INDEX[0], INDEX[1], {"sha256:a0", "linux/amd64", "cuda", "100", 32}};
    v.variants = index3;
    v.n_variants = 3;
    ASSERT_EQ(agg_unknown(&n, &v, &st), 0);
    ASSERT_EQ(st.counts.compatible, 5);
    ASSERT_UEQ(st.n_variants, 3);
    ASSERT_STREQ(st.variants[2].arch, "100");
    ASSERT_EQ(st.variants[2].gpus, 2);
    tkm_api_cache_status_release(&st);
    /* no variants reported (older agents): nothing written */
    ASSERT_EQ(upsert(&n, "ml", "old",
                     "{\"y\":{\"digest\":\"" DA "\",\"compatibleGPUs\":[{\"ids\":"
                     "[0]}]}}"),
              0);
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/y", 0), &v, 1, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    ASSERT_UEQ(st.n_variants, 0);
    ASSERT_NULL(st.variant_summary);
    tkm_api_cache_status_release(&st);
    ctrl_nodes_release(&n);
}

TEST(labels_keys_node_labels_and_usable_entries)
{
    struct ctrl_nodes n;
    char key[TKM_API_NODE_LABEL_MAX], c[2048];
    int changed = -1;
    ctrl_nodes_init(&n);
    ASSERT_EQ(ctrl_label_of("ml/x", key, sizeof key), 0);
    ASSERT_STREQ(key, "tkc.tkm.io/ml.x");
    ASSERT_EQ(ctrl_label_of("/x", key, sizeof key), 0);
    ASSERT_STREQ(key, "tkcc.tkm.io/x");
    ASSERT_EQ(ctrl_label_of("x", key, sizeof key), -EINVAL);
    /* a Node's labels: only the controller's prefixes are kept, sorted */
    const char *node = "{\"apiVersion\":\"meta.k8s.io/v1\",\"kind\":\"PartialObjectMetadata\","
                       "\"metadata\":{\"name\":\"n1\",\"uid\":\"u1\",\"labels\":{"
                       "\"kubernetes.io/hostname\":\"n1\",\"tkcc.tkm.io/z\":\"true\","
                       "\"tkc.tkm.io/ml.x\":\"true\",\"tkm.io/other\":\"1\"}}}";
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n1", "u1", node, strlen(node), &changed), 0);
    ASSERT_EQ(changed, 1);
    struct ctrl_node *nd = tkm_strmap_get(&n.nodes, "n1");
    ASSERT_NOT_NULL(nd);
    ASSERT_UEQ(nd->n_labels, 2);
    ASSERT_STREQ(nd->labels[0], "tkc.tkm.io/ml.x");
    ASSERT(ctrl_node_has_label(nd, "tkcc.tkm.io/z"));
    ASSERT(!ctrl_node_has_label(nd, "tkm.io/other"));
    /* the same labels again (a heartbeat): no change; one gone: a change */
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n1", "u1", node, strlen(node), &changed), 0);
    ASSERT_EQ(changed, 0);
    const char *node2 = "{\"metadata\":{\"name\":\"n1\",\"labels\":{\"tkc.tkm.io/ml.x\":\"t\"}}}";
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n1", "u1", node2, strlen(node2), &changed), 0);
    ASSERT_EQ(changed, 1);
    ASSERT_UEQ(nd->n_labels, 1);
    ASSERT_EQ(ctrl_nodes_node_upsert(&n, "n1", "u1", "{bad", 4, &changed), 0);
    ASSERT_EQ(changed, 0); /* garbage keeps what was known */
    ASSERT_UEQ(nd->n_labels, 1);
    /* entries: usable = at the usable digest, compatible, no error, not Empty */
    snprintf(c, sizeof c,
             "{\"x\":%s,\"y\":%s,\"z\":{\"digest\":\"%s\",\"fallback\":\"Empty\","
             "\"incompatibleGPUs\":[{\"ids\":[0],\"reason\":\"NoVariant\"}]}}",
             compat(DA), compat(DB), DA);
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    const struct ctrl_cidx *x = ctrl_nodes_cache(&n, "ml/x", 0);
    const struct ctrl_entry *e = ctrl_nodes_entry(&n, x, "n1");
    ASSERT_NOT_NULL(e);
    ASSERT(ctrl_entry_usable(e, ctrl_digest_id(DA)));
    ASSERT(!ctrl_entry_usable(e, 0)); /* not verified: nowhere */
    ASSERT(!ctrl_entry_usable(e, ctrl_digest_id(DB)));
    ASSERT_NULL(ctrl_nodes_entry(&n, x, "n2"));
    ASSERT(!ctrl_entry_usable(NULL, ctrl_digest_id(DA)));
    e = ctrl_nodes_entry(&n, ctrl_nodes_cache(&n, "ml/z", 0), "n1");
    ASSERT_NOT_NULL(e);
    ASSERT(e->flags & CTRL_E_EMPTY);
    ASSERT(!ctrl_entry_usable(e, ctrl_digest_id(DA)));
    /* every entry of a node, across its objects */
    struct got g = {0};
    snprintf(c, sizeof c, "{\"w\":%s}", compat(DA));
    char *j = obj_json(1, "", "n1", c);
    ASSERT_EQ(ctrl_nodes_upsert(&n, 1, j, strlen(j), 0), 0);
    free(j);
    ASSERT_EQ(ctrl_nodes_node_entries(&n, "n1", got_one, &g), 0);
    ASSERT_EQ(g.n, 4);
    ASSERT_EQ(g.v[0].cluster, 1); /* the cluster kind's first */
    ctrl_nodes_release(&n);
}

static void on_node_entries(const char *node, void *data)
{
    struct notes *n = data;
    if (n->n < 64)
        snprintf(n->keys[n->n++], 64, "%s", node);
}

/* The Node labels' trigger: a node's entries changed (once per report that changes them). */
TEST(nodes_entry_changes_name_the_node)
{
    struct ctrl_nodes n;
    struct notes no = {0};
    char c[512];
    ctrl_nodes_init(&n);
    n.node_entries_changed = on_node_entries;
    n.data = &no;
    snprintf(c, sizeof c, "{\"x\":%s}", compat(DA));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_EQ(no.n, 1);
    ASSERT_STREQ(no.keys[0], "n1");
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0); /* a heartbeat: nothing changed */
    ASSERT_EQ(no.n, 1);
    snprintf(c, sizeof c, "{\"x\":%s}", incompat(DA, "NoVariant"));
    ASSERT_EQ(upsert(&n, "ml", "n1", c), 0);
    ASSERT_EQ(no.n, 2);
    ctrl_nodes_remove(&n, 0, "ml", "n1");
    ASSERT_EQ(no.n, 3);
    ASSERT_STREQ(no.keys[2], "n1");
    ctrl_nodes_release(&n);
}

/* ---- issue 25: what pods compiled, summed into the cache status ------------------------- */

/* A compatible entry at digest d with the given compiles (JSON object text). */
static const char *with_compiles(const char *d, const char *compiles)
{
    static char b[4][2048];
    static int i;
    i = (i + 1) % 4;
    snprintf(b[i], sizeof b[i],
             "{\"x\":{\"digest\":\"%s\",\"verified\":true,\"compatibleGPUs\":[{\"ids\":[0]}],"
             "\"compiles\":%s}}",
             d, compiles);
    return b[i];
}

#define CMP_N1                                                                                     \
    "{\"podsServed\":5,\"podsCompiled\":2,\"tritonKernels\":7,\"inductorEntries\":1,"              \
    "\"bytes\":100,\"topKernels\":[{\"name\":\"k_a\",\"pods\":2},{\"name\":\"k_b\",\"pods\":1}],"  \
    "\"since\":\"2026-11-28T01:00:00Z\"}"

TEST(agg_compiles_summed_over_nodes_at_the_pin)
{
    struct ctrl_nodes n;
    struct notes seen = {0};
    struct tkm_api_cache_status st = {0};
    char top[1024] = "", c[1400];
    ctrl_nodes_init(&n);
    n.changed = on_changed;
    n.data = &seen;
    ASSERT_EQ(upsert(&n, "ml", "n1", with_compiles(DA, CMP_N1)), 0);
    ASSERT_EQ(upsert(&n, "ml", "n3", with_compiles(DA, CMP_N1)), 0); /* the same string */
    ASSERT_EQ(upsert(&n, "ml", "n2",
                     with_compiles(DA, "{\"podsServed\":3,\"podsCompiled\":3,\"tritonKernels\":9,"
                                       "\"vllmEntries\":4,\"bytes\":50,\"topKernels\":[{\"name\":"
                                       "\"k_b\",\"pods\":3},{\"name\":\"k_c\",\"pods\":1}],"
                                       "\"since\":\"2026-11-28T00:30:00Z\"}")),
              0);
    for (int k = 0; k < 10; k++) /* ten more names, one pod each */
        snprintf(top + strlen(top), sizeof top - strlen(top), "%s{\"name\":\"k%02d\",\"pods\":1}",
                 k ? "," : "", k);
    snprintf(c, sizeof c, "{\"podsServed\":2,\"podsCompiled\":1,\"topKernels\":[%s]}", top);
    ASSERT_EQ(upsert(&n, "ml", "n4", with_compiles(DA, c)), 0);
    /* behind (another digest): not counted; a node without compiles: not counted */
    ASSERT_EQ(upsert(&n, "ml", "behind", with_compiles(DB, CMP_N1)), 0);
    ASSERT_EQ(upsert(&n, "ml", "quiet",
                     "{\"x\":{\"digest\":\"" DA "\",\"compatibleGPUs\":[{"
                     "\"ids\":[0]}]}}"),
              0);
    struct ctrl_verdict v = {.verified = TKM_API_COND_TRUE,
                             .reason = "SignatureVerified",
                             .message = "ok",
                             .usable = 1,
                             .digest = DA};
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/x", 0), &v, 1, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    const struct tkm_api_compiles *s = &st.compiles;
    ASSERT_EQ(s->present, 1);
    ASSERT_EQ(s->nodes, 4);
    ASSERT_EQ(s->pods_served, 15);
    ASSERT_EQ(s->pods_compiled, 8);
    ASSERT_EQ(s->triton_kernels, 23);
    ASSERT_EQ(s->inductor_entries, 2);
    ASSERT_EQ(s->vllm_entries, 4);
    ASSERT_EQ(s->bytes, 250);
    ASSERT_STREQ(s->since, "2026-11-28T00:30:00Z"); /* the earliest */
    ASSERT_STREQ(s->hit, "7/15");
    ASSERT_UEQ(s->n_top, TKM_API_COMPILES_TOP); /* 13 names, the top 10 kept */
    ASSERT_STREQ(s->top[0].name, "k_b");
    ASSERT_EQ(s->top[0].pods, 5);
    ASSERT_STREQ(s->top[1].name, "k_a");
    ASSERT_EQ(s->top[1].pods, 4);
    ASSERT_STREQ(s->top[2].name, "k00"); /* then by name */
    ASSERT_STREQ(s->top[9].name, "k07");
    json_t *o = NULL;
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_api_cache_status_apply(&st, "x", "ml", &o, NULL));
    ASSERT_OK(tkm_api_dump(o, &b));
    ASSERT_STRCONTAINS(b.data, "\"compiles\":{\"nodes\":4,\"podsServed\":15,\"podsCompiled\":8,");
    ASSERT_STRCONTAINS(b.data, "\"hit\":\"7/15\"");
    json_decref(o);
    tkm_buf_release(&b);
    tkm_api_cache_status_release(&st);
    /* a node's compiles changing notifies its cache (the interned string changes) */
    seen.n = 0;
    ASSERT_EQ(upsert(&n, "ml", "n2",
                     with_compiles(DA, "{\"podsServed\":4,\"podsCompiled\":3,\"tritonKernels\":9,"
                                       "\"since\":\"2026-11-28T00:30:00Z\"}")),
              0);
    ASSERT_EQ(seen.n, 1);
    ASSERT_STREQ(seen.keys[0], "ml/x");
    /* no node reports compiles: none written */
    ASSERT_EQ(upsert(&n, "ml", "quiet", "{\"y\":{\"digest\":\"" DA "\"}}"), 0);
    ASSERT_EQ(ctrl_agg_build(ctrl_nodes_cache(&n, "ml/y", 0), &v, 1, NULL, 0,
                             "2026-01-01T00:00:00Z", &st),
              0);
    ASSERT_EQ(st.compiles.present, 0);
    ASSERT_NULL(st.compiles.hit);
    tkm_api_cache_status_release(&st);
    ctrl_nodes_release(&n);
}

/* ---- staged prefetch: the grants (ctrl_grant.c) ------------------------------------ */

/* node's entry of cache "p" in namespace ml: state "Waiting", "Pulling" or
 * "" (none), extracted or not, at digest d. */
static void pf_report(struct ctrl_nodes *n, const char *node, const char *d, const char *state,
                      int extracted)
{
    char c[512];
    snprintf(c, sizeof c, "{\"p\":{\"digest\":\"%s\",\"verified\":true,\"extracted\":%s%s%s%s}}", d,
             extracted ? "true" : "false", *state ? ",\"prefetch\":\"" : "", state,
             *state ? "\"" : "");
    ASSERT_EQ(upsert(n, "ml", node, c), 0);
}

/* The grants after an update, as "a,b|waiting". */
static const char *pf_update(struct ctrl_grant *g, struct ctrl_nodes *n, const char *d,
                             unsigned slots, uint64_t timeout, uint64_t now, uint64_t *next)
{
    static char out[512];
    struct tkm_api_cache_status st = {0};
    size_t w = 0;
    ASSERT_EQ(ctrl_grant_update(g, ctrl_nodes_cache(n, "ml/p", 0), ctrl_digest_id(d), slots,
                                timeout, now, &st.prefetch, next),
              0);
    out[0] = '\0';
    for (size_t i = 0; i < st.prefetch.n_granted; i++)
        w +=
            (size_t)snprintf(out + w, sizeof out - w, "%s%s", i ? "," : "", st.prefetch.granted[i]);
    if (st.prefetch.present)
        snprintf(out + w, sizeof out - w, "|%d/%d", (int)st.prefetch.waiting,
                 (int)st.prefetch.slots);
    tkm_api_cache_status_release(&st);
    return out;
}

TEST(grant_first_wave_of_one_then_k_in_name_order)
{
    struct ctrl_nodes n;
    struct ctrl_grant *g = ctrl_grant_new();
    char node[16];
    uint64_t next = 0;
    ctrl_nodes_init(&n);
    for (int i = 5; i >= 1; i--) { /* reported in reverse order: granted by name */
        snprintf(node, sizeof node, "n%d", i);
        pf_report(&n, node, DA, "Waiting", 0);
    }
    /* nobody has it extracted: one pull alone (the mirror warms up) */
    ASSERT_STREQ(pf_update(g, &n, DA, 2, 60000, 1000, &next), "n1|4/2");
    ASSERT_UEQ(next, 60000);
    uint32_t gr, wt;
    ctrl_grant_counts(g, &gr, &wt);
    ASSERT_UEQ(gr, 1);
    ASSERT_UEQ(wt, 4);
    /* granted and pulling: still one */
    pf_report(&n, "n1", DA, "Pulling", 0);
    ASSERT_STREQ(pf_update(g, &n, DA, 2, 60000, 2000, &next), "n1|4/2");
    ASSERT_UEQ(next, 59000);
    /* n1 extracted: the slot is free and K = 2 go at once */
    pf_report(&n, "n1", DA, "", 1);
    ASSERT_STREQ(pf_update(g, &n, DA, 2, 60000, 3000, NULL), "n2,n3|2/2");
    /* n3 done: n4 takes its slot; n2 keeps its own */
    pf_report(&n, "n3", DA, "", 1);
    ASSERT_STREQ(pf_update(g, &n, DA, 2, 60000, 4000, NULL), "n2,n4|1/2");
    /* a node whose pull failed (no Waiting/Pulling, not extracted) gives its slot back */
    pf_report(&n, "n2", DA, "", 0);
    ASSERT_STREQ(pf_update(g, &n, DA, 2, 60000, 5000, NULL), "n4,n5|0/2");
    pf_report(&n, "n4", DA, "", 1);
    pf_report(&n, "n5", DA, "", 1);
    ASSERT_STREQ(pf_update(g, &n, DA, 2, 60000, 6000, &next), "|0/2");
    ASSERT_UEQ(next, 0);
    /* prefetchSlots 0: no limit, no status field, the set forgotten */
    pf_report(&n, "n2", DA, "Waiting", 0);
    ASSERT_STREQ(pf_update(g, &n, DA, 0, 60000, 7000, NULL), "");
    ctrl_grant_counts(g, &gr, &wt);
    ASSERT_UEQ(gr, 0);
    ctrl_grant_free(g);
    ctrl_nodes_release(&n);
}

TEST(grant_timeout_node_gone_and_digest_change)
{
    struct ctrl_nodes n;
    struct ctrl_grant *g = ctrl_grant_new();
    uint64_t next = 0;
    ctrl_nodes_init(&n);
    pf_report(&n, "a", DA, "Waiting", 0);
    pf_report(&n, "b", DA, "Waiting", 0);
    pf_report(&n, "c", DA, "Waiting", 0);
    ASSERT_STREQ(pf_update(g, &n, DA, 1, 10000, 0, &next), "a|2/1");
    ASSERT_UEQ(next, 10000);
    /* a died while pulling: its entry stays Pulling; after the timeout its
     * slot goes to b, and a is not granted again while it says the same */
    pf_report(&n, "a", DA, "Pulling", 0);
    ASSERT_STREQ(pf_update(g, &n, DA, 1, 10000, 9999, NULL), "a|2/1");
    ASSERT_STREQ(pf_update(g, &n, DA, 1, 10000, 10000, &next), "b|2/1");
    ASSERT_UEQ(next, 10000);
    /* b's node is deleted (its status object goes): c is granted */
    ctrl_nodes_remove(&n, 0, "ml", "b");
    ASSERT_STREQ(pf_update(g, &n, DA, 1, 10000, 11000, NULL), "c|1/1");
    /* a comes back and reports Waiting again after its status was
     * collected: it is a new candidate (its expired slot was forgotten) */
    ctrl_nodes_remove(&n, 0, "ml", "a");
    ASSERT_STREQ(pf_update(g, &n, DA, 1, 10000, 12000, NULL), "c|0/1");
    pf_report(&n, "a", DA, "Waiting", 0);
    ASSERT_STREQ(pf_update(g, &n, DA, 1, 10000, 13000, NULL), "c|1/1");
    /* a new digest is pinned: the nodes at DA no longer count; the first
     * wave at DB is one node again, even though DA was extracted somewhere */
    pf_report(&n, "c", DA, "", 1);
    pf_report(&n, "d", DB, "Waiting", 0);
    pf_report(&n, "e", DB, "Waiting", 0);
    ASSERT_STREQ(pf_update(g, &n, DB, 5, 10000, 14000, NULL), "d|1/5");
    /* restart: the grants the status showed are seeded and kept */
    struct ctrl_grant *g2 = ctrl_grant_new();
    ASSERT_EQ(ctrl_grant_seed(g2, ctrl_digest_id(DB), "e", 15000), 0);
    ASSERT_STREQ(pf_update(g2, &n, DB, 1, 10000, 15000, NULL), "e|1/1");
    ctrl_grant_free(g2);
    ctrl_grant_free(g);
    ctrl_nodes_release(&n);
}
