/*
 * main.c - tkm-csi: flags, the loop, signals. See csi/README.md, docs/csi.md.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/util.h>

#include "csi.h"

static const char usage[] =
    "Usage: tkm-csi [flags]\n"
    "\n"
    "The CSI node driver " CSI_DRIVER_NAME " (ephemeral inline volumes): for each pod volume it\n"
    "asks tkm-agent to materialize the declared Triton kernel cache, then mounts at the target\n"
    "an overlay: lower = the pod's rewritten group files over the verified store copy, upper =\n"
    "the pod's scratch dir, so Triton can add kernels it misses and the store stays untouched.\n"
    "It serves kubelet's plugin-registration socket itself (no node-driver-registrar).\n"
    "\n"
    "Flags:\n"
    "  --endpoint PATH         CSI socket to serve (unix:// prefix allowed)\n"
    "                          [/var/lib/kubelet/plugins/" CSI_DRIVER_NAME "/csi.sock]\n"
    "  --agent-socket PATH     tkm-agent's socket [" CSI_DEFAULT_AGENT_SOCKET "]\n"
    "  --node-id NAME          this node's name for NodeGetInfo [$NODE_NAME]\n"
    "  --state-dir DIR         per-pod layers: DIR/<namespace>/<pod>/<volume-id>/ "
    "[/var/run/tkm/caches]\n"
    "                          (must be on a filesystem overlayfs accepts as upper: tmpfs, ext4, "
    "xfs)\n"
    "  --kubelet-dir DIR       kubelet's root; targets must lie below DIR/pods [/var/lib/kubelet]\n"
    "  --target-root DIR       another directory targets may lie below (repeatable, tests)\n"
    "  --registration-dir DIR  kubelet's plugin-registration dir, \"\" for none\n"
    "                          [<kubelet-dir>/plugins_registry]\n"
    "  --agent-timeout SEC     deadline of the agent's Materialize/Release [100]\n"
    "  --retry-release SEC     how often releases the agent missed are retried [10]\n"
    "  --max-volumes N         NodeGetInfo max_volumes_per_node, 0 = no limit [0]\n"
    "  -v, --verbose           more log (-v debug); --log-level error|warn|info|debug|trace\n"
    "  --log-json              log one JSON object per line\n"
    "  -h, --help              this text\n"
    "\n"
    "tkm-csi probe [--endpoint PATH] [--timeout SEC]: exit 0 when the driver answers on its CSI\n"
    "socket (the DaemonSet's exec liveness/readiness probe), else 1 with the reason.\n"
    "\n"
    "Pod volume (docs/csi.md):\n"
    "  volumes:\n"
    "  - name: triton-cache\n"
    "    csi:\n"
    "      driver: " CSI_DRIVER_NAME "\n"
    "      volumeAttributes: {cacheName: vector-add, mountPath: /cache}  # readOnly: "
    "\"true\"|\"false\"\n"
    "  and in the container: TRITON_CACHE_DIR=/cache, volumeMounts: [{name: triton-cache, "
    "mountPath: /cache}]\n"
    "\n"
    "Errors reach `kubectl describe pod` as CSI codes: PermissionDenied (cache not declared for\n"
    "the namespace), FailedPrecondition (not verified / incompatible here), InvalidArgument (bad\n"
    "attributes), Unavailable (agent unreachable; kubelet retries).\n";

struct main_ctx {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    struct csi_driver *drv;
};

static void on_closed(void *data)
{
    struct main_ctx *m = data;
    uv_close((uv_handle_t *)&m->sigint, NULL);
    uv_close((uv_handle_t *)&m->sigterm, NULL);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct main_ctx *m = s->data;
    tkm_info("signal %d: shutting down", signum);
    uv_signal_stop(&m->sigint);
    uv_signal_stop(&m->sigterm);
    struct csi_driver *d = m->drv;
    m->drv = NULL;
    if (d)
        csi_driver_close(d, on_closed, m);
}

static int mkdir_p(const char *path, mode_t mode)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(p, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

static int parse_secs(const char *flag, const char *v, uint64_t *ms)
{
    uint64_t s;
    if (tkm_parse_u64(v, 86400, &s) < 0 || s == 0) {
        fprintf(stderr, "tkm-csi: %s \"%s\": a number of seconds from 1 to 86400\n", flag, v);
        return -1;
    }
    *ms = s * 1000;
    return 0;
}

enum {
    O_ENDPOINT = 256,
    O_AGENT,
    O_NODE,
    O_STATE,
    O_KUBELET,
    O_ROOT,
    O_REG,
    O_ATIMEOUT,
    O_RETRY,
    O_MAXVOL,
    O_LEVEL,
    O_JSON
};

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, O_ENDPOINT},
        {"agent-socket", required_argument, NULL, O_AGENT},
        {"node-id", required_argument, NULL, O_NODE},
        {"state-dir", required_argument, NULL, O_STATE},
        {"kubelet-dir", required_argument, NULL, O_KUBELET},
        {"target-root", required_argument, NULL, O_ROOT},
        {"registration-dir", required_argument, NULL, O_REG},
        {"agent-timeout", required_argument, NULL, O_ATIMEOUT},
        {"retry-release", required_argument, NULL, O_RETRY},
        {"max-volumes", required_argument, NULL, O_MAXVOL},
        {"log-level", required_argument, NULL, O_LEVEL},
        {"log-json", no_argument, NULL, O_JSON},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct csi_config cfg = {
        .endpoint = "/var/lib/kubelet/plugins/" CSI_DRIVER_NAME "/csi.sock",
        .agent_socket = CSI_DEFAULT_AGENT_SOCKET,
        .node_id = getenv("NODE_NAME"),
        .state_dir = "/var/run/tkm/caches",
        .agent_timeout_ms = 100000,
        .retry_release_ms = 10000,
    };
    const char *kubelet = "/var/lib/kubelet", *reg = NULL;
    char pods[PATH_MAX], regdef[PATH_MAX];
    int level = TKM_LOG_INFO, json = 0, c, rc;
    struct main_ctx m;
    struct tkm_err err = {0};
    int64_t maxv;
    size_t n_extra = 0;
    const char *extra[CSI_MAX_TARGET_ROOTS];

    if (argc > 1 && strcmp(argv[1], "probe") == 0)
        return csi_probe_main(argc - 1, argv + 1);
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        switch (c) {
        case O_ENDPOINT:
            cfg.endpoint = strncmp(optarg, "unix://", 7) == 0 ? optarg + 7 : optarg;
            break;
        case O_AGENT:
            cfg.agent_socket = strncmp(optarg, "unix://", 7) == 0 ? optarg + 7 : optarg;
            break;
        case O_NODE:
            cfg.node_id = optarg;
            break;
        case O_STATE:
            cfg.state_dir = optarg;
            break;
        case O_KUBELET:
            kubelet = optarg;
            break;
        case O_ROOT:
            if (n_extra + 1 >= CSI_MAX_TARGET_ROOTS) {
                fprintf(stderr, "tkm-csi: at most %d --target-root\n", CSI_MAX_TARGET_ROOTS - 1);
                return 2;
            }
            extra[n_extra++] = optarg;
            break;
        case O_REG:
            reg = optarg;
            break;
        case O_ATIMEOUT:
            if (parse_secs("--agent-timeout", optarg, &cfg.agent_timeout_ms) < 0)
                return 2;
            break;
        case O_RETRY:
            if (parse_secs("--retry-release", optarg, &cfg.retry_release_ms) < 0)
                return 2;
            break;
        case O_MAXVOL:
            if (tkm_parse_i64(optarg, 0, 1000000, &maxv) < 0) {
                fprintf(stderr, "tkm-csi: --max-volumes \"%s\": 0 to 1000000\n", optarg);
                return 2;
            }
            cfg.max_volumes = maxv;
            break;
        case O_LEVEL:
            if ((level = tkm_log_level_parse(optarg)) < 0) {
                fprintf(stderr, "tkm-csi: --log-level \"%s\": error|warn|info|debug|trace\n",
                        optarg);
                return 2;
            }
            break;
        case O_JSON:
            json = 1;
            break;
        case 'v':
            level = level < TKM_LOG_TRACE ? level + 1 : level;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs("Try 'tkm-csi --help'.\n", stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tkm-csi: unexpected argument \"%s\"; try 'tkm-csi --help'\n",
                argv[optind]);
        return 2;
    }
    tkm_log_init("tkm-csi", (enum tkm_log_level)level, json);
    if (!cfg.node_id || !cfg.node_id[0]) {
        fprintf(stderr, "tkm-csi: no node id: pass --node-id or set NODE_NAME (the DaemonSet sets "
                        "it from spec.nodeName)\n");
        return 2;
    }
    if (csi_check_abs_path(kubelet, "--kubelet-dir", &err) < 0 ||
        csi_check_abs_path(cfg.endpoint, "--endpoint", &err) < 0 ||
        csi_check_abs_path(cfg.agent_socket, "--agent-socket", &err) < 0 ||
        csi_check_option_path(cfg.state_dir, "--state-dir", &err) < 0)
        goto usage_err;
    snprintf(pods, sizeof(pods), "%s/pods", kubelet);
    cfg.target_roots[cfg.n_target_roots++] = pods;
    for (size_t i = 0; i < n_extra; i++) {
        if (csi_check_abs_path(extra[i], "--target-root", &err) < 0)
            goto usage_err;
        cfg.target_roots[cfg.n_target_roots++] = extra[i];
    }
    snprintf(regdef, sizeof(regdef), "%s/plugins_registry", kubelet);
    cfg.registration_dir = reg ? reg : regdef;

    umask(022);
    if (tkm_threadpool_init(0, &err) < 0)
        tkm_warn("thread pool: %s", tkm_err_str(&err));
    if ((rc = mkdir_p(cfg.state_dir, 0755)) < 0) {
        tkm_err("--state-dir %s: %s", cfg.state_dir, strerror(-rc));
        return 1;
    }
    memset(&m, 0, sizeof(m));
    uv_loop_init(&m.loop);
    uv_signal_init(&m.loop, &m.sigint);
    uv_signal_init(&m.loop, &m.sigterm);
    m.sigint.data = m.sigterm.data = &m;
    if (csi_driver_new(&m.loop, &cfg, &m.drv, &err) < 0) {
        tkm_err("%s", tkm_err_str(&err));
        uv_close((uv_handle_t *)&m.sigint, NULL);
        uv_close((uv_handle_t *)&m.sigterm, NULL);
        uv_run(&m.loop, UV_RUN_DEFAULT);
        uv_loop_close(&m.loop);
        return 1;
    }
    uv_signal_start(&m.sigint, on_signal, SIGINT);
    uv_signal_start(&m.sigterm, on_signal, SIGTERM);
    tkm_info("serving " CSI_DRIVER_NAME " %s on %s (node %s, agent %s, state %s%s%s)", TKM_VERSION,
             cfg.endpoint, cfg.node_id, cfg.agent_socket, cfg.state_dir,
             cfg.registration_dir[0] ? ", registration in " : "", cfg.registration_dir);
    uv_run(&m.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&m.loop);
    if (rc != 0)
        tkm_warn("loop closed with handles open: %s", uv_strerror(rc));
    tkm_info("stopped");
    return 0;
usage_err:
    fprintf(stderr, "tkm-csi: %s\n", tkm_err_str(&err));
    return 2;
}
