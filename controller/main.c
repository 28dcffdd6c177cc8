/*
 * tkm-controller - the control plane of tkm (controller/README.md,
 * docs/controller.md). Flags follow controller-runtime operators.
 */
#include <errno.h>
#include <malloc.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/daemon.h>
#include <tkm/flags.h>
#include <tkm/http.h>
#include <tkm/httpd.h>
#include <tkm/metrics.h>
#include <tkm/log.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/events.h>
#include <k8s/informer.h>
#include <k8s/lease.h>
#include <k8s/watch.h>
#include <k8s/workqueue.h>

#include "ctrl-int.h"

struct args {
    const char *kubeconfig, *ns, *le_ns, *le_id, *metrics_addr, *health_addr, *state_dir;
    const char *signature_floor;
    int leader_elect, node_labels;
    struct tkm_reach_config reach; /* --registry-*: what tkm-config leaves out */
    struct tkm_flagset flags;
    uint64_t cleanup_timeout_ms, registry_timeout_ms, status_interval_ms, node_gc_grace_ms;
    uint64_t pull_deadline_ms;
    uint64_t status_settle_ms;
    uint64_t lease_ms, renew_ms, retry_ms;
    unsigned workers;
};

struct app {
    uv_loop_t *loop;
    struct args a;
    struct ctrl ctrl;
    struct k8s_client *client;
    struct tkm_http *http;
    struct k8s_lease *lease;
    struct tkm_metrics *metrics;
    struct tkm_httpd *srv_metrics, *srv_health;
    struct tkm_daemon d;
};

static const char about[] =
    "The control plane of tkm: pins each TritonKernelCache / TritonKernelCacheCluster image\n"
    "tag to a digest, verifies its signature, aggregates what the node agents report into the\n"
    "cache's status (Verified, Ready, Progressing, Degraded, counts, failedNodes, variants),\n"
    "labels the Nodes where each cache is usable, and cleans up after deleted caches and\n"
    "Nodes. See controller/README.md and docs/controller.md.\n";

static const char epilogue[] =
    "Signals: SIGTERM/SIGINT stop: the reconciles in flight finish (registry requests are\n"
    "cancelled), the Lease is released, then the process exits 0. A leader that loses its\n"
    "Lease stops the same way and exits 1 (the Deployment restarts it as a candidate).\n\n"
    "Example (by hand, against a dev cluster):\n"
    "  tkm-controller --kubeconfig ~/.kube/config --namespace tkm-system --state-dir /tmp/tkmc \\\n"
    "      --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 \\\n"
    "      --cleanup-timeout 2m --status-settle 100ms -v 1 --log-format json\n";

static int parse_args(int argc, char **argv, struct args *a)
{
    const char *pns = getenv("POD_NAMESPACE");
    uint64_t workers = 64;
    *a = (struct args){.ns = pns && *pns ? pns : "tkm-system",
                       .le_id = "tkm-controller",
                       .metrics_addr = ":8080",
                       .health_addr = ":8081",
                       .state_dir = "/var/lib/tkm-controller",
                       .cleanup_timeout_ms = 60000,
                       .registry_timeout_ms = 30000,
                       .pull_deadline_ms = 30 * 60 * 1000,
                       .status_interval_ms = 500,
                       .status_settle_ms = 250,
                       .node_gc_grace_ms = 5000,
                       .lease_ms = 15000,
                       .renew_ms = 10000,
                       .retry_ms = 2000,
                       .node_labels = 1};
    /* clang-format off */
    const struct tkm_flag flags[] = {
        {.name = "kubeconfig", .type = TKM_FLAG_STRING, .dst = &a->kubeconfig, .arg = "PATH",
         .def = "$KUBECONFIG, else in-cluster, else ~/.kube/config",
         .help = "the cluster to work on"},
        {.name = "namespace", .type = TKM_FLAG_STRING, .dst = &a->ns, .arg = "NS",
         .def = "$POD_NAMESPACE, else tkm-system",
         .help = "the controller's namespace (ConfigMap tkm-config, Secrets of cluster caches)"},
        {.name = "leader-elect", .type = TKM_FLAG_BOOL, .dst = &a->leader_elect, .def = "false",
         .help = "elect a leader on a Lease before acting (--leader-elect=false: off)"},
        {.name = "leader-election-namespace", .type = TKM_FLAG_STRING, .dst = &a->le_ns,
         .arg = "NS", .def = "--namespace", .help = "the Lease's namespace"},
        {.name = "leader-election-id", .type = TKM_FLAG_STRING, .dst = &a->le_id, .arg = "NAME",
         .def = "tkm-controller", .help = "the Lease's name"},
        {.name = "lease-duration", .type = TKM_FLAG_DURATION, .dst = &a->lease_ms,
         .arg = "DURATION", .def = "15s", .bare_ms = 1000,
         .help = "leader election: how long a Lease is valid without renewal"},
        {.name = "renew-deadline", .type = TKM_FLAG_DURATION, .dst = &a->renew_ms,
         .arg = "DURATION", .def = "10s", .bare_ms = 1000,
         .help = "leader election: how long the leader tries to renew before it gives up"},
        {.name = "retry-period", .type = TKM_FLAG_DURATION, .dst = &a->retry_ms,
         .arg = "DURATION", .def = "2s", .bare_ms = 1000,
         .help = "leader election: the wait between two tries"},
        {.name = "metrics-bind-address", .type = TKM_FLAG_STRING, .dst = &a->metrics_addr,
         .arg = "ADDR", .def = ":8080", .help = "/metrics on host:port or :port; \"0\" disables"},
        {.name = "health-probe-bind-address", .type = TKM_FLAG_STRING, .dst = &a->health_addr,
         .arg = "ADDR", .def = ":8081",
         .help = "/healthz and /readyz on host:port or :port; \"0\" disables"},
        {.name = "state-dir", .type = TKM_FLAG_STRING, .dst = &a->state_dir, .arg = "DIR",
         .def = "/var/lib/tkm-controller",
         .help = "SQLite state (pins, verifications, status hashes); \"\" keeps it in memory"},
        {.name = "cleanup-timeout", .type = TKM_FLAG_DURATION, .dst = &a->cleanup_timeout_ms,
         .arg = "DURATION", .def = "60s", .bare_ms = 1000,
         .help = "how long a deleted cache waits for the agents to drop their entries\n"
                 "before the controller removes them"},
        {.name = "registry-timeout", .type = TKM_FLAG_DURATION, .dst = &a->registry_timeout_ms,
         .arg = "DURATION", .def = "30s", .bare_ms = 1000, .help = "per registry request"},
        {.name = "pull-deadline", .type = TKM_FLAG_DURATION, .dst = &a->pull_deadline_ms,
         .arg = "DURATION", .def = "30m", .min = 1,
         .help = "each blob download (signatures), retries included, ends after this\n"
                 "long (reason PullDeadlineExceeded); tkm-config pullDeadline wins"},
        TKM_VERIFY_REACH_FLAGS(&a->reach),
        {.name = "status-min-interval", .type = TKM_FLAG_DURATION,
         .dst = &a->status_interval_ms, .arg = "DURATION", .def = "500ms", .bare_ms = 1,
         .help = "least time between two status writes of one cache"},
        {.name = "status-settle", .type = TKM_FLAG_DURATION, .dst = &a->status_settle_ms,
         .arg = "DURATION", .def = "250ms", .bare_ms = 1,
         .help = "write a cache's status once the node reports for it have been quiet\n"
                 "this long, or at the latest 10 x --status-min-interval (or 50ms per\n"
                 "cache, when longer) after a change; 0 = at once"},
        {.name = "node-gc-grace", .type = TKM_FLAG_DURATION, .dst = &a->node_gc_grace_ms,
         .arg = "DURATION", .def = "5s", .bare_ms = 1000,
         .help = "a node status younger than this is never collected"},
        {.name = "signature-floor", .type = TKM_FLAG_CHOICE, .dst = &a->signature_floor,
         .choices = "Enforce|Audit|Disabled", .def = "tkm-config's signatureMode",
         .help = "the weakest signature mode a namespaced cache may choose, when\n"
                 "tkm-config sets no signatureFloor (PolicyBelowFloor)"},
        {.name = "node-labels", .type = TKM_FLAG_BOOL, .dst = &a->node_labels, .def = "true",
         .help = "label each Node where a cache is usable (tkc.tkm.io/<ns>.<name>,\n"
                 "tkcc.tkm.io/<name>: for nodeSelector); =false: no labels, no Node patches"},
        {.name = "workers", .type = TKM_FLAG_UINT, .dst = &workers, .arg = "N", .def = "64",
         .min = 1, .max = 256, .help = "caches reconciled at once"},
    };
    /* clang-format on */
    struct tkm_flagset *fs = &a->flags;
    *fs = (struct tkm_flagset){.prog = "tkm-controller",
                               .synopsis = "tkm-controller [flags]",
                               .about = about,
                               .flags = flags,
                               .n_flags = TKM_ARRAY_SIZE(flags),
                               .epilogue = epilogue};
    int rc = tkm_flags_parse(fs, argc, argv);
    fs->flags = NULL; /* the table was on this stack */
    fs->n_flags = 0;
    a->workers = (unsigned)workers;
    if (!a->le_ns)
        a->le_ns = a->ns;
    return rc;
}

/* ---- leadership and signals ------------------------------------------------------------ */

static void started_leading(void *data)
{
    struct app *app = data;
    tkm_info("controller: became the leader (Lease %s/%s)", app->a.le_ns, app->a.le_id);
    ctrl_set_leading(&app->ctrl, 1);
}

static void stopped_leading(void *data)
{
    struct app *app = data;
    if (app->d.stopping)
        return;
    /* As controller-runtime: a leader that lost its lease stops (exit 1);
     * the Deployment restarts it as a candidate. */
    tkm_err("controller: leader election lost: stopping");
    tkm_daemon_stop(&app->d, 1);
}

static void new_leader(const char *id, void *data)
{
    (void)data;
    tkm_info("controller: the leader is now \"%s\"", id);
}

/* ---- the stop: closes, each reported by its callback (tkm/daemon.h) ---------------------- */

static void clients_close(void *data)
{
    struct app *app = data;
    /* the verify context's registry sessions are freed: nothing uses the http client */
    TKM_DAEMON_CLOSE(&app->d, tkm_http_close, app->http);
    app->http = NULL;
    tkm_daemon_closed(&app->d);
}

static void lease_closed(void *data)
{
    struct app *app = data;
    /* the queue is drained and the Lease released: nothing uses the client */
    k8s_recorder_free(app->ctrl.rec);
    app->ctrl.rec = NULL;
    TKM_DAEMON_CLOSE(&app->d, k8s_client_close, app->client);
    app->client = NULL;
    ctrl_state_close(app->ctrl.state);
    app->ctrl.state = NULL;
    tkm_info("controller: stopped");
    tkm_daemon_closed(&app->d);
}

static void queue_closed(void *data)
{
    struct app *app = data;
    app->ctrl.q = NULL;
    /* no reconcile is in flight: the Lease can go (release_on_stop) */
    tkm_daemon_closing(&app->d);
    if (app->lease)
        k8s_lease_close(app->lease, lease_closed, app);
    else
        lease_closed(app);
    app->lease = app->ctrl.lease = NULL;
    tkm_daemon_closed(&app->d);
}

/* The stop, in this order: readiness and /metrics go; the informers and watches stop (no
 * new work); the registry operations in flight are cancelled, then the http client is
 * closed; the queue drains (the reconciles in flight finish: they act no more once
 * ctrl.stopping is set, and a status write in flight completes); then the Lease is
 * released and the k8s client closed. The loop ends when the last close has reported. */
static void on_stop(struct tkm_daemon *d, int signum, void *data)
{
    struct app *app = data;
    struct ctrl *c = &app->ctrl;
    (void)signum;
    c->stopping = 1;
    if (app->lease)
        tkm_info("controller: stopping (the Lease is released once the reconciles in flight "
                 "have finished)");
    if (app->srv_health != app->srv_metrics)
        TKM_DAEMON_CLOSE(d, tkm_httpd_close, app->srv_health);
    TKM_DAEMON_CLOSE(d, tkm_httpd_close, app->srv_metrics);
    app->srv_health = app->srv_metrics = NULL;
    for (int i = 0; i < 3; i++) {
        TKM_DAEMON_CLOSE(d, k8s_informer_close, c->inf[i]);
        TKM_DAEMON_CLOSE(d, k8s_watch_close, c->w[i]);
        c->inf[i] = NULL;
        c->w[i] = NULL;
    }
    /* the verify jobs in flight end their keys (a cancelled job never calls back), then
     * the registry sessions close; the http client closes after them */
    ctrl_caches_cancel(c);
    tkm_daemon_closing(d);
    if (c->verify)
        tkm_verify_ctx_close(c->verify, clients_close, app);
    else
        clients_close(app);
    c->verify = NULL;
    tkm_daemon_closing(d);
    if (c->q)
        k8s_workqueue_close(c->q, queue_closed, app);
    else
        queue_closed(app);
}

/* /metrics, /healthz, /readyz: one server when both addresses are the same. */
static int serve(struct app *app, struct tkm_err *err)
{
    struct args *a = &app->a;
    int rc;
    if ((rc = tkm_metrics_new(&app->metrics, err)) < 0 ||
        (rc = tkm_metrics_add_standard(app->metrics, err)) < 0 ||
        (rc = ctrl_prom_new(&app->ctrl, app->metrics, &app->ctrl.prom, err)) < 0)
        return rc;
    if ((rc = tkm_httpd_new(app->loop, a->metrics_addr, NULL, &app->srv_metrics, err)) < 0)
        goto bind;
    if (strcmp(a->health_addr, a->metrics_addr) == 0 && strcmp(a->health_addr, "0") != 0)
        app->srv_health = app->srv_metrics;
    else if ((rc = tkm_httpd_new(app->loop, a->health_addr, NULL, &app->srv_health, err)) < 0)
        goto bind;
    if ((rc = tkm_metrics_serve(app->metrics, app->srv_metrics, "/metrics", err)) < 0 ||
        (rc = tkm_httpd_health(app->srv_health, "/healthz", err)) < 0 ||
        (rc = tkm_httpd_add_check(app->srv_health, "/readyz", "informers", ctrl_ready_check,
                                  &app->ctrl, err)) < 0)
        return rc;
    if (app->srv_metrics)
        tkm_info("controller: /metrics on %s", tkm_httpd_addr(app->srv_metrics));
    if (app->srv_health)
        tkm_info("controller: /healthz and /readyz on %s", tkm_httpd_addr(app->srv_health));
    return 0;
bind:
    tkm_err_prefix(err, "--metrics-bind-address / --health-probe-bind-address");
    return rc;
}

/* The Lease holder: $POD_NAME (the downward API, manifests/base) plus a random
 * suffix, so that a restarted container of the same pod is a new candidate,
 * as controller-runtime's "<pod>_<uuid>"; without POD_NAME, "<host>_<pid>". */
static void lease_identity(char *out, size_t n)
{
    const char *pod = getenv("POD_NAME");
    unsigned char r[6] = {0};
    if (pod && *pod && getrandom(r, sizeof r, 0) == (ssize_t)sizeof r) {
        snprintf(out, n, "%.150s_%02x%02x%02x%02x%02x%02x", pod, r[0], r[1], r[2], r[3], r[4],
                 r[5]);
        return;
    }
    char host[128] = "tkm-controller";
    gethostname(host, sizeof host - 1);
    snprintf(out, n, "%s_%d", host, (int)getpid());
}

static int setup(struct app *app, struct tkm_err *err)
{
    struct args *a = &app->a;
    struct k8s_config cfg;
    struct ctrl_state *state = NULL;
    struct tkm_verify_ctx *verify = NULL;
    struct k8s_recorder *rec = NULL;
    int rc;
    k8s_config_init(&cfg);
    rc = k8s_config_load_default(&cfg, a->kubeconfig, err);
    if (rc == 0)
        rc = k8s_client_new(app->loop, &cfg, NULL, &app->client, err);
    k8s_config_release(&cfg);
    if (rc < 0)
        return rc;
    if (a->state_dir[0] && mkdir(a->state_dir, 0700) < 0 && errno != EEXIST)
        return tkm_err_set(err, -errno, "--state-dir %s: %s", a->state_dir, strerror(errno));
    if ((rc = ctrl_state_open(a->state_dir[0] ? a->state_dir : NULL, &state, err)) < 0)
        return rc;
    struct tkm_verify_ctx_opts vo = {.timeout_ms = a->registry_timeout_ms,
                                     .pull_deadline_ms = a->pull_deadline_ms};
    if ((rc = tkm_http_new(app->loop, NULL, &app->http, err)) < 0 ||
        (rc = tkm_verify_ctx_new(app->loop, app->http, &vo, &verify, err)) < 0)
        return rc;
    /* the flags' policy until tkm-config is read (a bad flag stops the start) */
    if ((rc = tkm_verify_ctx_reach(verify, NULL, &a->reach, err)) < 0) {
        tkm_err_prefix(err, "--registry-*");
        return rc;
    }
    struct ctrl_opts co = {.ns = a->ns,
                           .reach = a->reach,
                           .cleanup_timeout_ms = a->cleanup_timeout_ms,
                           .status_min_interval_ms = a->status_interval_ms,
                           .status_settle_ms = a->status_settle_ms,
                           .node_gc_grace_ms = a->node_gc_grace_ms,
                           .node_labels = a->node_labels,
                           .signature_floor = a->signature_floor,
                           .workers = a->workers};
    if ((rc = ctrl_init(&app->ctrl, app->loop, app->client, verify, state, &co, err)) < 0)
        return rc;
    struct k8s_recorder_opts rco = {.component = "tkm-controller"};
    if ((rc = k8s_recorder_new(app->client, &rco, &rec, err)) < 0)
        return rc;
    app->ctrl.rec = rec;
    if ((rc = serve(app, err)) < 0 || (rc = ctrl_start(&app->ctrl, err)) < 0)
        return rc;
    if (!a->leader_elect) {
        ctrl_set_leading(&app->ctrl, 1);
        return 0;
    }
    char id[200];
    lease_identity(id, sizeof id);
    struct k8s_lease_opts lo = {.ns = a->le_ns,
                                .name = a->le_id,
                                .identity = id,
                                .lease_duration_ms = a->lease_ms,
                                .renew_deadline_ms = a->renew_ms,
                                .retry_period_ms = a->retry_ms,
                                .release_on_stop = 1,
                                .on_started_leading = started_leading,
                                .on_stopped_leading = stopped_leading,
                                .on_new_leader = new_leader,
                                .data = app};
    if ((rc = k8s_lease_start(app->client, &lo, &app->lease, err)) < 0)
        return rc;
    app->ctrl.lease = app->lease;
    tkm_info("controller: campaigning for Lease %s/%s as %s", a->le_ns, a->le_id, id);
    return 0;
}

int main(int argc, char **argv)
{
    static struct app app;
    struct tkm_err err = {0};
    int rc = parse_args(argc, argv, &app.a);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    /* One malloc arena: the loop does the work, the thread pool's few short
     * jobs need no arena of their own (each keeps pages resident). Fixed
     * mmap and trim thresholds: glibc's dynamic threshold would grow after
     * the first large buffer is freed (a list response, a watch chunk) and
     * keep later ones in the heap, where they fragment it. */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024);
    tkm_flags_log_init(&app.a.flags, TKM_LOG_INFO);
    if (tkm_threadpool_init(0, &err) < 0 || tkm_http_global_init(&err) < 0) {
        fprintf(stderr, "tkm-controller: %s\n", tkm_err_str(&err));
        return 1;
    }
    app.loop = uv_default_loop();
    struct tkm_daemon_opts dopts = {.on_stop = on_stop, .data = &app};
    if (tkm_daemon_init(&app.d, app.loop, &dopts, &err) < 0 || setup(&app, &err) < 0) {
        fprintf(stderr, "tkm-controller: %s\n", tkm_err_str(&err));
        return 1;
    }
    tkm_info("controller: started (namespace %s, state %s, leader election %s)", app.a.ns,
             app.a.state_dir[0] ? app.a.state_dir : "in memory", app.a.leader_elect ? "on" : "off");
    return tkm_daemon_run(&app.d);
}
