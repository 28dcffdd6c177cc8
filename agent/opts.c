/* opts.c - tkm-agent's flags (agent.h), read by the daemons' one parser (<tkm/flags.h>). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/flags.h>
#include <tkm/util.h>

#include "agent.h"

static const char about[] =
    "The tkm node daemon. It probes this node's GPUs, watches TritonKernelCache (all\n"
    "namespaces) and TritonKernelCacheCluster, and for every cache whose digest\n"
    "tkm-controller pinned (status.resolvedDigest) it fetches the manifest and config by\n"
    "that digest, verifies the signature with the effective policy (the cache's\n"
    "signaturePolicy, else ConfigMap tkm-config), judges every GPU and writes the result\n"
    "to TritonKernelCacheNodeStatus (one per namespace) and\n"
    "TritonKernelCacheNodeStatusCluster objects named after the node (server-side apply,\n"
    "field manager tkm-agent, owned by the Node). See agent/README.md and docs/agent.md.\n";

static const char epilogue[] =
    "Exit status (--once): 0 when every cache is verified (or not enforced) and\n"
    "compatible with at least one GPU; 1 otherwise (the reason is printed); 2 on a usage\n"
    "error. Signals: SIGTERM/SIGINT stop gracefully (work in flight is cancelled, nothing\n"
    "partial is left in the store, status writes in flight complete; exit 0); SIGHUP\n"
    "probes the GPUs again.\n\n"
    "Examples:\n"
    "  NODE_NAME=gpu-1 tkm-agent --kubeconfig ~/.kube/config --store-dir /tmp/store \\\n"
    "      --socket /tmp/tkm/agent.sock --metrics-bind-address 127.0.0.1:9090 \\\n"
    "      --store-budget 2Gi --gc-grace 30m -v 1 --log-format json\n"
    "  tkm-agent --once --image ./layout -o json\n"
    "  tkm-agent --once --image registry.example.com/kernels/add@sha256:... --key "
    "cosign.pub\n";

static int bad(const char *flag, const char *v, const char *why)
{
    if (v && v[0])
        fprintf(stderr, "tkm-agent: %s %s: %s (see tkm-agent --help)\n", flag, v, why);
    else
        fprintf(stderr, "tkm-agent: %s: %s (see tkm-agent --help)\n", flag, why);
    return -EINVAL;
}

static int opts_check(struct agent_opts *o)
{
    if ((o->image || o->key) && !o->once)
        return bad(o->image ? "--image" : "--key", o->image ? o->image : o->key,
                   "only with --once");
    if (o->key && !o->image)
        return bad("--key", o->key, "only with --image");
    if (!o->image && (!o->node_name || !o->node_name[0]))
        return bad("--node-name", "", "required (or set $NODE_NAME)");
    struct tkm_reach_policy p;
    struct tkm_err e = {0};
    int rc = tkm_api_reach_policy(NULL, &o->reach, &p, &e);
    tkm_reach_policy_release(&p);
    return rc ? bad("--registry-*", "", tkm_err_str(&e)) : 0;
}

int agent_opts_parse(struct agent_opts *o, int argc, char **argv)
{
    const char *ns_env = getenv("POD_NAMESPACE");
    memset(o, 0, sizeof *o);
    o->node_name = getenv("NODE_NAME");
    o->ns = ns_env && ns_env[0] ? ns_env : "tkm-system";
    o->store_dir = "/var/lib/tkm/store";
    o->socket = AGENT_DEFAULT_SOCKET;
    o->store_budget = 10ULL << 30;
    o->gc_grace_ms = 10 * 60 * 1000;
    o->once_timeout_ms = 2 * 60 * 1000;
    o->pull_deadline_ms = 30 * 60 * 1000;
    o->max_pulls = 2;
    o->socket_max_conns = TKM_GRPC_DEFAULT_MAX_CONNS;
    o->socket_idle_ms = TKM_GRPC_DEFAULT_IDLE_MS;
    o->metrics_addr = ":8080";
    o->health_addr = ":8081";
    o->output = "json";
    /* clang-format off */
    const struct tkm_flag flags[] = {
        {.name = "kubeconfig", .type = TKM_FLAG_STRING, .dst = &o->kubeconfig, .arg = "PATH",
         .def = "$KUBECONFIG, else in-cluster, else ~/.kube/config",
         .help = "the cluster to work on"},
        {.name = "node-name", .type = TKM_FLAG_STRING, .dst = &o->node_name, .arg = "NAME",
         .def = "$NODE_NAME", .help = "this node (required)"},
        {.name = "namespace", .type = TKM_FLAG_STRING, .dst = &o->ns, .arg = "NS",
         .def = "$POD_NAMESPACE, else tkm-system",
         .help = "the agent's namespace, for tkm-config and the Secrets of cluster caches"},
        {.name = "store-dir", .type = TKM_FLAG_STRING, .dst = &o->store_dir, .arg = "DIR",
         .def = "/var/lib/tkm/store", .help = "the cache store"},
        {.name = "socket", .type = TKM_FLAG_STRING, .dst = &o->socket, .arg = "PATH",
         .def = AGENT_DEFAULT_SOCKET, .help = "the socket tkm-csi calls"},
        {.name = "socket-max-connections", .type = TKM_FLAG_UINT, .dst = &o->socket_max_conns,
         .arg = "N", .def = "1024", .min = 1, .max = 1000000,
         .help = "connections the socket serves at once; more are closed at once\n"
                 "(tkm_agent_socket_refused_connections_total)"},
        {.name = "socket-idle-timeout", .type = TKM_FLAG_DURATION, .dst = &o->socket_idle_ms,
         .arg = "DURATION", .def = "5m", .min = 1,
         .help = "close a socket connection without a call for this long"},
        {.name = "store-budget", .type = TKM_FLAG_SIZE, .dst = &o->store_budget, .arg = "SIZE",
         .def = "10Gi", .min = 1, .help = "disk budget of the store"},
        {.name = "gc-grace", .type = TKM_FLAG_DURATION, .dst = &o->gc_grace_ms,
         .arg = "DURATION", .def = "10m", .bare_ms = 1000,
         .help = "keep unused caches this long"},
        {.name = "pull-deadline", .type = TKM_FLAG_DURATION, .dst = &o->pull_deadline_ms,
         .arg = "DURATION", .def = "30m", .min = 1,
         .help = "each blob download (the layer, the config, signatures), retries\n"
                 "included, ends after this long (reason PullDeadlineExceeded); tkm-config pullDeadline wins"},
        {.name = "max-concurrent-pulls", .type = TKM_FLAG_UINT, .dst = &o->max_pulls,
         .arg = "N", .def = "2", .min = 1, .max = 1000,
         .help = "layer downloads at once on this node (prefetch and Materialize\n"
                 "alike); more wait their turn, oldest first"},
        {.name = "pull-bandwidth", .type = TKM_FLAG_SIZE, .dst = &o->pull_bandwidth,
         .arg = "BYTES_PER_SECOND", .def = "none",
         .help = "the node's download rate cap (K M G or Ki Mi Gi), split evenly\n"
                 "over --max-concurrent-pulls: each download gets its share"},
        {.name = "metrics-bind-address", .type = TKM_FLAG_STRING, .dst = &o->metrics_addr,
         .arg = "ADDR", .def = ":8080", .help = "/metrics on host:port or :port; \"0\" disables"},
        {.name = "health-probe-bind-address", .type = TKM_FLAG_STRING, .dst = &o->health_addr,
         .arg = "ADDR", .def = ":8081",
         .help = "/healthz and /readyz on host:port or :port; \"0\" disables"},
        {.name = "sysfs-root", .type = TKM_FLAG_STRING, .dst = &o->probe.sysfs_root,
         .arg = "DIR", .def = "/sys", .help = "read /sys from DIR"},
        {.name = "procfs-root", .type = TKM_FLAG_STRING, .dst = &o->probe.procfs_root,
         .arg = "DIR", .def = "/proc", .help = "read /proc from DIR"},
        {.name = "nvml-lib", .type = TKM_FLAG_STRING, .dst = &o->probe.nvml_lib, .arg = "PATH",
         .def = "libnvidia-ml.so.1", .help = "the NVML library to dlopen"},
        {.name = "no-nvml", .type = TKM_FLAG_BOOL, .dst = &o->probe.no_nvml,
         .help = "do not load NVML"},
        {.name = "signature-floor", .type = TKM_FLAG_CHOICE, .dst = &o->signature_floor,
         .choices = "Enforce|Audit|Disabled", .def = "tkm-config's signatureMode",
         .help = "the weakest signature mode a namespaced cache may choose, when\n"
                 "tkm-config sets no signatureFloor (PolicyBelowFloor: never mounted)"},
        {.name = "once", .type = TKM_FLAG_BOOL, .dst = &o->once,
         .help = "probe, judge, print the node status it would apply, exit\n"
                 "(writes nothing)"},
        {.name = "output", .alias = "o", .type = TKM_FLAG_CHOICE, .dst = &o->output,
         .choices = "json|yaml", .def = "json", .help = "--once: the output format"},
        {.name = "image", .type = TKM_FLAG_STRING, .dst = &o->image, .arg = "REF|LAYOUT_DIR",
         .help = "--once: judge this image (a registry reference or an OCI layout\n"
                 "written by tkmctl build) instead of the caches in the apiserver;\n"
                 "no apiserver is needed"},
        {.name = "once-timeout", .type = TKM_FLAG_DURATION, .dst = &o->once_timeout_ms,
         .arg = "DURATION", .def = "2m", .min = 1, .bare_ms = 1000,
         .help = "--once: give up (exit 1) after this long without an answer from\n"
                 "the apiserver or registry"},
        {.name = "key", .type = TKM_FLAG_STRING, .dst = &o->key, .arg = "FILE",
         .help = "--once --image: verify the cosign signature with this public key\n"
                 "(else the signature is not checked)"},
        TKM_VERIFY_REACH_FLAGS(&o->reach),
    };
    /* clang-format on */
    o->flags = (struct tkm_flagset){
        .prog = "tkm-agent",
        .synopsis = "tkm-agent [flags]\n"
                    "       tkm-agent --once [-o json|yaml] [--image REF|LAYOUT_DIR [--key "
                    "cosign.pub]]",
        .about = about,
        .flags = flags,
        .n_flags = TKM_ARRAY_SIZE(flags),
        .epilogue = epilogue};
    int rc = tkm_flags_parse(&o->flags, argc, argv);
    o->flags.flags = NULL; /* the table was on this stack */
    o->flags.n_flags = 0;
    o->verbosity = o->flags.verbosity;
    if (rc != 0)
        return rc;
    return opts_check(o);
}
