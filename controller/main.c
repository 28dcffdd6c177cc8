/*
 * tkm-controller - the control plane of tkm (controller/README.md,
 * docs/controller.md). Flags follow controller-runtime operators.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/http.h>
#include <tkm/httpd.h>
#include <tkm/metrics.h>
#include <tkm/log.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/events.h>
#include <k8s/lease.h>

#include "ctrl-int.h"

struct args {
    const char *kubeconfig, *ns, *le_ns, *le_id, *metrics_addr, *health_addr, *state_dir;
    int leader_elect;
    int level;
    uint64_t cleanup_timeout_ms, registry_timeout_ms, status_interval_ms, node_gc_grace_ms;
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
    uv_signal_t sig_term, sig_int;
    uv_timer_t exit_timer;
    int exiting;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "Usage: tkm-controller [flags]\n\n"
        "The control plane of tkm: pins each TritonKernelCache / TritonKernelCacheCluster image\n"
        "tag to a digest, verifies its signature, aggregates what the node agents report into the\n"
        "cache's status (Verified, Ready, Progressing, Degraded, counts, failedNodes) and cleans\n"
        "up after deleted caches and Nodes. See controller/README.md and docs/controller.md.\n\n"
        "Flags (--flag VALUE or --flag=VALUE):\n"
        "  --kubeconfig PATH                  kubeconfig; default $KUBECONFIG, else in-cluster,\n"
        "                                     else ~/.kube/config\n"
        "  --namespace NS                     the controller's namespace (ConfigMap tkm-config,\n"
        "                                     Secrets of cluster caches); default $POD_NAMESPACE,\n"
        "                                     else tkm-system\n"
        "  --leader-elect[=true|false]        elect a leader on a Lease before acting (default "
        "false)\n"
        "  --leader-election-namespace NS     the Lease's namespace (default: --namespace)\n"
        "  --leader-election-id NAME          the Lease's name (default tkm-controller)\n"
        "  --metrics-bind-address ADDR        /metrics on host:port or :port; \"0\" disables "
        "(default :8080)\n"
        "  --health-probe-bind-address ADDR   /healthz and /readyz; \"0\" disables (default "
        ":8081)\n"
        "  --state-dir DIR                    SQLite state (pins, verifications, status hashes);\n"
        "                                     default /var/lib/tkm-controller; \"\" keeps it in "
        "memory\n"
        "  -v N, --zap-log-level LEVEL        0 info (default), 1+ debug; or error|info|debug\n"
        "  --cleanup-timeout SECONDS          how long a deleted cache waits for the agents to "
        "drop\n"
        "                                     their entries before the controller removes them "
        "(60)\n"
        "  --registry-timeout SECONDS         per registry request (30)\n"
        "  --status-min-interval MS           least time between two status writes of one cache "
        "(500)\n"
        "  --node-gc-grace SECONDS            a node status younger than this is never collected "
        "(5)\n"
        "  --status-settle MS                 write a cache's status once the node reports for "
        "it\n"
        "                                     have been quiet this long, or at the latest\n"
        "                                     10 x --status-min-interval (or 50 ms per cache,\n"
        "                                     when longer) after a change; 0 = at once (250)\n"
        "  --workers N                        caches reconciled at once (64)\n"
        "  --lease-duration S, --renew-deadline S, --retry-period S   leader election (15, 10, 2)\n"
        "  -h, --help                         this text\n\n"
        "Example (by hand, against a dev cluster):\n"
        "  tkm-controller --kubeconfig ~/.kube/config --namespace tkm-system --state-dir /tmp/tkmc "
        "\\\n"
        "      --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 -v "
        "1\n");
}

enum {
    O_KUBECONFIG = 256,
    O_NS,
    O_LE,
    O_LE_NS,
    O_LE_ID,
    O_METRICS,
    O_HEALTH,
    O_STATE,
    O_ZAP,
    O_CLEANUP,
    O_REGTIMEOUT,
    O_STATUSINT,
    O_SETTLE,
    O_GCGRACE,
    O_WORKERS,
    O_LEASE,
    O_RENEW,
    O_RETRY,
};

static int parse_secs(const char *name, const char *v, uint64_t mult, uint64_t *out)
{
    uint64_t x;
    if (tkm_parse_u64(v, UINT64_MAX / 1000, &x) < 0) {
        fprintf(stderr, "tkm-controller: %s: \"%s\" is not a number\n", name, v);
        return -EINVAL;
    }
    *out = x * mult;
    return 0;
}

static int parse_level(const char *v, int *out)
{
    int64_t n;
    if (tkm_parse_i64(v, 0, 10, &n) == 0) {
        *out = n >= 1 ? TKM_LOG_DEBUG : TKM_LOG_INFO;
        return 0;
    }
    int l = tkm_log_level_parse(v);
    if (l < 0) {
        fprintf(stderr, "tkm-controller: log level \"%s\": use a number or error|warn|info|debug\n",
                v);
        return -EINVAL;
    }
    *out = l;
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!v || strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = 1;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = 0;
    else {
        fprintf(stderr, "tkm-controller: --leader-elect=%s: use true or false\n", v);
        return -EINVAL;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        {"kubeconfig", required_argument, NULL, O_KUBECONFIG},
        {"namespace", required_argument, NULL, O_NS},
        {"leader-elect", optional_argument, NULL, O_LE},
        {"leader-election-namespace", required_argument, NULL, O_LE_NS},
        {"leader-election-id", required_argument, NULL, O_LE_ID},
        {"metrics-bind-address", required_argument, NULL, O_METRICS},
        {"health-probe-bind-address", required_argument, NULL, O_HEALTH},
        {"state-dir", required_argument, NULL, O_STATE},
        {"zap-log-level", required_argument, NULL, O_ZAP},
        {"cleanup-timeout", required_argument, NULL, O_CLEANUP},
        {"registry-timeout", required_argument, NULL, O_REGTIMEOUT},
        {"status-min-interval", required_argument, NULL, O_STATUSINT},
        {"status-settle", required_argument, NULL, O_SETTLE},
        {"node-gc-grace", required_argument, NULL, O_GCGRACE},
        {"workers", required_argument, NULL, O_WORKERS},
        {"lease-duration", required_argument, NULL, O_LEASE},
        {"renew-deadline", required_argument, NULL, O_RENEW},
        {"retry-period", required_argument, NULL, O_RETRY},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *pns = getenv("POD_NAMESPACE");
    uint64_t w;
    int ch, rc = 0;
    *a = (struct args){.ns = pns && *pns ? pns : "tkm-system",
                       .le_id = "tkm-controller",
                       .metrics_addr = ":8080",
                       .health_addr = ":8081",
                       .state_dir = "/var/lib/tkm-controller",
                       .level = TKM_LOG_INFO,
                       .cleanup_timeout_ms = 60000,
                       .registry_timeout_ms = 30000,
                       .status_interval_ms = 500,
                       .status_settle_ms = 250,
                       .node_gc_grace_ms = 5000,
                       .workers = 64,
                       .lease_ms = 15000,
                       .renew_ms = 10000,
                       .retry_ms = 2000};
    while (rc == 0 && (ch = getopt_long(argc, argv, "hv:", opts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            usage(stdout);
            exit(0);
        case O_KUBECONFIG:
            a->kubeconfig = optarg;
            break;
        case O_NS:
            a->ns = optarg;
            break;
        case O_LE:
            rc = parse_bool(optarg, &a->leader_elect);
            break;
        case O_LE_NS:
            a->le_ns = optarg;
            break;
        case O_LE_ID:
            a->le_id = optarg;
            break;
        case O_METRICS:
            a->metrics_addr = optarg;
            break;
        case O_HEALTH:
            a->health_addr = optarg;
            break;
        case O_STATE:
            a->state_dir = optarg;
            break;
        case 'v':
        case O_ZAP:
            rc = parse_level(optarg, &a->level);
            break;
        case O_CLEANUP:
            rc = parse_secs("--cleanup-timeout", optarg, 1000, &a->cleanup_timeout_ms);
            break;
        case O_REGTIMEOUT:
            rc = parse_secs("--registry-timeout", optarg, 1000, &a->registry_timeout_ms);
            break;
        case O_STATUSINT:
            rc = parse_secs("--status-min-interval", optarg, 1, &a->status_interval_ms);
            break;
        case O_SETTLE:
            rc = parse_secs("--status-settle", optarg, 1, &a->status_settle_ms);
            break;
        case O_GCGRACE:
            rc = parse_secs("--node-gc-grace", optarg, 1000, &a->node_gc_grace_ms);
            break;
        case O_LEASE:
            rc = parse_secs("--lease-duration", optarg, 1000, &a->lease_ms);
            break;
        case O_RENEW:
            rc = parse_secs("--renew-deadline", optarg, 1000, &a->renew_ms);
            break;
        case O_RETRY:
            rc = parse_secs("--retry-period", optarg, 1000, &a->retry_ms);
            break;
        case O_WORKERS:
            rc = parse_secs("--workers", optarg, 1, &w);
            if (rc == 0 && (w < 1 || w > 256)) {
                fprintf(stderr, "tkm-controller: --workers %s: use 1..256\n", optarg);
                rc = -EINVAL;
            }
            a->workers = (unsigned)w;
            break;
        default:
            usage(stderr);
            return -EINVAL;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "tkm-controller: unexpected argument \"%s\" (see --help)\n", argv[optind]);
        rc = -EINVAL;
    }
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
    if (app->exiting)
        return;
    /* As controller-runtime: a leader that lost its lease exits; the
     * Deployment restarts it as a candidate. */
    tkm_err("controller: leader election lost: exiting");
    exit(1);
}

static void new_leader(const char *id, void *data)
{
    (void)data;
    tkm_info("controller: the leader is now \"%s\"", id);
}

static void exit_now(uv_timer_t *t)
{
    struct app *app = t->data;
    tkm_info("controller: stopped");
    ctrl_state_close(app->ctrl.state);
    exit(0);
}

static void lease_closed(void *data)
{
    struct app *app = data;
    exit_now(&app->exit_timer);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct app *app = s->data;
    if (app->exiting)
        return;
    app->exiting = 1;
    app->ctrl.stopping = 1;
    tkm_info("controller: signal %d: stopping%s", signum,
             app->lease ? " (releasing the lease)" : "");
    /* Exit in at most 3 s even if the apiserver does not answer the release. */
    uv_timer_start(&app->exit_timer, exit_now, app->lease ? 3000 : 0, 0);
    if (app->lease)
        k8s_lease_stop(app->lease, lease_closed, app);
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
    struct tkm_verify_ctx_opts vo = {.timeout_ms = a->registry_timeout_ms};
    if ((rc = tkm_http_new(app->loop, NULL, &app->http, err)) < 0 ||
        (rc = tkm_verify_ctx_new(app->loop, app->http, &vo, &verify, err)) < 0)
        return rc;
    struct ctrl_opts co = {.ns = a->ns,
                           .cleanup_timeout_ms = a->cleanup_timeout_ms,
                           .status_min_interval_ms = a->status_interval_ms,
                           .status_settle_ms = a->status_settle_ms,
                           .node_gc_grace_ms = a->node_gc_grace_ms,
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
    if (parse_args(argc, argv, &app.a) < 0)
        return 2;
    /* One malloc arena: the loop does the work, the thread pool's few short
     * jobs need no arena of their own (each keeps pages resident). Fixed
     * mmap and trim thresholds: glibc's dynamic threshold would grow after
     * the first large buffer is freed (a list response, a watch chunk) and
     * keep later ones in the heap, where they fragment it. */
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 256 * 1024);
    tkm_log_init("tkm-controller", (enum tkm_log_level)app.a.level, 0);
    if (tkm_threadpool_init(0, &err) < 0 || tkm_http_global_init(&err) < 0) {
        fprintf(stderr, "tkm-controller: %s\n", tkm_err_str(&err));
        return 1;
    }
    app.loop = uv_default_loop();
    uv_timer_init(app.loop, &app.exit_timer);
    app.exit_timer.data = &app;
    uv_signal_init(app.loop, &app.sig_term);
    uv_signal_init(app.loop, &app.sig_int);
    app.sig_term.data = app.sig_int.data = &app;
    uv_signal_start(&app.sig_term, on_signal, SIGTERM);
    uv_signal_start(&app.sig_int, on_signal, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    if (setup(&app, &err) < 0) {
        fprintf(stderr, "tkm-controller: %s\n", tkm_err_str(&err));
        return 1;
    }
    tkm_info("controller: started (namespace %s, state %s, leader election %s)", app.a.ns,
             app.a.state_dir[0] ? app.a.state_dir : "in memory", app.a.leader_elect ? "on" : "off");
    uv_run(app.loop, UV_RUN_DEFAULT);
    return 0;
}
