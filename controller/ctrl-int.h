/*
 * ctrl-int.h - tkm-controller's private interfaces (controller/ only; see
 * docs/controller.md for the design).
 *
 * Pieces:
 *   ctrl_nodes    compact stores of the node status objects (both kinds) and
 *                 of the Nodes: what the reconcilers read, never the JSON;
 *                 per object, its 12-byte entries (one per cache it lists)
 *   ctrl_agg      pure aggregation: entries + verification -> the status
 *                 (counts, failedNodes, conditions) the controller writes
 *   ctrl_state    SQLite: pinned digests, verification results (with the key
 *                 fingerprint)
 *   ctrl_rec      the reconcilers (caches, nodes) and the controller object;
 *                 its registry steps are verify jobs (<tkm/api/verify.h>, shared
 *                 with tkm-agent) on the controller's one session pool
 *
 * Everything runs on the one libuv loop of the process.
 */
#ifndef TKM_CTRL_INT_H
#define TKM_CTRL_INT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/jscan.h>
#include <tkm/strmap.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/trust/policy.h>
#include <tkm/api/policy.h>
#include <tkm/api/verify.h>
#include <k8s/client.h>

#define CTRL_FIELD_MANAGER "tkm-controller"
#define CTRL_FINALIZER     "tkm.io/cleanup"
#define CTRL_ANN_RERESOLVE "tkm.io/re-resolve"
#define CTRL_MAX_FAILED    16
#define CTRL_DIGEST_MAX    72 /* "sha256:" + 64 hex + NUL */

/* The indexes are libtkm's one hash map (<tkm/strmap.h>), whose keys are
 * borrowed: each value holds its own key (a cidx, group, node status object
 * or Node after its struct), so an entry is one allocation as before.
 * ctrl_map_each calls fn for each (key, value) of m until it returns non-zero
 * (returned); fn must not change the map. */
static inline int ctrl_map_each(const struct tkm_strmap *m,
                                int (*fn)(const char *key, void *val, void *data), void *data)
{
    const char *k;
    void *v;
    int rc = 0;
    for (size_t pos = 0; !rc && tkm_strmap_next(m, &pos, &k, &v);)
        rc = fn(k, v, data);
    return rc;
}

/* ---- ctrl_nodes: the node status index ---------------------------------------- */

struct ctrl_nsobj;
struct ctrl_cidx;
struct ctrl_nodes;

#define CTRL_E_VERIFIED  0x01
#define CTRL_E_EXTRACTED 0x02
#define CTRL_E_ERROR     0x04
#define CTRL_E_COMPAT    0x08      /* at least one compatible GPU group */
#define CTRL_E_INCOMPAT  0x10      /* at least one incompatible GPU group */
#define CTRL_E_PODS      0x20      /* pods use it on the node */
#define CTRL_E_EMPTY     0x40      /* served as an empty volume (fallback Empty) */
#define CTRL_E_PREFETCH  0x80      /* prefetch Waiting or Pulling (staged prefetch) */
#define CTRL_WHY_MAX     0xffffffu /* distinct reasons (the 24-bit why id) */

/* One node's view of one cache: 12 bytes (100,000 of them at 1000 nodes x
 * 100 caches, 5 million at 5000 x 1000), held in its node status object's
 * array sorted by cache id. No pointers: the cache is an id into
 * ctrl_nodes.cidx, the reason an id into the intern table ctrl_nodes.whys
 * (the same reason on 900 nodes is stored once). The aggregation needs only
 * whether there are compatible or incompatible GPU groups and pods, so
 * those are flags, not counts. Read them with ctrl_cidx_foreach. */
struct ctrl_entry {
    uint32_t cache;     /* the id of its cache (ctrl_cidx.id) */
    uint32_t digest;    /* ctrl_digest_id() of the digest the node reports */
    uint32_t why : 24;  /* interned "Reason\0message\0" of the first incompatible GPU
                           group or the error (ctrl_why_str), 0 = none */
    uint32_t flags : 8; /* CTRL_E_* */
};
_Static_assert(sizeof(struct ctrl_entry) == 12, "struct ctrl_entry is 12 bytes");

/* An object in its group, with a copy of where its entries are: the walk
 * of a cache reads the entries without touching the object (one cache miss
 * per object, not two). */
struct ctrl_gslot {
    struct ctrl_nsobj *o;          /* borrowed (owned by ctrl_nodes.objs) */
    const struct ctrl_entry *ents; /* = o->ents (borrowed) */
    uint32_t n_ents;               /* = o->n_ents */
};

/* Node status objects by the namespace they are in (the cluster kind's own
 * group in ctrl_nodes.cgroup): what a cache's reconcile walks to find its
 * entries. */
struct ctrl_nsgroup {
    const char *ns;          /* in the group's allocation ("" for cgroup); groups' key */
    struct ctrl_gslot *objs; /* owned array */
    uint32_t n, cap;
    uint32_t refs; /* objects + cache indexes in it; freed at 0 (not cgroup) */
};

/* One node status object (tkcns ns/node, or tkcnsc node): one allocation
 * (the struct and its strings). */
struct ctrl_nsobj {
    const char *key;            /* in buf: "ns/name", or "c:name" (objs' key) */
    const char *ns;             /* in buf: "" for the cluster kind */
    const char *node;           /* in buf: metadata.name (= the node's name) */
    const char *uid;            /* in buf, or uid_own */
    char *uid_own;              /* owned: a uid that changed since the object was first seen */
    char *bad_rv;               /* owned: the resourceVersion last reported as invalid */
    struct ctrl_nsgroup *group; /* borrowed: the group it is in (holds a ref) */
    struct ctrl_entry *ents;    /* owned array sorted by cache id (each holds a why ref) */
    uint32_t n_ents;
    uint32_t gpos;    /* position in group->objs */
    uint64_t seen_ms; /* uv_now when first seen (node GC grace) */
    unsigned mark;
    int cluster;
    char buf[];
};

/* Per cache key ("ns/name" of a tkc, "/name" of a tkcc): how many entries
 * the nodes report, and the reconciler's memory of the cache (struct
 * ctrl_cache, owned by ctrl_rec). Exists while entries exist or the cache
 * does. Its entries are found in the node status objects of its group. */
struct ctrl_cidx {
    const char *key;            /* in the cidx's allocation (caches' key) */
    struct ctrl_nodes *owner;   /* borrowed: the index it is in */
    struct ctrl_nsgroup *group; /* borrowed: the objects that can hold its entries (holds a
                                   ref), NULL for a key without '/' */
    void *rec;                  /* ctrl_rec's struct ctrl_cache, or NULL */
    uint64_t changed_ms;        /* uv_now when the entries last changed (0: never) */
    uint32_t id;                /* its slot in owner->cidx (reused once it is dropped) */
    uint32_t n;                 /* entries */
};

/* Called per entry of a cache with the object it came from (borrowed, valid
 * during the call) and its why string (ctrl_why_str). Non-zero stops. */
typedef int (*ctrl_entry_fn)(const struct ctrl_entry *e, const struct ctrl_nsobj *o,
                             const char *why, void *data);
/* Calls fn for each entry of c (NULL: none), in the order of the objects
 * in its group, until fn returns non-zero (returned). fn must not change
 * the index. Cost: one binary search per object of the group. */
int ctrl_cidx_foreach(const struct ctrl_cidx *c, ctrl_entry_fn fn, void *data);
/* The interned "Reason\0message\0profile\0" of a why id (borrowed: valid
 * while an entry holds it), or NULL for 0. Reason and message are "" for an
 * entry with nothing wrong; the profile (ctrl_why_profile) lists the
 * variants the node uses, the GPU types left without one and the compiles
 * summary (issue 25), "" when the node reports none (ctrl_nodes.c's
 * profile_of has the grammar). Entries of nodes with the same reason,
 * variants and compiles share one string (nodes whose pods compiled
 * something mostly have their own). */
const char *ctrl_why_str(const struct ctrl_nodes *n, uint32_t why);
/* The profile part of a why string ("" for NULL). */
const char *ctrl_why_profile(const char *why);
/* The entry of cache c on node (its node status object in c's group), or NULL. */
const struct ctrl_entry *ctrl_nodes_entry(const struct ctrl_nodes *n, const struct ctrl_cidx *c,
                                          const char *node);
/* Calls fn for every entry of node's status objects (the cluster kind's,
 * then each namespace's) until it returns non-zero (returned). */
int ctrl_nodes_node_entries(const struct ctrl_nodes *n, const char *node, ctrl_entry_fn fn,
                            void *data);

/* Identifies a digest string in 4 bytes (its first 8 hex digits; 1 where
 * those are all zero): the index compares what the nodes of one cache report
 * with its pinned digest only, a handful of digests at most (a false match
 * between two of them: about 2^-32). 0 for NULL/bad. */
uint32_t ctrl_digest_id(const char *digest);

/* A table of pointers by 32-bit id (id 0 never used), ids reused through a
 * free list. */
struct ctrl_idtab {
    void **v;      /* owned array; the pointers are the table user's */
    uint32_t *fr;  /* owned: free ids (capacity cap) */
    uint32_t n;    /* slots used (ids < n), free ones included */
    uint32_t cap;  /* of v and fr */
    uint32_t n_fr; /* free ids in fr */
};

/* An interned why string (refcounted, chained in its hash bucket). */
struct ctrl_why {
    uint32_t refs;
    uint32_t hash;
    uint32_t next; /* the next id in the bucket, 0 = end */
    char s[];      /* "Reason\0message\0" */
};

/* A Node seen by the nodes informer. */
struct ctrl_node {
    char *uid;
    char **labels; /* owned block: the label keys under the controller's prefixes
                      (TKM_API_NODE_LABEL_*), sorted, the strings after the pointers */
    uint32_t n_labels;
    unsigned mark;
    char name[]; /* nodes' key */
};
/* 1 when the Node carries the label key (one of the controller's). */
int ctrl_node_has_label(const struct ctrl_node *nd, const char *key);

struct ctrl_nodes {
    struct tkm_strmap objs;     /* nsobj key ("c:" + name for the cluster kind) -> struct ctrl_nsobj
                                   (owned) */
    struct tkm_strmap caches;   /* cache key -> struct ctrl_cidx (owned) */
    struct tkm_strmap nodes;    /* node name -> struct ctrl_node (owned) */
    struct tkm_strmap groups;   /* namespace -> struct ctrl_nsgroup (owned) */
    struct ctrl_nsgroup cgroup; /* the cluster kind's objects */
    struct ctrl_idtab cidx;     /* cache id -> struct ctrl_cidx (borrowed from caches) */
    struct ctrl_idtab whys;     /* why id -> struct ctrl_why (owned) */
    uint32_t *why_bkt;          /* owned: hash buckets of whys (first id, 0 = empty) */
    uint32_t n_bkt;             /* a power of 2, or 0 */
    uint32_t n_whys;            /* live why strings */
    unsigned mark[3];           /* relist generations: tkcns, tkcnsc, nodes */
    size_t n_entries;
    struct tkm_api_nsscan scan; /* owned: the node status decoder's scratch, reused */
    struct tkm_buf profile;     /* owned: scratch of why_of */
    struct tkm_jscan js;        /* owned: scratch of the Node labels reader */
    /* Called for each cache whose entries changed (key borrowed). */
    void (*changed)(const char *cache_key, void *data);
    /* Called with a node's name when the entries of one of its objects changed. */
    void (*node_entries_changed)(const char *node, void *data);
    /* Called with a node's name when it vanished (deleted, or gone in a relist). */
    void (*node_gone)(const char *node, void *data);
    /* An object that could not be decoded (first time per resourceVersion). */
    void (*invalid)(const struct ctrl_nsobj *o, const char *msg, void *data);
    void *data;
};

void ctrl_nodes_init(struct ctrl_nodes *n);
void ctrl_nodes_release(struct ctrl_nodes *n);
/* The cache key of a cache: "ns/name", or "/name" for the cluster kind. */
int ctrl_cache_key(char *out, size_t n, const char *ns, const char *name);
/* Upserts a node status object from its raw JSON (borrowed). cluster: 1 for
 * TritonKernelCacheNodeStatusCluster. Undecodable input keeps the previous
 * entries and calls invalid(). 0 or -ENOMEM. */
int ctrl_nodes_upsert(struct ctrl_nodes *n, int cluster, const char *json, size_t len,
                      uint64_t now_ms);
/* Removes a node status object (its entries go; caches are notified). */
void ctrl_nodes_remove(struct ctrl_nodes *n, int cluster, const char *ns, const char *name);
/* Relists: begin marks, upsert, end removes what was not seen. kind: 0 tkcns,
 * 1 tkcnsc, 2 nodes. */
void ctrl_nodes_list_begin(struct ctrl_nodes *n, int kind);
void ctrl_nodes_list_end(struct ctrl_nodes *n, int kind);
/* Nodes (name, uid and raw borrowed; raw: the Node's JSON, metadata at
 * least, or NULL: no labels). *changed (may be NULL): 1 when the Node is
 * new or its labels under the controller's prefixes changed. 0 or -ENOMEM. */
int ctrl_nodes_node_upsert(struct ctrl_nodes *n, const char *name, const char *uid, const char *raw,
                           size_t len, int *changed);
void ctrl_nodes_node_remove(struct ctrl_nodes *n, const char *name);
/* The index of a cache key; create 1 makes one. NULL when absent (or ENOMEM). */
struct ctrl_cidx *ctrl_nodes_cache(struct ctrl_nodes *n, const char *key, int create);
/* Drops the index of a cache when it has no entries and no rec. */
void ctrl_nodes_cache_gc(struct ctrl_nodes *n, struct ctrl_cidx *c);

/* ---- ctrl_agg: status from entries ------------------------------------------- */

/* A variant of the pinned index (tkm_variant, the parts the status shows). */
struct ctrl_variant {
    char digest[TKM_OCI_DIGEST_LEN + 1];
    char platform[66]; /* "os/architecture" */
    char backend[16], arch[32];
    int warp_size;
};

/* The verification outcome the aggregation needs. Strings borrowed. */
struct ctrl_verdict {
    /* Verified: TRUE, FALSE or UNKNOWN (not known yet: resolving/verifying). */
    enum tkm_api_cond_status verified;
    const char *reason;  /* Verified's reason (CamelCase) */
    const char *message; /* Verified's message */
    int usable;          /* 1: nodes may use the digest (verified, or Audit/Disabled) */
    int in_progress;     /* 1: resolving or verifying now */
    const char *digest;  /* pinned digest, or NULL */
    /* The variants of the pinned index as the controller read them (none
     * for a single image): a node entry names a variant by digest only, its
     * target is taken from here. An entry at the pin naming a digest that
     * is not among them is not trusted: it counts as a node that has not
     * caught up (pending), and *unknown (optional) is set to 1. */
    const struct ctrl_variant *variants;
    size_t n_variants;
    int *unknown;
};

/* The conditions and numbers of one cache. Builds st (owned: release with
 * tkm_api_cache_status_release) from the cache's entries, the verdict and
 * the previous conditions (borrowed: their lastTransitionTime is kept when
 * the status did not change). now: RFC 3339. Returns 0 or -ENOMEM. */
int ctrl_agg_build(const struct ctrl_cidx *c, const struct ctrl_verdict *v, int64_t generation,
                   const struct tkm_api_condition *prev, size_t n_prev, const char *now,
                   struct tkm_api_cache_status *st);
/* Copies a summary (deep). 0 or -ENOMEM. */
int ctrl_summary_copy(struct tkm_api_summary *dst, const struct tkm_api_summary *src);
/* The status of a condition type in st, or UNKNOWN when absent (with reason). */
enum tkm_api_cond_status ctrl_cond_get(const struct tkm_api_condition *c, size_t n,
                                       const char *type, const char **reason);

/* ---- ctrl_grant: staged prefetch (docs/prefetch.md) ------------------------------- */

/* The pull slots of one cache at its pinned digest (tkm-config prefetchSlots
 * K > 0). A node holds a slot from when it is granted until its entry at the
 * digest no longer says prefetch Waiting or Pulling (extracted, failed,
 * gone, another digest) or the grant timeout passes (a node that died: it
 * is not granted again while its entry stays as it is). Free slots go to
 * the waiting nodes in name order, up to 1 while no node has the digest
 * extracted (the first pull warms a mirror alone), else K. Owned by the
 * cache's reconciler memory; all on the loop. */
struct ctrl_grant;
struct ctrl_grant *ctrl_grant_new(void);
void ctrl_grant_free(struct ctrl_grant *g);
/* Adds node to the granted set (a restart: the grants the status shows),
 * since now_ms, at digest (resets the set when g holds another digest). 0 or -ENOMEM. */
int ctrl_grant_seed(struct ctrl_grant *g, uint32_t digest, const char *node, uint64_t now_ms);
/* Updates g from the entries of x at digest (a ctrl_digest_id; 0: none
 * pinned, the set empties), K = slots (0: no limit, the set empties) and
 * timeout_ms (0: TKM_API_PREFETCH_GRANT_TIMEOUT_MS), and writes the cache
 * status' prefetch into out (released by tkm_api_cache_status_release;
 * present 0 when slots is 0). *next_ms (may be NULL): the ms until the
 * earliest grant times out, 0 when none. 0 or -ENOMEM. */
int ctrl_grant_update(struct ctrl_grant *g, const struct ctrl_cidx *x, uint32_t digest,
                      unsigned slots, uint64_t timeout_ms, uint64_t now_ms,
                      struct tkm_api_prefetch_grants *out, uint64_t *next_ms);
/* Granted (live) and waiting nodes of g as last updated. */
void ctrl_grant_counts(const struct ctrl_grant *g, uint32_t *granted, uint32_t *waiting);

/* ---- ctrl_state: SQLite ------------------------------------------------------ */

struct ctrl_state;

struct ctrl_verify_rec {
    int ok;
    char reason[64];
    char message[512];
    char key_id[64];
};

/* Opens (creates) <dir>/controller.db. dir NULL: in memory. *out owned:
 * ctrl_state_close(). */
int ctrl_state_open(const char *dir, struct ctrl_state **out, struct tkm_err *err);
void ctrl_state_close(struct ctrl_state *s);
/* The digest pinned for (uid, image); 1 found, 0 not, < 0 error. */
int ctrl_state_pin_get(struct ctrl_state *s, const char *uid, const char *image,
                       char digest[CTRL_DIGEST_MAX]);
int ctrl_state_pin_put(struct ctrl_state *s, const char *uid, const char *image,
                       const char *digest);
/* Verification result for (uid, digest, policy fingerprint). 1/0/<0. */
int ctrl_state_verify_get(struct ctrl_state *s, const char *uid, const char *digest,
                          const char *policy_fp, struct ctrl_verify_rec *out);
int ctrl_state_verify_put(struct ctrl_state *s, const char *uid, const char *digest,
                          const char *policy_fp, const struct ctrl_verify_rec *r);
/* Forgets everything about uid (a cache that is gone). */
int ctrl_state_forget(struct ctrl_state *s, const char *uid);
/* Uids known (for pruning caches deleted while down): fn per uid. */
int ctrl_state_foreach_uid(struct ctrl_state *s, int (*fn)(const char *uid, void *data),
                           void *data);

/* ---- ctrl_rec: the controller ------------------------------------------------- */

struct k8s_informer;
struct k8s_workqueue;
struct k8s_recorder;
struct k8s_lease;
struct k8s_watch;

struct ctrl_opts {
    const char *ns;                  /* the controller's namespace (config, cluster Secrets) */
    uint64_t cleanup_timeout_ms;     /* wait for agents to drop a deleted cache's entries */
    uint64_t status_min_interval_ms; /* between two status writes of one cache */
    uint64_t status_settle_ms;       /* node entries quiet this long before a write; 0 = none */
    uint64_t status_max_delay_ms;    /* ... but at most this after the first unwritten change */
    uint64_t node_gc_grace_ms;       /* a node status younger than this is never collected */
    unsigned workers;
    int node_labels;               /* 1: keep the Node labels of usable caches (ctrl_labels.c) */
    const char *signature_floor;   /* --signature-floor: when tkm-config sets none (NULL) */
    struct tkm_reach_config reach; /* --registry-* (strings borrowed from argv) */
};

struct ctrl;

/* Counters kept by the controller, exposed by ctrl_metrics.c (kind 0:
 * TritonKernelCache, 1: ...Cluster, 2: Node). */
struct ctrl_metrics {
    uint64_t reconciles[3], errors[3];
    uint64_t status_writes, finalizer_writes, registry_ops, verifications, events;
    uint64_t label_patches;
    uint64_t queue_adds;
    uint64_t settle_fast; /* steps that were the settle wait again, the object not loaded */
};

/* The Prometheus side (ctrl_metrics.c): histograms observed as things
 * happen, everything else read at scrape time. NULL-safe. */
struct ctrl_prom;
struct tkm_metrics;
int ctrl_prom_new(struct ctrl *c, struct tkm_metrics *reg, struct ctrl_prom **out,
                  struct tkm_err *err);
void ctrl_prom_reconciled(struct ctrl_prom *p, int kind, double seconds);
void ctrl_prom_queued(struct ctrl_prom *p, double seconds);
/* The /readyz check: every informer and watch has synced. */
int ctrl_ready_check(void *data, char *reason, size_t n);

/* When a queue key was enqueued (for the queue latency histogram): the
 * value of ctrl.queued_at, which holds the key. */
struct ctrl_queued {
    uint64_t at; /* uv_now */
    char key[];
};

struct ctrl_wctx {
    struct ctrl *c;
    int kind; /* 0 tkcns, 1 tkcnsc, 2 nodes */
};

struct ctrl {
    uv_loop_t *loop;
    struct k8s_client *c;
    struct tkm_verify_ctx *verify; /* borrowed: the registry session pool, for verify jobs */
    struct ctrl_state *state;
    struct k8s_recorder *rec;
    struct k8s_workqueue *q;
    struct k8s_informer *inf[3]; /* tkc, tkcc, tkm-config */
    struct k8s_watch *w[3];      /* tkcns, tkcnsc, nodes */
    int w_synced[3];
    struct k8s_lease *lease; /* NULL without --leader-elect */
    int leading;
    int stopping;
    struct ctrl_nodes idx;
    struct tkm_api_config cfg;
    char cfg_rv[64];
    unsigned cfg_gen; /* tkm-config applied so many times (failures wait for a new one) */
    struct ctrl_opts o;
    struct ctrl_metrics m;
    struct ctrl_prom *prom; /* NULL: no /metrics */
    struct ctrl_wctx wctx[3];
    struct tkm_strmap queued_at; /* queue key -> struct ctrl_queued (owned: ctrl_core.c) */
    /* Catching up (the "caught up" log line; bench/controller.sh splits its
     * latency with it): wall-clock ms of the last node status event and of
     * the last status write answered, and writes since the queue was last
     * idle. */
    int64_t ns_event_wall_ms, write_wall_ms;
    uint64_t writes_since_idle;
    uint64_t labels_defer_since; /* uv_now when Node label patches began to wait for quiet, or 0 */
};

/* Sets up the indexes and queue (informers and watches are started by
 * ctrl_start). 0 or -errno with err. */
int ctrl_init(struct ctrl *c, uv_loop_t *loop, struct k8s_client *client,
              struct tkm_verify_ctx *verify, struct ctrl_state *state, const struct ctrl_opts *o,
              struct tkm_err *err);
int ctrl_start(struct ctrl *c, struct tkm_err *err);
/* 1 once every informer and watch has synced. */
int ctrl_synced(const struct ctrl *c);
/* Leadership changed: on 1 every object is enqueued. */
void ctrl_set_leading(struct ctrl *c, int leading);
/* Adds a queue key ("c:<cache key>", "n:<node>" or "l:<node>"), recording
 * when; _after: in delay_ms (a key already waiting keeps the earlier time). */
void ctrl_enqueue(struct ctrl *c, const char *qkey);
void ctrl_enqueue_after(struct ctrl *c, const char *qkey, uint64_t delay_ms);

/* Reconcilers (ctrl_rec.c, ctrl_gc.c). */
void ctrl_reconcile_cache(struct ctrl *c, const char *qkey);
void ctrl_reconcile_node(struct ctrl *c, const char *qkey);
/* ---- ctrl_labels: the Node labels of usable caches ---------------------------------- */

struct ctrl_cache;

/* The Node label key of a cache key ("ns/name", "/name"). 0 or -EINVAL. */
int ctrl_label_of(const char *cache_key, char *out, size_t n);
/* 1 when an entry (NULL: none) says the cache is usable on its node, given
 * the digest id the cache may be used at (0: nowhere). */
int ctrl_entry_usable(const struct ctrl_entry *e, uint32_t usable_digest);
/* When a cache's judgement changed (usable at another digest, or nowhere):
 * queues "l:<node>" for every Node whose label (label: the cache's key)
 * disagrees with its entry. */
void ctrl_labels_check(struct ctrl *c, const struct ctrl_cidx *x, const char *label,
                       uint32_t usable_digest);
/* A Node is new, its labels changed, or its entries changed: queues "l:<node>". */
void ctrl_labels_node_changed(struct ctrl *c, const char *node);
/* "l:<node>": one merge patch of the node's cache labels. */
void ctrl_reconcile_labels(struct ctrl *c, const char *qkey);
/* 1 when the cache has been judged (*usable_digest: the digest id it may be
 * used at, 0 = nowhere), 0 while not yet (its labels are left alone). */
int ctrl_cache_label_state(const struct ctrl_cache *cc, uint32_t *usable_digest);

/* Per-cache memory (owned by cidx->rec). */
struct ctrl_cache;
void ctrl_cache_free(struct ctrl_cache *cc);
/* The cache object changed: a registry operation in flight for it is
 * cancelled (its result would be for the old spec). */
void ctrl_cache_changed(struct ctrl_cache *cc);
/* The stop: every verify job in flight is cancelled and its key done (the
 * verify context can then close without waiting for the work queue). */
void ctrl_caches_cancel(struct ctrl *c);
/* The conditions last computed for the cache (Verified, Ready, Progressing,
 * Degraded), UNKNOWN before the first status. */
void ctrl_cache_conds(const struct ctrl_cache *cc, enum tkm_api_cond_status out[4]);
/* 1 when the cache's last written Verified condition is False because its signature
 * search failed (not VerificationDisabled), else 0 (tkm_controller_verification_failed_caches). */
int ctrl_cache_ver_failed(const struct ctrl_cache *cc);
/* The cache's staged prefetch grants, NULL while tkm-config prefetchSlots is 0. */
const struct ctrl_grant *ctrl_cache_grant(const struct ctrl_cache *cc);
/* Enqueues every node whose Node is gone but whose status objects remain. */
void ctrl_gc_scan(struct ctrl *c);
/* Status write coalescing (ctrl_agg.c). While nodes keep reporting (a
 * rollout: every node status write changes the entries of every cache it
 * lists) a cache's status is written once its entries have been quiet for
 * settle_ms, or max_delay_ms after the first change not written yet while
 * they never are (settle_ms 0: at once): the status shows the rollout's progress
 * without a write per report, and the apiserver, busy with the reports, is
 * not handed a status write per cache per report. A change of the cache
 * itself (pin, verification) is written at once. changed_ms: uv_now of the
 * entries' last change (0: never); *dirty_since: the caller's memory of the
 * first unwritten change (set here; the caller zeroes it after a write or
 * when nothing is to be written). Returns 0 = write now, else the ms to
 * wait. */
uint64_t ctrl_settle_wait(uint64_t settle_ms, uint64_t max_delay_ms, uint64_t changed_ms,
                          uint64_t *dirty_since, uint64_t now);
/* CLOCK_REALTIME in ms (compared across processes by the benchmark). */
int64_t ctrl_wall_ms(void);
/* Finishes a reconcile of qkey (kind, t0 for metrics). */
void ctrl_done(struct ctrl *c, const char *qkey, int kind, uint64_t t0, int result,
               uint64_t after_ms);

#endif
