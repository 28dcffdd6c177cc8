/*
 * metrics.c - /metrics, /healthz and /readyz on lib/httpd (one server when
 * both bind addresses are equal, two otherwise, none for "0").
 * The names are listed in docs/agent.md.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tkm/httpd.h>
#include <tkm/log.h>
#include <tkm/metrics.h>

#include "agent.h"

static void collect_caches(struct tkm_metric *m, void *data)
{
    struct agent *a = data;
    double usable = 0, failed = 0, pending = 0;
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next) {
        if (agent_cache_usable(ac))
            usable++;
        else if (ac->reason[0] && strcmp(ac->reason, "DigestNotPinned") != 0)
            failed++;
        else
            pending++;
    }
    tkm_metric_set(m, (const char *[]){"usable"}, usable);
    tkm_metric_set(m, (const char *[]){"failed"}, failed);
    tkm_metric_set(m, (const char *[]){"pending"}, pending);
}

/* Caches whose prefetch waits for a pull slot (staged prefetch). */
static void collect_prefetch_waiting(struct tkm_metric *m, void *data)
{
    struct agent *a = data;
    double n = 0;
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        n += ac->prefetch == TKM_API_PREFETCH_WAITING;
    tkm_metric_set(m, NULL, n);
}

static void collect_store(struct tkm_metric *m, void *data)
{
    struct agent *a = data;
    struct tkm_store_stats st = {0};
    struct tkm_err e = {0};
    if (!a->state || tkm_store_state_stats(a->state, &st, &e) < 0)
        return;
    if (m == a->m_store_bytes)
        tkm_metric_set(m, NULL, (double)st.bytes);
    else if (m == a->m_store_entries)
        tkm_metric_set(m, NULL, (double)st.entries);
    else if (m == a->m_store_refs)
        tkm_metric_set(m, NULL, (double)st.refs);
}

static void collect_counters(struct tkm_metric *m, void *data)
{
    struct agent *a = data;
    if (m == a->m_registry_errors)
        tkm_metric_set(m, NULL, (double)a->registry_errors);
    else if (m == a->m_watch_restarts)
        tkm_metric_set(m, NULL, (double)a->watch_restarts);
    else if (m == a->m_status_writes)
        tkm_metric_set(m, NULL, (double)a->status_writes);
    else if (m == a->m_extractions)
        tkm_metric_set(m, NULL, (double)a->extractions);
    else if (m == a->m_extract_errors)
        tkm_metric_set(m, NULL, (double)a->extract_errors);
    else if (m == a->m_gpus)
        tkm_metric_set(m, NULL, (double)a->gpus.n);
    else if (m == a->m_store_budget)
        tkm_metric_set(m, NULL, (double)a->o.store_budget);
    else if (m == a->m_status_write_time)
        tkm_metric_set(m, NULL, a->status_write_time);
    else if (m == a->m_socket_refused)
        tkm_metric_set(m, NULL, (double)agent_rpc_server_refused(a->rpc));
    else if (m == a->m_socket_idle_closed)
        tkm_metric_set(m, NULL, (double)agent_rpc_server_idle_closed(a->rpc));
}

static int add(struct agent *a, enum tkm_metric_type t, const char *name, const char *help,
               const char *const *labels, tkm_metric_collect_fn fn, struct tkm_metric **out,
               struct tkm_err *err)
{
    struct tkm_metric_opts o = {
        .name = name, .help = help, .labels = labels, .collect = fn, .collect_data = a};
    if (t == TKM_METRIC_HISTOGRAM) {
        o.buckets = TKM_METRICS_SLOW_BUCKETS;
        o.nbuckets = sizeof TKM_METRICS_SLOW_BUCKETS / sizeof TKM_METRICS_SLOW_BUCKETS[0];
    }
    return tkm_metrics_add(a->metrics, t, &o, out, err);
}

static int metrics_register(struct agent *a, struct tkm_err *err)
{
    static const char *const state[] = {"state", NULL}, *const reason[] = {"reason", NULL};
    static const char *const nscache[] = {"namespace", "cache", NULL}, *const nscachepart[] = {
                                                                           "namespace", "cache",
                                                                           "part", NULL};
    int rc;
    if ((rc = tkm_metrics_new(&a->metrics, err)) < 0 ||
        (rc = tkm_metrics_add_standard(a->metrics, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_caches",
                  "Caches this agent knows, by state (usable here, failed with a reason, "
                  "pending: no pinned digest or being verified).",
                  state, collect_caches, NULL, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_prefetch_waiting",
                  "Caches whose prefetch waits for a pull slot from tkm-controller (tkm-config "
                  "prefetchSlots).",
                  NULL, collect_prefetch_waiting, NULL, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_gpus", "GPUs the last probe found.", NULL,
                  collect_counters, &a->m_gpus, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_store_bytes",
                  "Bytes of the extracted caches in the store.", NULL, collect_store,
                  &a->m_store_bytes, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_store_budget_bytes",
                  "The store's disk budget (--store-budget).", NULL, collect_counters,
                  &a->m_store_budget, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_store_entries", "Extracted digests in the store.",
                  NULL, collect_store, &a->m_store_entries, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_store_references",
                  "Volume references held on store entries.", NULL, collect_store, &a->m_store_refs,
                  err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_extractions_total",
                  "Layers extracted into the store.", NULL, collect_counters, &a->m_extractions,
                  err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_extraction_errors_total",
                  "Extractions that failed (disk full, malicious layer, ...).", NULL,
                  collect_counters, &a->m_extract_errors, err)) < 0 ||
        (rc = add(a, TKM_METRIC_HISTOGRAM, "tkm_agent_extraction_seconds",
                  "Time from the start of a pull to the extracted entry.", NULL, NULL,
                  &a->m_extract_seconds, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_materialize_failures_total",
                  "Materialize calls and prefetches that failed after admission, by reason "
                  "(StoreFull, ExtractFailed, RegistryUnreachable, ...): the node status keeps "
                  "each cache's last one.",
                  reason, NULL, &a->m_mat_failures, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_empty_volumes_total",
                  "Volumes served as an empty writable cache because no variant of the cache "
                  "fits this node and its policy (whenIncompatible) is Empty, by reason "
                  "(NoVariant, ArchMismatch, ...).",
                  reason, NULL, &a->m_empty_volumes, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_pods_served_total",
                  "Volumes released with a scratch count from tkm-csi, by the pod's namespace "
                  "and the cache.",
                  nscache, NULL, &a->m_pods_served, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_pods_compiled_total",
                  "Of those, the pods that compiled at least one kernel or entry beside the "
                  "cache (a stale cache when it grows).",
                  nscache, NULL, &a->m_pods_compiled, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_pod_compiles_total",
                  "Kernels or entries the pods compiled beside the cache, by part (triton, "
                  "inductor, vllm).",
                  nscachepart, NULL, &a->m_pod_compiles, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_registry_errors_total",
                  "Registry requests that failed transiently (unreachable, 5xx).", NULL,
                  collect_counters, &a->m_registry_errors, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_watch_restarts_total",
                  "Watches that failed and were restarted.", NULL, collect_counters,
                  &a->m_watch_restarts, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_status_writes_total",
                  "Node status applies the apiserver accepted.", NULL, collect_counters,
                  &a->m_status_writes, err)) < 0 ||
        (rc = add(a, TKM_METRIC_GAUGE, "tkm_agent_last_status_write_timestamp_seconds",
                  "Unix time of the last node status apply the apiserver accepted (0: none yet).",
                  NULL, collect_counters, &a->m_status_write_time, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_socket_refused_connections_total",
                  "Connections to the agent's socket closed at once: --socket-max-connections "
                  "were open.",
                  NULL, collect_counters, &a->m_socket_refused, err)) < 0 ||
        (rc = add(a, TKM_METRIC_COUNTER, "tkm_agent_socket_idle_closed_total",
                  "Connections to the agent's socket closed after --socket-idle-timeout "
                  "without a call.",
                  NULL, collect_counters, &a->m_socket_idle_closed, err)) < 0)
        return rc;
    return 0;
}

static int check_ready(void *data, char *reason, size_t n)
{
    struct agent *a = data;
    if (agent_ready(a))
        return 0;
    snprintf(reason, n, "%s",
             !a->state       ? "the store is not open"
             : !a->probed    ? "the GPUs are not probed yet"
             : !a->cfg_ready ? "tkm-config is not known yet"
                             : "informers not synced");
    return 1;
}

static int check_alive(void *data, char *reason, size_t n)
{
    struct agent *a = data;
    (void)reason;
    (void)n;
    return a->stopping;
}

void agent_metrics_extraction(struct agent *a, double seconds)
{
    if (a->m_extract_seconds)
        tkm_metric_observe(a->m_extract_seconds, NULL, seconds);
}

void agent_metrics_materialize_failure(struct agent *a, const char *reason)
{
    if (a->m_mat_failures)
        tkm_metric_add(a->m_mat_failures, (const char *[]){reason}, 1);
}

void agent_metrics_empty_volume(struct agent *a, const char *reason)
{
    if (a->m_empty_volumes)
        tkm_metric_add(a->m_empty_volumes, (const char *[]){reason}, 1);
}

void agent_metrics_compiles_open(struct agent *a, const char *ns, const char *cache)
{
    if (!a->m_pods_served)
        return;
    tkm_metric_add(a->m_pods_served, (const char *[]){ns, cache}, 0);
    tkm_metric_add(a->m_pods_compiled, (const char *[]){ns, cache}, 0);
    for (int i = 0; i < 3; i++)
        tkm_metric_add(
            a->m_pod_compiles,
            (const char *[]){ns, cache, (const char *[]){"triton", "inductor", "vllm"}[i]}, 0);
}

void agent_metrics_compiles(struct agent *a, const char *ns, const char *cache,
                            const struct agent_scratch *s)
{
    uint64_t ind = (uint64_t)s->inductor_fxgraph + s->inductor_aotautograd;
    if (!a->m_pods_served || !s->present)
        return;
    tkm_metric_add(a->m_pods_served, (const char *[]){ns, cache}, 1);
    tkm_metric_add(a->m_pods_compiled, (const char *[]){ns, cache},
                   s->triton_kernels || ind || s->vllm_entries);
    tkm_metric_add(a->m_pod_compiles, (const char *[]){ns, cache, "triton"},
                   (double)s->triton_kernels);
    tkm_metric_add(a->m_pod_compiles, (const char *[]){ns, cache, "inductor"}, (double)ind);
    tkm_metric_add(a->m_pod_compiles, (const char *[]){ns, cache, "vllm"}, (double)s->vllm_entries);
}

void agent_forget_compiles(struct agent *a, const char *cache)
{
    /* every family labelled by cache: {namespace, cache} and {namespace, cache, part} */
    const char *const nscache[] = {NULL, cache, NULL};
    struct tkm_metric *const fams[] = {a->m_pods_served, a->m_pods_compiled, a->m_pod_compiles};
    agent_compiles_drop(&a->compiles, cache);
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
        if (fams[i])
            tkm_metric_remove(fams[i], nscache);
}

int agent_metrics_start(struct agent *a, struct tkm_err *err)
{
    int rc = metrics_register(a, err);
    if (rc < 0)
        return rc;
    int same = !strcmp(a->o.metrics_addr, a->o.health_addr);
    if ((rc = tkm_httpd_new(a->loop, a->o.metrics_addr, NULL, &a->httpd_metrics, err)) < 0)
        return rc;
    if (!same && (rc = tkm_httpd_new(a->loop, a->o.health_addr, NULL, &a->httpd_health, err)) < 0)
        return rc;
    struct tkm_httpd *h = same ? a->httpd_metrics : a->httpd_health;
    if ((rc = tkm_metrics_serve(a->metrics, a->httpd_metrics, "/metrics", err)) < 0 ||
        (rc = tkm_httpd_add_check(h, "/healthz", "loop", check_alive, a, err)) < 0 ||
        (rc = tkm_httpd_add_check(h, "/readyz", "agent", check_ready, a, err)) < 0)
        return rc;
    if (a->httpd_metrics)
        tkm_info("metrics on http://%s/metrics", tkm_httpd_addr(a->httpd_metrics));
    if (h)
        tkm_info("probes on http://%s/healthz and /readyz", tkm_httpd_addr(h));
    return 0;
}

void agent_metrics_free(struct agent *a)
{
    tkm_metrics_free(a->metrics);
    a->metrics = NULL;
}
