/*
 * ctrl_gc.c - node statuses of Nodes that are gone.
 *
 * Node status objects carry an ownerReference to their Node, so the garbage
 * collector removes them; the controller does it too (belt and braces: no
 * garbage collector runs in some clusters, and an ownerReference written
 * with a stale uid is never collected). Queue key "n:<node>": when the Node
 * is absent from the Node watch (synced), every node status object named
 * after it that has been known for longer than the grace period is deleted
 * with a uid precondition (a recreated object is left alone).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>
#include <k8s/workqueue.h>

#include "ctrl-int.h"

struct gc_run {
    struct ctrl *c;
    const char *node;
    uint64_t now, wait_ms;
    unsigned started;
    char qkey[300];
    uint64_t t0;
};

static void del_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct gc_run *g = data;
    char line[512];
    if (rc < 0 && rc != -ENOENT && rc != -ESTALE && rc != -EEXIST)
        tkm_warn("controller: deleting node status of %s: %s", g->node,
                 k8s_status_str(st, line, sizeof line));
    if (--g->started == 0) {
        ctrl_done(g->c, g->qkey, 2, g->t0, K8S_WQ_OK, 0);
        free(g);
    }
}

static int gc_obj(const char *key, void *val, void *data)
{
    (void)key;
    struct ctrl_nsobj *o = val;
    struct gc_run *g = data;
    if (strcmp(o->node, g->node) != 0)
        return 0;
    uint64_t age = g->now - o->seen_ms;
    if (age < g->c->o.node_gc_grace_ms) {
        uint64_t w = g->c->o.node_gc_grace_ms - age + 50;
        if (!g->wait_ms || w < g->wait_ms)
            g->wait_ms = w;
        return 0;
    }
    struct k8s_delete_opts d = {.precondition_uid = o->uid[0] ? o->uid : NULL};
    if (k8s_delete_async(g->c->c, o->cluster ? &tkm_api_res_tkcnsc : &tkm_api_res_tkcns,
                         o->cluster ? NULL : o->ns, o->node, &d, del_done, g) == 0) {
        g->started++;
        tkm_info("controller: node %s is gone: deleting %s %s%s%s", g->node,
                 o->cluster ? "TritonKernelCacheNodeStatusCluster" : "TritonKernelCacheNodeStatus",
                 o->ns, o->cluster ? "" : "/", o->node);
    }
    return 0;
}

void ctrl_reconcile_node(struct ctrl *c, const char *qkey)
{
    const char *node = qkey + 2;
    uint64_t t0 = uv_now(c->loop);
    if ((c->lease && !c->leading) || c->stopping || tkm_strmap_get(&c->idx.nodes, node)) {
        ctrl_done(c, qkey, 2, t0, K8S_WQ_OK, 0);
        return;
    }
    if (!c->w_synced[2]) {
        ctrl_done(c, qkey, 2, t0, K8S_WQ_OK, 1000);
        return;
    }
    struct gc_run *g = calloc(1, sizeof *g);
    if (!g) {
        ctrl_done(c, qkey, 2, t0, K8S_WQ_RETRY, 0);
        return;
    }
    g->c = c;
    g->now = t0;
    g->t0 = t0;
    snprintf(g->qkey, sizeof g->qkey, "%s", qkey);
    g->node = g->qkey + 2;
    g->started = 1; /* held until the loop below is over */
    ctrl_map_each(&c->idx.objs, gc_obj, g);
    if (g->wait_ms) {
        /* some objects are too young: look again later (after the deletes) */
        k8s_workqueue_add_after(c->q, qkey, g->wait_ms);
    }
    del_done(0, NULL, NULL, g);
}

static int scan_obj(const char *key, void *val, void *data)
{
    (void)key;
    struct ctrl *c = data;
    struct ctrl_nsobj *o = val;
    char qkey[300];
    if (!tkm_strmap_get(&c->idx.nodes, o->node)) {
        snprintf(qkey, sizeof qkey, "n:%s", o->node);
        ctrl_enqueue(c, qkey);
    }
    return 0;
}

void ctrl_gc_scan(struct ctrl *c)
{
    if (!c->w_synced[0] || !c->w_synced[1] || !c->w_synced[2])
        return;
    ctrl_map_each(&c->idx.objs, scan_obj, c);
}
