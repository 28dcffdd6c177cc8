/*
 * ctrl_core.c - the controller object: informers for the cache kinds and the
 * ConfigMap tkm-config, compact watches for the node status kinds and the
 * Nodes, the one work queue, leadership, and the metrics text.
 *
 * Events map to the caches they concern: a cache event queues that cache; a
 * node status event queues only the caches whose entries changed (the
 * index in ctrl_nodes.c diffs the entries); a Node that vanishes queues a
 * node GC key; tkm-config queues every cache (its verification inputs
 * changed; the policy fingerprint decides whether the registry is asked
 * again). No polling: time-based requeues only for retries and timeouts.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/log.h>
#include <tkm/api/policy.h>
#include <k8s/events.h>
#include <k8s/informer.h>
#include <k8s/watch.h>
#include <k8s/workqueue.h>

#include "ctrl-int.h"

static int leading(const struct ctrl *c)
{
    return !c->stopping && (!c->lease || c->leading);
}

void ctrl_enqueue(struct ctrl *c, const char *qkey)
{
    ctrl_enqueue_after(c, qkey, 0);
}

void ctrl_enqueue_after(struct ctrl *c, const char *qkey, uint64_t delay_ms)
{
    /* Nothing runs before every store has synced: a cache reconciled against
     * a half-filled node index would write wrong counts (and could lose its
     * finalizer); the synced callback queues everything. */
    if (!leading(c) || !c->q || !ctrl_synced(c))
        return;
    if (!tkm_strmap_get(&c->queued_at, qkey)) {
        size_t kl = strlen(qkey) + 1;
        struct ctrl_queued *q = malloc(sizeof *q + kl);
        if (q) {
            q->at = uv_now(c->loop);
            if (tkm_strmap_put(&c->queued_at, memcpy(q->key, qkey, kl), q, NULL) < 0)
                free(q);
        }
    }
    c->m.queue_adds++;
    if (delay_ms)
        k8s_workqueue_add_after(c->q, qkey, delay_ms);
    else
        k8s_workqueue_add(c->q, qkey);
}

/* A TritonKernelCacheCluster is cluster-scoped: its informer key, the
 * name, has no '/'; a TritonKernelCache's is "ns/name". */
static int cluster_key(const char *key)
{
    return !strchr(key, '/');
}

/* Queue key "c:ns/name", or "c:/name" for the cluster kind. */
static void enqueue_cache(struct ctrl *c, const char *key)
{
    char q[600];
    snprintf(q, sizeof q, "c:%s%s", cluster_key(key) ? "/" : "", key);
    ctrl_enqueue(c, q);
}

int64_t ctrl_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Each time the queue drains after status writes: one info line (how many,
 * when the last was answered and when the last node status event came, wall
 * clock ms, so that the time from a node's report to the caches' status
 * splits into the apiserver's delivery, the controller's work and the
 * apiserver's delivery of the result), and malloc_trim. */
static void caught_up(struct ctrl *c)
{
    if (!c->writes_since_idle || k8s_workqueue_len(c->q) || k8s_workqueue_processing(c->q) ||
        k8s_workqueue_waiting(c->q))
        return;
    tkm_info("controller: caught up: %llu status writes, the last answered at %lld ms; last node "
             "status event at %lld ms (wall clock); %llu steps were only the settle wait",
             (unsigned long long)c->writes_since_idle, (long long)c->write_wall_ms,
             (long long)c->ns_event_wall_ms, (unsigned long long)c->m.settle_fast);
    c->writes_since_idle = 0;
    /* The burst's decoded node statuses, status bodies and responses left
     * free chunks all over the heap: give their pages back while idle. */
    malloc_trim(0);
}

void ctrl_done(struct ctrl *c, const char *qkey, int kind, uint64_t t0, int result,
               uint64_t after_ms)
{
    c->m.reconciles[kind]++;
    ctrl_prom_reconciled(c->prom, kind, (double)(uv_now(c->loop) - t0) / 1000.0);
    if (result == K8S_WQ_RETRY)
        c->m.errors[kind]++;
    if (after_ms && result == K8S_WQ_OK)
        k8s_workqueue_done_after(c->q, qkey, after_ms);
    else
        k8s_workqueue_done(c->q, qkey, (enum k8s_wq_result)result);
    caught_up(c);
}

static void handle(struct k8s_workqueue *q, const char *key, void *data)
{
    (void)q;
    struct ctrl *c = data;
    struct ctrl_queued *at = tkm_strmap_del(&c->queued_at, key);
    if (at)
        ctrl_prom_queued(c->prom, (double)(uv_now(c->loop) - at->at) / 1000.0);
    free(at);
    if (!leading(c)) {
        k8s_workqueue_done(c->q, key, K8S_WQ_OK);
        return;
    }
    if (key[0] == 'c' && key[1] == ':')
        ctrl_reconcile_cache(c, key);
    else if (key[0] == 'n' && key[1] == ':')
        ctrl_reconcile_node(c, key);
    else if (key[0] == 'l' && key[1] == ':')
        ctrl_reconcile_labels(c, key);
    else
        k8s_workqueue_done(c->q, key, K8S_WQ_DROP);
}

/* ---- cache informers ------------------------------------------------------------------ */

static void cache_changed(struct ctrl *c, const char *key)
{
    char k[600];
    snprintf(k, sizeof k, "%s%s", cluster_key(key) ? "/" : "", key);
    struct ctrl_cidx *x = ctrl_nodes_cache(&c->idx, k, 0);
    if (x && x->rec)
        ctrl_cache_changed(x->rec);
}

/* One set of handlers for both cache kinds (the key tells them apart). */
static void cache_add(const struct k8s_obj *o, void *data)
{
    enqueue_cache(data, o->key);
}
static void cache_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    if (strcmp(old->resource_version, cur->resource_version) != 0) {
        cache_changed(data, cur->key);
        enqueue_cache(data, cur->key);
    }
}
static void cache_delete(const struct k8s_obj *o, int unknown, void *data)
{
    (void)unknown;
    enqueue_cache(data, o->key);
}
static int enq_cache(const struct k8s_obj *o, void *data)
{
    enqueue_cache(data, o->key);
    return 0;
}

static void enqueue_all(struct ctrl *c)
{
    for (int i = 0; i < 2; i++)
        if (c->inf[i])
            k8s_informer_foreach(c->inf[i], enq_cache, c);
}

static void cfg_set(struct ctrl *c, const struct k8s_obj *o)
{
    struct tkm_api_config cfg = {0};
    struct tkm_err err = {0};
    json_t *j = NULL;
    if (o && k8s_obj_parse(o, &j, &err) < 0) {
        tkm_warn("controller: ConfigMap %s: %s (keeping the previous settings)",
                 TKM_API_CONFIG_NAME, tkm_err_str(&err));
        return;
    }
    if (tkm_api_config_decode(j, &cfg, &err) < 0 ||
        tkm_verify_ctx_reach(c->verify, &cfg, &c->o.reach, &err) < 0) {
        tkm_warn("controller: %s (keeping the previous settings)", tkm_err_str(&err));
        tkm_api_config_release(&cfg);
        json_decref(j);
        return;
    }
    json_decref(j);
    tkm_api_config_floor_default(&cfg, c->o.signature_floor);
    tkm_api_config_release(&c->cfg);
    c->cfg = cfg;
    tkm_verify_ctx_set_pull_deadline(c->verify, cfg.pull_deadline_ms);
    c->cfg_gen++;
    snprintf(c->cfg_rv, sizeof c->cfg_rv, "%s", o ? o->resource_version : "");
    tkm_info("controller: ConfigMap %s/%s %s", c->o.ns, TKM_API_CONFIG_NAME,
             o ? "loaded" : "absent: defaults");
    enqueue_all(c);
}
static void cfg_add(const struct k8s_obj *o, void *data)
{
    cfg_set(data, o);
}
static void cfg_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    if (strcmp(old->resource_version, cur->resource_version) != 0)
        cfg_set(data, cur);
}
static void cfg_delete(const struct k8s_obj *o, int unknown, void *data)
{
    (void)o;
    (void)unknown;
    cfg_set(data, NULL);
}

/* ---- state of caches that are gone ---------------------------------------------------- */

struct prune {
    struct tkm_strmap uids; /* keys borrowed from the informers' objects */
    char **stale;
    size_t n, cap;
};

static int uid_of(const struct k8s_obj *o, void *data)
{
    struct prune *p = data;
    return tkm_strmap_put(&p->uids, o->uid, (void *)1, NULL);
}

static int stale_uid(const char *uid, void *data)
{
    struct prune *p = data;
    if (tkm_strmap_get(&p->uids, uid))
        return 0;
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 16;
        char **v = realloc(p->stale, nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        p->stale = v;
        p->cap = nc;
    }
    return (p->stale[p->n] = strdup(uid)) ? (p->n++, 0) : -ENOMEM;
}

/* Forgets the SQLite rows of caches that no longer exist (deleted without
 * the finalizer's help, e.g. force-removed while the controller was down). */
static void prune_state(struct ctrl *c)
{
    struct prune p = {0};
    if (k8s_informer_foreach(c->inf[0], uid_of, &p) == 0 &&
        k8s_informer_foreach(c->inf[1], uid_of, &p) == 0 &&
        ctrl_state_foreach_uid(c->state, stale_uid, &p) == 0)
        for (size_t i = 0; i < p.n; i++)
            ctrl_state_forget(c->state, p.stale[i]);
    if (p.n)
        tkm_info("controller: forgot the state of %zu cache(s) that no longer exist", p.n);
    for (size_t i = 0; i < p.n; i++)
        free(p.stale[i]);
    free(p.stale);
    tkm_strmap_release(&p.uids);
}

/* Every Node with a label of ours: a cache deleted while the controller
 * was away leaves one that nothing else would look at. */
static void enqueue_labelled(struct ctrl *c)
{
    const char *k;
    void *v;
    for (size_t pos = 0; tkm_strmap_next(&c->idx.nodes, &pos, &k, &v);)
        if (((const struct ctrl_node *)v)->n_labels)
            ctrl_labels_node_changed(c, k);
}

static void synced(void *data)
{
    struct ctrl *c = data;
    if (ctrl_synced(c)) {
        tkm_info("controller: caches synced (%zu caches, %zu cluster caches, %zu node status "
                 "objects, %zu nodes)",
                 k8s_informer_count(c->inf[0]), k8s_informer_count(c->inf[1]), c->idx.objs.count,
                 c->idx.nodes.count);
        enqueue_all(c);
        enqueue_labelled(c);
        ctrl_gc_scan(c);
        if (leading(c))
            prune_state(c);
        malloc_trim(0); /* the lists' transient trees are gone: give the pages back */
    }
}

static void inf_error(int rc, const char *msg, uint64_t delay_ms, void *data)
{
    (void)rc;
    (void)data;
    tkm_warn("controller: watch: %s (retry in %llu ms)", msg, (unsigned long long)delay_ms);
}

/* ---- node status and Node watches -------------------------------------------------------- */

static void w_list_begin(void *data)
{
    struct ctrl_wctx *w = data;
    ctrl_nodes_list_begin(&w->c->idx, w->kind);
}

static void node_event(struct ctrl *c, const struct k8s_watch_event *ev)
{
    int changed = 0;
    if (ctrl_nodes_node_upsert(&c->idx, ev->name, ev->uid, ev->raw, ev->raw_len, &changed) < 0)
        tkm_warn("controller: out of memory indexing Node %s", ev->name);
    else if (changed)
        ctrl_labels_node_changed(c, ev->name);
}

static void w_apply(struct ctrl_wctx *w, const struct k8s_watch_event *ev)
{
    struct ctrl *c = w->c;
    if (w->kind == 2) {
        if (ev->type == K8S_WATCH_DELETED)
            ctrl_nodes_node_remove(&c->idx, ev->name);
        else
            node_event(c, ev);
        return;
    }
    c->ns_event_wall_ms = ctrl_wall_ms();
    if (ev->type == K8S_WATCH_DELETED)
        ctrl_nodes_remove(&c->idx, w->kind, ev->ns, ev->name);
    else if (ctrl_nodes_upsert(&c->idx, w->kind, ev->raw, ev->raw_len, uv_now(c->loop)) < 0)
        tkm_warn("controller: out of memory indexing %s/%s", ev->ns, ev->name);
}

static int w_item(const struct k8s_watch_event *ev, void *data)
{
    w_apply(data, ev);
    return 0;
}

static int w_list_end(const char *rv, void *data)
{
    (void)rv;
    struct ctrl_wctx *w = data;
    ctrl_nodes_list_end(&w->c->idx, w->kind);
    if (w->c->w_synced[w->kind])
        malloc_trim(0); /* a relist (after a 410) parsed every object once more */
    if (!w->c->w_synced[w->kind]) {
        w->c->w_synced[w->kind] = 1;
        synced(w->c);
    }
    return 0;
}

static void w_error(int rc, const char *msg, uint64_t delay_ms, void *data)
{
    inf_error(rc, msg, delay_ms, data);
}

static void idx_changed(const char *cache_key, void *data)
{
    struct ctrl *c = data;
    struct ctrl_cidx *x = ctrl_nodes_cache(&c->idx, cache_key, 0);
    char q[600];
    if (x)
        x->changed_ms = uv_now(c->loop);
    snprintf(q, sizeof q, "c:%s", cache_key);
    ctrl_enqueue(c, q);
}

static void idx_node_entries_changed(const char *node, void *data)
{
    ctrl_labels_node_changed(data, node);
}

static void idx_node_gone(const char *node, void *data)
{
    struct ctrl *c = data;
    char q[300];
    snprintf(q, sizeof q, "n:%s", node);
    ctrl_enqueue(c, q);
}

static void idx_invalid(const struct ctrl_nsobj *o, const char *msg, void *data)
{
    struct ctrl *c = data;
    struct k8s_object_ref ref = {.api_version = TKM_API_GROUP_VERSION,
                                 .kind = o->cluster ? "TritonKernelCacheNodeStatusCluster"
                                                    : "TritonKernelCacheNodeStatus",
                                 .namespace = o->cluster ? NULL : o->ns,
                                 .name = o->node,
                                 .uid = o->uid};
    tkm_warn("controller: ignoring %s %s: %s", ref.kind, o->key, msg);
    if (c->rec && leading(c)) {
        c->m.events++;
        k8s_event_emit(c->rec, &ref, "Warning", "InvalidNodeStatus",
                       "ignored by tkm-controller: %s", msg);
    }
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

int ctrl_init(struct ctrl *c, uv_loop_t *loop, struct k8s_client *client,
              struct tkm_verify_ctx *verify, struct ctrl_state *state, const struct ctrl_opts *o,
              struct tkm_err *err)
{
    memset(c, 0, sizeof *c);
    c->loop = loop;
    c->c = client;
    c->verify = verify;
    c->state = state;
    c->o = *o;
    if (!c->o.cleanup_timeout_ms)
        c->o.cleanup_timeout_ms = 60000;
    if (!c->o.node_gc_grace_ms)
        c->o.node_gc_grace_ms = 5000;
    if (!c->o.workers)
        c->o.workers = 64;
    if (!c->o.status_max_delay_ms)
        c->o.status_max_delay_ms = 10 * c->o.status_min_interval_ms;
    ctrl_nodes_init(&c->idx);
    c->idx.changed = idx_changed;
    c->idx.node_gone = idx_node_gone;
    c->idx.node_entries_changed = idx_node_entries_changed;
    c->idx.invalid = idx_invalid;
    c->idx.data = c;
    for (int i = 0; i < 3; i++)
        c->wctx[i] = (struct ctrl_wctx){c, i};
    struct k8s_workqueue_opts qo = {.workers = c->o.workers};
    return k8s_workqueue_new(loop, &qo, handle, c, &c->q, err);
}

int ctrl_start(struct ctrl *c, struct tkm_err *err)
{
    char sel[128];
    const struct k8s_resource *cres[2] = {&tkm_api_res_tkc, &tkm_api_res_tkcc};
    const struct k8s_informer_handler ch = {.on_add = cache_add,
                                            .on_update = cache_update,
                                            .on_delete = cache_delete,
                                            .on_synced = synced,
                                            .on_error = inf_error};
    int rc;
    for (int i = 0; i < 2; i++) {
        /* nothing here reads managedFields (changes are patches, never a PUT) */
        struct k8s_informer_opts io = {
            .watch = {.res = cres[i]}, .handler = ch, .data = c, .strip_managed_fields = 1};
        if ((rc = k8s_informer_start(c->c, &io, &c->inf[i], err)) < 0)
            return rc;
    }
    snprintf(sel, sizeof sel, "metadata.name=%s", TKM_API_CONFIG_NAME);
    struct k8s_informer_opts co = {
        .watch = {.res = &k8s_res_configmaps, .ns = c->o.ns, .field_selector = sel},
        .handler = {.on_add = cfg_add,
                    .on_update = cfg_update,
                    .on_delete = cfg_delete,
                    .on_synced = synced,
                    .on_error = inf_error},
        .data = c,
        .strip_managed_fields = 1};
    if ((rc = k8s_informer_start(c->c, &co, &c->inf[2], err)) < 0)
        return rc;
    static const struct k8s_watch_handler wh = {.list_begin = w_list_begin,
                                                .list_item = w_item,
                                                .list_end = w_list_end,
                                                .event = w_item,
                                                .error = w_error};
    const struct k8s_resource *wres[3] = {&tkm_api_res_tkcns, &tkm_api_res_tkcnsc, &k8s_res_nodes};
    for (int i = 0; i < 3; i++) {
        /* w_apply reads raw, type, ns, name and uid only: no tree */
        struct k8s_watch_opts wo = {.res = wres[i], .metadata_only = i == 2};
        if ((rc = k8s_watch_start(c->c, &wo, &wh, &c->wctx[i], &c->w[i], err)) < 0)
            return rc;
    }
    return 0;
}

int ctrl_synced(const struct ctrl *c)
{
    for (int i = 0; i < 3; i++)
        if (!c->inf[i] || !k8s_informer_has_synced(c->inf[i]) || !c->w_synced[i])
            return 0;
    return 1;
}

void ctrl_set_leading(struct ctrl *c, int on)
{
    c->leading = on;
    if (!on)
        return;
    tkm_info("controller: leading: reconciling every cache");
    if (ctrl_synced(c))
        prune_state(c);
    enqueue_all(c);
    enqueue_labelled(c);
    ctrl_gc_scan(c);
}
