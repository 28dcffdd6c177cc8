/*
 * e2e_agent_rpc - a TEST HARNESS for agent/rpc.c and agent/declared.c, not
 * tkm-agent: it only exercises the protocol layer against the real apiserver
 * until the daemon plugs its own materialize/release logic in.
 *
 * Usage: e2e_agent_rpc --socket PATH [--kubeconfig FILE]
 *
 * Runs real informers (TritonKernelCache in all namespaces and
 * TritonKernelCacheCluster) and the agent socket on one loop. Its ops:
 *   Materialize  UNAVAILABLE until both informers synced; then the
 *                declaration check (agent_declared_find on the index its
 *                informer handlers feed, as tkm-agent's) and, from a timer
 *                (an asynchronous answer, as after a pull), the cache's spec:
 *                store_path "/harness/store/<ns or _cluster>/<name>",
 *                target_arch "harness", mount_path the volume's mountPath else
 *                spec.mountPath, digest status.resolvedDigest. A pod whose
 *                name starts with "slow-" is answered after 3 s (deadline
 *                tests). Remembers the volume for Release.
 *   Release      released for a volume it answered, else NOT_FOUND.
 *   Status       ready once synced.
 * Prints (flushed) "SYNCED tkc=N tkcc=M", "ANSWER <vol> <rc>",
 * "CANCEL <vol>", "LATE <vol> <rc>" (a reply after the cancel). SIGTERM/SIGINT
 * close everything and exit 0 (valgrind-clean).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/informer.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/http.h>
#include <tkm/log.h>

#include "declared.h"
#include "rpc.h"

struct vol {
    char *id;
    struct vol *next;
};

struct app {
    uv_loop_t *loop;
    struct k8s_client *c;
    struct k8s_informer *tkc, *tkcc;
    struct agent_index idx; /* fed by the informers' handlers, as tkm-agent's */
    struct agent_cache *live;
    struct agent_rpc_server *srv;
    uv_signal_t sig_term, sig_int;
    struct vol *vols;
    struct pend *pends; /* Materialize calls not answered yet */
    int stopping;
};

/* One Materialize being answered later; strings owned. */
struct pend {
    uv_timer_t t;
    struct app *a;
    struct agent_rpc_call *call;
    struct pend *next;
    char *vol, *store_path, *mount_path, *ns, *name, *digest;
};

static int synced(const struct app *a)
{
    return a->tkc && a->tkcc && k8s_informer_has_synced(a->tkc) && k8s_informer_has_synced(a->tkcc);
}

static void pend_closed(uv_handle_t *h)
{
    struct pend *p = h->data;
    free(p->vol);
    free(p->store_path);
    free(p->mount_path);
    free(p->ns);
    free(p->name);
    free(p->digest);
    free(p);
}

static int vol_known(const struct app *a, const char *id)
{
    for (const struct vol *v = a->vols; v; v = v->next)
        if (strcmp(v->id, id) == 0)
            return 1;
    return 0;
}

static void pend_fire(uv_timer_t *t)
{
    struct pend *p = t->data;
    struct agent_materialize_result res = {.store_path = p->store_path,
                                           .target_arch = "harness",
                                           .mount_path = p->mount_path,
                                           .cache_namespace = p->ns,
                                           .cache_name = p->name,
                                           .digest = p->digest};
    int rc = agent_rpc_reply_materialize(p->call, &res); /* -ECANCELED: after the cancel */
    printf("%s %s %d\n", rc == -ECANCELED ? "LATE" : "ANSWER", p->vol, rc);
    for (struct pend **q = &p->a->pends; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    if (rc == 0 && !vol_known(p->a, p->vol)) {
        struct vol *v = calloc(1, sizeof *v);
        if (v && (v->id = strdup(p->vol))) {
            v->next = p->a->vols;
            p->a->vols = v;
        } else {
            free(v);
        }
    }
    uv_close((uv_handle_t *)&p->t, pend_closed);
}

static int pend_fill(struct pend *p, const struct agent_materialize_req *req,
                     const struct agent_cache *d)
{
    const char *mp = req->mount_path ? req->mount_path : d->c.spec.mount_path;
    const char *ns = d->c.cluster ? "" : d->c.meta.ns;
    size_t n = strlen(ns) + strlen(d->c.meta.name) + 32;
    if (!(p->store_path = malloc(n)))
        return -ENOMEM;
    snprintf(p->store_path, n, "/harness/store/%s/%s", d->c.cluster ? "_cluster" : ns,
             d->c.meta.name);
    p->vol = strdup(req->volume_id);
    p->mount_path = strdup(mp ? mp : "");
    p->ns = strdup(ns);
    p->name = strdup(d->c.meta.name);
    p->digest = strdup(d->c.status.resolved_digest ? d->c.status.resolved_digest : "");
    return p->vol && p->mount_path && p->ns && p->name && p->digest ? 0 : -ENOMEM;
}

static void op_materialize(struct agent_rpc_call *call, const struct agent_materialize_req *req,
                           void *data)
{
    struct app *a = data;
    struct agent_cache *d;
    struct tkm_err err = {0};
    struct pend *p;
    int rc;
    if (!synced(a)) {
        agent_rpc_fail(call, TKM_GRPC_UNAVAILABLE,
                       "tkm-agent is starting: the cache informers have not synced yet");
        return;
    }
    if ((rc = agent_declared_find(&a->idx, req->pod_ns, req, &d, &err)) < 0) {
        agent_rpc_fail(call, agent_declared_grpc_code(rc), tkm_err_str(&err));
        return;
    }
    if (!(p = calloc(1, sizeof *p))) {
        agent_rpc_fail(call, TKM_GRPC_INTERNAL, "harness: out of memory");
        return;
    }
    p->a = a;
    p->call = call;
    uv_timer_init(a->loop, &p->t);
    p->t.data = p;
    rc = pend_fill(p, req, d);
    if (rc < 0) {
        agent_rpc_fail(call, TKM_GRPC_INTERNAL, "harness: out of memory");
        uv_close((uv_handle_t *)&p->t, pend_closed);
        return;
    }
    p->next = a->pends;
    a->pends = p;
    uv_timer_start(&p->t, pend_fire, strncmp(req->pod_name, "slow-", 5) == 0 ? 3000 : 10, 0);
}

static void op_cancel(struct agent_rpc_call *call, void *data)
{
    struct app *a = data;
    struct pend *p = a->pends;
    while (p && p->call != call)
        p = p->next;
    if (!p)
        return;
    printf("CANCEL %s\n", p->vol);
    if (a->stopping) { /* shutting down: finish now instead of waiting for the timer */
        uv_timer_stop(&p->t);
        pend_fire(&p->t);
    }
}

static void op_release(struct agent_rpc_call *call, const struct agent_release_req *req, void *data)
{
    struct app *a = data;
    for (struct vol **v = &a->vols; *v; v = &(*v)->next) {
        if (strcmp((*v)->id, req->volume_id) == 0) {
            struct vol *gone = *v;
            *v = gone->next;
            free(gone->id);
            free(gone);
            agent_rpc_reply_release(call, 1);
            return;
        }
    }
    agent_rpc_reply_release(call, 0);
}

static void op_status(struct agent_rpc_call *call, void *data)
{
    struct app *a = data;
    struct agent_status_result st = {.ready = synced(a),
                                     .message = synced(a) ? "harness: informers synced"
                                                          : "harness: informers not synced",
                                     .node_name = "e2e-harness"};
    agent_rpc_reply_status(call, &st);
}

static const struct agent_rpc_ops OPS = {op_materialize, op_release, op_status, op_cancel};

static void on_synced(void *data)
{
    struct app *a = data;
    if (synced(a))
        printf("SYNCED tkc=%zu tkcc=%zu\n", k8s_informer_count(a->tkc),
               k8s_informer_count(a->tkcc));
}

static void on_obj(const struct k8s_obj *o, void *data)
{
    struct app *a = data;
    struct tkm_err err = {0};
    if (agent_index_apply(&a->idx, o, NULL, &err) < 0)
        fprintf(stderr, "e2e_agent_rpc: ignoring %s: %s\n", o->key, tkm_err_str(&err));
}

static void on_upd(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    (void)old;
    on_obj(cur, data);
}

static void on_del(const struct k8s_obj *o, int unknown, void *data)
{
    struct app *a = data;
    (void)unknown;
    agent_cache_destroy(agent_index_take(&a->idx, o->key));
}

static void on_error(int rc, const char *msg, uint64_t delay_ms, void *data)
{
    (void)rc;
    (void)data;
    fprintf(stderr, "e2e_agent_rpc: watch: %s (retry in %llu ms)\n", msg,
            (unsigned long long)delay_ms);
}

static void on_term(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    (void)signum;
    a->stopping = 1;
    uv_close((uv_handle_t *)&a->sig_term, NULL);
    uv_close((uv_handle_t *)&a->sig_int, NULL);
    agent_rpc_server_close(a->srv, NULL, NULL);
    k8s_informer_close(a->tkc, NULL, NULL);
    k8s_informer_close(a->tkcc, NULL, NULL);
    k8s_client_close(a->c, NULL, NULL);
}

static int start_informers(struct app *a, struct tkm_err *err)
{
    struct k8s_informer_opts io = {
        .watch = {.res = &tkm_api_res_tkc, .ns = NULL},
        .handler = {.on_add = on_obj,
                    .on_update = on_upd,
                    .on_delete = on_del,
                    .on_synced = on_synced,
                    .on_error = on_error},
        .data = a,
    };
    int rc = k8s_informer_start(a->c, &io, &a->tkc, err);
    if (rc < 0)
        return rc;
    io.watch.res = &tkm_api_res_tkcc;
    return k8s_informer_start(a->c, &io, &a->tkcc, err);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"socket", required_argument, NULL, 's'},
                                       {"kubeconfig", required_argument, NULL, 'k'},
                                       {NULL, 0, NULL, 0}};
    struct app a = {0};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    const char *sock = NULL, *kubeconfig = NULL;
    int opt, rc = 1;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (opt == 's')
            sock = optarg;
        else if (opt == 'k')
            kubeconfig = optarg;
        else
            return 2;
    }
    if (!sock) {
        fprintf(stderr, "usage: e2e_agent_rpc --socket PATH [--kubeconfig FILE]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    tkm_log_init("e2e_agent_rpc", TKM_LOG_INFO, 0);
    k8s_config_init(&cfg);
    a.loop = uv_default_loop();
    agent_index_init(&a.idx, &a.live);
    if (tkm_http_global_init(&err) < 0 || k8s_config_load_default(&cfg, kubeconfig, &err) < 0 ||
        k8s_client_new(a.loop, &cfg, NULL, &a.c, &err) < 0)
        goto out;
    if (start_informers(&a, &err) < 0 ||
        agent_rpc_server_new(a.loop, sock, &OPS, &a, NULL, &a.srv, &err) < 0) {
        k8s_informer_close(a.tkc, NULL, NULL);
        k8s_informer_close(a.tkcc, NULL, NULL);
        k8s_client_close(a.c, NULL, NULL);
        uv_run(a.loop, UV_RUN_DEFAULT);
        goto out;
    }
    uv_signal_init(a.loop, &a.sig_term);
    uv_signal_init(a.loop, &a.sig_int);
    a.sig_term.data = a.sig_int.data = &a;
    uv_signal_start(&a.sig_term, on_term, SIGTERM);
    uv_signal_start(&a.sig_int, on_term, SIGINT);
    uv_run(a.loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    if (err.code)
        fprintf(stderr, "e2e_agent_rpc: %s\n", tkm_err_str(&err));
    while (a.vols) {
        struct vol *v = a.vols;
        a.vols = v->next;
        free(v->id);
        free(v);
    }
    agent_index_release(&a.idx);
    k8s_config_release(&cfg);
    if (uv_loop_close(a.loop) != 0) {
        fprintf(stderr, "e2e_agent_rpc: handles left open on the loop\n");
        rc = 1;
    }
    return rc;
}
