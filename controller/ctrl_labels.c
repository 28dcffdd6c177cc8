/*
 * ctrl_labels.c - scheduling help: the Node labels of usable caches.
 *
 * Every Node on which a cache is usable carries the cache's label
 * (tkm_api_node_label(): "tkc.tkm.io/<ns>.<name>" or "tkcc.tkm.io/<name>",
 * value "true"), so that a workload can ask for such nodes with a
 * nodeSelector or nodeAffinity (docs/user-guide.md). Usable on a node: the
 * cache may be used (verified, or Audit/Disabled), and the node's entry is
 * at the pinned digest, without error, with at least one compatible GPU and
 * not the Empty fallback.
 *
 * Two halves:
 *   - what queues "l:<node>": the node's entries changed (a report), its
 *     Node's labels changed, or a cache's judgement changed (verified, a new
 *     pin, deleted: ctrl_labels_check walks the Nodes once and queues those
 *     whose label disagrees with their entry); no patch from there;
 *   - "l:<node>" (ctrl_reconcile_labels) computes every label of the node
 *     from its entries and sends ONE merge patch with all the changes. It
 *     waits while node reports keep arriving (a rollout: LABEL_QUIET_MS
 *     without one; a long rollout lets the waiting nodes through every
 *     LABEL_MAX_DEFER_MS): the apiserver serves the
 *     reports and the caches' status first, and a node gets one patch for
 *     all its caches rather than one per report.
 * A cache the controller has not judged yet (just started, verifying) keeps
 * the node's label as it is; a label under the controller's prefixes that
 * no entry of the node explains (a deleted cache) is removed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>
#include <k8s/workqueue.h>

#include "ctrl-int.h"

#define LABEL_BATCH_MS     300   /* the delay of "l:<node>": several changes, one patch */
#define LABEL_QUIET_MS     3000  /* patches wait until no node report came for this long */
#define LABEL_MAX_DEFER_MS 30000 /* ... but not longer than this: then a window of */
#define LABEL_WINDOW_MS    2000  /* this long lets every waiting node through, and so on */

/* 0 when patches may go now, else the ms to wait (node reports keep arriving). The
 * waiting keys come back within LABEL_QUIET_MS, so a window lets all of them through. */
static uint64_t labels_wait(struct ctrl *c)
{
    int64_t quiet = ctrl_wall_ms() - c->ns_event_wall_ms;
    uint64_t now = uv_now(c->loop);
    if (quiet >= LABEL_QUIET_MS || quiet < 0) {
        c->labels_defer_since = 0;
        return 0;
    }
    if (!c->labels_defer_since)
        c->labels_defer_since = now;
    if (now - c->labels_defer_since < LABEL_MAX_DEFER_MS)
        return (uint64_t)(LABEL_QUIET_MS - quiet) + 10;
    if (now - c->labels_defer_since < LABEL_MAX_DEFER_MS + LABEL_WINDOW_MS)
        return 0;
    c->labels_defer_since = now; /* the window is over: wait again */
    return (uint64_t)(LABEL_QUIET_MS - quiet) + 10;
}

int ctrl_label_of(const char *cache_key, char *out, size_t n)
{
    char ns[300];
    const char *slash = strchr(cache_key, '/');
    size_t l = slash ? (size_t)(slash - cache_key) : 0;
    if (!slash || l >= sizeof ns)
        return -EINVAL;
    memcpy(ns, cache_key, l);
    ns[l] = 0;
    return tkm_api_node_label(ns, slash + 1, out, n);
}

int ctrl_entry_usable(const struct ctrl_entry *e, uint32_t usable_digest)
{
    return e && usable_digest && e->digest == usable_digest &&
           (e->flags & (CTRL_E_COMPAT | CTRL_E_ERROR | CTRL_E_EMPTY)) == CTRL_E_COMPAT;
}

void ctrl_labels_check(struct ctrl *c, const struct ctrl_cidx *x, const char *label,
                       uint32_t usable_digest)
{
    char q[300];
    const char *k;
    void *v;
    if (!c->o.node_labels || !label)
        return;
    for (size_t pos = 0; tkm_strmap_next(&c->idx.nodes, &pos, &k, &v);) {
        const struct ctrl_node *nd = v;
        int has = ctrl_node_has_label(nd, label);
        int want = ctrl_entry_usable(ctrl_nodes_entry(&c->idx, x, nd->name), usable_digest);
        if (has != want && snprintf(q, sizeof q, "l:%s", nd->name) < (int)sizeof q)
            ctrl_enqueue_after(c, q, LABEL_BATCH_MS);
    }
}

void ctrl_labels_node_changed(struct ctrl *c, const char *node)
{
    char q[300];
    if (c->o.node_labels && snprintf(q, sizeof q, "l:%s", node) < (int)sizeof q)
        ctrl_enqueue_after(c, q, LABEL_BATCH_MS);
}

/* ---- "l:<node>" ------------------------------------------------------------------------- */

struct lrun {
    struct ctrl *c;
    const struct ctrl_node *nd;
    char (*want)[TKM_API_NODE_LABEL_MAX]; /* owned: the labels the node should have */
    size_t n, cap;
    int oom;
    char qkey[300];
    uint64_t t0;
};

static int want_entry(const struct ctrl_entry *e, const struct ctrl_nsobj *o, const char *why,
                      void *data)
{
    (void)o;
    (void)why;
    struct lrun *r = data;
    const struct ctrl_cidx *x = e->cache < r->c->idx.cidx.n ? r->c->idx.cidx.v[e->cache] : NULL;
    char key[TKM_API_NODE_LABEL_MAX];
    uint32_t usable;
    if (!x || ctrl_label_of(x->key, key, sizeof key) < 0)
        return 0;
    int known = x->rec && ctrl_cache_label_state(x->rec, &usable);
    if (known ? !ctrl_entry_usable(e, usable) : !ctrl_node_has_label(r->nd, key))
        return 0;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 16;
        void *w = realloc(r->want, nc * sizeof *r->want);
        if (!w) {
            r->oom = 1;
            return 1;
        }
        r->want = w;
        r->cap = nc;
    }
    memcpy(r->want[r->n++], key, sizeof key);
    return 0;
}

static int cmp_label(const void *a, const void *b)
{
    return strcmp(a, b);
}

static void lrun_end(struct lrun *r, int result)
{
    ctrl_done(r->c, r->qkey, 2, r->t0, result, 0);
    free(r->want);
    free(r);
}

static void patch_done(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    (void)obj;
    struct lrun *r = data;
    char line[512];
    if (rc < 0 && rc != -ENOENT)
        tkm_warn("controller: labelling Node %s: %s", r->qkey + 2,
                 k8s_status_str(st, line, sizeof line));
    lrun_end(r, rc < 0 && rc != -ENOENT ? K8S_WQ_RETRY : K8S_WQ_OK);
}

/* {"metadata":{"labels":{added: "true", removed: null}}}, or NULL when nothing changes
 * (*oom on failure). */
static json_t *patch_of(const struct lrun *r, int *oom)
{
    json_t *labels = json_object();
    size_t added = 0, removed = 0;
    *oom = !labels;
    for (size_t i = 0; labels && !*oom && i < r->n; i++)
        if ((i == 0 || strcmp(r->want[i], r->want[i - 1]) != 0) &&
            !ctrl_node_has_label(r->nd, r->want[i])) {
            *oom = json_object_set_new(labels, r->want[i], json_string(TKM_API_NODE_LABEL_VALUE));
            added++;
        }
    for (uint32_t i = 0; labels && !*oom && i < r->nd->n_labels; i++)
        if (!bsearch(r->nd->labels[i], r->want, r->n, sizeof *r->want, cmp_label)) {
            *oom = json_object_set_new(labels, r->nd->labels[i], json_null());
            removed++;
        }
    if (*oom || !(added + removed)) {
        json_decref(labels);
        return NULL;
    }
    tkm_info("controller: Node %s: %zu cache label(s) to add, %zu to remove", r->nd->name, added,
             removed);
    json_t *p = json_pack("{s:{s:o}}", "metadata", "labels", labels);
    *oom = !p;
    return p;
}

void ctrl_reconcile_labels(struct ctrl *c, const char *qkey)
{
    uint64_t t0 = uv_now(c->loop), wait;
    const struct ctrl_node *nd = tkm_strmap_get(&c->idx.nodes, qkey + 2);
    struct lrun *r;
    if ((c->lease && !c->leading) || c->stopping || !nd || !c->o.node_labels) {
        ctrl_done(c, qkey, 2, t0, K8S_WQ_OK, 0);
        return;
    }
    if ((wait = labels_wait(c))) {
        ctrl_done(c, qkey, 2, t0, K8S_WQ_OK, wait);
        return;
    }
    if (!(r = calloc(1, sizeof *r))) {
        ctrl_done(c, qkey, 2, t0, K8S_WQ_RETRY, 0);
        return;
    }
    *r = (struct lrun){.c = c, .nd = nd, .t0 = t0};
    snprintf(r->qkey, sizeof r->qkey, "%s", qkey);
    ctrl_nodes_node_entries(&c->idx, nd->name, want_entry, r);
    if (r->n > 1)
        qsort(r->want, r->n, sizeof *r->want, cmp_label);
    int oom = r->oom;
    json_t *patch = oom ? NULL : patch_of(r, &oom);
    if (!patch) {
        lrun_end(r, oom ? K8S_WQ_RETRY : K8S_WQ_OK);
        return;
    }
    struct k8s_patch_opts po = {.type = K8S_PATCH_MERGE, .field_manager = CTRL_FIELD_MANAGER};
    int rc = k8s_patch_async(c->c, &k8s_res_nodes, NULL, nd->name, patch, &po, patch_done, r);
    json_decref(patch);
    if (rc < 0)
        lrun_end(r, K8S_WQ_RETRY);
    else
        c->m.label_patches++;
}
