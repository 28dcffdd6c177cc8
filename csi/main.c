/*
 * main.c - tkm-csi: flags, the loop, signals. See csi/README.md, docs/csi.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/daemon.h>
#include <tkm/flags.h>
#include <tkm/fs.h>
#include <tkm/grpc.h>
#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/util.h>

#include "csi.h"

static const char about[] =
    "The CSI node driver " CSI_DRIVER_NAME " (ephemeral inline volumes): for each pod volume it\n"
    "asks tkm-agent to materialize the declared Triton kernel cache, then mounts at the target\n"
    "an overlay: lower = the pod's rewritten group files over the verified store copy, upper =\n"
    "the pod's scratch dir, so Triton can add kernels it misses and the store stays untouched.\n"
    "It serves kubelet's plugin-registration socket itself (no node-driver-registrar).\n";

static const char epilogue[] =
    "tkm-csi probe [--endpoint PATH] [--timeout DURATION]: exit 0 when the driver answers on\n"
    "its CSI socket (the DaemonSet's exec liveness/readiness probe), else 1 with the reason.\n"
    "\n"
    "Signals: SIGTERM/SIGINT stop: the servers stop accepting, the operations in flight finish\n"
    "their filesystem work, the socket is removed, then the process exits 0.\n"
    "\n"
    "Example (by hand, beside a tkm-agent on its default socket):\n"
    "  NODE_NAME=gpu-1 tkm-csi --endpoint /tmp/csi/csi.sock --state-dir /tmp/csi/state \\\n"
    "      --registration-dir \"\" --agent-timeout 30s -v 1 --log-format json\n"
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
    struct tkm_daemon d;
    struct csi_driver *drv;
};

static void on_stop(struct tkm_daemon *d, int signum, void *data)
{
    struct main_ctx *m = data;
    (void)signum;
    TKM_DAEMON_CLOSE(d, csi_driver_close, m->drv);
    m->drv = NULL;
}

/* --target-root, repeatable */
struct roots {
    size_t n;
    const char *dir[CSI_MAX_TARGET_ROOTS];
};

static int add_root(const char *v, void *dst, struct tkm_err *err)
{
    struct roots *r = dst;
    if (r->n + 1 >= CSI_MAX_TARGET_ROOTS)
        return tkm_err_set(err, -EINVAL, "at most %d --target-root", CSI_MAX_TARGET_ROOTS - 1);
    r->dir[r->n++] = v;
    return 0;
}

int main(int argc, char **argv)
{
    struct csi_config cfg = {
        .endpoint = "/var/lib/kubelet/plugins/" CSI_DRIVER_NAME "/csi.sock",
        .agent_socket = CSI_DEFAULT_AGENT_SOCKET,
        .node_id = getenv("NODE_NAME"),
        .state_dir = "/var/run/tkm/caches",
        .agent_timeout_ms = 100000,
        .retry_release_ms = 10000,
        .socket_idle_ms = TKM_GRPC_DEFAULT_IDLE_MS,
        .count_scratch = 1,
    };
    const char *kubelet = "/var/lib/kubelet", *reg = NULL;
    char pods[PATH_MAX], regdef[PATH_MAX];
    struct main_ctx m;
    struct tkm_err err = {0};
    uint64_t maxv = 0, maxc = TKM_GRPC_DEFAULT_MAX_CONNS;
    struct roots extra = {0};
    int rc;

    if (argc > 1 && strcmp(argv[1], "probe") == 0)
        return csi_probe_main(argc - 1, argv + 1);
    /* clang-format off */
    const struct tkm_flag flags[] = {
        {.name = "endpoint", .type = TKM_FLAG_STRING, .dst = &cfg.endpoint, .arg = "PATH",
         .def = "/var/lib/kubelet/plugins/" CSI_DRIVER_NAME "/csi.sock",
         .help = "the CSI socket to serve (a unix:// prefix is allowed)"},
        {.name = "agent-socket", .type = TKM_FLAG_STRING, .dst = &cfg.agent_socket,
         .arg = "PATH", .def = CSI_DEFAULT_AGENT_SOCKET, .help = "tkm-agent's socket"},
        {.name = "node-id", .type = TKM_FLAG_STRING, .dst = &cfg.node_id, .arg = "NAME",
         .def = "$NODE_NAME", .help = "this node's name for NodeGetInfo"},
        {.name = "state-dir", .type = TKM_FLAG_STRING, .dst = &cfg.state_dir, .arg = "DIR",
         .def = "/var/run/tkm/caches",
         .help = "per-pod layers: DIR/<namespace>/<pod>/<volume-id>/ (on a filesystem\n"
                 "overlayfs accepts as upper: tmpfs, ext4, xfs)"},
        {.name = "kubelet-dir", .type = TKM_FLAG_STRING, .dst = &kubelet, .arg = "DIR",
         .def = "/var/lib/kubelet", .help = "kubelet's root; targets must lie below DIR/pods"},
        {.name = "target-root", .type = TKM_FLAG_FUNC, .dst = &extra, .arg = "DIR",
         .set = add_root, .help = "another directory targets may lie below (repeatable; tests)"},
        {.name = "registration-dir", .type = TKM_FLAG_STRING, .dst = &reg, .arg = "DIR",
         .def = "<kubelet-dir>/plugins_registry",
         .help = "kubelet's plugin-registration dir, \"\" for none"},
        {.name = "agent-timeout", .type = TKM_FLAG_DURATION, .dst = &cfg.agent_timeout_ms,
         .arg = "DURATION", .def = "100s", .min = 1, .max = 86400000, .bare_ms = 1000,
         .help = "deadline of the agent's Materialize/Release"},
        {.name = "retry-release", .type = TKM_FLAG_DURATION, .dst = &cfg.retry_release_ms,
         .arg = "DURATION", .def = "10s", .min = 1, .max = 86400000, .bare_ms = 1000,
         .help = "how often releases the agent missed are retried"},
        {.name = "max-volumes", .type = TKM_FLAG_UINT, .dst = &maxv, .arg = "N", .def = "0",
         .max = 1000000, .help = "NodeGetInfo's max_volumes_per_node, 0 = no limit"},
        {.name = "socket-max-connections", .type = TKM_FLAG_UINT, .dst = &maxc, .arg = "N",
         .def = "1024", .min = 1, .max = 1000000,
         .help = "connections each of its sockets serves at once; more are closed at\n"
                 "once (logged)"},
        {.name = "count-scratch", .type = TKM_FLAG_BOOL, .dst = &cfg.count_scratch,
         .def = "true",
         .help = "at unpublish, count what the pod compiled into its scratch layer\n"
                 "(new kernels per part, files, bytes) and send it with the agent's\n"
                 "Release; --count-scratch=false sends no counts (docs/csi.md)"},
        {.name = "socket-idle-timeout", .type = TKM_FLAG_DURATION, .dst = &cfg.socket_idle_ms,
         .arg = "DURATION", .def = "5m", .min = 1,
         .help = "close a socket connection without a call for this long"},
    };
    /* clang-format on */
    struct tkm_flagset fs = {.prog = "tkm-csi",
                             .synopsis = "tkm-csi [flags]\n       tkm-csi probe [flags]",
                             .about = about,
                             .flags = flags,
                             .n_flags = TKM_ARRAY_SIZE(flags),
                             .epilogue = epilogue};
    if ((rc = tkm_flags_parse(&fs, argc, argv)) != 0)
        return rc > 0 ? 0 : 2;
    if (strncmp(cfg.endpoint, "unix://", 7) == 0)
        cfg.endpoint += 7;
    if (strncmp(cfg.agent_socket, "unix://", 7) == 0)
        cfg.agent_socket += 7;
    cfg.max_volumes = (int64_t)maxv;
    cfg.socket_max_conns = (unsigned)maxc;
    tkm_flags_log_init(&fs, TKM_LOG_INFO);
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
    for (size_t i = 0; i < extra.n; i++) {
        if (csi_check_abs_path(extra.dir[i], "--target-root", &err) < 0)
            goto usage_err;
        cfg.target_roots[cfg.n_target_roots++] = extra.dir[i];
    }
    snprintf(regdef, sizeof(regdef), "%s/plugins_registry", kubelet);
    cfg.registration_dir = reg ? reg : regdef;

    umask(022);
    if (tkm_threadpool_init(0, &err) < 0)
        tkm_warn("thread pool: %s", tkm_err_str(&err));
    if (tkm_mkdir_p(cfg.state_dir, 0755, &err) < 0) {
        tkm_err("--state-dir: %s", tkm_err_str(&err));
        return 1;
    }
    memset(&m, 0, sizeof(m));
    uv_loop_init(&m.loop);
    struct tkm_daemon_opts dopts = {.on_stop = on_stop, .data = &m};
    if (tkm_daemon_init(&m.d, &m.loop, &dopts, &err) < 0 ||
        csi_driver_new(&m.loop, &cfg, &m.drv, &err) < 0) {
        tkm_err("%s", tkm_err_str(&err));
        tkm_daemon_stop(&m.d, 1);
        tkm_daemon_run(&m.d);
        uv_loop_close(&m.loop);
        return 1;
    }
    tkm_info("serving " CSI_DRIVER_NAME " %s on %s (node %s, agent %s, state %s%s%s)", TKM_VERSION,
             cfg.endpoint, cfg.node_id, cfg.agent_socket, cfg.state_dir,
             cfg.registration_dir[0] ? ", registration in " : "", cfg.registration_dir);
    int code = tkm_daemon_run(&m.d);
    rc = uv_loop_close(&m.loop);
    if (rc != 0)
        tkm_warn("loop closed with handles open: %s", uv_strerror(rc));
    tkm_info("stopped");
    return code;
usage_err:
    fprintf(stderr, "tkm-csi: %s\n", tkm_err_str(&err));
    return 2;
}
