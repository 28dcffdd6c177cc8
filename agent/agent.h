/*
 * agent.h - tkm-agent's internal interface (the agent sources share it; nothing
 * outside agent/ includes it). docs/agent.md describes the design.
 *
 * One struct agent per process, owned by main() (on its stack). Everything
 * runs on its one libuv loop; only GPU probing and extraction go to the
 * thread pool.
 *
 * Ownership: struct agent owns every struct agent_cache in its list, the
 * registry sessions, the http client, the k8s client and the informers; they
 * are freed by agent_stop() (from the loop) and agent_release(). Strings in
 * struct agent_opts are borrowed from argv/environ for the process lifetime.
 */
#ifndef AGENT_AGENT_H
#define AGENT_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/triton/parts.h>
#include <tkm/api/policy.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/gpu/compat.h>
#include <tkm/gpu/probe.h>
#include <tkm/http.h>
#include <tkm/oci/session.h>
#include <tkm/triton/cache.h>
#include <tkm/store.h>
#include <tkm/store/state.h>
#include <k8s/client.h>
#include <k8s/events.h>
#include <k8s/informer.h>

#include "rpc.h"

#define AGENT_FIELD_MANAGER   "tkm-agent"
#define AGENT_PROBE_PERIOD_MS (5 * 60 * 1000)
#define AGENT_HEARTBEAT_MS    (60 * 1000)
#define AGENT_REVERIFY_MS     (10 * 60 * 1000) /* Secrets are not watched: re-verify this often */
#define AGENT_BACKOFF_MIN_MS  1000
#define AGENT_BACKOFF_MAX_MS  (5 * 60 * 1000)
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
    uint64_t once_timeout_ms; /* --once gives up after this long */
    const char *metrics_addr;
    const char *health_addr;
    struct tkm_gpu_probe_opts probe;
    int verbosity;
    int once;
    const char *output; /* "json" or "yaml" */
    const char *image;  /* --once --image REF|LAYOUT_DIR */
    const char *key;    /* --once --image: a cosign public key file to verify with */
};

/* Parses argv into o (strings borrowed). 0, 1 (--help printed: exit 0), or
 * -EINVAL after printing the error to stderr. */
int agent_opts_parse(struct agent_opts *o, int argc, char **argv);
/* "10Gi", "512Mi", "1000000" -> bytes; "10m", "30s", "1h" -> ms. 0 or -EINVAL. */
int agent_parse_size(const char *s, uint64_t *out);
int agent_parse_duration(const char *s, uint64_t *out_ms);

/* The outcome of one cache on this node. Owned strings. */
struct agent_verdicts {
    int judged; /* inspected and the GPUs judged */
    struct tkm_compat_verdict *v;
    size_t n;
};

enum agent_cache_state {
    AGENT_CS_PENDING = 0, /* no pinned digest yet */
    AGENT_CS_RUNNING,     /* creds -> inspect -> policy -> signature -> judge */
    AGENT_CS_BACKOFF,     /* a transient failure: retried on a timer */
    AGENT_CS_DONE,        /* a result (usable or with a reason) */
};

struct agent;
struct agent_run;

/* One TritonKernelCache / TritonKernelCacheCluster as the agent knows it:
 * the decoded object (a compact struct, not the JSON) and the result. */
struct agent_cache {
    struct agent_cache *next;
    struct agent *a;
    char *key; /* "ns/name", or "name" for the cluster kind */
    struct tkm_api_cache c;
    char *inputs; /* spec JSON + resolved digest: a change re-verifies */
    enum agent_cache_state state;
    struct agent_run *run; /* in flight, or NULL */
    uv_timer_t *timer;     /* backoff / periodic re-verify (owned, closed on free) */
    uint64_t backoff_ms;
    uint64_t verified_at_ms;
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
    struct tkm_oci_session *session; /* the registry session it was inspected through */
    int label_checked;               /* the extracted kernels matched the label (this process) */
    struct agent_verdicts verdicts;
    char judged_at[32];
    /* the image's Inductor part (cache.inductor.image/summary), judged per GPU
     * beside the Triton summary; a malformed label leaves the facts empty, so
     * every GPU is refused (fail closed) */
    int has_inductor;
    struct tkm_inductor_facts inductor;
};

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

struct agent_session {
    struct agent_session *next;
    char *host;
    char *auth; /* the dockerconfigjson the session was made with, "" anonymous */
    struct tkm_oci_session *s;
};

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
    struct agent_session *sessions;
    struct agent_cache *caches;
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
    uv_timer_t probe_timer, flush_timer, node_timer, shutdown_timer;
    int shutdown_polls;
    uv_signal_t sig_term, sig_int, sig_hup;
    int flush_pending;
    uint64_t flush_due_ms;
    uint64_t write_backoff_ms;
    uint64_t write_retry_ms; /* tkm_now_ms() before which no write starts (backoff), or 0 */
    int stopping;
    int exit_code;
    /* --once --image REF */
    struct tkm_oci_session *once_session;
    /* the store and the socket */
    struct tkm_store *store;
    struct tkm_store_state *state;
    struct agent_rpc_server *rpc;
    struct agent_pull *pulls;
    struct agent_vol *vols;
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
        *m_status_writes, *m_store_budget, *m_status_write_time;
    uint64_t registry_errors, watch_restarts, status_writes;
    double status_write_time; /* wall clock (Unix seconds) of the last accepted status apply */
};

/* gpu.c: probes on the thread pool; on change re-judges every cache. */
int agent_gpu_start(struct agent *a);
void agent_gpu_probe(struct agent *a);
void agent_gpus_release(struct agent *a);

/* cache.c */
int agent_caches_start(struct agent *a, struct tkm_err *err);
void agent_cache_kick(struct agent_cache *ac); /* (re)start the pipeline */
void agent_cache_free(struct agent_cache *ac);
void agent_cache_rejudge(struct agent_cache *ac);
void agent_caches_rejudge_all(struct agent *a);
void agent_caches_reverify_all(struct agent *a);
/* --once: prints and stops when everything is synced and judged. */
void agent_once_check(struct agent *a);
struct agent_cache *agent_cache_find(struct agent *a, int cluster, const char *ns,
                                     const char *name);
/* Decodes an object into a new or existing entry; -EPROTO with err for a bad object. */
int agent_cache_upsert_json(struct agent *a, const char *json, size_t len, struct agent_cache **out,
                            struct tkm_err *err);
void agent_cache_remove(struct agent *a, const char *key);
/* The registry session for host with auth bytes (NULL/"": anonymous). */
int agent_session_get(struct agent *a, const char *host, const char *auth,
                      struct tkm_oci_session **out, struct tkm_err *err);

/* sig.c: the one signature step (swap point for tkm_sig_job_verify). cb gets
 * rc 0 (verified, desc filled) or rc < 0 with a CamelCase reason and err. */
typedef void (*agent_sig_cb)(int rc, const char *reason, const char *desc,
                             const struct tkm_err *err, void *data);
struct agent_sig;
int agent_sig_verify(struct tkm_oci_session *s, const char *repo, const char *digest,
                     const struct tkm_sig_policy *pol, agent_sig_cb cb, void *data,
                     struct agent_sig **out, struct tkm_err *err);
void agent_sig_cancel(struct agent_sig *v);

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
/* CamelCase reason for a compat verdict's sentence. */
const char *agent_compat_reason(const char *sentence);

/* once.c */
int agent_once_image(struct agent *a);
int agent_once_print(struct agent *a);

/* store.c */
int agent_store_open(struct agent *a, struct tkm_err *err);
int agent_store_start(struct agent *a, struct tkm_err *err); /* open + GC timer + socket */
void agent_store_stop(struct agent *a);                      /* cancel pulls, close the socket */
void agent_store_close(struct agent *a);                     /* after the loop ended */
void agent_store_prefetch(struct agent *a, struct agent_cache *ac);
void agent_store_gc(struct agent *a, uint64_t extra);
int agent_store_extracted(struct agent *a, const char *layer);
int agent_ready(const struct agent *a);
int agent_socket_start(struct agent *a, struct tkm_err *err);
struct agent_vol *agent_vol_find(struct agent *a, const char *volume_id);

/* metrics.c: /metrics, /healthz, /readyz */
struct tkm_metrics;
struct tkm_metric;
struct tkm_httpd;
int agent_metrics_start(struct agent *a, struct tkm_err *err);
void agent_metrics_extraction(struct agent *a, double seconds);
void agent_metrics_stop(struct agent *a); /* servers closed (on the loop) */
void agent_metrics_free(struct agent *a); /* after the loop ended */

/* main.c */
void agent_stop(struct agent *a, int code);

#endif
