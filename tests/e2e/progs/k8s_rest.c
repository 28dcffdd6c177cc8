/*
 * k8s_rest.c - drives libk8sclient against a real apiserver for tests/e2e/k8s_rest.sh
 * and tests/e2e/k8s_token_rotation.sh.
 *
 *   e2e_k8s_rest [--kubeconfig PATH] CMD ARGS...
 *     get RES NS NAME [SUB]                  print the object
 *     create RES NS FILE                     print the created object
 *     apply RES NS MANAGER FORCE FILE [SUB]  server-side apply (FORCE 0|1)
 *     patch RES NS NAME merge|json FILE [SUB]
 *     delete RES NS NAME [uid=U] [rv=R] [prop=Foreground|Background|Orphan]
 *     list RES NS [SELECTOR] [LIMIT] [CONTINUE]
 *     events NS KIND NAME                    emit 3 identical Events and 1 other
 *     version                                raw GET /version twice on one client:
 *                                            prints "http=<1|2> git=<gitVersion>" each
 *     whoami-until USER TIMEOUT_S [RELOAD_MS] print the user (SelfSubjectReview) each
 *                                            time it changes, until it is USER
 *   RES: configmaps, tkc, tkcc, events, namespaces. NS "-" = the client's namespace.
 *
 * Success prints the object as compact JSON (keys sorted) and exits 0. An API
 * failure prints one line to stdout
 *   ERROR rc=<errno name> code=<http> reason=<reason> transport=<0|1>: <status line>
 * and exits 2; usage or local errors exit 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>
#include <jansson.h>

#include <tkm/http.h>
#include <k8s/client.h>
#include <k8s/events.h>
#include <tkm/util.h>
#include <tkm/api/v1alpha1.h>
#include "sup_k8s.h"

static const struct k8s_resource res_ssr = {"authentication.k8s.io", "v1", "selfsubjectreviews",
                                            "SelfSubjectReview", 0};

static const struct k8s_resource *resource(const char *n)
{
    if (strcmp(n, "configmaps") == 0)
        return &k8s_res_configmaps;
    if (strcmp(n, "tkc") == 0)
        return &tkm_api_res_tkc;
    if (strcmp(n, "tkcc") == 0)
        return &tkm_api_res_tkcc;
    if (strcmp(n, "events") == 0)
        return &k8s_res_events;
    if (strcmp(n, "namespaces") == 0)
        return &k8s_res_namespaces;
    fprintf(stderr, "unknown resource %s\n", n);
    exit(1);
}

static const char *errname(int rc)
{
    switch (-rc) {
    case ENOENT:
        return "ENOENT";
    case EEXIST:
        return "EEXIST";
    case ESTALE:
        return "ESTALE";
    case EINVAL:
        return "EINVAL";
    case EACCES:
        return "EACCES";
    case EKEYREJECTED:
        return "EKEYREJECTED";
    case ECONNREFUSED:
        return "ECONNREFUSED";
    case EPROTO:
        return "EPROTO";
    default:
        return strerror(-rc);
    }
}

static int report(int rc, json_t *obj, const struct k8s_status *st)
{
    if (rc == 0) {
        char *s = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
        printf("%s\n", s ? s : "null");
        free(s);
        json_decref(obj);
        return 0;
    }
    char line[2048];
    printf("ERROR rc=%s code=%ld reason=%s transport=%d: %s\n", errname(rc), st->code,
           st->reason ? st->reason : "-", st->transport, k8s_status_str(st, line, sizeof line));
    return 2;
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        fprintf(stderr, "%s: line %d: %s\n", path, je.line, je.text);
        exit(1);
    }
    return o;
}

static int cmd_events(struct k8s_client *c, const char *ns, const char *kind, const char *name)
{
    struct k8s_recorder *rec;
    struct k8s_recorder_opts ro = {.component = "tkm-e2e", .host = "e2e-host"};
    struct tkm_err err = {0};
    if (k8s_recorder_new(c, &ro, &rec, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct k8s_object_ref o = {.api_version = "v1", .kind = kind, .namespace = ns, .name = name};
    struct k8s_recorder_stats s;
    for (int i = 0; i < 3; i++) {
        k8s_event_emit(rec, &o, "Warning", "E2ERepeated", "the same message %d", 42);
        do {
            uv_run(k8s_client_loop(c), UV_RUN_ONCE);
            k8s_recorder_stats(rec, &s);
        } while (s.inflight);
    }
    k8s_event_emit(rec, &o, "Normal", "E2EOther", "another message");
    do {
        uv_run(k8s_client_loop(c), UV_RUN_ONCE);
        k8s_recorder_stats(rec, &s);
    } while (s.inflight);
    printf("created=%llu aggregated=%llu failed=%llu\n", (unsigned long long)s.created,
           (unsigned long long)s.aggregated, (unsigned long long)s.failed);
    k8s_recorder_free(rec);
    return s.failed ? 2 : 0;
}

/* Asks who we are every 300 ms; prints each change; stops at want. */
static int cmd_whoami(struct k8s_client *c, const char *want, int timeout_s)
{
    uint64_t end = tkm_now_ms() + (uint64_t)timeout_s * 1000;
    char last[256] = "";
    while (tkm_now_ms() < end) {
        json_t *body = json_pack("{s:s,s:s}", "apiVersion", "authentication.k8s.io/v1", "kind",
                                 "SelfSubjectReview");
        json_t *out = NULL;
        struct k8s_status st = K8S_STATUS_INIT;
        int rc = sup_k8s_create(c, &res_ssr, NULL, body, &out, &st);
        json_decref(body);
        char now[256];
        if (rc == 0) {
            const char *u = json_string_value(json_object_get(
                json_object_get(json_object_get(out, "status"), "userInfo"), "username"));
            snprintf(now, sizeof now, "user=%s", u ? u : "?");
        } else {
            char line[512];
            snprintf(now, sizeof now, "ERROR code=%ld: %s", st.code,
                     k8s_status_str(&st, line, sizeof line));
        }
        json_decref(out);
        k8s_status_release(&st);
        if (strcmp(now, last) != 0) {
            printf("%s\n", now);
            fflush(stdout);
            snprintf(last, sizeof last, "%s", now);
        }
        if (rc == 0 && strcmp(now + 5, want) == 0)
            return 0;
        usleep(300 * 1000);
    }
    printf("TIMEOUT waiting for user %s\n", want);
    return 2;
}

struct raw_ctx {
    int done, rc;
};

static void raw_done(struct k8s_req *req, struct k8s_response *resp, void *data)
{
    (void)req;
    struct raw_ctx *x = data;
    json_t *v = resp->rc ? NULL : json_loadb(resp->body->data, resp->body->len, 0, NULL);
    const char *git = json_string_value(json_object_get(v, "gitVersion"));
    printf("http=%ld git=%s\n", resp->http_version, git ? git : "?");
    json_decref(v);
    x->done = 1;
    x->rc = resp->rc;
}

/* The raw request API (what watches use): GET /version twice. */
static int cmd_version(struct k8s_client *c)
{
    for (int i = 0; i < 2; i++) {
        struct raw_ctx x = {0};
        struct k8s_request rq = {.method = "GET", .path = "/version", .idempotent = K8S_IDEMPOTENT};
        struct tkm_err err = {0};
        if (k8s_request_start(c, &rq, NULL, raw_done, &x, NULL, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        while (!x.done)
            uv_run(k8s_client_loop(c), UV_RUN_ONCE);
        if (x.rc)
            return 2;
    }
    return 0;
}

static int run(struct k8s_client *c, int argc, char **argv)
{
    const char *cmd = argv[0];
    json_t *out = NULL, *obj = NULL;
    struct k8s_status st = K8S_STATUS_INIT;
    int rc;
    if (strcmp(cmd, "version") == 0)
        return cmd_version(c);
    if (strcmp(cmd, "events") == 0 && argc == 4)
        return cmd_events(c, argv[1], argv[2], argv[3]);
    if (strcmp(cmd, "whoami-until") == 0 && argc >= 3)
        return cmd_whoami(c, argv[1], (int)strtol(argv[2], NULL, 10));
    if (argc < 3) {
        fprintf(stderr, "usage: see the comment at the top of k8s_rest.c\n");
        return 1;
    }
    const struct k8s_resource *r = resource(argv[1]);
    const char *ns = strcmp(argv[2], "-") == 0 ? NULL : argv[2];
    if (strcmp(cmd, "get") == 0 && argc >= 4) {
        rc = sup_k8s_get(c, r, ns, argv[3], argc > 4 ? argv[4] : NULL, &out, &st);
    } else if (strcmp(cmd, "create") == 0 && argc == 4) {
        obj = load_json(argv[3]);
        rc = sup_k8s_create(c, r, ns, obj, &out, &st);
    } else if (strcmp(cmd, "apply") == 0 && argc >= 6) {
        obj = load_json(argv[5]);
        struct k8s_apply_opts ao = {.field_manager = argv[3],
                                    .force = strcmp(argv[4], "1") == 0,
                                    .subresource = argc > 6 ? argv[6] : NULL};
        rc = sup_k8s_apply(c, r, ns, obj, &ao, &out, &st);
    } else if (strcmp(cmd, "patch") == 0 && argc >= 6) {
        obj = load_json(argv[5]);
        struct k8s_patch_opts po = {.type = strcmp(argv[4], "json") == 0 ? K8S_PATCH_JSON
                                                                         : K8S_PATCH_MERGE,
                                    .subresource = argc > 6 ? argv[6] : NULL};
        rc = sup_k8s_patch(c, r, ns, argv[3], obj, &po, &out, &st);
    } else if (strcmp(cmd, "delete") == 0 && argc >= 4) {
        struct k8s_delete_opts d = {0};
        for (int i = 4; i < argc; i++) {
            if (strncmp(argv[i], "uid=", 4) == 0)
                d.precondition_uid = argv[i] + 4;
            else if (strncmp(argv[i], "rv=", 3) == 0)
                d.precondition_resource_version = argv[i] + 3;
            else if (strcmp(argv[i], "prop=Foreground") == 0)
                d.propagation = K8S_PROPAGATE_FOREGROUND;
            else if (strcmp(argv[i], "prop=Orphan") == 0)
                d.propagation = K8S_PROPAGATE_ORPHAN;
            else if (strcmp(argv[i], "prop=Background") == 0)
                d.propagation = K8S_PROPAGATE_BACKGROUND;
        }
        rc = sup_k8s_delete(c, r, ns, argv[3], &d, &out, &st);
    } else if (strcmp(cmd, "list") == 0) {
        struct k8s_list_opts lo = {.label_selector = argc > 3 && *argv[3] ? argv[3] : NULL,
                                   .limit = argc > 4 ? strtol(argv[4], NULL, 10) : 0,
                                   .continue_token = argc > 5 ? argv[5] : NULL};
        rc = k8s_list(c, r, ns, &lo, &out, &st);
    } else {
        fprintf(stderr, "bad command or arguments: %s\n", cmd);
        return 1;
    }
    json_decref(obj);
    int ret = report(rc, out, &st);
    k8s_status_release(&st);
    return ret;
}

int main(int argc, char **argv)
{
    const char *kc = NULL;
    int i = 1;
    if (argc > 2 && strcmp(argv[1], "--kubeconfig") == 0) {
        kc = argv[2];
        i = 3;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: e2e_k8s_rest [--kubeconfig PATH] CMD ARGS...\n");
        return 1;
    }
    struct tkm_err err = {0};
    if (tkm_http_global_init(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    struct k8s_config cfg;
    k8s_config_init(&cfg);
    if (k8s_config_load_default(&cfg, kc, &err)) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c;
    const char *reload = getenv("E2E_TOKEN_RELOAD_MS");
    struct k8s_client_opts o = {.token_reload_ms = reload ? strtoull(reload, NULL, 10) : 0,
                                .max_retries = 1};
    if (k8s_client_new(&loop, &cfg, &o, &c, &err)) {
        fprintf(stderr, "client: %s\n", err.msg);
        k8s_config_release(&cfg);
        return 1;
    }
    k8s_config_release(&cfg);
    int ret = run(c, argc - i, argv + i);
    k8s_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    curl_global_cleanup();
    return ret;
}
