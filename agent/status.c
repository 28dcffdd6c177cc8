/*
 * status.c - the node status objects: one TritonKernelCacheNodeStatus per
 * namespace that has caches and one TritonKernelCacheNodeStatusCluster, named
 * after the node, owned by the Node, written by server-side apply on /status
 * (field manager tkm-agent, force) only on change plus a heartbeat at most
 * once a minute; deleted when no caches remain; recreated when deleted by
 * hand. docs/agent.md says why force.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/log.h>
#include <tkm/oci/ref.h>
#include <tkm/util.h>

#include "agent.h"

/* Unix time in seconds, for tkm_agent_last_status_write_timestamp_seconds. */
static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *agent_compat_reason(const char *s)
{
    static const struct {
        const char *prefix, *reason;
    } map[] = {{"backend mismatch", "BackendMismatch"},    {"arch mismatch", "ArchMismatch"},
               {"warp size mismatch", "WarpSizeMismatch"}, {"PTX too new", "PTXTooNew"},
               {"corrupt cache", "CorruptCache"},          {"label mismatch", "LabelMismatch"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strncmp(s, map[i].prefix, strlen(map[i].prefix)) == 0)
            return map[i].reason;
    if (strstr(s, "cannot be used"))
        return "GPUUnusable";
    return "Incompatible";
}

const char *agent_verdict_reason(const struct agent_verdicts *vs, size_t i)
{
    if (vs->code && vs->code[i])
        return vs->code[i];
    return agent_compat_reason(vs->v[i].reason);
}

/* ---- building ---------------------------------------------------------------------- */

static int group_add(struct tkm_api_gpu_group **gs, size_t *n, const char *type, const char *reason,
                     const char *message, int32_t id)
{
    if (!reason) {
        for (size_t i = 0; i < *n; i++) {
            struct tkm_api_gpu_group *g = &(*gs)[i];
            if (!strcmp(g->gpu_type, type)) {
                int32_t *ids = realloc(g->ids, (g->n_ids + 1) * sizeof *ids);
                if (!ids)
                    return -ENOMEM;
                g->ids = ids;
                g->ids[g->n_ids++] = id;
                return 0;
            }
        }
    }
    struct tkm_api_gpu_group *ng = realloc(*gs, (*n + 1) * sizeof *ng);
    if (!ng)
        return -ENOMEM;
    *gs = ng;
    struct tkm_api_gpu_group *g = &ng[*n];
    memset(g, 0, sizeof *g);
    g->ids = malloc(sizeof *g->ids);
    if (!g->ids)
        return -ENOMEM;
    (*n)++;
    g->ids[0] = id;
    g->n_ids = 1;
    g->gpu_type = (char *)type;
    g->reason = (char *)reason;
    g->message = (char *)message;
    return 0;
}

void agent_entry_release(struct tkm_api_node_cache *e)
{
    for (size_t i = 0; i < e->n_variants; i++)
        free(e->variants[i].gpu_ids);
    free(e->variants);
    free(e->pods);
    for (size_t i = 0; i < e->n_compatible; i++)
        free(e->compatible[i].ids);
    for (size_t i = 0; i < e->n_incompatible; i++)
        free(e->incompatible[i].ids);
    free(e->compatible);
    free(e->incompatible);
    free(e->error);
    free(e->compiles.top);
    memset(e, 0, sizeof *e);
}

/* variants[]: per used variant of a variant index, its GPUs (the digest
 * borrowed from ac; the target is the index's, read by the controller). */
static int variants_build(const struct agent *a, const struct agent_cache *ac,
                          struct tkm_api_node_cache *e)
{
    const struct agent_verdicts *vs = &ac->verdicts;
    for (size_t i = 0; vs->variant && i < vs->n && i < a->gpus.n; i++) {
        int k = vs->variant[i];
        if (!vs->v[i].compatible || k < 0)
            continue;
        const struct tkm_variant *v = &ac->variants.v[k];
        struct tkm_api_variant_use *u = NULL;
        for (size_t j = 0; j < e->n_variants && !u; j++)
            if (!strcmp(e->variants[j].digest, v->digest))
                u = &e->variants[j];
        if (!u) {
            if (e->n_variants >= TKM_VARIANTS_MAX)
                continue;
            u = realloc(e->variants, (e->n_variants + 1) * sizeof *u);
            if (!u)
                return -ENOMEM;
            e->variants = u;
            u = &e->variants[e->n_variants++];
            memset(u, 0, sizeof *u);
            u->digest = (char *)v->digest;
        }
        int32_t *ids = realloc(u->gpu_ids, (u->n_gpu_ids + 1) * sizeof *ids);
        if (!ids)
            return -ENOMEM;
        u->gpu_ids = ids;
        u->gpu_ids[u->n_gpu_ids++] = a->gpus.gpus[i].index;
    }
    return 0;
}

static int pod_cmp(const void *x, const void *y)
{
    const struct tkm_api_pod_ref *p = x, *q = y;
    return strcmp(p->volume_id, q->volume_id);
}

int agent_entry_build(const struct agent *a, const struct agent_cache *ac,
                      struct tkm_api_node_cache *e)
{
    memset(e, 0, sizeof *e);
    e->name = ac->c.meta.name;
    e->digest = tkm_oci_digest_valid(ac->digest) ? (char *)ac->digest : NULL;
    e->verified = ac->verified;
    struct agent_layer L[TKM_VARIANTS_MAX];
    size_t nl = agent_cache_layers((struct agent_cache *)ac, L);
    e->extracted = nl > 0;
    for (size_t k = 0; k < nl; k++)
        e->extracted &= agent_store_extracted((struct agent *)a, L[k].layer);
    size_t np = 0;
    for (const struct agent_vol *v = a->vols; v; v = v->next)
        np += !strcmp(v->cache_name, ac->c.meta.name) &&
              !strcmp(v->cache_ns, ac->c.cluster ? "" : ac->c.meta.ns);
    if (np && !(e->pods = calloc(np, sizeof *e->pods)))
        return -ENOMEM;
    for (const struct agent_vol *v = a->vols; v; v = v->next)
        if (!strcmp(v->cache_name, ac->c.meta.name) &&
            !strcmp(v->cache_ns, ac->c.cluster ? "" : ac->c.meta.ns)) {
            struct tkm_api_pod_ref *pr = &e->pods[e->n_pods++];
            pr->ns = v->pod_ns;
            pr->name = v->pod_name;
            pr->uid = v->pod_uid;
            pr->volume_id = v->volume_id;
        }
    if (e->n_pods > 1) /* a stable order: the same state is the same body */
        qsort(e->pods, e->n_pods, sizeof *e->pods, pod_cmp);
    e->last_updated = ac->judged_at[0] ? (char *)ac->judged_at : NULL;
    if (ac->fail_reason[0]) {
        e->fail_reason = (char *)ac->fail_reason;
        e->fail_message = (char *)ac->fail_message;
        e->fail_time = (char *)ac->fail_at;
    }
    for (size_t i = 0; ac->verdicts.judged && i < ac->verdicts.n && i < a->gpus.n; i++) {
        const struct tkm_compat_verdict *v = &ac->verdicts.v[i];
        const struct tkm_gpu *g = &a->gpus.gpus[i];
        const char *type = g->gpu_type[0] ? g->gpu_type : "unknown";
        int rc = v->compatible
                     ? group_add(&e->compatible, &e->n_compatible, type, NULL, NULL, g->index)
                     : group_add(&e->incompatible, &e->n_incompatible, type,
                                 agent_verdict_reason(&ac->verdicts, i), v->reason, g->index);
        if (rc < 0) {
            agent_entry_release(e);
            return rc;
        }
    }
    if (variants_build(a, ac, e) < 0) {
        agent_entry_release(e);
        return -ENOMEM;
    }
    if (agent_cache_serves_empty(a, ac))
        e->fallback = (char *)"Empty";
    e->prefetch = ac->prefetch;
    const struct agent_compiles *cc =
        agent_compiles_get((struct agent_cache_compiles **)&a->compiles, ac->key, 0);
    if (cc && agent_compiles_fill(cc, ac->digest, &e->compiles) < 0) {
        agent_entry_release(e);
        return -ENOMEM;
    }
    char err[1024] = "";
    if (ac->reason[0])
        snprintf(err, sizeof err, "%s: %s", ac->reason, ac->message);
    else if (!strncmp(ac->message, "Audit:", 6))
        snprintf(err, sizeof err, "%s", ac->message);
    if (err[0] && !(e->error = strdup(err))) {
        agent_entry_release(e);
        return -ENOMEM;
    }
    return 0;
}

void agent_status_release(struct tkm_api_node_status *st)
{
    for (size_t i = 0; i < st->n_caches; i++)
        agent_entry_release(&st->caches[i]);
    free(st->caches);
    memset(st, 0, sizeof *st); /* gpus are borrowed from the agent */
}

static int cache_in(const struct agent_cache *ac, const char *ns)
{
    if (!ns)
        return ac->c.cluster;
    return !ac->c.cluster && ac->c.meta.ns && !strcmp(ac->c.meta.ns, ns);
}

int agent_status_build(const struct agent *a, const char *ns, const char *last_updated,
                       struct tkm_api_node_status *st)
{
    size_t n = 0;
    int rc;
    memset(st, 0, sizeof *st);
    st->node_name = (char *)a->o.node_name;
    st->last_updated = (char *)last_updated;
    st->gpus = a->api_gpus;
    st->n_gpus = a->gpus.n;
    for (const struct agent_cache *ac = a->caches; ac; ac = ac->next)
        n += cache_in(ac, ns);
    st->caches = calloc(n + 1, sizeof *st->caches);
    if (!st->caches) {
        agent_status_release(st);
        return -ENOMEM;
    }
    for (const struct agent_cache *ac = a->caches; ac; ac = ac->next) {
        if (!cache_in(ac, ns))
            continue;
        if ((rc = agent_entry_build(a, ac, &st->caches[st->n_caches])) < 0) {
            agent_status_release(st);
            return rc;
        }
        st->n_caches++;
    }
    return 0;
}

/* ---- writing ------------------------------------------------------------------------ */

struct write_ctx {
    struct agent *a;
    struct agent_nsobj *o;
    char *body_cmp; /* the body without lastUpdated, kept on success */
    int step;       /* 0: create through the main endpoint, 1: /status, 2: delete */
    json_t *body;
};

static void flush(struct agent *a);

static const struct k8s_resource *nsobj_res(const struct agent_nsobj *o)
{
    return o->ns[0] ? &tkm_api_res_tkcns : &tkm_api_res_tkcnsc;
}

static void on_flush_timer(uv_timer_t *t)
{
    struct agent *a = t->data;
    a->flush_pending = 0;
    flush(a);
}

/* Runs flush() in ms, or earlier if one is already due earlier. */
static void flush_after(struct agent *a, uint64_t ms)
{
    uint64_t due = tkm_now_ms() + ms;
    if (a->stopping || a->o.once)
        return;
    if (a->flush_pending && a->flush_due_ms <= due)
        return;
    a->flush_pending = 1;
    a->flush_due_ms = due;
    uv_timer_start(&a->flush_timer, on_flush_timer, ms, 0);
}

/* Runs flush() as soon as a write may start: on the loop's next turn (so the
 * changes of one turn make one pass), or when the backoff after a failed
 * write ends. */
static void flush_soon(struct agent *a)
{
    uint64_t now = tkm_now_ms();
    flush_after(a, a->write_retry_ms > now ? a->write_retry_ms - now : 0);
}

void agent_status_changed(struct agent *a)
{
    flush_soon(a);
}

static struct agent_nsobj *nsobj_get(struct agent *a, const char *ns, int create)
{
    for (struct agent_nsobj *o = a->nsobjs; o; o = o->next)
        if (!strcmp(o->ns, ns))
            return o;
    if (!create)
        return NULL;
    struct agent_nsobj *o = calloc(1, sizeof *o);
    if (!o || !(o->ns = strdup(ns))) {
        free(o);
        return NULL;
    }
    o->next = a->nsobjs;
    a->nsobjs = o;
    return o;
}

static void nsobj_free(struct agent_nsobj *o)
{
    free(o->ns);
    free(o->last_body);
    free(o->applied_rv);
    free(o);
}

static void nsobj_remove(struct agent *a, struct agent_nsobj *o)
{
    for (struct agent_nsobj **pp = &a->nsobjs; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            nsobj_free(o);
            return;
        }
}

void agent_nsobjs_free(struct agent *a)
{
    while (a->nsobjs) {
        struct agent_nsobj *o = a->nsobjs;
        a->nsobjs = o->next;
        nsobj_free(o);
    }
}

static void write_failed(struct write_ctx *w, int rc, const struct k8s_status *st)
{
    struct agent *a = w->a;
    char msg[512];
    a->write_backoff_ms = a->write_backoff_ms ? a->write_backoff_ms * 2 : AGENT_BACKOFF_MIN_MS;
    if (a->write_backoff_ms > 30000)
        a->write_backoff_ms = 30000;
    a->write_retry_ms = tkm_now_ms() + a->write_backoff_ms;
    tkm_warn("%s %s%s%s: %s failed (%d): %s; retrying in %llu ms", nsobj_res(w->o)->kind, w->o->ns,
             w->o->ns[0] ? "/" : "", a->o.node_name, w->step == 2 ? "delete" : "apply", rc,
             st ? k8s_status_str(st, msg, sizeof msg) : "",
             (unsigned long long)a->write_backoff_ms);
    flush_after(a, a->write_backoff_ms);
}

static void write_start(struct write_ctx *w);

static void on_written(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct write_ctx *w = data;
    struct agent *a = w->a;
    struct agent_nsobj *o = w->o;
    o->inflight = 0;
    if (a->stopping)
        goto out;
    if (w->step == 2) {
        if (rc < 0 && rc != -ENOENT) {
            o->again = 0;
            write_failed(w, rc, st);
            goto out;
        }
        tkm_info("deleted the node status of %s%s (no caches left)", o->ns[0] ? "namespace " : "",
                 o->ns[0] ? o->ns : "cluster caches");
        nsobj_remove(a, o);
        a->write_backoff_ms = a->write_retry_ms = 0;
        flush_soon(a);
        goto out;
    }
    if (w->step == 0 && (rc == 0 || rc == -EEXIST || rc == -EALREADY)) {
        o->exists = 1;
        w->step = 1;
        write_start(w);
        return;
    }
    if (w->step == 1 && rc == -ENOENT) {
        /* deleted by hand (or never there): create it again */
        tkm_info("node status %s gone: recreating it", o->ns[0] ? o->ns : "(cluster)");
        o->exists = 0;
        w->step = 0;
        write_start(w);
        return;
    }
    if (rc < 0) {
        o->again = 0; /* the retry's pass takes what came meanwhile */
        write_failed(w, rc, st);
        goto out;
    }
    a->write_backoff_ms = a->write_retry_ms = 0;
    a->status_writes++;
    a->status_write_time = wall_s();
    free(o->last_body);
    o->last_body = w->body_cmp;
    w->body_cmp = NULL;
    o->last_ms = tkm_now_ms();
    free(o->applied_rv);
    o->applied_rv =
        obj && k8s_obj_resource_version(obj) ? strdup(k8s_obj_resource_version(obj)) : NULL;
    if (o->again) { /* changes came while this write was in flight: one more pass */
        o->again = 0;
        flush_soon(a);
    }
out:
    json_decref(w->body);
    free(w->body_cmp);
    free(w);
}

static void write_start(struct write_ctx *w)
{
    struct agent *a = w->a;
    struct agent_nsobj *o = w->o;
    const char *ns = o->ns[0] ? o->ns : NULL;
    struct k8s_apply_opts ao = {.field_manager = AGENT_FIELD_MANAGER, .force = 1};
    int rc;
    if (w->step == 2) {
        struct k8s_delete_opts d = {0};
        d.grace_period_s = -1;
        rc = k8s_delete_async(a->kc, nsobj_res(o), ns, a->o.node_name, &d, on_written, w);
    } else {
        ao.subresource = w->step == 1 ? "status" : NULL;
        rc = k8s_apply_async(a->kc, nsobj_res(o), ns, w->body, &ao, on_written, w);
    }
    if (rc < 0) {
        write_failed(w, rc, NULL);
        json_decref(w->body);
        free(w->body_cmp);
        free(w);
        return;
    }
    o->inflight = 1;
}

/* Applies o's status if it changed or the heartbeat is due. */
static void nsobj_write(struct agent *a, struct agent_nsobj *o, uint64_t now)
{
    struct tkm_api_node_status st;
    struct tkm_err e = {0};
    struct tkm_buf cmp;
    json_t *body = NULL;
    char ts[32];
    tkm_buf_init(&cmp, 16u << 20);
    if (agent_status_build(a, o->ns[0] ? o->ns : NULL, NULL, &st) < 0)
        return;
    int rc = tkm_api_node_status_apply(&st, o->ns[0] ? o->ns : NULL, a->node_uid, &body, &e);
    agent_status_release(&st);
    if (rc < 0 || tkm_api_dump(body, &cmp) < 0) {
        tkm_err("node status of %s: %s", o->ns[0] ? o->ns : "(cluster)", tkm_err_str(&e));
        goto out;
    }
    char *s = tkm_buf_detach(&cmp, NULL);
    if (o->exists && o->last_body && s && !strcmp(s, o->last_body) &&
        now - o->last_ms < AGENT_HEARTBEAT_MS) {
        free(s);
        goto out;
    }
    struct write_ctx *w = calloc(1, sizeof *w);
    if (!w || !s) {
        free(w);
        free(s);
        goto out;
    }
    tkm_api_now(ts, sizeof ts);
    json_object_set_new(json_object_get(body, "status"), "lastUpdated", json_string(ts));
    w->a = a;
    w->o = o;
    w->body = body;
    w->body_cmp = s;
    w->step = o->exists ? 1 : 0;
    body = NULL;
    write_start(w);
out:
    json_decref(body);
    tkm_buf_release(&cmp);
}

static int status_ready(struct agent *a)
{
    return a->probed && a->node_uid[0] && a->inf_tkc && k8s_informer_has_synced(a->inf_tkc) &&
           k8s_informer_has_synced(a->inf_tkcc) && k8s_informer_has_synced(a->inf_ns) &&
           k8s_informer_has_synced(a->inf_nsc);
}

static void flush(struct agent *a)
{
    uint64_t now = tkm_now_ms(), next = AGENT_HEARTBEAT_MS;
    if (a->stopping)
        return;
    if (!status_ready(a)) {
        flush_after(a, 500);
        return;
    }
    if (a->write_retry_ms > now) { /* backing off after a failed write */
        flush_after(a, a->write_retry_ms - now);
        return;
    }
    /* the objects there should be */
    for (struct agent_cache *ac = a->caches; ac; ac = ac->next)
        nsobj_get(a, ac->c.cluster ? "" : ac->c.meta.ns, 1);
    for (struct agent_nsobj *o = a->nsobjs, *nx; o; o = nx) {
        nx = o->next;
        int has = 0;
        for (struct agent_cache *ac = a->caches; ac && !has; ac = ac->next)
            has = o->ns[0] ? !ac->c.cluster && !strcmp(ac->c.meta.ns, o->ns) : ac->c.cluster;
        o->want_delete = !has;
        if (o->inflight) { /* one write per object at a time: the next pass when it ends */
            o->again = 1;
            continue;
        }
        if (o->want_delete) {
            struct write_ctx *w = calloc(1, sizeof *w);
            if (!w)
                continue;
            w->a = a;
            w->o = o;
            w->step = 2;
            write_start(w);
            continue;
        }
        nsobj_write(a, o, now);
        uint64_t due = o->last_ms + AGENT_HEARTBEAT_MS;
        if (due > now && due - now < next)
            next = due - now;
    }
    flush_after(a, next + 10);
}

static void node_get(uv_timer_t *t);

void agent_status_own_event(struct agent *a, const struct k8s_obj *obj, int deleted)
{
    struct agent_nsobj *o = nsobj_get(a, obj->ns ? obj->ns : "", !deleted);
    if (!o)
        return;
    if (deleted) {
        if (!o->inflight && !o->want_delete) {
            /* the garbage collector deletes it when the Node went away (or came
             * back with a new uid): read the Node again before recreating (no
             * write until on_node has the uid: passes run at once now, sooner
             * than the GET answers) */
            a->node_uid[0] = 0;
            uv_timer_start(&a->node_timer, node_get, 0, 0);
            tkm_warn("node status %s%s was deleted by someone else: recreating it", obj->ns,
                     obj->ns[0] ? "/" : "");
            o->exists = 0;
            free(o->last_body);
            o->last_body = NULL;
            agent_status_changed(a);
        }
        return;
    }
    o->exists = 1;
    if (!o->applied_rv || strcmp(o->applied_rv, obj->resource_version) != 0) {
        /* written by someone else (or our own write seen first): re-apply
         * ours; an identical apply changes nothing */
        if (o->applied_rv)
            tkm_dbg("node status %s changed outside the agent: re-applying", obj->key);
        free(o->last_body);
        o->last_body = NULL;
        agent_status_changed(a);
    }
}

static void on_node(int rc, json_t *obj, const struct k8s_status *st, void *data)
{
    struct agent *a = data;
    char msg[512];
    if (a->stopping)
        return;
    if (rc == -ENOENT)
        a->node_uid[0] = 0; /* no Node: writing would only feed the garbage collector */
    if (rc < 0 || !k8s_obj_uid(obj)) {
        tkm_warn("GET Node %s: %s; retrying in 5 s (node status waits for the Node's uid)",
                 a->o.node_name, rc < 0 ? k8s_status_str(st, msg, sizeof msg) : "no uid");
        uv_timer_start(&a->node_timer, node_get, 5000, 0);
        return;
    }
    snprintf(a->node_uid, sizeof a->node_uid, "%s", k8s_obj_uid(obj));
    tkm_info("node %s uid %s", a->o.node_name, a->node_uid);
    agent_status_changed(a);
}

static void node_get(uv_timer_t *t)
{
    struct agent *a = t->data;
    if (k8s_get_async(a->kc, &k8s_res_nodes, NULL, a->o.node_name, NULL, on_node, a) < 0)
        uv_timer_start(&a->node_timer, node_get, 5000, 0);
}

int agent_status_start(struct agent *a, struct tkm_err *err)
{
    (void)err;
    node_get(&a->node_timer);
    return 0;
}
