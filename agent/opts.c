/* opts.c - tkm-agent's flags (agent.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/util.h>

#include "agent.h"

static void usage(FILE *f)
{
    fprintf(
        f, "Usage: tkm-agent [flags]\n"
           "       tkm-agent --once [-o json|yaml] [--image REF|LAYOUT_DIR [--key cosign.pub]]\n\n"
           "The tkm node daemon. It probes this node's GPUs, watches TritonKernelCache (all\n"
           "namespaces) and TritonKernelCacheCluster, and for every cache whose digest\n"
           "tkm-controller pinned (status.resolvedDigest) it fetches the manifest and config by\n"
           "that digest, verifies the signature with the effective policy (the cache's\n"
           "signaturePolicy, else ConfigMap tkm-config), judges every GPU and writes the result\n"
           "to TritonKernelCacheNodeStatus (one per namespace) and\n"
           "TritonKernelCacheNodeStatusCluster objects named after the node (server-side apply,\n"
           "field manager tkm-agent, owned by the Node). See agent/README.md and docs/agent.md.\n\n"
           "Flags:\n"
           "  --kubeconfig PATH             kubeconfig (default: $KUBECONFIG, else the\n"
           "                                in-cluster config, else ~/.kube/config)\n"
           "  --node-name NAME              this node (default $NODE_NAME; required)\n"
           "  --namespace NS                the agent's namespace, for tkm-config and the Secrets\n"
           "                                of cluster caches (default $POD_NAMESPACE, else\n"
           "                                tkm-system)\n"
           "  --store-dir DIR               the cache store (default /var/lib/tkm/store)\n"
           "  --socket PATH                 the CSI driver's socket (default\n"
           "                                " AGENT_DEFAULT_SOCKET ")\n"
           "  --store-budget SIZE           disk budget of the store (default 10Gi; Ki Mi Gi Ti)\n"
           "  --gc-grace DURATION           keep unused caches this long (default 10m; s m h)\n"
           "  --metrics-bind-address ADDR   /metrics on host:port or :port (default :8080;\n"
           "                                \"0\" disables)\n"
           "  --health-probe-bind-address ADDR  /healthz and /readyz (default :8081; \"0\"\n"
           "                                disables)\n"
           "  --sysfs-root DIR              read /sys from DIR (default /sys)\n"
           "  --procfs-root DIR             read /proc from DIR (default /proc)\n"
           "  --nvml-lib PATH               the NVML library to dlopen (default\n"
           "                                libnvidia-ml.so.1)\n"
           "  --no-nvml                     do not load NVML\n"
           "  -v N                          log verbosity: 0 errors+warnings+info (default),\n"
           "                                1 debug, 2 trace\n"
           "  --once                        probe, judge, print the node status it would\n"
           "                                apply, exit (writes nothing)\n"
           "  -o, --output json|yaml        --once output format (default json)\n"
           "  --image REF|LAYOUT_DIR        --once: judge this image (a registry reference or an\n"
           "                                OCI layout written by tkmctl build) instead of the\n"
           "                                caches in the apiserver; no apiserver is needed\n"
           "  --once-timeout DURATION       --once: give up (exit 1) after this long without an\n"
           "                                answer from the apiserver or registry (default 2m)\n"
           "  --key FILE                    --once --image: verify the cosign signature with this\n"
           "                                public key (else the signature is not checked)\n"
           "  -h, --help                    this text\n\n"
           "Exit status (--once): 0 when every cache is verified (or not enforced) and\n"
           "compatible with at least one GPU; 1 otherwise (the reason is printed); 2 on a usage\n"
           "error. Signals: SIGTERM/SIGINT stop gracefully (work in flight is cancelled, nothing\n"
           "partial is left in the store); SIGHUP probes the GPUs again.\n\n"
           "Examples:\n"
           "  NODE_NAME=gpu-1 tkm-agent --kubeconfig ~/.kube/config --store-dir /tmp/store \\\n"
           "      --socket /tmp/tkm/agent.sock --metrics-bind-address 127.0.0.1:9090\n"
           "  tkm-agent --once --image ./layout -o json\n"
           "  tkm-agent --once --image registry.example.com/kernels/add@sha256:... --key "
           "cosign.pub\n");
}

int agent_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suf;
        uint64_t mul;
    } units[] = {{"Ki", 1ULL << 10}, {"Mi", 1ULL << 20}, {"Gi", 1ULL << 30},  {"Ti", 1ULL << 40},
                 {"K", 1000ULL},     {"M", 1000000ULL},  {"G", 1000000000ULL}};
    char num[32];
    size_t n = strlen(s);
    uint64_t mul = 1, v;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t l = strlen(units[i].suf);
        if (n > l && strcmp(s + n - l, units[i].suf) == 0) {
            mul = units[i].mul;
            n -= l;
            break;
        }
    }
    if (n == 0 || n >= sizeof num)
        return -EINVAL;
    memcpy(num, s, n);
    num[n] = 0;
    if (tkm_parse_u64(num, UINT64_MAX / mul, &v) < 0)
        return -EINVAL;
    *out = v * mul;
    return 0;
}

int agent_parse_duration(const char *s, uint64_t *out_ms)
{
    char num[32];
    size_t n = strlen(s);
    uint64_t mul = 1000, v;
    if (n > 2 && strcmp(s + n - 2, "ms") == 0) {
        mul = 1;
        n -= 2;
    } else if (n > 1 && (s[n - 1] == 's' || s[n - 1] == 'm' || s[n - 1] == 'h')) {
        mul = s[n - 1] == 's' ? 1000 : s[n - 1] == 'm' ? 60000 : 3600000;
        n--;
    }
    if (n == 0 || n >= sizeof num)
        return -EINVAL;
    memcpy(num, s, n);
    num[n] = 0;
    if (tkm_parse_u64(num, UINT64_MAX / mul, &v) < 0)
        return -EINVAL;
    *out_ms = v * mul;
    return 0;
}

static int bad(const char *flag, const char *v, const char *why)
{
    if (v && v[0])
        fprintf(stderr, "tkm-agent: %s %s: %s (see tkm-agent --help)\n", flag, v, why);
    else
        fprintf(stderr, "tkm-agent: %s: %s (see tkm-agent --help)\n", flag, why);
    return -EINVAL;
}

static const char **opt_slot(struct agent_opts *o, const char *s)
{
    static const char *const names[] = {"--kubeconfig",
                                        "--node-name",
                                        "--namespace",
                                        "--store-dir",
                                        "--socket",
                                        "--metrics-bind-address",
                                        "--health-probe-bind-address",
                                        "--sysfs-root",
                                        "--procfs-root",
                                        "--nvml-lib",
                                        "--image",
                                        "--key",
                                        "-o",
                                        "--output"};
    const char **slots[] = {&o->kubeconfig,
                            &o->node_name,
                            &o->ns,
                            &o->store_dir,
                            &o->socket,
                            &o->metrics_addr,
                            &o->health_addr,
                            &o->probe.sysfs_root,
                            &o->probe.procfs_root,
                            &o->probe.nvml_lib,
                            &o->image,
                            &o->key,
                            &o->output,
                            &o->output};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0)
            return slots[i];
    return NULL;
}

static int opts_check(struct agent_opts *o)
{
    if (strcmp(o->output, "json") != 0 && strcmp(o->output, "yaml") != 0)
        return bad("--output", o->output, "expected json or yaml");
    if ((o->image || o->key) && !o->once)
        return bad(o->image ? "--image" : "--key", o->image ? o->image : o->key,
                   "only with --once");
    if (o->key && !o->image)
        return bad("--key", o->key, "only with --image");
    if (!o->image && (!o->node_name || !o->node_name[0]))
        return bad("--node-name", "", "required (or set $NODE_NAME)");
    return 0;
}

int agent_opts_parse(struct agent_opts *o, int argc, char **argv)
{
    const char *budget = "10Gi", *grace = "10m", *once_to = "2m", *ns_env = getenv("POD_NAMESPACE");
    memset(o, 0, sizeof *o);
    o->node_name = getenv("NODE_NAME");
    o->ns = ns_env && ns_env[0] ? ns_env : "tkm-system";
    o->store_dir = "/var/lib/tkm/store";
    o->socket = AGENT_DEFAULT_SOCKET;
    o->metrics_addr = ":8080";
    o->health_addr = ":8081";
    o->output = "json";
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = opt_slot(o, s);
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(s, "--once")) {
            o->once = 1;
        } else if (!strcmp(s, "--no-nvml")) {
            o->probe.no_nvml = 1;
        } else if (slot || !strcmp(s, "-v") || !strcmp(s, "--store-budget") ||
                   !strcmp(s, "--gc-grace") || !strcmp(s, "--once-timeout")) {
            if (!v)
                return bad(s, NULL, "needs a value");
            i++;
            if (slot) {
                *slot = v;
            } else if (!strcmp(s, "-v")) {
                int64_t n;
                if (tkm_parse_i64(v, 0, 9, &n) < 0)
                    return bad(s, v, "expected a level 0..9");
                o->verbosity = (int)n;
            } else if (!strcmp(s, "--store-budget")) {
                budget = v;
            } else if (!strcmp(s, "--once-timeout")) {
                once_to = v;
            } else {
                grace = v;
            }
        } else {
            return bad(s, NULL, "unknown flag");
        }
    }
    if (agent_parse_size(budget, &o->store_budget) < 0 || o->store_budget == 0)
        return bad("--store-budget", budget, "expected a size such as 10Gi, 500Mi or 1000000");
    if (agent_parse_duration(grace, &o->gc_grace_ms) < 0)
        return bad("--gc-grace", grace, "expected a duration such as 10m, 30s or 1h");
    if (agent_parse_duration(once_to, &o->once_timeout_ms) < 0 || o->once_timeout_ms == 0)
        return bad("--once-timeout", once_to, "expected a duration such as 2m or 30s");
    return opts_check(o);
}
