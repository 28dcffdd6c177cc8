/* test_k8s_rest.c - paths, request building, retries, auth reload and events,
 * checked against the exact requests a canned loopback server records. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <k8s/client.h>
#include <k8s/events.h>
#include <tkm/fs.h>
#include <tkm/util.h>

#include "test.h"
#include "client-int.h"
#include "tsrv.h"
#include "sup_k8s.h"

static const char *path_of(const struct k8s_resource *r, const char *ns, const char *name,
                           const char *sub, int *rc)
{
    static char out[1024];
    struct tkm_buf b = TKM_BUF_INIT(1024);
    struct tkm_err err = {0};
    *rc = k8s_path(&b, r, ns, name, sub, &err);
    snprintf(out, sizeof out, "%s", *rc ? err.msg : b.data);
    tkm_buf_release(&b);
    return out;
}

/* A custom resource's descriptor, as a CRD's module declares it. */
static const struct k8s_resource res_crd = {"tkm.io", "v1alpha1", "tritonkernelcaches",
                                            "TritonKernelCache", 1};
static const struct k8s_resource res_crd_cluster = {
    "tkm.io", "v1alpha1", "tritonkernelcacheclusters", "TritonKernelCacheCluster", 0};

TEST(paths)
{
    int rc;
    ASSERT_STREQ(path_of(&k8s_res_configmaps, "ns1", "a", NULL, &rc),
                 "/api/v1/namespaces/ns1/configmaps/a");
    ASSERT_STREQ(path_of(&k8s_res_configmaps, NULL, NULL, NULL, &rc), "/api/v1/configmaps");
    ASSERT_STREQ(path_of(&k8s_res_nodes, "ignored", "n1", "status", &rc),
                 "/api/v1/nodes/n1/status");
    ASSERT_STREQ(path_of(&res_crd, "ml", "cache-a", "status", &rc),
                 "/apis/tkm.io/v1alpha1/namespaces/ml/tritonkernelcaches/cache-a/status");
    ASSERT_STREQ(path_of(&res_crd_cluster, NULL, "c", NULL, &rc),
                 "/apis/tkm.io/v1alpha1/tritonkernelcacheclusters/c");
    ASSERT_STREQ(path_of(&k8s_res_leases, "kube-system", "tkm", NULL, &rc),
                 "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/tkm");
    ASSERT_STREQ(path_of(&k8s_res_nodes, NULL, "system:node x", NULL, &rc),
                 "/api/v1/nodes/system%3Anode%20x");
    path_of(&k8s_res_configmaps, "ns", "a/b", NULL, &rc);
    ASSERT_EQ(rc, -EINVAL);
    ASSERT_STRCONTAINS(path_of(&k8s_res_configmaps, "ns", "..", NULL, &rc), "name \"..\"");
    ASSERT_EQ(rc, -EINVAL);
    ASSERT_STRCONTAINS(path_of(&k8s_res_configmaps, "ns", "", NULL, &rc), "name is empty");
    path_of(&k8s_res_configmaps, "ns", NULL, "status", &rc);
    ASSERT_EQ(rc, -EINVAL);
}

TEST(query_escaping)
{
    struct tkm_buf b = TKM_BUF_INIT(1024);
    ASSERT_OK(tkm_buf_puts(&b, "/api/v1/pods"));
    ASSERT_OK(k8s_query_add(&b, "labelSelector", "app=x,tier!=y"));
    ASSERT_OK(k8s_query_add(&b, "fieldSelector", NULL));
    ASSERT_OK(k8s_query_add(&b, "continue", "a+b/c=="));
    ASSERT_STREQ(b.data,
                 "/api/v1/pods?labelSelector=app%3Dx%2Ctier%21%3Dy&continue=a%2Bb%2Fc%3D%3D");
    tkm_buf_release(&b);
}

/* A client for the canned server at port, with a static token or a token file. */
static struct k8s_client *client_for(uv_loop_t *loop, int port, const char *token,
                                     const char *token_file, int max_retries)
{
    struct k8s_config cfg;
    k8s_config_init(&cfg);
    char server[64];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", port);
    cfg.server = strdup(server);
    cfg.namespace = strdup("ns1");
    if (token) {
        cfg.auth = K8S_AUTH_TOKEN;
        cfg.token = strdup(token);
    } else if (token_file) {
        cfg.auth = K8S_AUTH_TOKEN_FILE;
        cfg.token_file = strdup(token_file);
    }
    struct k8s_client_opts o = {.max_retries = max_retries, .timeout_ms = 5000};
    struct k8s_client *c = NULL;
    struct tkm_err err = {0};
    int rc = k8s_client_new(loop, &cfg, &o, &c, &err);
    k8s_config_release(&cfg);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "k8s_client_new: %s", err.msg);
    return c;
}

static void finish(uv_loop_t *loop, struct k8s_client *c)
{
    k8s_client_free(c);
    uv_run(loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(loop), 0);
}

#define CM_JSON                                                                                    \
    "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\",\"namespace\":"    \
    "\"ns1\",\"resourceVersion\":\"7\",\"uid\":\"u-1\"},\"data\":{\"k\":\"v\"}}"

TEST(get_sends_token_and_decodes)
{
    struct tsrv s;
    struct tsrv_reply r = {200, "Content-Type: application/json\r\n", CM_JSON, 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "tok-1", NULL, -1);
    json_t *obj = NULL;
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, &obj, &st));
    ASSERT_STREQ(k8s_obj_name(obj), "a");
    ASSERT_STREQ(k8s_obj_resource_version(obj), "7");
    ASSERT_STREQ(k8s_obj_uid(obj), "u-1");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(obj, "metadata"), "namespace")),
                 "ns1");
    json_decref(obj);
    const char *req = tsrv_req(&s, 0);
    ASSERT_STRCONTAINS(req, "GET /api/v1/namespaces/ns1/configmaps/a HTTP/1.1\r\n");
    ASSERT_STRCONTAINS(req, "Authorization: Bearer tok-1\r\n");
    ASSERT_STRCONTAINS(req, "Accept: application/json\r\n");
    ASSERT_EQ(st.rc, 0);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(status_errors_surface)
{
    struct tsrv s;
    struct tsrv_reply r[] = {
        {404, NULL,
         "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"configmaps \\\"zz\\\" not "
         "found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"zz\",\"kind\":\"configmaps\"},"
         "\"code\":404}",
         0, 0, 0},
        {200, NULL, "not json", 0, 0, 0}};
    int port = tsrv_start(&s, r, 2);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, NULL, NULL, -1);
    json_t *obj = (json_t *)1;
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(sup_k8s_get(c, &k8s_res_configmaps, "other", "zz", NULL, &obj, &st), -ENOENT);
    ASSERT_NULL(obj);
    ASSERT_EQ(st.code, 404);
    ASSERT_STREQ(st.reason, "NotFound");
    ASSERT_STREQ(st.message, "configmaps \"zz\" not found");
    ASSERT_STREQ(st.details_name, "zz");
    ASSERT(strstr(tsrv_req(&s, 0), "Authorization") == NULL);
    /* A 2xx that is not JSON is a protocol error, reported as such. */
    ASSERT_EQ(sup_k8s_get(c, &k8s_res_configmaps, "other", "zz", NULL, &obj, &st), -EPROTO);
    ASSERT_STRCONTAINS(st.message, "not valid JSON");
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(apply_request_shape)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, CM_JSON, 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, -1);
    json_t *obj = json_loads("{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\","
                             "\"metadata\":{\"name\":\"c1\"},\"status\":{\"x\":1}}",
                             0, NULL);
    struct k8s_apply_opts ao = {.field_manager = "tkm-agent", .force = 1, .subresource = "status"};
    struct k8s_status st = K8S_STATUS_INIT;
    int rc = sup_k8s_apply(c, &res_crd, "ml", obj, &ao, NULL, &st);
    ASSERT_OK(rc);
    const char *req = tsrv_req(&s, 0);
    ASSERT_STRCONTAINS(req, "PATCH /apis/tkm.io/v1alpha1/namespaces/ml/tritonkernelcaches/c1/"
                            "status?fieldManager=tkm-agent&force=true HTTP/1.1\r\n");
    ASSERT_STRCONTAINS(req, "Content-Type: application/apply-patch+yaml\r\n");
    ASSERT_STRCONTAINS(req, "\"status\":{\"x\":1}");
    /* resourceVersion in an apply body is refused before sending, and the log says why. */
    json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string("5"));
    struct sup_stderr log;
    ASSERT_OK(sup_stderr_begin(&log));
    rc = sup_k8s_apply(c, &res_crd, "ml", obj, &ao, NULL, &st);
    char *msg = sup_stderr_end(&log);
    ASSERT_EQ(rc, -EINVAL);
    ASSERT_STRCONTAINS(msg, "remove metadata.resourceVersion");
    free(msg);
    ao.field_manager = NULL;
    ASSERT_OK(sup_stderr_begin(&log));
    rc = sup_k8s_apply(c, &res_crd, "ml", obj, &ao, NULL, &st);
    msg = sup_stderr_end(&log);
    ASSERT_EQ(rc, -EINVAL);
    ASSERT_STRCONTAINS(msg, "field manager is required");
    free(msg);
    ASSERT_EQ(tsrv_nreqs(&s), 1);
    json_decref(obj);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(list_delete_patch_shapes)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "{\"kind\":\"List\",\"items\":[]}", 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, -1);
    struct k8s_list_opts lo = {.label_selector = "app=x", .limit = 5, .continue_token = "abc"};
    json_t *out = NULL;
    ASSERT_OK(k8s_list(c, &k8s_res_configmaps, "", &lo, &out, NULL));
    ASSERT(json_is_array(json_object_get(out, "items")));
    json_decref(out);
    ASSERT_STRCONTAINS(tsrv_req(&s, 0),
                       "GET /api/v1/configmaps?labelSelector=app%3Dx&limit=5&continue=abc ");
    struct k8s_delete_opts d = {.propagation = K8S_PROPAGATE_FOREGROUND,
                                .precondition_uid = "u-1",
                                .precondition_resource_version = "7"};
    ASSERT_OK(sup_k8s_delete(c, &k8s_res_configmaps, NULL, "a", &d, NULL, NULL));
    const char *req = tsrv_req(&s, 1);
    ASSERT_STRCONTAINS(req, "DELETE /api/v1/namespaces/ns1/configmaps/a HTTP/1.1");
    ASSERT_STRCONTAINS(req, "\"propagationPolicy\":\"Foreground\"");
    ASSERT_STRCONTAINS(req, "\"preconditions\":{\"uid\":\"u-1\",\"resourceVersion\":\"7\"}");
    json_t *jp = json_loads("[{\"op\":\"add\",\"path\":\"/data/x\",\"value\":\"1\"}]", 0, NULL);
    struct k8s_patch_opts po = {.type = K8S_PATCH_JSON, .field_manager = "me"};
    ASSERT_OK(sup_k8s_patch(c, &k8s_res_configmaps, NULL, "a", jp, &po, NULL, NULL));
    req = tsrv_req(&s, 2);
    ASSERT_STRCONTAINS(req, "PATCH /api/v1/namespaces/ns1/configmaps/a?fieldManager=me ");
    ASSERT_STRCONTAINS(req, "Content-Type: application/json-patch+json");
    /* A JSON patch must be an array; a merge patch an object. */
    struct k8s_status st = K8S_STATUS_INIT;
    po.type = K8S_PATCH_MERGE;
    struct sup_stderr log;
    ASSERT_OK(sup_stderr_begin(&log));
    int rc = sup_k8s_patch(c, &k8s_res_configmaps, NULL, "a", jp, &po, NULL, &st);
    char *msg = sup_stderr_end(&log);
    ASSERT_EQ(rc, -EINVAL);
    ASSERT_STRCONTAINS(msg, "must be a JSON object");
    free(msg);
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    json_decref(jp);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(retry_after_429_then_ok)
{
    struct tsrv s;
    struct tsrv_reply r[] = {
        {429, "Retry-After: 1\r\n",
         "{\"kind\":\"Status\",\"reason\":\"TooManyRequests\",\"message\":\"slow\",\"code\":429}",
         0, 0, 0},
        {200, NULL, CM_JSON, 0, 0, 0}};
    int port = tsrv_start(&s, r, 2);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, 3);
    uint64_t t0 = tkm_now_ms();
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, NULL));
    ASSERT(tkm_now_ms() - t0 >= 900);
    ASSERT_EQ(tsrv_nreqs(&s), 2);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(post_not_retried_on_plain_5xx)
{
    struct tsrv s;
    struct tsrv_reply r = {500, NULL, "{\"kind\":\"Status\",\"message\":\"boom\",\"code\":500}",
                           0,   0,    0};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, 3);
    json_t *obj = json_loads(CM_JSON, 0, NULL);
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(sup_k8s_create(c, &k8s_res_configmaps, NULL, obj, NULL, &st), -EREMOTEIO);
    ASSERT_STREQ(st.message, "boom");
    ASSERT_EQ(tsrv_nreqs(&s), 1);
    /* GET is idempotent: retried (3 more times) on 500. */
    ASSERT_EQ(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st), -EREMOTEIO);
    ASSERT_EQ(tsrv_nreqs(&s), 5);
    json_decref(obj);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(post_retried_when_server_asks)
{
    struct tsrv s;
    struct tsrv_reply r[] = {{503, "Retry-After: 0\r\n",
                              "{\"kind\":\"Status\",\"message\":\"later\",\"code\":503}", 0, 0, 0},
                             {201, NULL, CM_JSON, 0, 0, 0}};
    int port = tsrv_start(&s, r, 2);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, 3);
    json_t *obj = json_loads(CM_JSON, 0, NULL);
    ASSERT_OK(sup_k8s_create(c, &k8s_res_configmaps, NULL, obj, NULL, NULL));
    ASSERT_EQ(tsrv_nreqs(&s), 2);
    ASSERT_STRCONTAINS(tsrv_req(&s, 1), "POST /api/v1/namespaces/ns1/configmaps HTTP/1.1");
    json_decref(obj);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(transport_error_distinguished)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ASSERT_OK(bind(fd, (struct sockaddr *)&a, sizeof a));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&a, &al));
    close(fd);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, ntohs(a.sin_port), "t", NULL, -1);
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st), -ECONNREFUSED);
    ASSERT_EQ(st.transport, 1);
    ASSERT_EQ(st.code, 0);
    ASSERT_STRCONTAINS(st.message, "/api/v1/namespaces/ns1/configmaps/a");
    k8s_status_release(&st);
    finish(&loop, c);
}

TEST(token_file_reloaded_on_401)
{
    struct tsrv s;
    struct tsrv_reply r[] = {
        {401, NULL, "{\"kind\":\"Status\",\"reason\":\"Unauthorized\",\"code\":401}", 0, 0, 0},
        {200, NULL, CM_JSON, 0, 0, 0}};
    int port = tsrv_start(&s, r, 2);
    char tf[512];
    snprintf(tf, sizeof tf, "%s/token", tkm_test_tmpdir());
    FILE *f = fopen(tf, "w");
    fputs("token-A\n", f);
    fclose(f);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, NULL, tf, -1);
    f = fopen(tf, "w");
    fputs("token-B\n", f);
    fclose(f);
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, NULL));
    ASSERT_STRCONTAINS(tsrv_req(&s, 0), "Authorization: Bearer token-A\r\n");
    ASSERT_STRCONTAINS(tsrv_req(&s, 1), "Authorization: Bearer token-B\r\n");
    finish(&loop, c);
    tsrv_stop(&s);
}

struct stream_got {
    int done, rc;
    size_t bytes;
};

static int stream_data(struct k8s_req *req, const char *p, size_t n, void *data)
{
    (void)p;
    struct stream_got *g = data;
    g->bytes += n;
    k8s_req_cancel(req); /* cancel from inside the data callback */
    return 0;
}

static void stream_done(struct k8s_req *req, struct k8s_response *resp, void *data)
{
    (void)req;
    struct stream_got *g = data;
    g->done++;
    g->rc = resp->rc;
}

TEST(stream_and_cancel_from_callback)
{
    struct tsrv s;
    char body[4000];
    memset(body, 'e', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    struct tsrv_reply r = {200, NULL, body, 0, 0, 10};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, -1);
    struct stream_got g = {0};
    struct k8s_request rq = {.method = "GET",
                             .path = "/api/v1/configmaps?watch=1",
                             .timeout_ms = UINT64_MAX,
                             .no_retry = 1};
    ASSERT_OK(k8s_request_start(c, &rq, stream_data, stream_done, &g, NULL, NULL));
    ASSERT_EQ(g.done, 0);
    while (!g.done)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(g.done, 1);
    ASSERT_EQ(g.rc, -ECANCELED);
    ASSERT(g.bytes > 0 && g.bytes < strlen(body));
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(close_cancels_pending)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "{}", 0, 3000, 0};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, -1);
    struct stream_got g = {0};
    struct k8s_request rq = {.method = "GET", .path = "/api/v1/configmaps"};
    ASSERT_OK(k8s_request_start(c, &rq, NULL, stream_done, &g, NULL, NULL));
    uv_run(&loop, UV_RUN_NOWAIT);
    k8s_client_free(c);
    ASSERT_EQ(g.done, 1);
    ASSERT_EQ(g.rc, -ECANCELED);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    tsrv_stop(&s);
}

TEST(events_aggregate_repeats)
{
    struct tsrv s;
    struct tsrv_reply r = {201, NULL, "{\"kind\":\"Event\"}", 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, -1);
    struct k8s_recorder *rec;
    struct k8s_recorder_opts ro = {.component = "tkm-controller", .host = "node-1"};
    ASSERT_OK(k8s_recorder_new(c, &ro, &rec, NULL));
    struct k8s_object_ref o = {.api_version = "tkm.io/v1alpha1",
                               .kind = "TritonKernelCache",
                               .namespace = "ml",
                               .name = "cache-a",
                               .uid = "u-9"};
    struct k8s_recorder_stats stats;
    ASSERT_OK(k8s_event_emit(rec, &o, "Warning", "VerifyFailed", "signature of %s", "sha256:1"));
    /* A repeat while the create is in flight is folded in and patched after. */
    ASSERT_OK(k8s_event_emit(rec, &o, "Warning", "VerifyFailed", "signature of %s", "sha256:1"));
    do {
        uv_run(&loop, UV_RUN_ONCE);
        k8s_recorder_stats(rec, &stats);
    } while (stats.inflight);
    ASSERT_EQ(stats.created, 1);
    ASSERT_EQ(stats.aggregated, 1);
    ASSERT_OK(k8s_event_emit(rec, &o, "Warning", "VerifyFailed", "signature of %s", "sha256:1"));
    ASSERT_OK(k8s_event_emit(rec, &o, "Normal", "Verified", "ok"));
    do {
        uv_run(&loop, UV_RUN_ONCE);
        k8s_recorder_stats(rec, &stats);
    } while (stats.inflight);
    ASSERT_EQ(stats.created, 2);
    ASSERT_EQ(stats.aggregated, 2);
    ASSERT_EQ(stats.failed, 0);
    const char *req = tsrv_req(&s, 0);
    ASSERT_STRCONTAINS(req, "POST /api/v1/namespaces/ml/events HTTP/1.1");
    ASSERT_STRCONTAINS(req, "\"reason\":\"VerifyFailed\"");
    ASSERT_STRCONTAINS(req, "\"involvedObject\":{");
    ASSERT_STRCONTAINS(req, "\"uid\":\"u-9\"");
    ASSERT_STRCONTAINS(req, "\"count\":1");
    ASSERT_STRCONTAINS(req, "\"name\":\"cache-a.");
    req = tsrv_req(&s, 1);
    ASSERT_STRCONTAINS(req, "PATCH /api/v1/namespaces/ml/events/cache-a.");
    ASSERT_STRCONTAINS(req, "application/merge-patch+json");
    ASSERT_STRCONTAINS(req, "\"count\":2");
    /* The third repeat (a PATCH) and the new reason (a POST) go out together on two
     * connections, so the server may see them in either order. */
    static char r2[16384], r3[16384]; /* tsrv_req returns one shared buffer */
    snprintf(r2, sizeof r2, "%s", tsrv_req(&s, 2));
    snprintf(r3, sizeof r3, "%s", tsrv_req(&s, 3));
    const char *patch = strncmp(r2, "PATCH ", 6) == 0 ? r2 : r3;
    const char *post = patch == r2 ? r3 : r2;
    ASSERT_STRCONTAINS(patch, "PATCH /api/v1/namespaces/ml/events/cache-a.");
    ASSERT_STRCONTAINS(patch, "\"count\":3");
    ASSERT_STRCONTAINS(post, "POST /api/v1/namespaces/ml/events");
    ASSERT_STRCONTAINS(post, "\"reason\":\"Verified\"");
    ASSERT_NULL(strstr(post, "null")); /* unset fields (resourceVersion) are left out, not null */
    ASSERT_EQ(k8s_event_emit(rec, &o, "Odd", "X", "y"), -EINVAL);
    k8s_recorder_free(rec);
    finish(&loop, c);
    tsrv_stop(&s);
}

TEST(exec_plugin_refreshed_when_expired_and_on_401)
{
    struct tsrv s;
    struct tsrv_reply r[] = {
        {200, NULL, CM_JSON, 0, 0, 0},
        {401, NULL, "{\"kind\":\"Status\",\"reason\":\"Unauthorized\",\"code\":401}", 0, 0, 0},
        {200, NULL, CM_JSON, 0, 0, 0}};
    int port = tsrv_start(&s, r, 3);
    char script[512], count[512];
    snprintf(script, sizeof script, "%s/plugin.sh", tkm_test_tmpdir());
    snprintf(count, sizeof count, "%s/count", tkm_test_tmpdir());
    FILE *f = fopen(script, "w");
    /* Each run prints token exec-<n>; the credential expired long ago, so the
     * client runs the plugin again before each request. */
    fprintf(
        f,
        "#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0)\nn=$((n+1))\necho $n > %s\n"
        "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
        "\"status\":{\"token\":\"exec-'$n'\",\"expirationTimestamp\":\"2000-01-01T00:00:00Z\"}}'\n",
        count, count);
    fclose(f);
    chmod(script, 0755);
    char y[2048];
    snprintf(
        y, sizeof y,
        "current-context: a\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:%d'}\n"
        "contexts:\n- name: a\n  context: {cluster: c, user: u}\n"
        "users:\n- name: u\n  user:\n    exec:\n      command: %s\n"
        "      apiVersion: client.authentication.k8s.io/v1\n      interactiveMode: Never\n",
        port, script);
    struct k8s_config cfg;
    struct tkm_err err = {0};
    k8s_config_init(&cfg);
    ASSERT_OK(k8s_config_load_yaml(&cfg, y, strlen(y), "/", "kc", NULL, &err));
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c;
    ASSERT_OK(k8s_client_new(&loop, &cfg, NULL, &c, &err)); /* run 1 */
    k8s_config_release(&cfg);
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, "x", "a", NULL, NULL, NULL));
    ASSERT_STRCONTAINS(tsrv_req(&s, 0), "Authorization: Bearer exec-2\r\n");
    /* Request 2: refreshed (run 3), refused with 401, refreshed again (run 4). */
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, "x", "a", NULL, NULL, NULL));
    ASSERT_STRCONTAINS(tsrv_req(&s, 1), "Authorization: Bearer exec-3\r\n");
    ASSERT_STRCONTAINS(tsrv_req(&s, 2), "Authorization: Bearer exec-4\r\n");
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    finish(&loop, c);
    tsrv_stop(&s);
}

/* reliability.md section 3/6: 429 + Retry-After is honoured on merge and
 * JSON patches (retried only because the server asked) and on server-side
 * apply (idempotent); the same body goes out again after the wait. */
#define TOO_MANY                                                                                   \
    "{\"kind\":\"Status\",\"reason\":\"TooManyRequests\",\"message\":\"slow down\",\"code\":429}"

static void check_retried_after(struct tsrv *s, int first, int wait_ms)
{
    struct tsrv_request a, b;
    ASSERT_OK(tsrv_get(s, first, &a));
    ASSERT_OK(tsrv_get(s, first + 1, &b));
    ASSERT_STREQ(a.method, "PATCH");
    ASSERT_STREQ(a.target, b.target);
    ASSERT_UEQ(a.body_len, b.body_len);
    ASSERT_STREQ(a.body, b.body);
    ASSERT(b.at_ms - a.at_ms >= (uint64_t)wait_ms - 100);
}

TEST_TIMEOUT(patch_and_apply_honour_429_retry_after, 60)
{
    static const struct tsrv_reply merge[] = {{429, "Retry-After: 1\r\n", TOO_MANY},
                                              {200, NULL, CM_JSON}};
    static const struct tsrv_reply jsonp[] = {{429, "Retry-After: 2\r\n", TOO_MANY},
                                              {200, NULL, CM_JSON}};
    static const struct tsrv_reply apply[] = {{429, "Retry-After: 1\r\n", TOO_MANY},
                                              {429, "Retry-After: 1\r\n", TOO_MANY},
                                              {200, NULL, CM_JSON}};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(
        tsrv_route(&s, "PATCH", "/api/v1/namespaces/ns1/configmaps/m", TSRV_EXACT, NULL, merge, 2));
    ASSERT_OK(
        tsrv_route(&s, "PATCH", "/api/v1/namespaces/ns1/configmaps/j", TSRV_EXACT, NULL, jsonp, 2));
    ASSERT_OK(tsrv_route(&s, "PATCH", "/api/v1/namespaces/ns1/configmaps/a/status", TSRV_PREFIX,
                         "fieldManager=tkm-agent", apply, 3));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, 3);
    struct k8s_status st = K8S_STATUS_INIT;

    json_t *mp = json_pack("{s:{s:s}}", "data", "k", "v2");
    struct k8s_patch_opts po = {.type = K8S_PATCH_MERGE};
    ASSERT_OK(sup_k8s_patch(c, &k8s_res_configmaps, NULL, "m", mp, &po, NULL, &st));
    ASSERT_EQ(tsrv_nreqs(&s), 2);
    check_retried_after(&s, 0, 1000);
    ASSERT_STRCONTAINS(tsrv_req(&s, 1), "Content-Type: application/merge-patch+json\r\n");

    json_t *jp = json_pack("[{s:s,s:s,s:s}]", "op", "replace", "path", "/data/k", "value", "v3");
    po.type = K8S_PATCH_JSON;
    ASSERT_OK(sup_k8s_patch(c, &k8s_res_configmaps, NULL, "j", jp, &po, NULL, &st));
    ASSERT_EQ(tsrv_nreqs(&s), 4);
    check_retried_after(&s, 2, 2000);
    ASSERT_STRCONTAINS(tsrv_req(&s, 3), "Content-Type: application/json-patch+json\r\n");

    json_t *obj = json_pack("{s:s,s:s,s:{s:s},s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                            "metadata", "name", "a", "data", "k", "v");
    struct k8s_apply_opts ao = {.field_manager = "tkm-agent", .subresource = "status"};
    json_t *out = NULL;
    ASSERT_OK(sup_k8s_apply(c, &k8s_res_configmaps, NULL, obj, &ao, &out, &st));
    ASSERT_STREQ(k8s_obj_name(out), "a");
    ASSERT_EQ(tsrv_nreqs(&s), 7);
    check_retried_after(&s, 4, 1000);
    check_retried_after(&s, 5, 1000);
    ASSERT_STRCONTAINS(tsrv_req(&s, 6), "Content-Type: application/apply-patch+yaml\r\n");
    json_decref(out);
    json_decref(mp);
    json_decref(jp);
    json_decref(obj);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

/* A server that keeps answering 429: the client gives up after max_retries
 * and reports the 429, its Retry-After and the message. */
TEST_TIMEOUT(apply_429_gives_up_after_max_retries, 60)
{
    static const struct tsrv_reply busy[] = {{429, "Retry-After: 0\r\n", TOO_MANY}};
    struct tsrv s;
    int port = tsrv_start(&s, busy, 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = client_for(&loop, port, "t", NULL, 2);
    struct k8s_status st = K8S_STATUS_INIT;
    json_t *obj = json_pack("{s:s,s:s,s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                            "metadata", "name", "a");
    struct k8s_apply_opts ao = {.field_manager = "tkm-agent"};
    ASSERT(sup_k8s_apply(c, &k8s_res_configmaps, NULL, obj, &ao, NULL, &st) < 0);
    ASSERT_EQ(st.code, 429);
    ASSERT_EQ(st.retry_after_s, 0);
    ASSERT_STREQ(st.message, "slow down");
    ASSERT_EQ(tsrv_nreqs(&s), 3); /* the first try and 2 retries */
    json_decref(obj);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

/* ---- CA bundle rotation (reliability.md section 6) ------------------------- */

static void copy_file(const char *from, const char *to, int by_rename)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    struct tkm_err err = {0};
    ASSERT_OK(tkm_read_file(from, b.max, &b, "test", &err));
    FILE *f = fopen(by_rename ? tmp : to, "w");
    ASSERT_NOT_NULL(f);
    ASSERT_UEQ(fwrite(b.data, 1, b.len, f), b.len);
    ASSERT_OK(fclose(f));
    if (by_rename)
        ASSERT_OK(rename(tmp, to));
    tkm_buf_release(&b);
}

struct pki {
    char dir[512], ca[600], ca1[600], ca2[600], crt1[600], key1[600], crt2[600], key2[600];
};

static void pki_make(struct pki *p)
{
    snprintf(p->dir, sizeof p->dir, "%s", tkm_test_tmpdir());
    ASSERT_OK(tsrv_make_pki(p->dir, "one"));
    ASSERT_OK(tsrv_make_pki(p->dir, "two"));
    snprintf(p->ca, sizeof p->ca, "%s/ca.crt", p->dir);
    snprintf(p->ca1, sizeof p->ca1, "%s/one-ca.crt", p->dir);
    snprintf(p->ca2, sizeof p->ca2, "%s/two-ca.crt", p->dir);
    snprintf(p->crt1, sizeof p->crt1, "%s/one.crt", p->dir);
    snprintf(p->key1, sizeof p->key1, "%s/one.key", p->dir);
    snprintf(p->crt2, sizeof p->crt2, "%s/two.crt", p->dir);
    snprintf(p->key2, sizeof p->key2, "%s/two.key", p->dir);
    copy_file(p->ca1, p->ca, 0);
}

static struct k8s_client *tls_client_for(uv_loop_t *loop, int port, const char *ca_file,
                                         uint64_t ca_reload_ms)
{
    struct k8s_config cfg;
    k8s_config_init(&cfg);
    char server[64];
    snprintf(server, sizeof server, "https://127.0.0.1:%d", port);
    cfg.server = strdup(server);
    cfg.namespace = strdup("ns1");
    cfg.ca_file = strdup(ca_file);
    cfg.auth = K8S_AUTH_TOKEN;
    cfg.token = strdup("t");
    struct k8s_client_opts o = {
        .max_retries = -1, .timeout_ms = 20000, .ca_reload_ms = ca_reload_ms};
    struct k8s_client *c = NULL;
    struct tkm_err err = {0};
    int rc = k8s_client_new(loop, &cfg, &o, &c, &err);
    k8s_config_release(&cfg);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "k8s_client_new: %s", err.msg);
    return c;
}

/* The apiserver's certificate and the CA file rotate together (the file is
 * replaced by a rename, as the kubelet's atomic writer does): the TLS
 * failure on the next new connection re-reads the file and the request
 * goes through without a restart. A server that goes back to the old
 * certificate is refused: the old CA is no longer trusted. */
TEST_TIMEOUT(ca_rotation_picked_up_after_tls_failure, 60)
{
    static const struct tsrv_reply ok[] = {{200, NULL, CM_JSON}};
    struct pki p;
    pki_make(&p);
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(
        tsrv_route(&s, "GET", "/api/v1/namespaces/ns1/configmaps/a", TSRV_EXACT, NULL, ok, 1));
    ASSERT_OK(tsrv_tls(&s, p.crt1, p.key1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = tls_client_for(&loop, port, p.ca, 0);
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st));
    ASSERT_EQ(k8s__client_ca_reloads(c), 0);

    ASSERT_OK(tsrv_tls(&s, p.crt2, p.key2));
    tsrv_drop_conns(&s);
    copy_file(p.ca2, p.ca, 1);
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st));
    ASSERT_EQ(k8s__client_ca_reloads(c), 1);
    ASSERT_EQ(tsrv_nreqs(&s), 2);

    ASSERT_OK(tsrv_tls(&s, p.crt1, p.key1));
    tsrv_drop_conns(&s);
    ASSERT_EQ(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st), -EPROTO);
    ASSERT_EQ(k8s__client_ca_reloads(c), 1);
    ASSERT_EQ(tsrv_nreqs(&s), 2);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}

/* The periodic check: the CA file rewritten in place (same inode, new
 * mtime) is taken before the next request, so a server still presenting
 * the old chain is refused, and one presenting the new chain is accepted. A
 * CA file that turns into garbage keeps the last good bundle. */
TEST_TIMEOUT(ca_file_checked_periodically, 60)
{
    static const struct tsrv_reply ok[] = {{200, NULL, CM_JSON}};
    struct pki p;
    pki_make(&p);
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(
        tsrv_route(&s, "GET", "/api/v1/namespaces/ns1/configmaps/a", TSRV_EXACT, NULL, ok, 1));
    ASSERT_OK(tsrv_tls(&s, p.crt1, p.key1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct k8s_client *c = tls_client_for(&loop, port, p.ca, 50);
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st));

    copy_file(p.ca2, p.ca, 0);
    struct timespec ts = {0, 120 * 1000000L};
    nanosleep(&ts, NULL);
    tsrv_drop_conns(&s);
    ASSERT_EQ(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st), -EPROTO);
    ASSERT_EQ(k8s__client_ca_reloads(c), 1);

    ASSERT_OK(tsrv_tls(&s, p.crt2, p.key2));
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st));

    FILE *f = fopen(p.ca, "w");
    ASSERT_NOT_NULL(f);
    fputs("not a certificate\n", f);
    fclose(f);
    nanosleep(&ts, NULL);
    tsrv_drop_conns(&s);
    ASSERT_OK(sup_k8s_get(c, &k8s_res_configmaps, NULL, "a", NULL, NULL, &st));
    ASSERT_EQ(k8s__client_ca_reloads(c), 1);
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    k8s_status_release(&st);
    finish(&loop, c);
    tsrv_stop(&s);
}
