/*
 * kt_cli.c - kubectl-tkm's flags (as kubectl spells them), the apiserver
 * reads, and the three commands.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/http.h>
#include <tkm/triton/image.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>

#include "kt_cli.h"

/* ---- flags ------------------------------------------------------------------------- */

static int usage_error(const struct kt_cli *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const struct kt_cli *a, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kubectl-tkm: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun 'kubectl tkm %s%s--help' for usage.\n", a->cmd ? a->cmd : "",
            a->cmd ? " " : "");
    return 2;
}

/* Matches "-n", "--namespace" with the value in the next argument, after
 * "=", or glued to a short flag ("-nfoo", "-ojson"). */
static int flag_value(int argc, char **argv, int *i, const char *sh, const char *lg,
                      const char **out, int *missing)
{
    const char *s = argv[*i];
    size_t ll = strlen(lg);
    *missing = 0;
    if ((sh && !strcmp(s, sh)) || !strcmp(s, lg)) {
        if (*i + 1 >= argc) {
            *missing = 1;
            return 1;
        }
        *out = argv[++*i];
        return 1;
    }
    if (!strncmp(s, lg, ll) && s[ll] == '=') {
        *out = s + ll + 1;
        return 1;
    }
    if (sh && !strncmp(s, sh, 2) && s[2] && s[1] != '-') {
        *out = s + 2 + (s[2] == '=');
        return 1;
    }
    return 0;
}

/* "30", "30s", "2m", "500ms" -> ms; 0 is refused. */
static int parse_duration(const char *s, uint64_t *ms)
{
    char num[32];
    size_t n = strspn(s, "0123456789");
    int64_t v;
    uint64_t mul = !strcmp(s + n, "") || !strcmp(s + n, "s") ? 1000
                   : !strcmp(s + n, "m")                     ? 60000
                   : !strcmp(s + n, "ms")                    ? 1
                                                             : 0;
    if (!n || n >= sizeof num || !mul)
        return -EINVAL;
    snprintf(num, sizeof num, "%.*s", (int)n, s);
    if (tkm_parse_i64(num, 1, 86400000, &v) < 0 || (uint64_t)v * mul > 86400000ULL)
        return -EINVAL;
    *ms = (uint64_t)v * mul;
    return 0;
}

static int check_values(struct kt_cli *a, const char *by, const char *width, const char *timeout)
{
    int64_t v;
    a->timeout_ms = 30000;
    if (timeout && parse_duration(timeout, &a->timeout_ms) < 0)
        return usage_error(a, "--request-timeout takes a duration (30s, 2m, 500ms), not '%s'",
                           timeout);
    if (strcmp(a->output, "") && strcmp(a->output, "wide") && strcmp(a->output, "json") &&
        strcmp(a->output, "yaml"))
        return usage_error(a, "-o takes wide, json or yaml, not '%s'", a->output);
    if (by && !strcmp(by, "node"))
        a->by = KT_BY_NODE;
    else if (by && (!strcmp(by, "gpu-type") || !strcmp(by, "gpu")))
        a->by = KT_BY_GPU_TYPE;
    else if (by)
        return usage_error(a, "--by takes node or gpu-type, not '%s'", by);
    if (width && tkm_parse_i64(width, 0, 100000, &v) < 0)
        return usage_error(a, "--width takes a number of columns (0: unlimited), not '%s'", width);
    a->width = width ? (long)v : -1;
    if (a->kind && strcmp(a->kind, "tkc") && strcmp(a->kind, "tkcc"))
        return usage_error(a, "--kind takes tkc or tkcc, not '%s'", a->kind);
    if (!strcmp(a->cmd, "why") && !a->arg)
        return usage_error(a, "why needs a CACHE");
    if (!strcmp(a->cmd, "check") && !a->arg)
        return usage_error(a, "check needs an IMAGE");
    if (!strcmp(a->cmd, "schedule") && !a->arg)
        return usage_error(a, "schedule needs a CACHE");
    if (a->node && strcmp(a->cmd, "why"))
        return usage_error(a, "--node is a flag of 'why', not of '%s'", a->cmd);
    return -1;
}

int kt_cli_parse(struct kt_cli *a, int argc, char **argv)
{
    const char *by = NULL, *width = NULL, *timeout = NULL;
    int help = 0;
    memset(a, 0, sizeof *a);
    a->output = "";
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int miss = 0;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            help = 1;
        } else if (!strcmp(s, "-A") || !strcmp(s, "--all-namespaces")) {
            a->all_ns = 1;
        } else if (!strcmp(s, "--no-color")) {
            a->no_color = 1;
        } else if (flag_value(argc, argv, &i, "-n", "--namespace", &a->ns, &miss) ||
                   flag_value(argc, argv, &i, "-o", "--output", &a->output, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--kubeconfig", &a->kubeconfig, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--context", &a->context, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--node", &a->node, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--kind", &a->kind, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--by", &by, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--width", &width, &miss) ||
                   flag_value(argc, argv, &i, NULL, "--request-timeout", &timeout, &miss)) {
            if (miss)
                return usage_error(a, "%s needs a value", s);
        } else if (s[0] == '-' && s[1]) {
            return usage_error(a, "unknown flag '%s'", s);
        } else if (!a->cmd) {
            if (strcmp(s, "status") && strcmp(s, "why") && strcmp(s, "check") &&
                strcmp(s, "schedule") && strcmp(s, "version") && strcmp(s, "help"))
                return usage_error(
                    a, "unknown command '%s' (status, why, check, schedule, version)", s);
            a->cmd = s;
            if (!strcmp(s, "help")) {
                a->cmd = i + 1 < argc ? argv[i + 1] : NULL;
                kt_cli_usage(a->cmd, stdout);
                return 0;
            }
        } else if (!a->arg && strcmp(a->cmd, "version")) {
            a->arg = s;
        } else {
            return usage_error(a, "unexpected argument '%s'", s);
        }
    }
    if (help || !a->cmd) {
        kt_cli_usage(a->cmd, stdout);
        return 0;
    }
    if (a->ns && a->all_ns)
        return usage_error(a, "give -n NS or -A, not both");
    return check_values(a, by, width, timeout);
}

/* ---- the apiserver ----------------------------------------------------------------------- */

struct kt_conn {
    uv_loop_t loop;
    int loop_ok;
    struct k8s_config cfg;
    struct k8s_client *c;
    const char *ns; /* the namespace to use (borrowed) */
};

/* The kubeconfig kubectl would use with --context: the flag, else the
 * first file of $KUBECONFIG that exists, else ~/.kube/config. */
static const char *kubeconfig_path(const char *flag, char *buf, size_t n)
{
    const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
    if (flag)
        return flag;
    while (env && *env) {
        size_t len = strcspn(env, ":");
        snprintf(buf, n, "%.*s", (int)len, env);
        if (len && access(buf, R_OK) == 0)
            return buf;
        env += len + (env[len] == ':');
    }
    snprintf(buf, n, "%s/.kube/config", home ? home : "");
    return buf;
}

static int conn_open(struct kt_conn *k, const struct kt_cli *a)
{
    struct tkm_err err = {0};
    char path[4096];
    /* one retry: a person is waiting (the daemons' default is 3) */
    struct k8s_client_opts co = {
        .user_agent = "kubectl-tkm/" TKM_VERSION, .timeout_ms = a->timeout_ms, .max_retries = 1};
    int rc;
    memset(k, 0, sizeof *k);
    k8s_config_init(&k->cfg);
    if (uv_loop_init(&k->loop) < 0) {
        fprintf(stderr, "kubectl-tkm: cannot start an event loop\n");
        return -ENOMEM;
    }
    k->loop_ok = 1;
    if (a->context)
        rc = k8s_config_load_file(&k->cfg, kubeconfig_path(a->kubeconfig, path, sizeof path),
                                  a->context, &err);
    else
        rc = k8s_config_load_default(&k->cfg, a->kubeconfig, &err);
    if (rc == 0)
        rc = tkm_http_global_init(&err);
    if (rc == 0)
        rc = k8s_client_new(&k->loop, &k->cfg, &co, &k->c, &err);
    if (rc < 0) {
        fprintf(stderr, "kubectl-tkm: %s\n", tkm_err_str(&err));
        return rc;
    }
    k->ns = a->ns ? a->ns : k8s_client_namespace(k->c);
    return 0;
}

static void conn_close(struct kt_conn *k)
{
    k8s_client_free(k->c);
    k->c = NULL;
    if (k->loop_ok) {
        uv_run(&k->loop, UV_RUN_NOWAIT);
        uv_loop_close(&k->loop);
    }
    k8s_config_release(&k->cfg);
}

/* One message for a failed request, naming what was read and from where. */
static void req_error(const struct kt_conn *k, const struct k8s_resource *r,
                      const struct k8s_status *st)
{
    char msg[1024];
    k8s_status_str(st, msg, sizeof msg);
    if (st->transport)
        fprintf(stderr, "kubectl-tkm: cannot reach the apiserver at %s: %s\n",
                k8s_client_server(k->c), msg);
    else if (st->code == 404 && r->group && !strcmp(r->group, TKM_API_GROUP))
        fprintf(stderr,
                "kubectl-tkm: the apiserver at %s does not serve %s.%s: are the tkm CRDs "
                "installed? (kubectl apply -f crds/)\n",
                k8s_client_server(k->c), r->plural, r->group);
    else
        fprintf(stderr, "kubectl-tkm: reading %s: %s\n", r->plural, msg);
}

/* Decodes one list item into the world (a bad object is named and skipped). */
static int take_item(struct kt_world *w, const struct k8s_resource *r, const json_t *it)
{
    struct tkm_err err = {0};
    size_t len;
    char *s = json_dumps(it, JSON_COMPACT);
    int rc;
    if (!s)
        return -ENOMEM;
    len = strlen(s);
    if (r == &tkm_api_res_tkc || r == &tkm_api_res_tkcc) {
        struct tkm_api_cache c;
        rc = tkm_api_cache_decode(s, len, &c, &err);
        if (rc == 0)
            rc = kt_world_add_cache_take(w, &c);
    } else {
        struct tkm_api_nodestatus n;
        rc = tkm_api_nodestatus_decode(s, len, &n, &err);
        if (rc == 0)
            rc = kt_world_add_status_take(w, &n);
    }
    free(s);
    if (rc == -EPROTO) {
        fprintf(stderr, "kubectl-tkm: warning: skipping %s: %s\n", r->kind, tkm_err_str(&err));
        rc = 0;
    }
    return rc;
}

/* Lists r in ns (NULL: all namespaces) page by page into w; name, when
 * set, selects one object by metadata.name. */
static int list_into(struct kt_conn *k, const struct k8s_resource *r, const char *ns,
                     const char *name, struct kt_world *w)
{
    struct k8s_status st = K8S_STATUS_INIT;
    char sel[600], *cont = NULL;
    int rc = 0;
    if (name)
        snprintf(sel, sizeof sel, "metadata.name=%s", name);
    do {
        struct k8s_list_opts lo = {
            .limit = 500, .continue_token = cont, .field_selector = name ? sel : NULL};
        json_t *list = NULL, *it;
        size_t i;
        rc = k8s_list(k->c, r, r->namespaced ? (ns ? ns : "") : NULL, &lo, &list, &st);
        if (rc < 0) {
            req_error(k, r, &st);
            break;
        }
        json_array_foreach(json_object_get(list, "items"), i, it) if (rc == 0) rc =
            take_item(w, r, it);
        const char *c =
            json_string_value(json_object_get(json_object_get(list, "metadata"), "continue"));
        free(cont);
        cont = c && c[0] ? strdup(c) : NULL;
        json_decref(list);
    } while (rc == 0 && cont);
    free(cont);
    k8s_status_release(&st);
    return rc;
}

/* The caches a command shows: one (arg) or all in scope. */
static int read_caches(struct kt_conn *k, const struct kt_cli *a, struct kt_world *w)
{
    const char *name = a->arg, *kind = a->kind;
    const char *ns = a->all_ns ? NULL : k->ns;
    int rc;
    if (name && !strncmp(name, "tkc/", 4)) {
        kind = "tkc";
        name += 4;
    } else if (name && !strncmp(name, "tkcc/", 5)) {
        kind = "tkcc";
        name += 5;
    }
    if (name && !name[0]) {
        fprintf(stderr, "kubectl-tkm: '%s' names no cache\n", a->arg);
        return -EINVAL;
    }
    if (!kind || !strcmp(kind, "tkc"))
        if ((rc = list_into(k, &tkm_api_res_tkc, ns, name, w)) < 0)
            return rc;
    if ((!kind || !strcmp(kind, "tkcc")) && (!name || w->n_caches == 0))
        if ((rc = list_into(k, &tkm_api_res_tkcc, NULL, name, w)) < 0)
            return rc;
    if (name && w->n_caches == 0) {
        if (kind && !strcmp(kind, "tkcc"))
            fprintf(stderr, "kubectl-tkm: TritonKernelCacheCluster \"%s\" not found\n", name);
        else if (a->all_ns)
            fprintf(stderr, "kubectl-tkm: no TritonKernelCache \"%s\" in any namespace%s\n", name,
                    kind ? "" : ", and no TritonKernelCacheCluster of that name");
        else
            fprintf(stderr,
                    "kubectl-tkm: TritonKernelCache \"%s\" not found in namespace \"%s\"%s\n", name,
                    ns, kind ? "" : ", and no TritonKernelCacheCluster of that name");
        return -ENOENT;
    }
    return 0;
}

/* The node status objects for the caches in w. */
static int read_statuses(struct kt_conn *k, const struct kt_cli *a, struct kt_world *w)
{
    int nsd = 0, cl = 0, rc = 0;
    const char *ns = a->all_ns ? NULL : k->ns;
    for (size_t i = 0; i < w->n_caches; i++) {
        nsd |= !w->caches[i].cluster;
        cl |= w->caches[i].cluster;
    }
    if (nsd && w->n_caches == 1 && w->caches[0].meta.ns)
        ns = w->caches[0].meta.ns;
    if (nsd)
        rc = list_into(k, &tkm_api_res_tkcns, ns, NULL, w);
    if (rc == 0 && cl)
        rc = list_into(k, &tkm_api_res_tkcnsc, NULL, NULL, w);
    return rc;
}

/* ---- commands ----------------------------------------------------------------------------- */

/* What every command reads and renders; released in one place. */
struct run {
    struct kt_conn k;
    struct kt_world w;
    struct kt_matrix m;
    struct tkm_buf out;
};

static void run_init(struct run *r)
{
    memset(r, 0, sizeof *r);
    kt_world_init(&r->w);
    tkm_buf_init(&r->out, 1u << 30);
}

static void run_release(struct run *r)
{
    tkm_buf_release(&r->out);
    kt_matrix_release(&r->m);
    kt_world_release(&r->w);
    conn_close(&r->k);
}

/* Prints what a renderer returned (rc < 0: out of memory); the exit status. */
static int print_rendered(int rc, struct tkm_buf *out)
{
    if (rc >= 0)
        return kt_cli_print_buf(out);
    fprintf(stderr, "kubectl-tkm: out of memory\n");
    return 1;
}

int kt_cli_status(const struct kt_cli *a)
{
    struct run r;
    struct kt_render_opts o;
    int st = 1;
    run_init(&r);
    if (conn_open(&r.k, a) < 0 || read_caches(&r.k, a, &r.w) < 0 ||
        read_statuses(&r.k, a, &r.w) < 0)
        goto out;
    if (kt_matrix_build(&r.w, &r.m) < 0) {
        fprintf(stderr, "kubectl-tkm: out of memory\n");
        goto out;
    }
    if (!strcmp(a->output, "json") || !strcmp(a->output, "yaml")) {
        st = kt_cli_print_doc(a, kt_status_json(&r.m));
        goto out;
    }
    kt_cli_render_opts(a, &o);
    st = print_rendered(kt_render_status(&r.m, &o, &r.out), &r.out);
out:
    run_release(&r);
    return st;
}

/* The one cache a->arg names (with -A it may name several: an error). */
static int read_one_cache(struct kt_conn *k, const struct kt_cli *a, struct kt_world *w)
{
    int rc = read_caches(k, a, w);
    if (rc < 0 || w->n_caches <= 1)
        return rc;
    fprintf(stderr, "kubectl-tkm: \"%s\" names %zu caches (", a->arg, w->n_caches);
    for (size_t i = 0; i < w->n_caches; i++)
        fprintf(stderr, "%s%s/%s", i ? ", " : "", w->caches[i].meta.ns ? w->caches[i].meta.ns : "",
                w->caches[i].meta.name);
    fprintf(stderr, "); give its namespace with -n\n");
    return -EINVAL;
}

int kt_cli_schedule(const struct kt_cli *a)
{
    struct run r;
    int st = 1;
    run_init(&r);
    if (conn_open(&r.k, a) == 0 && read_one_cache(&r.k, a, &r.w) == 0)
        st = print_rendered(kt_render_schedule(&r.w.caches[0], &r.out), &r.out);
    run_release(&r);
    return st;
}

int kt_cli_why(const struct kt_cli *a)
{
    struct run r;
    struct kt_world *w = &r.w;
    struct kt_matrix *m = &r.m;
    size_t node = (size_t)-1;
    int st = 1;
    run_init(&r);
    if (conn_open(&r.k, a) < 0 || read_one_cache(&r.k, a, w) < 0)
        goto out;
    if (read_statuses(&r.k, a, w) < 0 || kt_matrix_build(w, m) < 0)
        goto out;
    if (a->node) {
        for (node = 0; node < m->n_nodes && strcmp(m->nodes[node].name, a->node); node++)
            ;
        if (node == m->n_nodes) {
            fprintf(stderr,
                    "kubectl-tkm: node \"%s\" has no %s object: its tkm-agent has not "
                    "reported (nodes that did: %zu)\n",
                    a->node,
                    w->caches[0].cluster ? "TritonKernelCacheNodeStatusCluster"
                                         : "TritonKernelCacheNodeStatus in the cache's namespace",
                    m->n_nodes);
            goto out;
        }
    }
    if (!strcmp(a->output, "json") || !strcmp(a->output, "yaml")) {
        st = kt_cli_print_doc(a, kt_why_json(m, 0, node));
        goto out;
    }
    struct kt_render_opts o;
    kt_cli_render_opts(a, &o);
    st = print_rendered(kt_render_why(m, 0, node, o.color, &r.out), &r.out);
out:
    run_release(&r);
    return st;
}

int kt_cli_check(const struct kt_cli *a)
{
    struct run r;
    struct kt_check c = {0};
    struct tkm_triton_image im;
    struct tkm_err err = {0};
    struct tkm_oci_registry_opts ro = {0};
    int st = 1;
    memset(&im, 0, sizeof im);
    run_init(&r);
    if (conn_open(&r.k, a) < 0)
        goto out;
    if (tkm_triton_image_load_ref(&im, a->arg, &ro, &err) < 0) {
        fprintf(stderr, "kubectl-tkm: %s\n", tkm_err_str(&err));
        goto out;
    }
    /* every node's GPU facts: node status objects of every namespace and the
     * cluster kind; with -n only the nodes that report in that namespace */
    if ((!a->ns && list_into(&r.k, &tkm_api_res_tkcnsc, NULL, NULL, &r.w) < 0) ||
        list_into(&r.k, &tkm_api_res_tkcns, a->ns, NULL, &r.w) < 0)
        goto out;
    if (kt_matrix_build(&r.w, &r.m) < 0 || kt_check_run(&r.m, &im.summary, &c) < 0) {
        fprintf(stderr, "kubectl-tkm: out of memory\n");
        goto out;
    }
    if (!strcmp(a->output, "json") || !strcmp(a->output, "yaml")) {
        st = kt_cli_print_doc(a, kt_check_json(&c, im.what, im.manifest_digest, &im.summary));
    } else {
        struct kt_render_opts o;
        kt_cli_render_opts(a, &o);
        st = print_rendered(
            kt_render_check(&c, im.what, im.manifest_digest, &im.summary, &o, &r.out), &r.out);
    }
    if (st == 0 && c.n_compatible == 0)
        st = 1;
out:
    kt_check_release(&c);
    tkm_triton_image_release(&im);
    run_release(&r);
    return st;
}
