/*
 * agent.h - tkm-agent's internal interface (the agent sources share it; nothing
 * outside agent/ includes it). docs/agent.md describes the design.
 *
 * The shape (the same words as the other daemons, docs/architecture.md):
 *   informers   TritonKernelCache (all namespaces), TritonKernelCacheCluster,
 *               the ConfigMap tkm-config, and the agent's own node status
 *               objects (cache.c); the cache events are decoded once into
 *               the index (declared.h)
 *   queue       one k8s_workqueue of cache keys (cache.c)
 *   reconcile   agent_cache_reconcile() (cache.c): the key's decoded cache
 *               -> the shared verify job (api/verify.h) -> the GPUs judged
 *   sinks       the node status objects (status.c), the store's prefetch and
 *               the CSI socket's Materialize (store.c), /metrics (metrics.c)
 *
 * One struct agent per process, owned by main() (on its stack). Everything
 * runs on its one libuv loop; the thread pool gets only the GPU probe,
 * extraction, the label check, removals and SQLite checkpoints.
 *
 * Ownership: struct agent owns the index and every struct agent_cache in it
 * (caches is the index's live list, borrowed), the work queue, the verify
 * context (with the registry session pool), the http and k8s clients, the
 * informers, the store and the socket. The stop (stop.c, from the loop) closes
 * them by close callbacks (agent_caches_close() for the caches' part); main() frees what
 * is left once the loop has ended (agent_store_close(), agent_metrics_free(),
 * agent_gpus_release(), agent_nsobjs_free()). Strings in struct agent_opts
 * are borrowed from argv/environ for the process lifetime.
 */
#ifndef AGENT_AGENT_H
#define AGENT_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/triton/parts.h>
#include <tkm/api/policy.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/api/verify.h>
#include <tkm/gpu/compat.h>
#include <tkm/gpu/probe.h>
#include <tkm/daemon.h>
#include <tkm/flags.h>
#include <tkm/http.h>
#include <tkm/oci/session.h>
#include <tkm/triton/cache.h>
#include <tkm/store.h>
#include <tkm/store/state.h>
#include <k8s/client.h>
#include <k8s/events.h>
#include <k8s/informer.h>
#include <k8s/workqueue.h>

#include "compiles.h"
#include "declared.h"
#include "rpc.h"

#define AGENT_FIELD_MANAGER   "tkm-agent"
#define AGENT_PROBE_PERIOD_MS (5 * 60 * 1000)
#define AGENT_HEARTBEAT_MS    (60 * 1000)
#define AGENT_REVERIFY_MS     (10 * 60 * 1000) /* Secrets are not watched: re-verify this often */
#define AGENT_BACKOFF_MIN_MS  1000             /* the work queue's retry backoff: 1 s doubling */
#define AGENT_BACKOFF_MAX_MS  (5 * 60 * 1000)  /* ... to 5 min */
#define AGENT_WORKERS         64               /* caches verified at once */
/* The reason (node status lastFailure, Materialize's RESOURCE_EXHAUSTED) when the store's
 * budget or its filesystem cannot hold a cache. */
#define AGENT_REASON_STORE_FULL "StoreFull"
/* --socket's default: what manifests/base/daemonset-node.yaml mounts and tkm-csi's
 * --agent-socket default (CSI_DEFAULT_AGENT_SOCKET); a directory of its own, since the
 * agent makes the socket's directory 0700 and the shared /var/run/tkm is 0755
 * (unit.agent.socket_default_matches_manifest checks all three agree). */
#define AGENT_DEFAULT_SOCKET "/var/run/tkm/agent/agent.sock"

/* Borrowed strings (argv / environment), process lifetime. */
struct agent_opts {
    const char *kubeconfig;
    const char *node_name;
    const char *ns; /* the agent's namespace: tkm-config, cluster caches' Secrets */
    const char *store_dir;
    const char *socket;
    uint64_t store_budget;
    uint64_t gc_grace_ms;
    uint64_t once_timeout_ms;  /* --once gives up after this long */
    uint64_t pull_deadline_ms; /* each blob download, retries included */
    uint64_t max_pulls;        /* --max-concurrent-pulls: layer downloads at once */
    uint64_t pull_bandwidth;   /* --pull-bandwidth: bytes/s over all downloads, 0: none */
    uint64_t socket_max_conns; /* the socket's connection cap */
    uint64_t socket_idle_ms;   /* ... and idle timeout */
    const char *metrics_addr;
    const char *health_addr;
    struct tkm_gpu_probe_opts probe;
    struct tkm_flagset flags; /* -v, --log-format and the deprecation notes */
    int verbosity;
    int once;
    const char *output;            /* "json" or "yaml" */
    const char *image;             /* --once --image REF|LAYOUT_DIR */
    const char *key;               /* --once --image: a cosign public key file to verify with */
    const char *signature_floor;   /* --signature-floor: when tkm-config sets none (NULL) */
    struct tkm_reach_config reach; /* --registry-*: what tkm-config leaves out */
    const char *mirrors_dir;       /* --mirrors-hosts-dir: containerd's hosts.toml directory */
    const char *registries_conf;   /* --registries-conf: CRI-O's registries.conf */
};

/* Parses argv into o (strings borrowed). 0, 1 (--help printed: exit 0), or
 * -EINVAL after printing the error to stderr. */
int agent_opts_parse(struct agent_opts *o, int argc, char **argv);

struct agent;
struct agent_run;

/* Takes the torch.compile parts an image config announces into ac (the
 * Inductor facts); returns the bytes their cache-size-bytes labels add to
 * the Triton part's (for admission). cfg is borrowed. */
uint64_t agent_cache_take_parts(struct agent_cache *ac, const struct tkm_oci_config *cfg);

/* 1 when the cache may be used on this node: inspected, signature verified
 * (or not enforced) and no reason recorded. */
int agent_cache_usable(const struct agent_cache *ac);

/* A CSI volume referencing a digest (mirror of the store state's references). */
struct agent_vol {
    struct agent_vol *next;
    char *volume_id, *pod_ns, *pod_name, *pod_uid, *cache_ns, *cache_name;
    char digest[80];
};

struct agent_pull;

/* Node status objects this agent writes: one per namespace with caches, plus
 * the cluster one (ns ""). */
struct agent_nsobj {
    struct agent_nsobj *next;
    char *ns;         /* "" for TritonKernelCacheNodeStatusCluster */
    char *last_body;  /* the last applied body without lastUpdated */
    uint64_t last_ms; /* when it was last applied */
    int exists;       /* created (through the main endpoint) */
    int inflight;     /* an apply or delete is in flight */
    int want_delete;  /* no caches left */
    int again;        /* changed while in flight: another pass when the write ends */
    char *applied_rv; /* resourceVersion our last apply returned */
};

struct agent {
    uv_loop_t *loop;
    struct agent_opts o;
    struct k8s_client *kc;
    struct tkm_http *http;
    struct tkm_verify_ctx *verify; /* the verify jobs and their registry session pool */
    struct agent_cache *caches;    /* the live list of idx (declared.h): iterate with ->next */
    struct agent_index idx;        /* every cache, decoded once: agent_caches_index() */
    struct k8s_workqueue *q;       /* cache keys; agent_cache_reconcile() runs each */
    uint64_t cfg_gen;              /* tkm-config's generation: a change re-verifies every cache */
    void (*caches_closed)(struct agent *a); /* agent_caches_close()'s callback */
    int caches_closing;                     /* ... once this many parts have closed */
    struct tkm_api_config cfg;
    int cfg_ready;        /* the tkm-config informer has synced */
    size_t runs_inflight; /* verifications in flight (a burst ends at 0) */
    char *cfg_inputs;     /* ConfigMap data JSON: a change re-verifies every cache */
    struct tkm_gpu_list gpus;
    struct tkm_api_gpu *api_gpus; /* the same as the API spells them (owned strings) */
    char *gpus_json;              /* for change detection */
    int probed;
    int probing;
    int reprobe; /* SIGHUP while probing */
    char node_uid[128];
    char hostname[256];
    struct k8s_informer *inf_tkc, *inf_tkcc, *inf_cfg, *inf_ns, *inf_nsc;
    struct agent_nsobj *nsobjs;
    uv_timer_t probe_timer, flush_timer, node_timer;
    struct tkm_daemon d;     /* signals and the stop (stop.c) */
    struct tkm_closer users; /* the stop: what uses the clients, closed before them */
    int flush_pending;
    uint64_t flush_due_ms;
    uint64_t write_backoff_ms;
    uint64_t write_retry_ms; /* tkm_now_ms() before which no write starts (backoff), or 0 */
    int stopping;
    struct tkm_oci_session *once_session; /* --once --image REF */
    /* the store and the socket */
    struct tkm_store *store;
    struct tkm_store_state *state;
    struct agent_rpc_server *rpc;
    struct agent_pull *pulls;
    struct agent_vol *vols;
    struct agent_cache_compiles *compiles; /* what served pods compiled, per cache key */
    uv_timer_t gc_timer, once_timer;
    int checkpointing;
    struct k8s_recorder *rec;
    uint64_t extractions, extract_errors;
    double extract_seconds;
    /* metrics (metrics.c) */
    struct tkm_metrics *metrics;
    struct tkm_httpd *httpd_metrics, *httpd_health;
    struct tkm_metric *m_gpus, *m_store_bytes, *m_store_entries, *m_store_refs, *m_extractions,
        *m_extract_errors, *m_extract_seconds, *m_registry_errors, *m_watch_restarts,
        *m_status_writes, *m_store_budget, *m_status_write_time, *m_mat_failures, *m_socket_refused,
        *m_socket_idle_closed, *m_empty_volumes;
    struct tkm_metric *m_pods_served, *m_pods_compiled, *m_pod_compiles; /* issue 25 */
    uint64_t registry_errors, watch_restarts, status_writes;
    double status_write_time; /* wall clock (Unix seconds) of the last accepted status apply */
    /* registry mirrors (mirrors.c) */
    struct tkm_mirrors *mirrors; /* the last good configuration, or NULL */
    int mirrors_loaded;          /* a load succeeded once */
    char mirrors_err[512];       /* the last load's error ("" after a good one) */
    struct agent_msess *msess;   /* one session per mirror endpoint */
    uint64_t mirror_config_errors, mirror_fallbacks;
    uint64_t pulled_bytes_mirror, pulled_bytes_upstream;
    struct tkm_metric *m_pulled_bytes, *m_mirror_fallbacks, *m_mirror_config_errors;
};

/* One download's share of --pull-bandwidth (split evenly over the
 * --max-concurrent-pulls that may run at once), bytes/s; 0: no cap. */
static inline uint64_t agent_download_bps(const struct agent *a)
{
    return a->o.pull_bandwidth ? (a->o.pull_bandwidth + a->o.max_pulls - 1) / a->o.max_pulls : 0;
}

/* mirrors.c: pulls through the node's registry mirrors (docs/mirrors.md). */
struct tkm_mirror_endpoint;
/* Re-reads the mirror files when they changed; a bad file keeps the last good
 * configuration (logged once per error, tkm_agent_mirror_config_errors_total). */
void agent_mirrors_refresh(struct agent *a);
/* The endpoints to try for a pull of ref by digest before its verified
 * upstream session: *eps (owned: tkm_mirror_endpoints_free(*eps, *n)) has *n
 * entries of which the first *use are tried; none (*eps NULL) without
 * mirrors. -EACCES: the files block this registry (err says which). */
int agent_mirrors_plan(struct agent *a, const struct tkm_oci_ref *ref,
                       struct tkm_mirror_endpoint **eps, size_t *n, size_t *use,
                       struct tkm_err *err);
/* The session of one endpoint (kept by the agent, borrowed), its downloads'
 * deadline set to deadline_ms; NULL with err on failure. */
struct tkm_oci_session *agent_mirror_session(struct agent *a, const struct tkm_mirror_endpoint *ep,
                                             uint64_t deadline_ms, struct tkm_err *err);
/* Part of the stop: closes the sessions (each adds to users) and the configuration. */
void agent_mirrors_close(struct agent *a, struct tkm_closer *users);
/* An Event on the cache object (none without a recorder). */
void agent_cache_event(struct agent *a, const struct agent_cache *ac, const char *type,
                       const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* gpu.c: probes on the thread pool; on change re-judges every cache. */
int agent_gpu_start(struct agent *a);
void agent_gpu_probe(struct agent *a);
void agent_gpus_release(struct agent *a);

/* cache.c: the informers of the caches and tkm-config, the work queue of
 * cache keys and its one reconcile function (the verification pipeline). */
int agent_caches_start(struct agent *a, struct tkm_err *err);
/* The index of caches (declared.h), set up on first use. */
struct agent_index *agent_caches_index(struct agent *a);
/* The live cache of key, or NULL. */
struct agent_cache *agent_cache_get(struct agent *a, const char *key);
void agent_cache_rejudge(struct agent_cache *ac);
void agent_caches_rejudge_all(struct agent *a);
/* Caches whose verification has not reported for their current inputs
 * (queued, in flight or retrying). */
size_t agent_caches_pending(const struct agent *a);
/* --once: prints and stops when everything is synced and judged. */
void agent_once_check(struct agent *a);
/* Part of the stop: cancels every verification in flight (their keys done),
 * frees the index, closes the verify context (its sessions) and shuts the
 * work queue down; cb (optional) runs from the loop once both have closed
 * (at once when neither was started). The http and k8s clients must stay
 * open until then: the cancelled requests report through them. */
void agent_caches_close(struct agent *a, void (*cb)(struct agent *a));

/* status.c */
/* Fills e (borrowed strings from ac) with ac's node status entry; arrays
 * are owned: agent_entry_release(). */
int agent_entry_build(const struct agent *a, const struct agent_cache *ac,
                      struct tkm_api_node_cache *e);
void agent_entry_release(struct tkm_api_node_cache *e);
/* Builds the node status for ns (NULL: the cluster kind). *out owned. */
int agent_status_build(const struct agent *a, const char *ns, const char *last_updated,
                       struct tkm_api_node_status *st);
void agent_status_release(struct tkm_api_node_status *st);
/* Marks the node status dirty: a pass on the loop's next turn writes what
 * changed at once; an object whose write is in flight is written again when
 * that write ends, with every change made meanwhile (one write, not one per
 * change); after a failed write, not before its backoff ends. */
void agent_status_changed(struct agent *a);
int agent_status_start(struct agent *a, struct tkm_err *err);
void agent_status_own_event(struct agent *a, const struct k8s_obj *o, int deleted);
void agent_nsobjs_free(struct agent *a);

/* fallback.c: the Empty fallback (docs/agent.md) */
/* The effective whenIncompatible of ac: FAIL or EMPTY (spec, else tkm-config, else Empty). */
enum tkm_api_fallback agent_cache_fallback(const struct agent *a, const struct agent_cache *ac);
/* 1 when a GPU here can use ac (judged). 0 when none can: *reason (static CamelCase: GPU 0's,
 * "NoGPU" without GPUs), msg ("<Reason>: no GPU on node N can use cache K: <why>") and
 * *compat 1 when every GPU's reason is a compatibility verdict (Empty may apply), 0 when one
 * is about the cache's integrity (CorruptCache, LabelMismatch, VariantMismatch, a variant's
 * InvalidImage) or a variant not inspected yet (VariantNotInspected). */
int agent_cache_fits(const struct agent *a, const struct agent_cache *ac, const char **reason,
                     int *compat, char *msg, size_t n);
/* 1 when Materialize serves ac as an empty volume here: usable, no GPU fits for compatibility
 * reasons only, and the policy is Empty (the node status' fallback: Empty). */
int agent_cache_serves_empty(const struct agent *a, const struct agent_cache *ac);
/* The part directories of a store dir of parts (TKM_PART_* bits) into out[3] (static
 * strings): {"triton"} when the Triton cache is at the root, else one per part, sorted. */
size_t agent_parts_names(int parts, const char **out);

/* variants.c: a variant index on this node (docs/agent.md "Variants") */
/* A layer the node's GPUs use: a single image's one layer, or a used variant's.
 * Pointers borrowed from the cache until its result changes. */
struct agent_layer {
    const char *layer;                        /* its digest: the store entry */
    const char *manifest;                     /* the image manifest it is pulled through */
    const struct tkm_triton_summary *summary; /* what its config label says */
    int *label_checked;                       /* the extracted kernels matched the label */
    uint64_t cache_bytes, layer_bytes;
    int parts;   /* TKM_PART_* */
    int variant; /* its index in ac->vars (0 for a single image) */
};
/* Judges every GPU of a variant index's cache into vs (arrays allocated): the pick, then
 * the compat judge on the variant's summary, then one parts layout per node. 1 when a
 * picked variant is not inspected yet (verify the cache again), 0, or -ENOMEM. */
int agent_variants_judge(struct agent_cache *ac, struct agent_verdicts *vs);
/* The layers the node's compatible GPUs use, in GPU order (out: TKM_VARIANTS_MAX). */
size_t agent_cache_layers(struct agent_cache *ac, struct agent_layer *out);
/* The used layer of digest layer (buf: TKM_VARIANTS_MAX, holds the answer), or NULL. */
struct agent_layer *agent_cache_layer_find(struct agent_cache *ac, const char *layer,
                                           struct agent_layer *buf);
/* The summary GPU i was judged against (NULL: none, no variant). */
const struct tkm_triton_summary *agent_verdict_summary(const struct agent_cache *ac, size_t i);
/* The parts bits of a parts annotation ("inductor,triton"). */
int agent_parts_mask(const char *list);

/* cache.c: variant idx of ac's index inspected (res: tkm_triton_job_inspect's, detail a
 * struct tkm_triton_image): it must be the one the index names, agree with the index's
 * annotations (else VariantMismatch) and have one layer; ac->vars[idx] filled. */
struct tkm_oci_job_result;
void agent_variant_take(struct agent_cache *ac, size_t idx, const struct tkm_oci_job_result *res);

/* once.c */
int agent_once_image(struct agent *a);
int agent_once_print(struct agent *a);

/* store.c */
int agent_store_start(struct agent *a, struct tkm_err *err); /* open + GC timer + socket */
void agent_store_stop(struct agent *a);                      /* cancel pulls, close the socket */
void agent_store_close(struct agent *a);                     /* after the loop ended */
void agent_store_prefetch(struct agent *a, struct agent_cache *ac);
void agent_store_gc(struct agent *a, uint64_t extra);
int agent_store_extracted(struct agent *a, const char *layer);
int agent_ready(const struct agent *a);
int agent_socket_start(struct agent *a, struct tkm_err *err);

/* metrics.c: /metrics, /healthz, /readyz */
struct tkm_metrics;
struct tkm_metric;
struct tkm_httpd;
int agent_metrics_start(struct agent *a, struct tkm_err *err);
void agent_metrics_extraction(struct agent *a, double seconds);
/* Counts a failed Materialize or prefetch by its CamelCase reason. */
void agent_metrics_materialize_failure(struct agent *a, const char *reason);
/* Counts a volume served empty (the Empty fallback) by its CamelCase reason. */
void agent_metrics_empty_volume(struct agent *a, const char *reason);
/* One released volume's scratch counts: pods served/compiled and per part
 * compiles, labelled by the pod's namespace and the cache key. */
void agent_metrics_compiles(struct agent *a, const char *ns, const char *cache,
                            const struct agent_scratch *s);
/* Creates those series at 0 when a volume of the cache is first tracked, so
 * that Prometheus' increase() counts the first pod released after it (a series
 * born at 1 loses its first increment, and TKMCacheStale wants >= 3 pods). */
void agent_metrics_compiles_open(struct agent *a, const char *ns, const char *cache);
/* A cache no longer served here (deleted, or being deleted): its compiles
 * summary and every series labelled with its key (all pod namespaces) go, so
 * /metrics does not keep a deleted cache's counters until the agent restarts. */
void agent_forget_compiles(struct agent *a, const char *cache);
void agent_metrics_free(struct agent *a); /* after the loop ended */

/* stop.c: stops with exit status code (the first stop's wins); the same as
 * SIGTERM with code 0. agent_on_stop: struct tkm_daemon_opts.on_stop. */
void agent_stop(struct agent *a, int code);
void agent_on_stop(struct tkm_daemon *d, int signum, void *data);

#endif
