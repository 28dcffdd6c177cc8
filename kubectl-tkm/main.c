/*
 * main.c - kubectl-tkm, the kubectl plugin: `kubectl tkm status|why|check|schedule`.
 * Reads the tkm.io objects the daemons read (libk8sclient, synchronous verbs
 * on a private loop), builds the matrix (kt_model.c) and prints it.
 * docs/kubectl-tkm.md describes the commands, the states and the -o json|yaml schema.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/triton/image.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>

#include "kt-int.h"
#include "kt_cli.h"

static const char *const usage_top =
    "kubectl tkm - where Triton kernel caches are ready, and why not\n"
    "\n"
    "Usage: kubectl tkm COMMAND [ARGS] [FLAGS]\n"
    "\n"
    "Commands:\n"
    "  status [CACHE]   a matrix: caches as rows, nodes (or GPU types) as columns\n"
    "  why CACHE        the chain for one cache: tag, digest, signature, per-GPU verdict,\n"
    "                   extraction, pods; each step with the object it was read from;\n"
    "                   the kernels pods keep compiling beside it\n"
    "  check IMAGE      which nodes could use an image, before any cache is created\n"
    "  schedule CACHE   the nodeSelector / nodeAffinity that keeps pods on the nodes where\n"
    "                   the cache is usable (the Node label tkm-controller maintains)\n"
    "  version          print the version\n"
    "\n"
    "Flags (every command):\n"
    "  --kubeconfig PATH        the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)\n"
    "  --context NAME           a context of the kubeconfig (default: its current-context)\n"
    "  -n, --namespace NS       the namespace (default: the context's, else \"default\")\n"
    "  -A, --all-namespaces     every namespace\n"
    "  -o, --output FORMAT      wide, json or yaml (default: a table)\n"
    "  --no-color               no colours (also: NO_COLOR set, or stdout not a terminal)\n"
    "  --request-timeout D      per apiserver request (30s, 2m, 500ms; default 30s)\n"
    "  -h, --help               help; 'kubectl tkm COMMAND --help' for a command's\n"
    "\n"
    "CACHE is NAME (a TritonKernelCache in the namespace, else a TritonKernelCacheCluster),\n"
    "tkc/NAME or tkcc/NAME. Exit status: 0 success, 1 failure (the message says why),\n"
    "2 usage error. See docs/kubectl-tkm.md.\n"
    "\n"
    "Examples:\n"
    "  kubectl tkm status -A\n"
    "  kubectl tkm why vector-add --node gpu-node-3\n"
    "  kubectl tkm check registry.example.com/kernels/vector-add:triton-3.6.0-sm90\n"
    "  kubectl tkm schedule vector-add\n";

static const char *const usage_status =
    "kubectl tkm status [CACHE] [-n NS | -A] [--by node|gpu-type] [--kind tkc|tkcc]\n"
    "                   [-o wide|json|yaml] [--width N] [--no-color]\n"
    "\n"
    "One row per cache (TritonKernelCaches of the namespace, or of all with -A, and the\n"
    "TritonKernelCacheClusters), one column per node that reports node status, each cell\n"
    "the cache's state on that node, read from the node's TritonKernelCacheNodeStatus:\n"
    "  ready         verified and compatible with a GPU of the node\n"
    "  extracted     ready and extracted into the node's store\n"
    "  in use (N)    extracted and mounted by N pods\n"
    "  incompatible  no GPU of the node can use it (reason listed under the table)\n"
    "  unverified    its signature did not verify (or not yet)\n"
    "  failed        the node's agent reports an error (pull, extraction, policy)\n"
    "  pending       the node reports another digest than the pinned one, or has not\n"
    "                judged it yet\n"
    "  -             the node reports nothing for it\n"
    "\n"
    "When the node columns do not fit the width, nodes are grouped by GPU type\n"
    "(\"H200 x998: ready\"), and the nodes unlike the rest of their type are listed under\n"
    "the table with their reasons. The width is --width, else $COLUMNS, else the terminal's,\n"
    "else 80 (piped); --width 0 never groups.\n"
    "\n"
    "When nodes report variants (one image per GPU target in an image index), a \"By\n"
    "variant:\" table follows: per cache, the nodes using each variant, and the nodes whose\n"
    "GPUs no variant fits, by GPU type (NoVariant, HostArchMismatch; \"empty volume\" where\n"
    "the pods got an empty cache).\n"
    "\n"
    "When tkm-controller counts what pods compiled beside a cache (status.compiles), a HIT\n"
    "column follows CACHE: pods that compiled nothing / pods served (\"-\": none counted).\n"
    "\n"
    "Flags:\n"
    "  --by node|gpu-type   force the columns (default: nodes when they fit)\n"
    "  --kind tkc|tkcc      only namespaced (tkc) or only cluster (tkcc) caches\n"
    "  --width N            the width to fit (0: unlimited)\n"
    "  -o wide              add DIGEST and IMAGE columns, list every exception\n"
    "  -o json|yaml         the whole matrix as a document (schema: docs/kubectl-tkm.md)\n"
    "\n"
    "Examples:\n"
    "  kubectl tkm status                      # the caches of the current namespace\n"
    "  kubectl tkm status -A --by gpu-type     # every cache, columns per GPU type\n"
    "  kubectl tkm status vector-add -o json | jq '.caches[0].counts'\n";

static const char *const usage_why =
    "kubectl tkm why CACHE [--node NODE] [-n NS] [-o json|yaml] [--no-color]\n"
    "\n"
    "The chain for one cache: its tag (spec.cacheImage) -> the pinned digest\n"
    "(status.resolvedDigest) -> the signature (the Verified condition, with the key id) ->\n"
    "Ready; then, on NODE, the digest the node has, its own verification, each GPU's verdict\n"
    "with its reason, the extraction, the pods using it and any error. Each step names the\n"
    "object and field it was read from. Without --node: how many nodes are in each state.\n"
    "When pods were counted (status.compiles): how many compiled beside the cache, and the\n"
    "kernels they keep compiling with how many pods compiled each; re-capture the cache\n"
    "with tkmctl capture (docs/capture.md) when they do.\n"
    "\n"
    "Examples:\n"
    "  kubectl tkm why vector-add --node gpu-node-3\n"
    "  kubectl tkm why tkcc/shared-kernels -o yaml\n";

static const char *const usage_check =
    "kubectl tkm check IMAGE [-n NS] [-o wide|json|yaml] [--no-color]\n"
    "\n"
    "Reads the image's Triton summary (the cache.triton.image/summary label of its config;\n"
    "the layer is not pulled) and judges every node's GPUs, as reported in the node status\n"
    "objects (status.gpus), with the same function tkm-agent uses (lib/gpu compat). No agent\n"
    "is called: the answer is what the agents would say. Nodes are grouped by GPU type,\n"
    "verdict and reason (-o wide lists every node name).\n"
    "Registries on loopback are reached over plain HTTP; others over HTTPS with the docker\n"
    "credentials (~/.docker/config.json).\n"
    "\n"
    "Every node that reports status anywhere is judged; with -n NS only the nodes that\n"
    "report in NS.\n"
    "\n"
    "Exit status: 0 when at least one node could use it, 1 when none could (or on an error).\n"
    "\n"
    "Examples:\n"
    "  kubectl tkm check registry.example.com/kernels/vector-add:triton-3.6.0-sm90\n"
    "  kubectl tkm check registry.example.com/kernels/vector-add@sha256:... -o json\n";

static const char *const usage_schedule =
    "kubectl tkm schedule CACHE [-n NS]\n"
    "\n"
    "Prints, as YAML to paste into a pod template, how to keep the pods that mount CACHE on\n"
    "the nodes where it is usable: tkm-controller labels every such Node\n"
    "(tkc.tkm.io/<namespace>.<name>=true, tkcc.tkm.io/<name>=true for a\n"
    "TritonKernelCacheCluster; the cache's status.nodeLabel names it) and removes the label\n"
    "when that stops. First a required nodeSelector, then a preferred nodeAffinity.\n"
    "\n"
    "Examples:\n"
    "  kubectl tkm schedule vector-add -n ml\n"
    "  kubectl tkm schedule tkcc/shared-kernels\n";

void kt_cli_usage(const char *cmd, FILE *f)
{
    fputs(!cmd                       ? usage_top
          : !strcmp(cmd, "status")   ? usage_status
          : !strcmp(cmd, "why")      ? usage_why
          : !strcmp(cmd, "check")    ? usage_check
          : !strcmp(cmd, "schedule") ? usage_schedule
                                     : usage_top,
          f);
}

static int write_out(const struct tkm_buf *b)
{
    if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0) {
        fprintf(stderr, "kubectl-tkm: cannot write the output\n");
        return 1;
    }
    return 0;
}

/* Prints doc as -o json or yaml. Returns the exit status. */
int kt_cli_print_doc(const struct kt_cli *a, json_t *doc)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 30);
    int st = 1;
    if (!doc)
        fprintf(stderr, "kubectl-tkm: out of memory\n");
    else if ((!strcmp(a->output, "yaml") ? kt_yaml_dump(doc, &b) : kt_json_dump(doc, &b)) < 0)
        fprintf(stderr, "kubectl-tkm: cannot render the %s output\n", a->output);
    else
        st = write_out(&b);
    tkm_buf_release(&b);
    json_decref(doc);
    return st;
}

int kt_cli_print_buf(struct tkm_buf *b)
{
    return write_out(b);
}

void kt_cli_render_opts(const struct kt_cli *a, struct kt_render_opts *o)
{
    struct winsize ws;
    int tty = isatty(STDOUT_FILENO), cols = 0;
    memset(o, 0, sizeof *o);
    if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
        cols = ws.ws_col;
    o->width = a->width >= 0 ? (size_t)a->width : kt_width_pick(getenv("COLUMNS"), cols);
    o->color = tty && !a->no_color && !getenv("NO_COLOR");
    o->by = a->by;
    o->wide = !strcmp(a->output, "wide");
    o->all_namespaces = a->all_ns;
}

int main(int argc, char **argv)
{
    struct kt_cli a;
    int st = kt_cli_parse(&a, argc, argv);
    if (st >= 0)
        return st;
    tkm_log_init("kubectl-tkm", TKM_LOG_ERROR, 0);
    if (!strcmp(a.cmd, "version")) {
        printf("kubectl-tkm %s\n", TKM_VERSION);
        return 0;
    }
    if (tkm_threadpool_init(0, NULL) < 0)
        return 1;
    if (!strcmp(a.cmd, "status"))
        return kt_cli_status(&a);
    if (!strcmp(a.cmd, "why"))
        return kt_cli_why(&a);
    if (!strcmp(a.cmd, "schedule"))
        return kt_cli_schedule(&a);
    return kt_cli_check(&a);
}
