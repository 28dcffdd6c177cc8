/*
 * agent/declared.h - the agent's one decoded index of caches, and the
 * declaration check Materialize runs on it (docs/agent-socket.md).
 *
 * The index holds one struct agent_cache per TritonKernelCache (all
 * namespaces) and TritonKernelCacheCluster the informers hold, keyed by the
 * informer's key ("ns/name", or "name" for the cluster kind), each decoded
 * once when its event arrives (agent_index_apply, called by the informer
 * handlers): Materialize never parses JSON. Beside the key map it keeps the
 * caches by spec.cacheImage (exact string) and, chained through ->next, the
 * live list: the caches that decoded and are not being deleted, which the
 * node status, the metrics and --once iterate.
 *
 * A pod may mount only a cache that its namespace declares: by cacheName, a
 * TritonKernelCache of that name in the pod's namespace, else a
 * TritonKernelCacheCluster of that name; by cacheImage, a cache in the pod's
 * namespace or a cluster cache whose spec.cacheImage is exactly that string.
 * Another namespace's TritonKernelCache never matches. An undeclared cache or
 * image is refused (-EACCES -> PERMISSION_DENIED) with a sentence a person
 * understands.
 *
 * Ownership: the index owns its entries (agent_index_release() frees them;
 * agent_index_take() hands one to the caller). Entries returned by lookups
 * are borrowed from the index until control returns to the loop. The result
 * part of an entry (below "result") is written by the verification pipeline
 * (agent/cache.c), by once.c and by store.c; the index only frees it.
 * Single-threaded, on the loop that owns the informers; no I/O. Built into
 * tkm_agent_rpc (with rpc.c), so its unit test and the e2e harness run the
 * index the daemon runs.
 */
#ifndef AGENT_DECLARED_H
#define AGENT_DECLARED_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>
#include <tkm/strmap.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/gpu/compat.h>
#include <tkm/oci/session.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/parts.h>
#include <tkm/triton/variants.h>
#include <k8s/informer.h>

#include "rpc.h"

/* The outcome of one cache on this node, one verdict per GPU. Owned arrays
 * (agent_verdicts_release()). */
struct agent_verdicts {
    int judged; /* inspected and the GPUs judged */
    struct tkm_compat_verdict *v;
    /* per GPU: a CamelCase reason (static) that is not the compat judge's (NoVariant,
     * HostArchMismatch, VariantMismatch, VariantLayoutConflict), else NULL; the array
     * itself may be NULL (none) */
    const char **code;
    /* per GPU: the variant of the cache's index it picked (ac->vars[i]), or -1 (none, or
     * a single image); NULL for a single image */
    int *variant;
    size_t n;
};

/* A variant of a variant index (agent/variants.c) as this node knows it: inspected
 * only when a GPU here picks it. Owned by its struct agent_cache. */
struct agent_variant {
    int state; /* 0 not inspected, 1 inspected and agreeing with its annotations, -1 refused */
    char reason[64];   /* state -1: VariantMismatch, InvalidImage, ... */
    char message[768]; /* ... and why */
    struct tkm_triton_summary summary;
    char *layer_digest;
    uint64_t cache_bytes, layer_bytes;
    int parts; /* TKM_PART_* of its config */
    int has_inductor;
    struct tkm_inductor_facts inductor;
    int label_checked;
};

/* Frees the arrays and zeroes vs. */
void agent_verdicts_release(struct agent_verdicts *vs);
/* The CamelCase reason of GPU i's verdict: its code, else the compat judge's
 * sentence mapped by agent_compat_reason(). */
const char *agent_verdict_reason(const struct agent_verdicts *vs, size_t i);
/* CamelCase reason for a compat verdict's sentence. */
const char *agent_compat_reason(const char *sentence);

struct agent;
struct agent_run;

/* One TritonKernelCache / TritonKernelCacheCluster as the agent knows it:
 * the decoded object (a compact struct, not the JSON) and the result. */
struct agent_cache {
    struct agent_cache *next;     /* the live list */
    struct agent_cache *img_next; /* the other caches of the same spec.cacheImage */
    struct agent *a;              /* set by the daemon (NULL in the index's tests) */
    char *key;                    /* "ns/name", or "name" for the cluster kind */
    struct tkm_api_cache c;       /* the last object that decoded */
    char *inputs;                 /* spec JSON + resolved digest: a change re-verifies */
    char *bad;    /* the current object does not decode: why (a sentence), else NULL */
    int live;     /* in the live list: decoded once, not being deleted */
    int deleting; /* metadata.deletionTimestamp is set */
    /* the verification (agent/cache.c) */
    struct agent_run *run;   /* in flight, or NULL */
    char *verified_inputs;   /* the inputs the result is for (NULL: no result yet) */
    uint64_t verified_cfg;   /* ... and the tkm-config generation */
    uint64_t verified_at_ms; /* when the result was recorded (0: none) */
    /* result */
    char digest[80];
    int inspected;
    int verified;      /* the signature verified */
    int sig_mode;      /* enum tkm_sig_mode used */
    char reason[64];   /* CamelCase, "" when usable */
    char message[768]; /* a sentence, "" when usable */
    struct tkm_triton_summary summary;
    char *layer_digest;              /* the image's one layer */
    uint64_t cache_bytes;            /* extracted size (label cache-size-bytes), for admission */
    uint64_t layer_bytes;            /* the layer's declared (compressed) size */
    struct tkm_oci_session *session; /* the registry session it was inspected through (borrowed) */
    int label_checked;               /* the extracted kernels matched the label (this process) */
    struct agent_verdicts verdicts;
    char judged_at[32];
    /* the last failed Materialize or prefetch of this cache here (store.c), cleared
     * when the cache is next materialized: node status lastFailure */
    char fail_reason[32];
    char fail_message[768];
    char fail_at[32];
    /* staged prefetch (store.c, tkm-config prefetchSlots above 0): Waiting for
     * a slot in the cache status' prefetch.granted, or Pulling with one; the
     * node status entry's prefetch */
    enum tkm_api_prefetch_state prefetch;
    /* the image's Inductor part (cache.inductor.image/summary), judged per GPU
     * beside the Triton summary; a malformed label leaves the facts empty, so
     * every GPU is refused (fail closed) */
    int has_inductor;
    struct tkm_inductor_facts inductor;
    /* the parts (TKM_PART_* bits) the image's layer holds: the store dir's layout,
     * and what an empty volume gets (the Empty fallback); 0 before inspection */
    int parts;
    /* a variant index (variants.from_index 1): its variants and, parallel, what this node
     * knows of each (vars); the fields above (summary, layer, parts...) are then unused.
     * A single image: variants empty, vars NULL. */
    struct tkm_variant_set variants;
    struct agent_variant *vars;
};

/* Frees ac's variants (vars and the set). */
void agent_cache_variants_clear(struct agent_cache *ac);

/* Frees an entry that is in no index (its run, if any, already detached). */
void agent_cache_destroy(struct agent_cache *ac);

struct agent_index {
    struct tkm_strmap by_key;   /* key -> entry (every object of both informers) */
    struct tkm_strmap by_image; /* spec.cacheImage -> first entry, chained by img_next */
    struct agent_cache **live;  /* head of the live list (borrowed: see agent_index_init) */
    size_t n_live;
};

/* live: where the live list's head is kept (struct agent's caches; it must
 * outlive the index). */
void agent_index_init(struct agent_index *x, struct agent_cache **live);
/* Frees every entry (detach their runs first) and the maps. */
void agent_index_release(struct agent_index *x);

/* What agent_index_apply() did to the entry. */
enum agent_index_change {
    AGENT_INDEX_SAME = 0, /* only fields outside the inputs moved (the controller's status) */
    AGENT_INDEX_INPUTS,   /* new, or its spec or pinned digest changed: verify again */
    AGENT_INDEX_GONE,     /* it left the live list (being deleted): drop its work */
};

/* Decodes obj (an informer's object, borrowed) into its entry, created when
 * absent; *entry (optional) gets it (borrowed from x). Returns an enum
 * agent_index_change, or -EPROTO with err when the object does not decode
 * (the entry keeps the last object that did, and lookups by name answer
 * -EPROTO), or -ENOMEM (the index unchanged). */
int agent_index_apply(struct agent_index *x, const struct k8s_obj *obj, struct agent_cache **entry,
                      struct tkm_err *err);
/* Adds an entry the caller built (key set, c filled; not from an informer:
 * --once --image) to the key map and the live list; the index owns it then.
 * 0 or -ENOMEM. */
int agent_index_add(struct agent_index *x, struct agent_cache *ac);
/* Removes key's entry and hands it to the caller (agent_cache_destroy), or NULL. */
struct agent_cache *agent_index_take(struct agent_index *x, const char *key);
/* The entry of key, or NULL. */
struct agent_cache *agent_index_get(const struct agent_index *x, const char *key);

/* Finds the cache that req (cache_name or cache_image; borrowed) names for
 * pod_ns (borrowed) in the index.
 *   - cacheName x: the TritonKernelCache pod_ns/x if it exists, else the
 *     TritonKernelCacheCluster x.
 *   - cacheImage R: caches whose spec.cacheImage == R (exact string
 *     equality): the TritonKernelCaches of pod_ns first, then the cluster
 *     ones; several matches of the same kind: the smallest name (strcmp),
 *     so the answer never depends on the order of events. Objects that do
 *     not decode are skipped.
 * Returns 0 with *found (borrowed from x; it may be being deleted: see
 * ->deleting), or with *found NULL: -EACCES not declared, -EPROTO the named
 * object does not decode (err names the field), -EINVAL req names no cache.
 * err gets the sentence for the client. */
int agent_declared_find(const struct agent_index *x, const char *pod_ns,
                        const struct agent_materialize_req *req, struct agent_cache **found,
                        struct tkm_err *err);

/* The gRPC code for agent_declared_find()'s result: PERMISSION_DENIED for
 * -EACCES, FAILED_PRECONDITION for -EPROTO, INVALID_ARGUMENT for -EINVAL,
 * INTERNAL otherwise (OK for 0). */
int agent_declared_grpc_code(int rc);

#endif
