/*
 * tkc_watch - watches TritonKernelCaches and prints every change.
 *
 * Usage: tkc_watch [-n NAMESPACE | -A] [--kubeconfig FILE]
 *
 * An informer (list, then watch; relists and reconnects on its own) keeps
 * the caches in memory; each change is printed with the fields a person
 * looks at first. A work queue shows how a controller would react: changes
 * only queue the key, and the handler reads the current object from the
 * informer, so a burst of changes to one cache is handled once. Ctrl-C
 * stops it cleanly.
 *
 *   $ tkc_watch -n ml
 *   synced: 2 caches
 *   ADDED     ml/llama-kernels  image=quay.io/org/llama-cache:v3  digest=-
 *   MODIFIED  ml/llama-kernels  image=quay.io/org/llama-cache:v3  digest=sha256:4be1...
 *   reconcile ml/llama-kernels (resourceVersion 1201)
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include <tkm/http.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/informer.h>
#include <k8s/workqueue.h>
#include <tkm/log.h>
#include <tkm/api/v1alpha1.h>

struct app {
    struct k8s_client *c;
    struct k8s_informer *inf;
    struct k8s_workqueue *q;
    uv_signal_t sigint;
};

/* Prints one line: what happened, the key, the image and the pinned digest. */
static void show(const char *what, const struct k8s_obj *o)
{
    json_t *j = NULL;
    const char *image = "-", *digest = "-";
    if (k8s_obj_parse(o, &j, NULL) == 0) {
        const char *s =
            json_string_value(json_object_get(json_object_get(j, "spec"), "cacheImage"));
        const char *d =
            json_string_value(json_object_get(json_object_get(j, "status"), "resolvedDigest"));
        image = s ? s : image;
        digest = d ? d : digest;
    }
    printf("%-9s %s  image=%s  digest=%s\n", what, o->key, image, digest);
    json_decref(j);
}

static void on_add(const struct k8s_obj *o, void *data)
{
    struct app *a = data;
    show("ADDED", o);
    k8s_workqueue_add(a->q, o->key);
}

static void on_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *data)
{
    struct app *a = data;
    if (strcmp(old->resource_version, cur->resource_version) == 0)
        return; /* the same version: nothing changed */
    show("MODIFIED", cur);
    k8s_workqueue_add(a->q, cur->key);
}

static void on_delete(const struct k8s_obj *o, int unknown, void *data)
{
    struct app *a = data;
    show(unknown ? "DELETED?" : "DELETED", o);
    k8s_workqueue_add(a->q, o->key);
}

static void on_synced(void *data)
{
    struct app *a = data;
    printf("synced: %zu caches\n", k8s_informer_count(a->inf));
}

/* The queue's handler: read the current state from the informer, act, done. */
static void reconcile(struct k8s_workqueue *q, const char *key, void *data)
{
    struct app *a = data;
    const struct k8s_obj *o = k8s_informer_get_key(a->inf, key);
    if (o)
        printf("reconcile %s (resourceVersion %s)\n", key, o->resource_version);
    else
        printf("reconcile %s (gone)\n", key);
    k8s_workqueue_done(q, key, K8S_WQ_OK);
}

static void on_sigint(uv_signal_t *s, int signum)
{
    struct app *a = s->data;
    (void)signum;
    uv_close((uv_handle_t *)&a->sigint, NULL);
    k8s_workqueue_close(a->q, NULL, NULL);
    k8s_informer_close(a->inf, NULL, NULL);
    k8s_client_close(a->c, NULL, NULL);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"namespace", required_argument, NULL, 'n'},
                                       {"all-namespaces", no_argument, NULL, 'A'},
                                       {"kubeconfig", required_argument, NULL, 'k'},
                                       {NULL, 0, NULL, 0}};
    struct app a = {0};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    const char *ns = NULL, *kubeconfig = NULL;
    int all = 0, opt, rc = 1;
    while ((opt = getopt_long(argc, argv, "n:Ak:", lo, NULL)) != -1) {
        if (opt == 'n')
            ns = optarg;
        else if (opt == 'A')
            all = 1;
        else if (opt == 'k')
            kubeconfig = optarg;
        else {
            fprintf(stderr, "usage: tkc_watch [-n NAMESPACE | -A] [--kubeconfig FILE]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    tkm_log_init("tkc_watch", TKM_LOG_WARN, 0);
    k8s_config_init(&cfg);
    uv_loop_t *loop = uv_default_loop();
    if (tkm_http_global_init(&err) < 0 || k8s_config_load_default(&cfg, kubeconfig, &err) < 0 ||
        k8s_client_new(loop, &cfg, NULL, &a.c, &err) < 0)
        goto out;
    if (!all && !ns)
        ns = k8s_client_namespace(a.c);
    if (k8s_workqueue_new(loop, NULL, reconcile, &a, &a.q, &err) < 0) {
        k8s_client_free(a.c);
        goto out;
    }
    struct k8s_informer_opts io = {
        .watch = {.res = &tkm_api_res_tkc, .ns = all ? NULL : ns},
        .handler = {.on_add = on_add,
                    .on_update = on_update,
                    .on_delete = on_delete,
                    .on_synced = on_synced},
        .data = &a,
    };
    if (k8s_informer_start(a.c, &io, &a.inf, &err) < 0) {
        k8s_workqueue_close(a.q, NULL, NULL);
        k8s_client_close(a.c, NULL, NULL);
        uv_run(loop, UV_RUN_DEFAULT);
        goto out;
    }
    uv_signal_init(loop, &a.sigint);
    a.sigint.data = &a;
    uv_signal_start(&a.sigint, on_sigint, SIGINT);
    uv_run(loop, UV_RUN_DEFAULT);
    rc = 0;
out:
    if (err.code)
        fprintf(stderr, "tkc_watch: %s\n", tkm_err_str(&err));
    k8s_config_release(&cfg);
    uv_loop_close(loop);
    return rc;
}
