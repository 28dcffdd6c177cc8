/*
 * e2e_k8s_watch - an informer on one resource for the e2e scenarios.
 *
 * Usage: e2e_k8s_watch --resource configmaps|tkc|nodes [--namespace NS]
 *                      [--kubeconfig FILE] [--metadata-only] [--dump FILE]
 *                      [--quiet] [--show-json]
 * Prints one line per change on stdout (flushed):
 *   SYNCED <n>                        the first list is in the store
 *   ADD <key> <rv>
 *   JSON <key> <json>                 with --show-json: the stored JSON of an add
 *   UPDATE <key> <old-rv> <new-rv>
 *   DELETE <key> <rv> unknown=<0|1>   unknown=1: synthesized by a relist
 *   DUP <key> <rv>                    an update that did not change the RV:
 *                                     an event applied twice (a bug)
 *   WATCHERR <delay-ms> <message>     the watch backs off
 * Signals: SIGUSR1 writes the store as sorted "<key> <rv>" lines to the dump
 * file (atomically) and prints "DUMPED <n>" and a STATS line; SIGTERM/SIGINT
 * stop the informer, free everything and exit 0 (valgrind-clean).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <k8s/client.h>
#include <k8s/config.h>
#include <tkm/http.h>
#include <k8s/informer.h>
#include <tkm/log.h>
#include <tkm/api/v1alpha1.h>

struct app {
    uv_loop_t *loop;
    struct k8s_client *c;
    struct k8s_informer *inf;
    uv_signal_t sig_usr1, sig_term, sig_int;
    const char *dump;
    int quiet, show_json;
};

static void on_add(const struct k8s_obj *o, void *data)
{
    struct app *a = data;
    if (!a->quiet)
        printf("ADD %s %s\n", o->key, o->resource_version);
    if (a->show_json)
        printf("JSON %s %s\n", o->key, o->json);
}

static void on_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    struct app *a = data;
    if (strcmp(old->resource_version, cur->resource_version) == 0)
        printf("DUP %s %s\n", cur->key, cur->resource_version);
    else if (!a->quiet)
        printf("UPDATE %s %s %s\n", cur->key, old->resource_version, cur->resource_version);
}

static void on_delete(const struct k8s_obj *o, int unknown, void *data)
{
    struct app *a = data;
    if (!a->quiet)
        printf("DELETE %s %s unknown=%d\n", o->key, o->resource_version, unknown);
}

static void on_error(int rc, const char *msg, uint64_t delay_ms, void *data)
{
    (void)rc;
    (void)data;
    printf("WATCHERR %" PRIu64 " %s\n", delay_ms, msg);
}

static void on_synced(void *data)
{
    struct app *a = data;
    printf("SYNCED %zu\n", k8s_informer_count(a->inf));
}

struct line {
    char *s;
};

static int cmp_line(const void *x, const void *y)
{
    return strcmp(((const struct line *)x)->s, ((const struct line *)y)->s);
}

struct collect {
    struct line *v;
    size_t n, cap;
};

static int collect_fn(const struct k8s_obj *o, void *data)
{
    struct collect *c = data;
    if (c->n == c->cap)
        return -ENOMEM;
    size_t len = strlen(o->key) + strlen(o->resource_version) + 2;
    c->v[c->n].s = malloc(len);
    if (!c->v[c->n].s)
        return -ENOMEM;
    snprintf(c->v[c->n].s, len, "%s %s", o->key, o->resource_version);
    c->n++;
    return 0;
}

static void print_stats(struct app *a)
{
    const struct k8s_watch_stats *s = k8s_watch_get_stats(k8s_informer_watch(a->inf));
    printf("STATS lists=%" PRIu64 " list_failures=%" PRIu64 " relists_410=%" PRIu64
           " watches=%" PRIu64 " watch_failures=%" PRIu64 " events=%" PRIu64 " bookmarks=%" PRIu64
           " throttled=%" PRIu64 " retry_after_ms=%" PRIu64 " count=%zu rv=%s\n",
           s->lists, s->list_failures, s->relists_410, s->watches, s->watch_failures, s->events,
           s->bookmarks, s->throttled, s->last_retry_after_ms, k8s_informer_count(a->inf),
           k8s_watch_resource_version(k8s_informer_watch(a->inf)));
}

static int dump_store(struct app *a)
{
    struct collect c = {0};
    char tmp[4096];
    int rc = -ENOMEM;
    FILE *f = NULL;
    c.cap = k8s_informer_count(a->inf);
    c.v = calloc(c.cap + 1, sizeof *c.v);
    if (!c.v)
        goto out;
    if ((rc = k8s_informer_foreach(a->inf, collect_fn, &c)) != 0)
        goto out;
    qsort(c.v, c.n, sizeof *c.v, cmp_line);
    snprintf(tmp, sizeof tmp, "%s.tmp", a->dump);
    rc = -errno;
    if (!(f = fopen(tmp, "w")))
        goto out;
    for (size_t i = 0; i < c.n; i++)
        fprintf(f, "%s\n", c.v[i].s);
    rc = fclose(f) == 0 && rename(tmp, a->dump) == 0 ? 0 : -EIO;
    f = NULL;
    printf("DUMPED %zu\n", c.n);
out:
    if (f)
        fclose(f);
    for (size_t i = 0; i < c.n; i++)
        free(c.v[i].s);
    free(c.v);
    return rc;
}

static void on_usr1(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    (void)signum;
    if (a->dump && dump_store(a) < 0)
        fprintf(stderr, "e2e_k8s_watch: cannot write %s\n", a->dump);
    print_stats(a);
}

static void on_closed(void *data)
{
    struct app *a = data;
    a->inf = NULL;
}

static void on_term(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    (void)signum;
    print_stats(a);
    uv_close((uv_handle_t *)&a->sig_usr1, NULL);
    uv_close((uv_handle_t *)&a->sig_term, NULL);
    uv_close((uv_handle_t *)&a->sig_int, NULL);
    k8s_informer_close(a->inf, on_closed, a);
    k8s_client_close(a->c, NULL, NULL);
}

static const struct k8s_resource *pick(const char *name)
{
    if (strcmp(name, "configmaps") == 0)
        return &k8s_res_configmaps;
    if (strcmp(name, "tkc") == 0)
        return &tkm_api_res_tkc;
    if (strcmp(name, "nodes") == 0)
        return &k8s_res_nodes;
    if (strcmp(name, "leases") == 0)
        return &k8s_res_leases;
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"resource", required_argument, NULL, 'r'},   {"namespace", required_argument, NULL, 'n'},
        {"kubeconfig", required_argument, NULL, 'k'}, {"metadata-only", no_argument, NULL, 'm'},
        {"dump", required_argument, NULL, 'd'},       {"quiet", no_argument, NULL, 'q'},
        {"show-json", no_argument, NULL, 'j'},        {NULL, 0, NULL, 0}};
    struct app a = {0};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    struct k8s_informer_opts io = {0};
    const char *kubeconfig = NULL;
    int opt, rc = 1;
    k8s_config_init(&cfg);
    io.watch.res = &k8s_res_configmaps;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'r':
            if (!(io.watch.res = pick(optarg))) {
                fprintf(stderr, "e2e_k8s_watch: unknown resource %s\n", optarg);
                return 2;
            }
            break;
        case 'n':
            io.watch.ns = optarg;
            break;
        case 'k':
            kubeconfig = optarg;
            break;
        case 'm':
            io.watch.metadata_only = 1;
            break;
        case 'd':
            a.dump = optarg;
            break;
        case 'q':
            a.quiet = 1;
            break;
        case 'j':
            a.show_json = 1;
            break;
        default:
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    tkm_log_init("e2e_k8s_watch", TKM_LOG_INFO, 0);
    a.loop = uv_default_loop();
    if (tkm_http_global_init(&err) < 0 || k8s_config_load_default(&cfg, kubeconfig, &err) < 0 ||
        k8s_client_new(a.loop, &cfg, NULL, &a.c, &err) < 0) {
        fprintf(stderr, "e2e_k8s_watch: %s\n", tkm_err_str(&err));
        goto out;
    }
    io.handler = (struct k8s_informer_handler){on_add, on_update, on_delete, on_synced, on_error};
    io.data = &a;
    if (k8s_informer_start(a.c, &io, &a.inf, &err) < 0) {
        fprintf(stderr, "e2e_k8s_watch: %s\n", tkm_err_str(&err));
        k8s_client_free(a.c);
        goto out;
    }
    uv_signal_init(a.loop, &a.sig_usr1);
    uv_signal_init(a.loop, &a.sig_term);
    uv_signal_init(a.loop, &a.sig_int);
    a.sig_usr1.data = a.sig_term.data = a.sig_int.data = &a;
    uv_signal_start(&a.sig_usr1, on_usr1, SIGUSR1);
    uv_signal_start(&a.sig_term, on_term, SIGTERM);
    uv_signal_start(&a.sig_int, on_term, SIGINT);
    uv_run(a.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(a.loop) == 0 ? 0 : 3;
out:
    k8s_config_release(&cfg);
    return rc;
}
