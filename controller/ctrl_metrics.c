/*
 * ctrl_metrics.c - tkm-controller's Prometheus metrics (lib/metrics) and
 * its readiness check. Histograms are observed as reconciles finish and keys
 * leave the queue; every other value is read from the controller at scrape
 * time (collect callbacks), so nothing is counted twice.
 *
 *   tkm_controller_reconcile_total{kind}            reconciles finished
 *   tkm_controller_reconcile_errors_total{kind}     of them, failed (retried with backoff)
 *   tkm_controller_reconcile_duration_seconds{kind} histogram, queue pop to done
 *   tkm_controller_workqueue_depth                  keys ready to run
 *   tkm_controller_workqueue_waiting                keys waiting for a delay (backoff, timers)
 *   tkm_controller_workqueue_processing             keys being reconciled
 *   tkm_controller_workqueue_latency_seconds        histogram, add to pop
 *   tkm_controller_watch_restarts_total{resource}   watch requests started again (timeouts,
 *                                                   errors, apiserver restarts)
 *   tkm_controller_watch_relists_total{resource}    lists after 410 Gone (etcd compaction)
 *   tkm_controller_caches{condition,status}         caches by their last computed conditions
 *   tkm_controller_status_writes_total, _finalizer_writes_total, _registry_operations_total,
 *   tkm_controller_verifications_total, _events_total
 *   tkm_controller_node_status_objects, tkm_controller_node_status_entries, tkm_controller_nodes
 *   tkm_controller_leader                           1 while this replica acts
 *   tkm_controller_verification_failed_caches       caches whose signature search failed
 *   tkm_controller_prefetch_granted{namespace,cache} nodes holding a pull slot (staged prefetch,
 *                                                   tkm-config prefetchSlots above 0)
 *   tkm_controller_prefetch_waiting{namespace,cache} nodes waiting for one
 * plus the process_* families and tkm_build_info.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/metrics.h>
#include <k8s/informer.h>
#include <k8s/watch.h>
#include <k8s/workqueue.h>

#include "ctrl-int.h"

static const char *const kinds[3] = {"TritonKernelCache", "TritonKernelCacheCluster", "Node"};
static const char *const conds[4] = {"Verified", "Ready", "Progressing", "Degraded"};

struct ctrl_prom {
    struct ctrl *c;
    struct tkm_metric *dur, *lat;
};

static void set0(struct tkm_metric *m, double v)
{
    tkm_metric_set(m, NULL, v);
}

static void c_reconciles(struct tkm_metric *m, void *data)
{
    struct ctrl *c = data;
    for (int k = 0; k < 3; k++) {
        const char *v[] = {kinds[k]};
        tkm_metric_set(m, v, (double)c->m.reconciles[k]);
    }
}

static void c_errors(struct tkm_metric *m, void *data)
{
    struct ctrl *c = data;
    for (int k = 0; k < 3; k++) {
        const char *v[] = {kinds[k]};
        tkm_metric_set(m, v, (double)c->m.errors[k]);
    }
}

static void c_queue(struct tkm_metric *m, void *data)
{
    struct ctrl *c = data;
    set0(m, c->q ? (double)k8s_workqueue_len(c->q) : 0);
}
static void c_waiting(struct tkm_metric *m, void *data)
{
    struct ctrl *c = data;
    set0(m, c->q ? (double)k8s_workqueue_waiting(c->q) : 0);
}
static void c_processing(struct tkm_metric *m, void *data)
{
    struct ctrl *c = data;
    set0(m, c->q ? (double)k8s_workqueue_processing(c->q) : 0);
}

/* The six watches: the two cache informers, tkm-config, node statuses (2), Nodes. */
static void each_watch(struct ctrl *c, struct tkm_metric *m, int relists)
{
    static const char *const names[6] = {"tritonkernelcaches",
                                         "tritonkernelcacheclusters",
                                         "configmaps",
                                         "tritonkernelcachenodestatuses",
                                         "tritonkernelcachenodestatusclusters",
                                         "nodes"};
    for (int i = 0; i < 6; i++) {
        const struct k8s_watch *w =
            i < 3 ? (c->inf[i] ? k8s_informer_watch(c->inf[i]) : NULL) : c->w[i - 3];
        if (!w)
            continue;
        const struct k8s_watch_stats *st = k8s_watch_get_stats(w);
        const char *v[] = {names[i]};
        double x = relists ? (double)st->relists_410 : st->watches ? (double)st->watches - 1 : 0;
        tkm_metric_set(m, v, x);
    }
}
static void c_restarts(struct tkm_metric *m, void *data)
{
    each_watch(data, m, 0);
}
static void c_relists(struct tkm_metric *m, void *data)
{
    each_watch(data, m, 1);
}

struct cond_count {
    unsigned n[4][3];
};

static int count_conds(const char *key, void *val, void *data)
{
    (void)key;
    struct ctrl_cidx *x = val;
    struct cond_count *cc = data;
    enum tkm_api_cond_status s[4];
    if (!x->rec)
        return 0;
    ctrl_cache_conds(x->rec, s);
    for (int i = 0; i < 4; i++)
        cc->n[i][s[i]]++;
    return 0;
}

static void c_caches(struct tkm_metric *m, void *data)
{
    static const char *const st[3] = {"Unknown", "True", "False"};
    struct ctrl *c = data;
    struct cond_count cc = {0};
    ctrl_map_each(&c->idx.caches, count_conds, &cc);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 3; k++) {
            const char *v[] = {conds[i], st[k]};
            tkm_metric_set(m, v, cc.n[i][k]);
        }
}

static int count_ver_failed(const char *key, void *val, void *data)
{
    (void)key;
    struct ctrl_cidx *x = val;
    unsigned *n = data;
    if (x->rec && ctrl_cache_ver_failed(x->rec))
        (*n)++;
    return 0;
}

static void c_ver_failed(struct tkm_metric *m, void *data)
{
    struct ctrl *c = data;
    unsigned n = 0;
    ctrl_map_each(&c->idx.caches, count_ver_failed, &n);
    set0(m, n);
}

/* Per cache with staged prefetch on: its granted or waiting nodes. */
struct pf_walk {
    struct tkm_metric *m;
    int waiting;
};

static int pf_one(const char *key, void *val, void *data)
{
    struct ctrl_cidx *x = val;
    struct pf_walk *w = data;
    const struct ctrl_grant *g = x->rec ? ctrl_cache_grant(x->rec) : NULL;
    const char *slash = strchr(key, '/');
    uint32_t granted, waiting;
    char ns[256];
    if (!g || !slash)
        return 0;
    snprintf(ns, sizeof ns, "%.*s", (int)(slash - key), key);
    ctrl_grant_counts(g, &granted, &waiting);
    const char *v[] = {ns, slash + 1};
    tkm_metric_set(w->m, v, w->waiting ? waiting : granted);
    return 0;
}

static void c_pf_granted(struct tkm_metric *m, void *data)
{
    struct pf_walk w = {m, 0};
    ctrl_map_each(&((struct ctrl *)data)->idx.caches, pf_one, &w);
}

static void c_pf_waiting(struct tkm_metric *m, void *data)
{
    struct pf_walk w = {m, 1};
    ctrl_map_each(&((struct ctrl *)data)->idx.caches, pf_one, &w);
}

#define SIMPLE(fn, expr)                                                                           \
    static void fn(struct tkm_metric *m, void *data)                                               \
    {                                                                                              \
        struct ctrl *c = data;                                                                     \
        set0(m, (double)(expr));                                                                   \
    }
SIMPLE(c_writes, c->m.status_writes)
SIMPLE(c_fin, c->m.finalizer_writes)
SIMPLE(c_reg, c->m.registry_ops)
SIMPLE(c_ver, c->m.verifications)
SIMPLE(c_events, c->m.events)
SIMPLE(c_labels, c->m.label_patches)
SIMPLE(c_objs, c->idx.objs.count)
SIMPLE(c_entries, c->idx.n_entries)
SIMPLE(c_nodes, c->idx.nodes.count)
SIMPLE(c_leader, !c->stopping && (!c->lease || c->leading))

struct fam {
    enum tkm_metric_type type;
    const char *name, *help;
    const char *const *labels;
    tkm_metric_collect_fn collect;
};

int ctrl_prom_new(struct ctrl *c, struct tkm_metrics *reg, struct ctrl_prom **out,
                  struct tkm_err *err)
{
    static const char *const kl[] = {"kind", NULL};
    static const char *const rl[] = {"resource", NULL};
    static const char *const cl[] = {"condition", "status", NULL};
    static const char *const pl[] = {"namespace", "cache", NULL};
    static const double lat[] = {0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};
    const struct fam fams[] = {
        {TKM_METRIC_COUNTER, "tkm_controller_reconcile_total", "Reconciles finished.", kl,
         c_reconciles},
        {TKM_METRIC_COUNTER, "tkm_controller_reconcile_errors_total",
         "Reconciles that failed and were retried with backoff.", kl, c_errors},
        {TKM_METRIC_GAUGE, "tkm_controller_workqueue_depth", "Keys ready to be reconciled.", NULL,
         c_queue},
        {TKM_METRIC_GAUGE, "tkm_controller_workqueue_waiting",
         "Keys waiting for a delay (backoff, timeouts).", NULL, c_waiting},
        {TKM_METRIC_GAUGE, "tkm_controller_workqueue_processing", "Keys being reconciled.", NULL,
         c_processing},
        {TKM_METRIC_COUNTER, "tkm_controller_watch_restarts_total",
         "Watch requests started again after the first (timeouts, errors, apiserver restarts).", rl,
         c_restarts},
        {TKM_METRIC_COUNTER, "tkm_controller_watch_relists_total",
         "Lists after 410 Gone (the resourceVersion was compacted).", rl, c_relists},
        {TKM_METRIC_GAUGE, "tkm_controller_caches",
         "Caches by the status of each condition as last computed.", cl, c_caches},
        {TKM_METRIC_COUNTER, "tkm_controller_status_writes_total",
         "Cache status writes (server-side apply).", NULL, c_writes},
        {TKM_METRIC_COUNTER, "tkm_controller_finalizer_writes_total",
         "Finalizer additions and removals.", NULL, c_fin},
        {TKM_METRIC_COUNTER, "tkm_controller_registry_operations_total",
         "Registry operations started (resolve, verify, inspect).", NULL, c_reg},
        {TKM_METRIC_COUNTER, "tkm_controller_verifications_total",
         "Signature searches that reported.", NULL, c_ver},
        {TKM_METRIC_GAUGE, "tkm_controller_verification_failed_caches",
         "Caches whose signature search failed (Verified False, not VerificationDisabled).", NULL,
         c_ver_failed},
        {TKM_METRIC_COUNTER, "tkm_controller_events_total", "Events emitted.", NULL, c_events},
        {TKM_METRIC_COUNTER, "tkm_controller_node_label_patches_total",
         "Node patches of the cache labels (one per node and change, several caches in one).", NULL,
         c_labels},
        {TKM_METRIC_GAUGE, "tkm_controller_node_status_objects",
         "Node status objects in the index.", NULL, c_objs},
        {TKM_METRIC_GAUGE, "tkm_controller_node_status_entries",
         "Per-cache entries of node status objects in the index.", NULL, c_entries},
        {TKM_METRIC_GAUGE, "tkm_controller_nodes", "Nodes seen.", NULL, c_nodes},
        {TKM_METRIC_GAUGE, "tkm_controller_leader", "1 while this replica acts.", NULL, c_leader},
        {TKM_METRIC_GAUGE, "tkm_controller_prefetch_granted",
         "Nodes holding a pull slot of the cache's pinned digest (staged prefetch; namespace \"\" "
         "for the cluster kind).",
         pl, c_pf_granted},
        {TKM_METRIC_GAUGE, "tkm_controller_prefetch_waiting",
         "Nodes waiting for a pull slot of the cache's pinned digest (staged prefetch).", pl,
         c_pf_waiting},
    };
    struct ctrl_prom *p = calloc(1, sizeof *p);
    int rc;
    if (!p)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    p->c = c;
    for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
        struct tkm_metric_opts o = {.name = fams[i].name,
                                    .help = fams[i].help,
                                    .labels = fams[i].labels,
                                    .collect = fams[i].collect,
                                    .collect_data = c};
        if ((rc = tkm_metrics_add(reg, fams[i].type, &o, NULL, err)) < 0)
            goto fail;
    }
    struct tkm_metric_opts d = {.name = "tkm_controller_reconcile_duration_seconds",
                                .help =
                                    "Time from a key leaving the queue to its reconcile ending.",
                                .labels = kl};
    struct tkm_metric_opts l = {.name = "tkm_controller_workqueue_latency_seconds",
                                .help = "Time a key waited in the queue before its reconcile.",
                                .buckets = lat,
                                .nbuckets = sizeof lat / sizeof lat[0]};
    if ((rc = tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &d, &p->dur, err)) < 0 ||
        (rc = tkm_metrics_add(reg, TKM_METRIC_HISTOGRAM, &l, &p->lat, err)) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    free(p);
    return rc;
}

void ctrl_prom_reconciled(struct ctrl_prom *p, int kind, double seconds)
{
    if (!p)
        return;
    const char *v[] = {kinds[kind]};
    tkm_metric_observe(p->dur, v, seconds);
}

void ctrl_prom_queued(struct ctrl_prom *p, double seconds)
{
    if (p)
        tkm_metric_observe(p->lat, NULL, seconds);
}

int ctrl_ready_check(void *data, char *reason, size_t n)
{
    struct ctrl *c = data;
    static const char *const names[6] = {
        "TritonKernelCache",           "TritonKernelCacheCluster",           "ConfigMap tkm-config",
        "TritonKernelCacheNodeStatus", "TritonKernelCacheNodeStatusCluster", "Node"};
    for (int i = 0; i < 3; i++) {
        if (!c->inf[i] || !k8s_informer_has_synced(c->inf[i])) {
            snprintf(reason, n, "the %s informer has not synced", names[i]);
            return 1;
        }
        if (!c->w_synced[i]) {
            snprintf(reason, n, "the %s watch has not synced", names[3 + i]);
            return 1;
        }
    }
    return 0;
}
