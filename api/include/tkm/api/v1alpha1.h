/*
 * tkm/api/v1alpha1.h - the tkm.io/v1alpha1 API in C: resource descriptors for
 * k8sclient, typed decoding of the objects the daemons read, and the
 * server-side-apply bodies of the status they write (docs/api.md).
 *
 * Built as its own library, libtkmapi (api/), on top of libk8sclient and
 * libtkm: k8sclient itself knows nothing of tkm.io.
 *
 * Decoding: from the raw JSON bytes of an object (a struct k8s_obj's json in
 * the informer store, a GET body). Duplicate keys are rejected, unknown
 * fields are ignored, a field of the wrong type or out of range is -EPROTO
 * with err naming the field ("status.caches[\"a\"].compatibleGPUs[0].ids[1]:
 * expected an integer, got a string"). Absent strings are NULL, absent
 * numbers 0, absent lists empty. Every decoded struct owns its strings and
 * arrays: free with the matching _release(); _release() of a zeroed struct
 * is a no-op, and so is a second one.
 *
 * Encoding: the *_apply() functions build the object to give to k8s_apply_async()
 * (with .subresource = "status"; the same body applied without the
 * subresource creates the object): apiVersion, kind, metadata.name (and
 * namespace), ownerReferences for node statuses, and only the status fields
 * the writer owns. Never metadata.resourceVersion. Keys come out in a fixed
 * order and lists in the order given (caches sorted by name), so an identical
 * status gives a byte-identical body (k8s_apply_async() serialises in insertion
 * order) and the apiserver treats the re-apply as a no-op.
 *
 * Timestamps are RFC 3339 strings in UTC ("2026-01-02T03:04:05Z"), as the
 * apiserver stores them; tkm_api_now() formats the current time.
 */
#ifndef TKM_API_V1ALPHA1_H
#define TKM_API_V1ALPHA1_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/jscan.h>
#include <k8s/client.h>

#define TKM_API_GROUP         "tkm.io"
#define TKM_API_VERSION       "v1alpha1"
#define TKM_API_GROUP_VERSION "tkm.io/v1alpha1"

/* Resource descriptors for k8sclient (static, never freed). */
extern const struct k8s_resource tkm_api_res_tkc;    /* TritonKernelCache (namespaced) */
extern const struct k8s_resource tkm_api_res_tkcc;   /* TritonKernelCacheCluster */
extern const struct k8s_resource tkm_api_res_tkcns;  /* TritonKernelCacheNodeStatus (namespaced) */
extern const struct k8s_resource tkm_api_res_tkcnsc; /* TritonKernelCacheNodeStatusCluster */

/* Writes the current UTC time as RFC 3339 ("...Z") into out (>= 21 bytes). */
void tkm_api_now(char *out, size_t n);

/* ---- common ------------------------------------------------------------------ */

/* The metadata the daemons read. Owned strings. */
struct tkm_api_meta {
    char *name;
    char *ns; /* NULL for cluster-scoped kinds */
    char *uid;
    char *resource_version;
    int64_t generation;
    char *deletion_timestamp; /* RFC 3339; set once the object is being deleted */
};

enum tkm_api_cond_status {
    TKM_API_COND_UNKNOWN = 0,
    TKM_API_COND_TRUE,
    TKM_API_COND_FALSE,
};

/* A status condition (metav1.Condition). Owned strings. */
struct tkm_api_condition {
    char *type; /* "Verified", "Ready", "Progressing", "Degraded" */
    enum tkm_api_cond_status status;
    int64_t observed_generation;
    char *last_transition_time; /* RFC 3339; required by the schema */
    char *reason;               /* CamelCase; required by the schema */
    char *message;
};

/* ---- TritonKernelCache / TritonKernelCacheCluster ---------------------------- */

enum tkm_api_sig_mode {
    TKM_API_SIG_UNSET = 0, /* no mode: the controller's default applies */
    TKM_API_SIG_ENFORCE,
    TKM_API_SIG_AUDIT,
    TKM_API_SIG_DISABLED,
};

/* A keyless signer: an OIDC issuer and exactly one of subject /
 * subject_regexp (owned strings). */
struct tkm_api_identity {
    char *issuer, *subject, *subject_regexp;
};

/* spec.signaturePolicy. Decoded by one function (api/cache.c) so new
 * fields (keyless identities, a trusted root) are added in one place. */
struct tkm_api_signature_policy {
    int present; /* the field was in the spec */
    enum tkm_api_sig_mode mode;
    char *public_key;          /* PEM, or NULL */
    char *public_key_ref_name; /* publicKeySecretRef.name, or NULL */
    char *public_key_ref_key;  /* publicKeySecretRef.key, or NULL (the default key) */
    /* keyless (has_keyless: the field was there) */
    int has_keyless;
    char *trusted_root_kind;             /* keyless.trustedRoot.kind: "ConfigMap" or "Secret" */
    char *trusted_root_name;             /* keyless.trustedRoot.name */
    char *trusted_root_namespace;        /* keyless.trustedRoot.namespace (cluster kind), or NULL */
    char *trusted_root_key;              /* keyless.trustedRoot.key, or NULL (trusted_root.json) */
    struct tkm_api_identity *identities; /* keyless.identities */
    size_t n_identities;
    int allow_cross_repository; /* allowCrossRepository */
};

/* spec.whenIncompatible / tkm-config whenIncompatible: what a pod gets on a
 * node where no variant of the cache fits (docs/compatibility.md). */
enum tkm_api_fallback {
    TKM_API_FALLBACK_UNSET = 0, /* not set: tkm-config's, else Empty */
    TKM_API_FALLBACK_FAIL,      /* the mount fails (FAILED_PRECONDITION) */
    TKM_API_FALLBACK_EMPTY,     /* an empty writable cache, a Warning event */
};

/* "Fail" / "Empty" into *out; anything else is -EPROTO with err naming field
 * ("spec.whenIncompatible: \"empty\", expected Fail or Empty"). */
int tkm_api_fallback_parse(const char *s, const char *field, enum tkm_api_fallback *out,
                           struct tkm_err *err);
/* "Fail", "Empty" (UNSET: "Empty", the built-in default). Static. */
const char *tkm_api_fallback_name(enum tkm_api_fallback f);

struct tkm_api_cache_spec {
    char *cache_image; /* required */
    enum tkm_api_fallback when_incompatible;
    char *mount_path; /* NULL: the default */
    struct tkm_api_signature_policy signature_policy;
    char **image_pull_secrets; /* names */
    size_t n_image_pull_secrets;
};

struct tkm_api_target {
    char *backend, *arch, *triton_version, *ptx_version;
    int64_t warp_size;
};

struct tkm_api_summary {
    int64_t entry_count, cache_size_bytes;
    struct tkm_api_target *targets;
    size_t n_targets;
};
/* Frees what a summary owns and zeroes it. */
void tkm_api_summary_release(struct tkm_api_summary *s);

struct tkm_api_counts {
    int32_t nodes, compatible, incompatible, failed, in_use;
};

struct tkm_api_failed_node {
    char *node, *reason, *message;
};

/* status.variants[]: one variant of the cache and how many nodes and GPUs use
 * it (summed over the node statuses). Owned strings. */
struct tkm_api_variant_count {
    char *digest, *platform, *backend, *arch;
    int64_t warp_size;
    int32_t nodes, gpus;
};

/* status.caches.<name>.compiles.topKernels[] (issue 25). Owned string. */
struct tkm_api_kernel_count {
    char *name;   /* a Triton kernel's name, [A-Za-z0-9_.-]{1,128} */
    int64_t pods; /* pods on this node that compiled it */
};

#define TKM_API_COMPILES_TOP 10 /* topKernels entries */

/* status.caches.<name>.compiles: what the pods served this cache on this node
 * compiled beside it (counted by tkm-csi at unpublish), since `since` (the agent's
 * start or the cache's digest changing). present 0: the field is absent.
 * The cache status' compiles (tkm-controller) is the same, summed over the
 * nodes at the pinned digest, with nodes and hit set. Limits (the CRDs'):
 * counts >= 0, at most TKM_API_COMPILES_TOP topKernels, names
 * [A-Za-z0-9_.-]{1,128}, since RFC 3339. */
struct tkm_api_compiles {
    int present;
    int64_t pods_served;   /* volumes released with a counted scratch layer */
    int64_t pods_compiled; /* ... of which compiled at least one kernel or entry */
    int64_t triton_kernels, inductor_entries, vllm_entries; /* summed over those pods */
    int64_t bytes;
    struct tkm_api_kernel_count *top; /* the most compiled kernel names, at most 10 */
    size_t n_top;
    char *since; /* RFC 3339 */
    /* the cache status only (0 / NULL in a node status): the nodes counted,
     * and "<pods that compiled nothing>/<pods served>" (the printer column Hit) */
    int32_t nodes;
    char *hit;
};
/* c as JSON (the node and cache status' member; kubectl-tkm's documents):
 * members in a fixed order, nodes only when > 0, topKernels only when there
 * are some, since and hit only when set. A new reference; NULL on ENOMEM. */
json_t *tkm_api_compiles_json(const struct tkm_api_compiles *c);
/* Frees what a decoded compiles owns (names, top, since, hit) and zeroes it. */
void tkm_api_compiles_release(struct tkm_api_compiles *c);
/* 1 when s is an RFC 3339 date-time ("2026-01-02T03:04:05Z", fraction and offset allowed). */
int tkm_api_time_ok(const char *s);

/* tkm-config prefetchSlots' cap, prefetchGrantTimeout's default */
#define TKM_API_PREFETCH_SLOTS_MAX        1000u
#define TKM_API_PREFETCH_GRANT_TIMEOUT_MS (15ull * 60 * 1000)

/* status.prefetch (docs/prefetch.md): the pull slots tkm-controller hands out
 * for the pinned digest when tkm-config prefetchSlots is above 0. present 0:
 * the field is absent (no fleet-wide limit). granted: the node names that
 * may prefetch now (at most TKM_API_PREFETCH_SLOTS_MAX, owned strings). */
struct tkm_api_prefetch_grants {
    int present;
    int32_t slots;  /* prefetchSlots */
    char **granted; /* node names, sorted */
    size_t n_granted;
    int32_t waiting; /* nodes waiting for a slot */
};
/* 1 when node is in g's granted list. Pure. */
int tkm_api_prefetch_granted(const struct tkm_api_prefetch_grants *g, const char *node);

/* The status the controller writes. */
struct tkm_api_cache_status {
    int64_t observed_generation;
    char *resolved_digest; /* "sha256:<64 hex>" or NULL */
    int has_summary;
    struct tkm_api_summary summary;
    int has_counts;
    struct tkm_api_counts counts;
    struct tkm_api_failed_node *failed_nodes;
    size_t n_failed_nodes;
    struct tkm_api_condition *conditions;
    size_t n_conditions;
    char *last_updated;
    /* mixed fleets (docs/api.md): at most 64 variants, sorted by nodes then digest */
    struct tkm_api_variant_count *variants;
    size_t n_variants;
    char **gpu_types_without_variant; /* NoVariant / HostArchMismatch somewhere; at most 64 */
    size_t n_gpu_types_without_variant;
    char *variant_summary; /* the printer column: "cuda/90: 3 nodes; none for: nvidia-a100" */
    char *node_label;      /* the Node label key the controller keeps for this cache */
    struct tkm_api_compiles compiles;        /* issue 25: summed over the nodes at resolvedDigest */
    struct tkm_api_prefetch_grants prefetch; /* issue 26: staged prefetch */
};

struct tkm_api_cache {
    int cluster; /* 1: TritonKernelCacheCluster */
    struct tkm_api_meta meta;
    struct tkm_api_cache_spec spec;
    struct tkm_api_cache_status status;
};

/* Scheduling help (docs/user-guide.md): tkm-controller labels every Node
 * where a cache is usable with this key and the value "true". Namespaced
 * caches: "tkc.tkm.io/<namespace>.<name>", cluster caches:
 * "tkcc.tkm.io/<name>"; a name part longer than 63 characters (the label
 * limit) is its first 52 characters, '-' and 10 hex digits of the SHA-256
 * of "<namespace>/<name>" ("/<name>" for the cluster kind). The prefixes
 * belong to the controller: it removes any of their labels that no usable
 * cache explains. */
#define TKM_API_NODE_LABEL_NS      "tkc.tkm.io/"
#define TKM_API_NODE_LABEL_CLUSTER "tkcc.tkm.io/"
#define TKM_API_NODE_LABEL_VALUE   "true"
#define TKM_API_NODE_LABEL_MAX     80 /* the longest key, NUL included */
/* The key for a cache (ns NULL or "": the cluster kind) into out (at least
 * TKM_API_NODE_LABEL_MAX bytes). 0, -EINVAL (no name, or out too small). */
int tkm_api_node_label(const char *ns, const char *name, char *out, size_t n);

/* Decodes a TritonKernelCache or TritonKernelCacheCluster (kind checked).
 * json is borrowed; *out is owned: tkm_api_cache_release(). On failure *out
 * is released and err names the field. 0, -EPROTO, -ENOMEM. */
int tkm_api_cache_decode(const char *json, size_t len, struct tkm_api_cache *out,
                         struct tkm_err *err);
/* The same, and *root (owned: json_decref(); NULL after a failure) is the parsed
 * document it was decoded from, for the fields the struct does not carry: one
 * parse where a caller needs both. */
int tkm_api_cache_decode_root(const char *json, size_t len, struct tkm_api_cache *out,
                              json_t **root, struct tkm_err *err);
void tkm_api_cache_release(struct tkm_api_cache *c);

/* Decodes a list of keyless identities (arr: a JSON array, NULL = none; at
 * most 16). *out owned: tkm_api_identities_release(*out, *n), also after a
 * failure. 0, -EPROTO, -ENOMEM. */
int tkm_api_identities_decode(const json_t *arr, const char *field, struct tkm_api_identity **out,
                              size_t *n, struct tkm_err *err);
void tkm_api_identities_release(struct tkm_api_identity *ids, size_t n);

void tkm_api_cache_status_release(struct tkm_api_cache_status *st);

/* The server-side-apply body for a cache's status: ns NULL for the cluster
 * kind. st and strings are borrowed; *out is owned (json_decref()). Only the
 * fields set are written (has_summary/has_counts, non-NULL strings,
 * non-empty lists). 0, -EINVAL (err says which field), -ENOMEM. */
int tkm_api_cache_status_apply(const struct tkm_api_cache_status *st, const char *name,
                               const char *ns, json_t **out, struct tkm_err *err);

/* ---- TritonKernelCacheNodeStatus / ...Cluster --------------------------------- */

struct tkm_api_gpu {
    int32_t id;
    char *gpu_type; /* "nvidia-h200" */
    char *vendor;   /* "nvidia", "amd", "unknown" */
    char *product_name;
    char *arch; /* as Triton's key spells it: "90", "gfx942" */
    char *compute_capability;
    int32_t warp_size;
    char *driver_version, *cuda_driver_version, *rocm_version;
    int64_t memory_bytes;
    char *uuid, *pci_bus_id;
    int mig_mode;
};

/* compatibleGPUs[] / incompatibleGPUs[] entry: a set of GPU ids of one type
 * (reason and message only for incompatible ones). */
struct tkm_api_gpu_group {
    int32_t *ids;
    size_t n_ids;
    char *gpu_type;
    char *reason, *message;
};

struct tkm_api_pod_ref {
    char *ns, *name, *uid, *volume_id;
};

/* status.caches.<name>.variants[]: a variant this node uses and its GPUs
 * (one entry per digest). Only the digest: its target (platform, backend,
 * arch, warp size) is the signed index's, which tkm-controller reads itself
 * and lists in the cache status' variants; the GPUs' types are the node's
 * own gpus[] (by id). Owned. */
struct tkm_api_variant_use {
    char *digest; /* the variant's image manifest */
    int32_t *gpu_ids;
    size_t n_gpu_ids;
};

/* status.caches.<name>.prefetch: where this node's prefetch of the cache
 * stands while tkm-config prefetchSlots is above 0 (absent otherwise, and
 * once extracted or failed). */
enum tkm_api_prefetch_state {
    TKM_API_PREFETCH_NONE = 0, /* absent */
    TKM_API_PREFETCH_WAITING,  /* "Waiting": for a slot from tkm-controller */
    TKM_API_PREFETCH_PULLING,  /* "Pulling": granted, pulling */
};
/* "Waiting", "Pulling"; NULL for NONE. Static. */
const char *tkm_api_prefetch_state_name(enum tkm_api_prefetch_state s);

/* status.caches.<name> */
struct tkm_api_node_cache {
    char *name; /* the map key: the cache's name */
    char *digest;
    int verified, extracted;
    struct tkm_api_gpu_group *compatible;
    size_t n_compatible;
    struct tkm_api_gpu_group *incompatible;
    size_t n_incompatible;
    struct tkm_api_pod_ref *pods;
    size_t n_pods;
    char *error;
    char *last_updated;
    /* lastFailure: the last failed Materialize here (reason, message, RFC 3339
     * time); all NULL when absent (cleared on the next success) */
    char *fail_reason, *fail_message, *fail_time;
    struct tkm_api_variant_use *variants; /* the variants used here (at most 64) */
    size_t n_variants;
    char *fallback;                   /* "Empty" when served as an empty volume here, else NULL */
    struct tkm_api_compiles compiles; /* issue 25 */
    enum tkm_api_prefetch_state prefetch;
    /* pulledFrom: where this node downloaded the layer it extracted last
     * ("mirror <host>[path]", "registry <host>" for a moved upstream,
     * "upstream <host>"; at most 300 bytes), NULL when absent (issue 26) */
    char *pulled_from;
};

/* The status a node's agent writes. gpuCount, gpuTypes and cacheCount (the
 * printer columns) are derived from gpus and caches when encoding. */
struct tkm_api_node_status {
    char *node_name;
    struct tkm_api_gpu *gpus;
    size_t n_gpus;
    struct tkm_api_node_cache *caches;
    size_t n_caches;
    char *last_updated;
};

struct tkm_api_nodestatus {
    int cluster; /* 1: TritonKernelCacheNodeStatusCluster */
    struct tkm_api_meta meta;
    struct tkm_api_node_status status;
};

/* Decodes a TritonKernelCacheNodeStatus or ...Cluster into a tree (kubectl-tkm):
 * tkm_api_nodestatus_scan() below decides what is refused and with which
 * message (one decoder), then every field is copied out. *out is owned
 * (tkm_api_nodestatus_release, also done on failure); caches come out sorted
 * by name. 0, -EPROTO, -ENOMEM. */
int tkm_api_nodestatus_decode(const char *json, size_t len, struct tkm_api_nodestatus *out,
                              struct tkm_err *err);
void tkm_api_nodestatus_release(struct tkm_api_nodestatus *n);
void tkm_api_node_status_release(struct tkm_api_node_status *st);

/*
 * Streaming decoder of a node status for readers that keep a few fields per
 * cache (tkm-controller's index): no jansson tree, nothing allocated per
 * entry. It validates the whole object (JSON syntax and duplicate keys with
 * tkm_jscan, kind, apiVersion, metadata, every status field's type and
 * limits: 64 GPUs, 512 caches, 64 groups and ids, 1024 pods, 64 variants
 * with the CRD's string lengths, fallback "Empty", compiles as
 * struct tkm_api_compiles says; the messages
 * name the field) and only then calls entry() once per status.caches
 * member, in the object's order (NOT sorted by name).
 *
 * s: caller-owned scratch (tkm_api_nsscan_init / _release), reused from one
 * call to the next; head and entry strings live in it and are borrowed:
 * head's until the next call with s, an entry's until entry() returns.
 * entry() returning non-zero stops the scan, which returns that value. On
 * failure (-EPROTO, -ENOMEM, with err) entry() is never called.
 */
/* An entry's variants[] member (strings NULL when absent). */
struct tkm_api_nsscan_variant {
    const char *digest;
    size_t n_gpu_ids;
};

/* An entry's incompatibleGPUs[] member, in short. */
struct tkm_api_nsscan_group {
    const char *gpu_type, *reason; /* NULL when absent */
    size_t n_ids;
};

#define TKM_API_NS_VARIANTS_MAX 64 /* variants per cache entry */
#define TKM_API_NS_GROUPS_MAX   64 /* compatibleGPUs / incompatibleGPUs groups */
struct tkm_api_nsscan {
    struct tkm_jscan js;
    struct tkm_buf head, str;
    /* an entry's lists (the strings' offsets in str until the entry is read) */
    struct tkm_api_nsscan_variant var[TKM_API_NS_VARIANTS_MAX];
    struct tkm_api_nsscan_group grp[TKM_API_NS_GROUPS_MAX];
    size_t var_at[TKM_API_NS_VARIANTS_MAX], grp_at[TKM_API_NS_GROUPS_MAX][2];
    struct tkm_api_kernel_count top[TKM_API_COMPILES_TOP]; /* an entry's compiles.topKernels */
    size_t top_at[TKM_API_COMPILES_TOP], since_at;
};
void tkm_api_nsscan_init(struct tkm_api_nsscan *s);
void tkm_api_nsscan_release(struct tkm_api_nsscan *s);

struct tkm_api_nsscan_head {
    int cluster; /* as tkm_api_nodestatus.cluster */
    /* metadata; NULL when absent (ns for the cluster kind) */
    const char *name, *ns, *uid, *resource_version;
    const char *node_name; /* status.nodeName or NULL */
    size_t n_caches;
};

/* One status.caches entry: what tkm_api_node_cache has, less the pods, the
 * GPU ids, the messages but the first and lastFailure (checked: an object of
 * strings reason, message, time). */
struct tkm_api_nsscan_entry {
    const char *name;   /* the member name (never NULL) */
    const char *digest; /* NULL when absent */
    int verified, extracted;
    size_t n_compatible, n_incompatible, n_pods;
    const char *error; /* NULL when absent */
    /* incompatibleGPUs[0].reason / .message; NULL when absent */
    const char *incompatible_reason, *incompatible_message;
    const struct tkm_api_nsscan_group *incompatible; /* n_incompatible of them */
    const struct tkm_api_nsscan_variant *variants;   /* n_variants of them */
    size_t n_variants;
    const char *fallback; /* "Empty" or NULL */
    enum tkm_api_prefetch_state prefetch;
    /* compiles (present 0 when absent); top and the strings are borrowed (in s) */
    struct tkm_api_compiles compiles;
};

typedef int (*tkm_api_nsscan_cb)(const struct tkm_api_nsscan_head *h,
                                 const struct tkm_api_nsscan_entry *e, void *data);

/* 0 (or entry()'s non-zero value), -EPROTO or -ENOMEM with err. head may be
 * NULL; it is filled before the first entry() call. */
int tkm_api_nodestatus_scan(struct tkm_api_nsscan *s, const char *json, size_t len,
                            struct tkm_api_nsscan_head *head, tkm_api_nsscan_cb entry, void *data,
                            struct tkm_err *err);

/* The server-side-apply body of a node's status, named after the node
 * (st->node_name, required) and owned by the Node object (node_uid,
 * required: ownerReferences need it). ns NULL for the cluster kind. Caches
 * are written sorted by name (duplicates: -EINVAL). *out is owned. 0,
 * -EINVAL, -ENOMEM. */
int tkm_api_node_status_apply(const struct tkm_api_node_status *st, const char *ns,
                              const char *node_uid, json_t **out, struct tkm_err *err);

/* Serialises an apply body as k8s_apply_async() sends it (compact, insertion
 * order), for comparisons and logs. out is appended to. */
int tkm_api_dump(const json_t *obj, struct tkm_buf *out);

#endif
