/*
 * test_api_verify.c - the verify job (<tkm/api/verify.h>) against tsrv, which
 * plays the apiserver (a pull Secret) and the registry (a Triton cache image
 * behind Basic auth, unsigned; and the real cosign v3.1.3 bundle of
 * cosign3_bundle.h): credentials -> pooled session -> resolve -> inspect ->
 * policy -> signature -> summary, the known() hook, the pool's keys,
 * cancellation with a registry request and with an apiserver read in flight,
 * start failures, the pin (the hash of the manifest bytes) and resolve
 * failures' reasons; and the helpers (registry reasons, the API summary, the
 * policy fingerprint).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <tkm/api/verify.h>
#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/manifest.h>
#include <tkm/trust/bundle.h>
#include <tkm/util.h>
#include <k8s/client.h>
#include <k8s/config.h>

#include "test.h"
#include "tsrv.h"

#include "cosign3_bundle.h"

#define MANIF "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n"
#define INDEX "Content-Type: application/vnd.oci.image.index.v1+json\r\n"
#define OCTET "Content-Type: application/octet-stream\r\n"
#define JSONH "Content-Type: application/json\r\n"
#define NF    "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}"

/* ---- the image ------------------------------------------------------------------------ */

/* A Triton cache image of repository e2e/x: config with the labels, a
 * manifest with one layer, the paths they are served at. */
struct img {
    char cfg[1024], man[1024], cdg[72], mdg[72], ldg[72];
    char mpath[160], cpath[160];
};

/* The image with config cfg (copied). */
static void img_init_cfg(struct img *m, const char *cfg)
{
    snprintf(m->cfg, sizeof m->cfg, "%s", cfg);
    ASSERT_OK(tkm_oci_digest_bytes(m->cfg, strlen(m->cfg), m->cdg));
    ASSERT_OK(tkm_oci_digest_bytes("x", 1, m->ldg));
    snprintf(m->man, sizeof m->man,
             "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"config\":{"
             "\"mediaType\":\"" TKM_OCI_MT_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\","
             "\"digest\":\"%s\",\"size\":1}]}",
             m->cdg, strlen(m->cfg), m->ldg);
    ASSERT_OK(tkm_oci_digest_bytes(m->man, strlen(m->man), m->mdg));
    snprintf(m->mpath, sizeof m->mpath, "/v2/e2e/x/manifests/%s", m->mdg);
    snprintf(m->cpath, sizeof m->cpath, "/v2/e2e/x/blobs/%s", m->cdg);
}

static void img_init(struct img *m)
{
    img_init_cfg(
        m, "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Labels\":{"
           "\"cache.triton.image/entry-count\":\"4\",\"cache.triton.image/cache-size-bytes\":"
           "\"4096\",\"cache.triton.image/summary\":\"{\\\"targets\\\":[{\\\"backend\\\":"
           "\\\"cuda\\\",\\\"arch\\\":\\\"90\\\",\\\"warp_size\\\":32}],\\\"triton_versions\\\":"
           "[\\\"3.6.0\\\"],\\\"ptx_versions\\\":[\\\"8.7\\\"]}\"}},"
           "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}");
}

/* 401 Basic unless the request carries Authorization: Basic. */
static int basic_gate(const struct tsrv_request *req, struct tsrv_reply *out, char *scratch,
                      size_t scratch_len, void *data)
{
    static const struct tsrv_reply unauthorized = {401, "WWW-Authenticate: Basic realm=\"t\"\r\n",
                                                   ""};
    (void)scratch;
    (void)scratch_len;
    *out = strcasestr(req->head, "\r\nAuthorization: Basic ") ? *(const struct tsrv_reply *)data
                                                              : unauthorized;
    return 0;
}

struct img_routes {
    struct tsrv_reply tag, man, cfg;
};

/* The image's routes on s: by tag v1, by digest, the config (gated: Basic
 * auth needed). */
static void img_serve(struct tsrv *s, const struct img *m, struct img_routes *r, int gated)
{
    r->tag = (struct tsrv_reply){200, MANIF, m->man};
    r->man = r->tag;
    r->cfg = (struct tsrv_reply){200, OCTET, m->cfg};
    const char *paths[3] = {"/v2/e2e/x/manifests/v1", m->mpath, m->cpath};
    const struct tsrv_reply *rs[3] = {&r->tag, &r->man, &r->cfg};
    for (int i = 0; i < 3; i++) {
        if (gated)
            ASSERT_OK(
                tsrv_route_fn(s, NULL, paths[i], TSRV_EXACT, NULL, basic_gate, (void *)rs[i]));
        else
            ASSERT_OK(tsrv_route(s, NULL, paths[i], TSRV_EXACT, NULL, rs[i], 1));
    }
}

/* ---- the apiserver's side -------------------------------------------------------------- */

static void b64(const char *in, char *out, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = strlen(in), o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < len)
            v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < len)
            v |= (unsigned char)in[i + 2];
        ASSERT(o + 5 < n);
        out[o++] = a[(v >> 18) & 63];
        out[o++] = a[(v >> 12) & 63];
        out[o++] = i + 1 < len ? a[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? a[v & 63] : '=';
    }
    out[o] = '\0';
}

/* Secret ns1/pull: user:pass for 127.0.0.1:port (body into out). */
static void pull_secret(int port, char *out, size_t n)
{
    char cfg[256], enc[512];
    snprintf(cfg, sizeof cfg,
             "{\"auths\":{\"127.0.0.1:%d\":{\"username\":\"user\",\"password\":\"pass\"}}}", port);
    b64(cfg, enc, sizeof enc);
    snprintf(out, n,
             "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"pull\","
             "\"namespace\":\"ns1\"},\"type\":\"kubernetes.io/dockerconfigjson\",\"data\":{"
             "\".dockerconfigjson\":\"%s\"}}",
             enc);
}

/* A TritonKernelCache ns1/c1 of image (spec extras: more JSON members). */
static void cache_of(struct tkm_api_cache *c, const char *image, const char *extras)
{
    char j[4096];
    struct tkm_err err = {0};
    snprintf(j, sizeof j,
             "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":{"
             "\"name\":\"c1\",\"namespace\":\"ns1\",\"uid\":\"u1\",\"generation\":1},\"spec\":{"
             "\"cacheImage\":\"%s\"%s%s}}",
             image, extras ? "," : "", extras ? extras : "");
    if (tkm_api_cache_decode(j, strlen(j), c, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "%s", err.msg);
}

/* ---- the environment ------------------------------------------------------------------- */

struct env {
    uv_loop_t loop;
    struct tkm_http *http;
    struct k8s_client *kc;
    struct tkm_verify_ctx *ctx;
    int port;
};

static void env_open(struct env *e, int port)
{
    struct tkm_err err = {0};
    struct k8s_config cfg;
    char y[512];
    e->port = port;
    ASSERT_OK(tkm_http_global_init(&err));
    ASSERT_OK(uv_loop_init(&e->loop));
    ASSERT_OK(tkm_http_new(&e->loop, NULL, &e->http, &err));
    snprintf(y, sizeof y,
             "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {server: "
             "\"http://127.0.0.1:%d\"}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: t\n"
             "  context: {cluster: t, user: u, namespace: ns1}\ncurrent-context: t\n",
             port);
    k8s_config_init(&cfg);
    ASSERT_OK(k8s_config_load_yaml(&cfg, y, strlen(y), "/", "test", NULL, &err));
    struct k8s_client_opts ko = {.max_retries = -1};
    ASSERT_OK(k8s_client_new(&e->loop, &cfg, &ko, &e->kc, &err));
    k8s_config_release(&cfg);
    /* the request timeout, scaled (valgrind): cancel tests end well before it */
    struct tkm_verify_ctx_opts vo = {.timeout_ms = 5000 * tkm_test_timeout_scale()};
    ASSERT_OK(tkm_verify_ctx_new(&e->loop, e->http, &vo, &e->ctx, &err));
}

static void flag(void *data)
{
    (*(int *)data)++;
}

/* Closes the context (waiting for its close callback), then the clients. */
static void env_close(struct env *e)
{
    int closed = 0;
    tkm_verify_ctx_close(e->ctx, flag, &closed);
    while (!closed)
        uv_run(&e->loop, UV_RUN_ONCE);
    ASSERT_EQ(closed, 1);
    k8s_client_close(e->kc, NULL, NULL);
    tkm_http_close(e->http, NULL, NULL);
    ASSERT_OK(uv_run(&e->loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&e->loop));
}

/* What a callback saw (copied: the result is borrowed). */
struct seen {
    int calls, known_calls;
    struct tkm_verify_result r; /* image and manifest moved out */
    struct tkm_api_summary sum;
    char known_fp[72], known_digest[72];
    int known_answer; /* what known() returns */
};

static void on_done(const struct tkm_verify_result *r, void *data)
{
    struct seen *s = data;
    s->calls++;
    s->r = *r;
    /* the image and the manifest may be moved out */
    struct tkm_verify_result *w = (struct tkm_verify_result *)r;
    memset(&w->image, 0, sizeof w->image);
    memset(&w->manifest, 0, sizeof w->manifest);
    memset(&w->variants, 0, sizeof w->variants);
    if (r->inspected)
        ASSERT_OK(tkm_verify_api_summary(&s->r.image, &s->sum));
}

static int known(const struct tkm_verify_result *r, void *data)
{
    struct seen *s = data;
    s->known_calls++;
    snprintf(s->known_fp, sizeof s->known_fp, "%s", r->policy_fp);
    snprintf(s->known_digest, sizeof s->known_digest, "%s", r->digest);
    return s->known_answer;
}

static void seen_release(struct seen *s)
{
    tkm_triton_image_release(&s->r.image);
    tkm_oci_manifest_release(&s->r.manifest);
    tkm_variant_set_release(&s->r.variants);
    tkm_api_summary_release(&s->sum);
}

/* Runs one job to its callback. */
static void run_job(struct env *e, const struct tkm_verify_req *q, struct seen *s)
{
    struct tkm_err err = {0};
    if (tkm_verify_start(e->ctx, q, on_done, s, NULL, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "start: %s", err.msg);
    ASSERT_EQ(s->calls, 0); /* never from inside the start */
    while (s->calls == 0)
        uv_run(&e->loop, UV_RUN_ONCE);
    ASSERT_EQ(s->calls, 1);
    ASSERT_UEQ(tkm_verify_ctx_jobs(e->ctx), 0);
}

static int count_paths(struct tsrv *s, const char *part)
{
    struct tsrv_request rq;
    int n = 0;
    for (int i = 0; i < tsrv_nreqs(s); i++)
        if (tsrv_get(s, i, &rq) == 0 && strstr(rq.path, part))
            n++;
    return n;
}

/* ---- tests ------------------------------------------------------------------------------ */

TEST(pull_secret_session_resolve_inspect_policy)
{
    struct img m;
    struct img_routes ir;
    struct tsrv srv;
    char secret[1024], image[128];
    img_init(&m);
    tsrv_init(&srv);
    img_serve(&srv, &m, &ir, 1);
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    pull_secret(port, secret, sizeof secret);
    struct tsrv_reply rs = {200, JSONH, secret};
    ASSERT_OK(
        tsrv_route(&srv, "GET", "/api/v1/namespaces/ns1/secrets/pull", TSRV_EXACT, NULL, &rs, 1));
    struct env e;
    env_open(&e, port);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    struct tkm_api_cache c;
    cache_of(&c, image,
             "\"imagePullSecrets\":[{\"name\":\"pull\"}],\"signaturePolicy\":{\"mode\":"
             "\"Disabled\"}");
    struct tkm_verify_req q = {.flags =
                                   TKM_VERIFY_RESOLVE | TKM_VERIFY_INSPECT | TKM_VERIFY_SIGNATURE,
                               .kc = e.kc,
                               .cache = &c,
                               .config_ns = "tkm-system"};
    struct seen s = {0};
    /* No tkm-config: the floor is Enforce, and a namespaced cache may not
     * switch checks off for itself (issue 23). */
    run_job(&e, &q, &s);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_STEP_POLICY);
    ASSERT_STREQ(s.r.reason, "PolicyBelowFloor");
    ASSERT_STRCONTAINS(s.r.message, "weaker than the floor Enforce");
    ASSERT_EQ(s.r.has_policy, 0);
    seen_release(&s);
    memset(&s, 0, sizeof s);
    /* The admin lowers the floor: the same cache is honoured. */
    struct tkm_api_config cfg = {.present = 1, .floor = TKM_API_SIG_DISABLED};
    q.cfg = &cfg;
    run_job(&e, &q, &s);
    if (s.r.failed)
        tkm_test_fail(__FILE__, __LINE__, "step %d: %s: %s", (int)s.r.failed, s.r.reason,
                      s.r.message);
    ASSERT_EQ(s.r.rc, 0);
    ASSERT_STREQ(s.r.reason, "");
    ASSERT_STREQ(s.r.digest, m.mdg); /* the hash of the manifest bytes */
    ASSERT_EQ(s.r.resolved, 1);
    ASSERT_NOT_NULL(s.r.session);
    /* the image facts the agent judges with */
    ASSERT_EQ(s.r.inspected, 1);
    ASSERT_STREQ(s.r.image_digest, m.mdg);
    ASSERT_UEQ(s.r.manifest.n_descs, 1);
    ASSERT_STREQ(s.r.manifest.descs[0].digest, m.ldg);
    ASSERT_UEQ(s.r.image.summary.n_targets, 1);
    ASSERT_STREQ(s.r.image.summary.targets[0].target.arch, "90");
    ASSERT_STREQ(s.r.image.size_bytes, "4096");
    /* ... and the summary the controller shows */
    ASSERT_EQ(s.sum.entry_count, 4);
    ASSERT_EQ(s.sum.cache_size_bytes, 4096);
    ASSERT_UEQ(s.sum.n_targets, 1);
    ASSERT_STREQ(s.sum.targets[0].arch, "90");
    ASSERT_STREQ(s.sum.targets[0].ptx_version, "8.7");
    ASSERT_STREQ(s.sum.targets[0].triton_version, "3.6.0");
    /* the policy: Disabled, so nothing was searched and nodes may use it */
    ASSERT_EQ(s.r.has_policy, 1);
    ASSERT_EQ(s.r.mode, TKM_SIG_MODE_DISABLED);
    ASSERT_EQ(s.r.policy_source, TKM_API_POLICY_SPEC);
    ASSERT_STRCONTAINS(s.r.policy_describe, "spec.signaturePolicy (Disabled");
    ASSERT_EQ(s.r.sig_state, TKM_VERIFY_SIG_DISABLED);
    ASSERT_EQ(s.r.usable, 1);
    ASSERT_EQ(count_paths(&srv, "/referrers/"), 0);
    /* the Secret's credentials reached the registry */
    int basic = 0;
    char v[256];
    for (int i = 0; i < tsrv_nreqs(&srv); i++)
        if (tsrv_header(&srv, i, "Authorization", v, sizeof v) >= 0 &&
            strcmp(v, "Basic dXNlcjpwYXNz") == 0)
            basic++;
    ASSERT(basic >= 1);
    ASSERT_UEQ(tkm_verify_ctx_sessions(e.ctx), 1);
    seen_release(&s);

    /* Same host and credentials: the pool's session again. */
    struct seen s2 = {0};
    q.digest = m.mdg;
    q.flags = TKM_VERIFY_SUMMARY;
    run_job(&e, &q, &s2);
    ASSERT_EQ(s2.r.failed, TKM_VERIFY_DONE);
    ASSERT_EQ(s2.r.resolved, 0);
    ASSERT_STREQ(s2.r.digest, m.mdg);
    ASSERT_EQ(s2.r.inspected, 1);
    ASSERT_EQ(s2.r.has_policy, 0);
    ASSERT_EQ(s2.r.summary_rc, 0);
    ASSERT(s2.r.session == s.r.session);
    ASSERT_UEQ(tkm_verify_ctx_sessions(e.ctx), 1);
    seen_release(&s2);

    /* No pull Secret: an anonymous session of its own, refused by the
     * registry: a failure of the resolve step, worth a retry. */
    struct tkm_api_cache anon;
    cache_of(&anon, image, NULL);
    struct tkm_verify_req qa = {.flags = TKM_VERIFY_RESOLVE | TKM_VERIFY_INSPECT, .cache = &anon};
    struct seen s3 = {0};
    run_job(&e, &qa, &s3);
    ASSERT_EQ(s3.r.failed, TKM_VERIFY_STEP_RESOLVE);
    ASSERT_EQ(s3.r.rc, -EACCES);
    ASSERT_STREQ(s3.r.reason, "RegistryUnauthorized");
    ASSERT_EQ(s3.r.retry, 1);
    ASSERT_STREQ(s3.r.digest, "");
    ASSERT_EQ(s3.r.inspected, 0);
    ASSERT(s3.r.session != s.r.session);
    ASSERT_UEQ(tkm_verify_ctx_sessions(e.ctx), 2);
    seen_release(&s3);
    tkm_api_cache_release(&anon);
    tkm_api_cache_release(&c);
    env_close(&e);
    tsrv_stop(&srv);
}

/* Resolves 127.0.0.1:<port>/e2e/x:v1 with a job (RESOLVE only: what the
 * controller's pin step runs). */
static void resolve_once(int port, struct seen *s)
{
    struct env e;
    char image[128];
    env_open(&e, port);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    struct tkm_verify_req q = {.flags = TKM_VERIFY_RESOLVE, .image = image};
    run_job(&e, &q, s);
    env_close(&e);
}

TEST(resolve_pins_the_hash_of_the_manifest_bytes)
{
    static const char manifest[] =
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":"
        "\"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"size\":2},"
        "\"layers\":[]}";
    static const struct tsrv_reply ok[] = {
        {200,
         "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n"
         "Docker-Content-Digest: "
         "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n",
         manifest}};
    struct tsrv srv;
    struct seen s = {0};
    char want[72];
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, ok, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    resolve_once(port, &s);
    tsrv_stop(&srv);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_DONE);
    ASSERT_EQ(s.r.resolved, 1);
    ASSERT_OK(tkm_oci_digest_bytes(manifest, strlen(manifest), want));
    ASSERT_STREQ(s.r.digest, want); /* never the header's claim */
    ASSERT_EQ(s.r.inspected, 0);
    ASSERT_EQ(s.r.sig_state, TKM_VERIFY_SIG_NOT_RUN);
    seen_release(&s);
}

TEST(resolve_failures_have_reasons)
{
    static const struct tsrv_reply missing[] = {
        {404, JSONH,
         "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\",\"message\":\"manifest unknown\"}]}"}};
    static const struct tsrv_reply broken[] = {{500, NULL, "boom"}};
    struct tsrv srv;
    struct seen s = {0};
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, missing, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    resolve_once(port, &s);
    tsrv_stop(&srv);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_STEP_RESOLVE);
    ASSERT_EQ(s.r.rc, -ENOENT);
    ASSERT_STREQ(s.r.reason, "ImageNotFound");
    ASSERT_EQ(s.r.retry, 0); /* looked at again slowly, not with the fast backoff */
    ASSERT_STRCONTAINS(s.r.message, "MANIFEST_UNKNOWN");
    ASSERT_STREQ(s.r.digest, "");
    seen_release(&s);

    memset(&s, 0, sizeof s);
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, broken, 1));
    port = tsrv_listen(&srv);
    ASSERT(port > 0);
    resolve_once(port, &s);
    tsrv_stop(&srv);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_STEP_RESOLVE);
    ASSERT(s.r.rc < 0);
    ASSERT_STREQ(s.r.reason, "RegistryUnreachable");
    ASSERT_EQ(s.r.retry, 1);
    seen_release(&s);
}

TEST(missing_pull_secret_fails_the_creds_step)
{
    struct tsrv srv;
    char image[128];
    static const struct tsrv_reply nf = {
        404, JSONH,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":"
        "\"NotFound\",\"code\":404,\"message\":\"secrets \\\"pull\\\" not found\"}"};
    tsrv_init(&srv);
    ASSERT_OK(
        tsrv_route(&srv, "GET", "/api/v1/namespaces/ns1/secrets/pull", TSRV_EXACT, NULL, &nf, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    struct tkm_api_cache c;
    cache_of(&c, image, "\"imagePullSecrets\":[{\"name\":\"pull\"}]");
    struct tkm_verify_req q = {
        .flags = TKM_VERIFY_RESOLVE, .kc = e.kc, .cache = &c, .config_ns = "tkm-system"};
    struct seen s = {0};
    run_job(&e, &q, &s);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_STEP_CREDS);
    ASSERT_EQ(s.r.rc, -ENOENT);
    ASSERT_STREQ(s.r.reason, "SecretNotFound");
    ASSERT_STRCONTAINS(s.r.message, "imagePullSecret ns1/pull not found");
    ASSERT_EQ(s.r.retry, 1); /* it may be created later */
    ASSERT_NULL(s.r.session);
    ASSERT_EQ(count_paths(&srv, "/v2/"), 0); /* the registry was never asked */
    ASSERT_UEQ(tkm_verify_ctx_sessions(e.ctx), 0);
    seen_release(&s);
    tkm_api_cache_release(&c);
    env_close(&e);
    tsrv_stop(&srv);
}

TEST(unsigned_under_enforce_is_a_verdict_and_known_skips_the_search)
{
    struct img m;
    struct img_routes ir;
    struct tsrv srv;
    char image[128], extras[2048];
    img_init(&m);
    tsrv_init(&srv);
    img_serve(&srv, &m, &ir, 0);
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    char pem[1024];
    size_t o = 0;
    for (const char *p = COSIGN3_PUB; *p && o + 3 < sizeof pem; p++) { /* JSON-escape the PEM */
        if (*p == '\n') {
            pem[o++] = '\\';
            pem[o++] = 'n';
        } else {
            pem[o++] = *p;
        }
    }
    pem[o] = '\0';
    snprintf(extras, sizeof extras,
             "\"signaturePolicy\":{\"mode\":\"Enforce\",\"publicKey\":\"%s\"}", pem);
    struct tkm_api_cache c;
    cache_of(&c, image, extras);
    struct tkm_verify_req q = {.flags = TKM_VERIFY_SIGNATURE | TKM_VERIFY_SUMMARY,
                               .kc = e.kc,
                               .cache = &c,
                               .digest = m.mdg,
                               .config_ns = "tkm-system"};
    struct seen s = {0};
    run_job(&e, &q, &s);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_DONE);
    ASSERT_EQ(s.r.mode, TKM_SIG_MODE_ENFORCE);
    ASSERT_EQ(s.r.sig_state, TKM_VERIFY_SIG_SEARCHED);
    ASSERT_EQ(s.r.verified, 0);
    ASSERT_EQ(s.r.sig_rc, -ENOENT);
    ASSERT_STREQ(s.r.sig_reason, "NoSignature");
    ASSERT_STRCONTAINS(s.r.sig_message, "not signed");
    ASSERT_EQ(s.r.sig_retry, 0);
    ASSERT_EQ(s.r.usable, 0);
    ASSERT_EQ(s.r.inspected, 0); /* no summary for an image nodes may not use */
    ASSERT_EQ(strncmp(s.r.policy_fp, "sha256:", 7), 0);
    int searched = tsrv_nreqs(&srv);
    int refs = count_paths(&srv, "/referrers/") + count_paths(&srv, "sha256-");
    ASSERT(refs >= 2); /* the referrers API and the tag schema were looked at */
    seen_release(&s);

    /* The caller remembers a verification for this digest and policy. */
    struct seen k = {.known_answer = 1};
    q.known = known;
    run_job(&e, &q, &k);
    ASSERT_EQ(k.known_calls, 1);
    ASSERT_STREQ(k.known_fp, s.r.policy_fp);
    ASSERT_STREQ(k.known_digest, m.mdg);
    ASSERT_EQ(k.r.sig_state, TKM_VERIFY_SIG_KNOWN);
    ASSERT_EQ(k.r.verified, 1);
    ASSERT_EQ(k.r.usable, 1);
    ASSERT_EQ(k.r.inspected, 1); /* usable: the summary step ran */
    ASSERT_EQ(k.sum.entry_count, 4);
    /* nothing but the manifest and the config: no signature search */
    ASSERT_EQ(count_paths(&srv, "/referrers/") + count_paths(&srv, "sha256-"), refs);
    ASSERT_EQ(tsrv_nreqs(&srv) - searched, 2);
    seen_release(&k);

    /* known() says -1: searched again. */
    struct seen k2 = {.known_answer = -1};
    run_job(&e, &q, &k2);
    ASSERT_EQ(k2.known_calls, 1);
    ASSERT_EQ(k2.r.sig_state, TKM_VERIFY_SIG_SEARCHED);
    ASSERT_STREQ(k2.r.sig_reason, "NoSignature");
    seen_release(&k2);
    tkm_api_cache_release(&c);
    env_close(&e);
    tsrv_stop(&srv);
}

TEST(not_a_triton_image_fails_inspect_but_not_the_summary)
{
    struct img m;
    struct img_routes ir;
    struct tsrv srv;
    char image[128];
    img_init_cfg(&m, "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{},"
                     "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}");
    tsrv_init(&srv);
    img_serve(&srv, &m, &ir, 0);
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    /* the agent's order: an image that cannot be judged ends the job */
    struct tkm_verify_req q = {.flags = TKM_VERIFY_INSPECT, .image = image, .digest = m.mdg};
    struct seen s = {0};
    run_job(&e, &q, &s);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_STEP_INSPECT);
    ASSERT_EQ(s.r.rc, -ENOENT);
    ASSERT_STREQ(s.r.reason, "NotATritonCache");
    ASSERT_EQ(s.r.retry, 0);
    ASSERT_EQ(s.r.inspected, 0);
    ASSERT_STREQ(s.r.digest, m.mdg);
    seen_release(&s);
    /* the controller's summary: reported, the job still done */
    struct seen s2 = {0};
    q.flags = TKM_VERIFY_SUMMARY;
    run_job(&e, &q, &s2);
    ASSERT_EQ(s2.r.failed, TKM_VERIFY_DONE);
    ASSERT_EQ(s2.r.summary_rc, -ENOENT);
    ASSERT_STREQ(s2.r.summary_reason, "NotATritonCache");
    ASSERT_STRCONTAINS(s2.r.summary_message, "not a Triton cache image");
    ASSERT_EQ(s2.r.inspected, 0);
    seen_release(&s2);
    env_close(&e);
    tsrv_stop(&srv);
}

/* A variant index of two entries: the image m (sm90, amd64) and an arm64 one
 * never served; arch80 is the second entry's arch annotation (JSON text). */
static void variant_index(const struct img *m, const char *arch80, char *out, size_t n)
{
    snprintf(out, n,
             "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_INDEX "\",\"manifests\":["
             "{\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"digest\":\"%s\",\"size\":%zu,"
             "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"},\"annotations\":{"
             "\"" TKM_VARIANT_ANN_BACKEND "\":\"cuda\",\"" TKM_VARIANT_ANN_ARCH "\":\"90\","
             "\"" TKM_VARIANT_ANN_WARP "\":\"32\",\"" TKM_VARIANT_ANN_PARTS "\":\"triton\"}},"
             "{\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"digest\":\"%s\",\"size\":9,"
             "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"},\"annotations\":{"
             "\"" TKM_VARIANT_ANN_BACKEND "\":\"cuda\",\"" TKM_VARIANT_ANN_ARCH "\":\"%s\","
             "\"" TKM_VARIANT_ANN_WARP "\":\"32\",\"" TKM_VARIANT_ANN_PARTS "\":\"triton\"}}]}",
             m->mdg, strlen(m->man), m->ldg, arch80);
}

TEST(variant_index_is_read_not_followed_and_an_image_is_a_set_of_one)
{
    struct img m;
    struct img_routes ir;
    struct tsrv srv;
    char image[128], idx[2048], idg[72], ipath[160], bad[2048], bdg[72], bpath[160];
    img_init(&m);
    variant_index(&m, "80", idx, sizeof idx);
    variant_index(&m, "8\\u0001", bad, sizeof bad); /* a control character */
    ASSERT_OK(tkm_oci_digest_bytes(idx, strlen(idx), idg));
    ASSERT_OK(tkm_oci_digest_bytes(bad, strlen(bad), bdg));
    snprintf(ipath, sizeof ipath, "/v2/e2e/x/manifests/%s", idg);
    snprintf(bpath, sizeof bpath, "/v2/e2e/x/manifests/%s", bdg);
    tsrv_init(&srv);
    img_serve(&srv, &m, &ir, 0);
    struct tsrv_reply ri = {200, INDEX, idx}, rb = {200, INDEX, bad};
    ASSERT_OK(tsrv_route(&srv, NULL, ipath, TSRV_EXACT, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, NULL, bpath, TSRV_EXACT, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    struct tkm_verify_req q = {.flags = TKM_VERIFY_INSPECT, .image = image, .digest = idg};
    struct seen s = {0};
    run_job(&e, &q, &s);
    ASSERT_EQ(s.r.failed, TKM_VERIFY_DONE);
    ASSERT_EQ(s.r.inspected, 1);
    ASSERT_STREQ(s.r.image_digest, "");
    ASSERT_NULL(s.r.image.summary_label);
    ASSERT_EQ(s.r.manifest.n_descs, 0);
    ASSERT_EQ(s.r.variants.from_index, 1);
    ASSERT_STREQ(s.r.variants.digest, idg);
    ASSERT_EQ(s.r.variants.n, 2);
    ASSERT_STREQ(s.r.variants.v[0].digest, m.mdg);
    ASSERT_STREQ(s.r.variants.v[1].architecture, "arm64");
    /* nothing of a variant was fetched: the agent inspects those it uses */
    ASSERT_EQ(count_paths(&srv, m.mdg), 0);
    ASSERT_EQ(count_paths(&srv, m.cdg), 0);
    seen_release(&s);
    /* the image itself (by the summary step): the set of one */
    struct seen s2 = {0};
    q.flags = TKM_VERIFY_SUMMARY;
    q.digest = m.mdg;
    run_job(&e, &q, &s2);
    ASSERT_EQ(s2.r.inspected, 1);
    ASSERT_STREQ(s2.r.image_digest, m.mdg);
    ASSERT_EQ(s2.r.variants.from_index, 0);
    ASSERT_EQ(s2.r.variants.n, 1);
    ASSERT_STREQ(s2.r.variants.digest, m.mdg);
    ASSERT_STREQ(s2.r.variants.v[0].arch, "90");
    ASSERT_STREQ(s2.r.variants.v[0].architecture, "amd64");
    ASSERT_STREQ(s2.r.variants.v[0].triton_version, "3.6.0");
    ASSERT_STREQ(s2.r.variants.v[0].parts, "triton");
    seen_release(&s2);
    /* a malformed variant index is an invalid image, the value never echoed raw */
    struct seen s3 = {0};
    q.flags = TKM_VERIFY_INSPECT;
    q.digest = bdg;
    run_job(&e, &q, &s3);
    ASSERT_EQ(s3.r.failed, TKM_VERIFY_STEP_INSPECT);
    ASSERT_STREQ(s3.r.reason, "InvalidImage");
    ASSERT_STRCONTAINS(s3.r.message, "manifests[1] annotation " TKM_VARIANT_ANN_ARCH);
    ASSERT_STRCONTAINS(s3.r.message, "8\\\\x01"); /* escaped by the library, then by verify */
    ASSERT(!strchr(s3.r.message, '\x01'));
    ASSERT_EQ(s3.r.variants.n, 0);
    seen_release(&s3);
    env_close(&e);
    tsrv_stop(&srv);
}

/* The referrer manifest for the cosign v3 bundle and an index listing it. */
struct art {
    char bdig[72], mdig[72], mpath[128], bpath[128];
    struct tkm_buf man, idx;
};

static void art_init(struct art *a)
{
    ASSERT_OK(tkm_oci_digest_bytes(COSIGN3_BUNDLE, strlen(COSIGN3_BUNDLE), a->bdig));
    tkm_buf_init(&a->man, 1 << 16);
    tkm_buf_init(&a->idx, 1 << 16);
    ASSERT_OK(tkm_buf_printf(
        &a->man,
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"artifactType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"config\":{\"mediaType\":"
        "\"application/vnd.oci.empty.v1+json\",\"size\":2,\"digest\":\"sha256:"
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\"},\"layers\":[{"
        "\"mediaType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"size\":%zu,\"digest\":\"%s\"}],"
        "\"annotations\":{\"dev.sigstore.bundle.predicateType\":\"" TKM_BUNDLE_PREDICATE_SIGN
        "\"},\"subject\":{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"size\":1,\"digest\":\"" COSIGN3_IMG "\"}}",
        strlen(COSIGN3_BUNDLE), a->bdig));
    ASSERT_OK(tkm_oci_digest_bytes(a->man.data, a->man.len, a->mdig));
    ASSERT_OK(tkm_buf_printf(&a->idx,
                             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index."
                             "v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image."
                             "manifest.v1+json\",\"size\":%zu,\"digest\":\"%s\","
                             "\"artifactType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\"}]}",
                             a->man.len, a->mdig));
    snprintf(a->mpath, sizeof a->mpath, "/v2/t/img/manifests/%s", a->mdig);
    snprintf(a->bpath, sizeof a->bpath, "/v2/t/img/blobs/%s", a->bdig);
}

TEST(signed_image_verifies_with_the_spec_key)
{
    struct art a;
    art_init(&a);
    struct tsrv_reply ri = {200, INDEX, a.idx.data}, rm = {200, MANIF, a.man.data},
                      rb = {200, OCTET, COSIGN3_BUNDLE};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(
        tsrv_route(&srv, "GET", "/v2/t/img/referrers/" COSIGN3_IMG, TSRV_TARGET, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", a.bpath, TSRV_TARGET, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    char image[128], extras[2048], pem[1024];
    size_t o = 0;
    for (const char *p = COSIGN3_PUB; *p && o + 3 < sizeof pem; p++) {
        if (*p == '\n') {
            pem[o++] = '\\';
            pem[o++] = 'n';
        } else {
            pem[o++] = *p;
        }
    }
    pem[o] = '\0';
    snprintf(image, sizeof image, "127.0.0.1:%d/t/img:v1", port);
    snprintf(extras, sizeof extras, "\"signaturePolicy\":{\"publicKey\":\"%s\"}", pem);
    struct tkm_api_cache c;
    cache_of(&c, image, extras);
    struct tkm_verify_req q = {.flags = TKM_VERIFY_SIGNATURE,
                               .kc = e.kc,
                               .cache = &c,
                               .digest = COSIGN3_IMG,
                               .config_ns = "tkm-system"};
    struct seen s = {0};
    run_job(&e, &q, &s);
    if (s.r.failed || !s.r.verified)
        tkm_test_fail(__FILE__, __LINE__, "failed %d %s %s; sig %s %s", (int)s.r.failed, s.r.reason,
                      s.r.message, s.r.sig_reason, s.r.sig_message);
    ASSERT_EQ(s.r.mode, TKM_SIG_MODE_ENFORCE); /* a spec policy without a mode: Enforce */
    ASSERT_EQ(s.r.sig_state, TKM_VERIFY_SIG_SEARCHED);
    ASSERT_EQ(s.r.sig_rc, 0);
    ASSERT_STREQ(s.r.sig_reason, "Verified");
    ASSERT_EQ(s.r.sig.source, TKM_SIG_SRC_REFERRERS);
    ASSERT_STRCONTAINS(s.r.sig.location, a.mdig);
    ASSERT_EQ(strncmp(s.r.sig.key_id, "sha256:", 7), 0);
    ASSERT_EQ(s.r.usable, 1);
    ASSERT_EQ(s.r.inspected, 0); /* not asked */
    seen_release(&s);
    tkm_api_cache_release(&c);
    env_close(&e);
    tkm_buf_release(&a.man);
    tkm_buf_release(&a.idx);
    tsrv_stop(&srv);
}

/* Cancels once the server has seen n requests (a tick of the loop). */
struct stall {
    struct tsrv *srv;
    struct tkm_verify_job *job;
    struct seen *s;
    int n, cancelled;
    uv_timer_t t;
};

static void stall_tick(uv_timer_t *t)
{
    struct stall *st = t->data;
    if (tsrv_nreqs(st->srv) < st->n)
        return;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, NULL);
    tkm_verify_job_cancel(st->job);
    tkm_verify_job_cancel(st->job); /* twice: still nothing */
    /* the caller's object goes away at once */
    memset(st->s, 0xa5, sizeof *st->s);
    free(st->s);
    st->s = NULL;
    st->cancelled = 1;
}

static struct seen *never_called;

static void on_never(const struct tkm_verify_result *r, void *data)
{
    (void)r;
    never_called = data;
    tkm_test_fail(__FILE__, __LINE__, "a cancelled job called back");
}

TEST(cancel_with_a_registry_request_in_flight)
{
    static const struct tsrv_reply hang = {200, MANIF, "{}", .hang_ms = -1};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, NULL, "/v2/e2e/x/manifests/v1", TSRV_EXACT, NULL, &hang, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    char image[128];
    struct tkm_err err = {0};
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    struct tkm_verify_req q = {.flags = TKM_VERIFY_RESOLVE, .image = image};
    struct stall st = {.srv = &srv, .s = calloc(1, sizeof(struct seen)), .n = 1};
    ASSERT_NOT_NULL(st.s);
    ASSERT_OK(tkm_verify_start(e.ctx, &q, on_never, st.s, &st.job, &err));
    ASSERT_OK(uv_timer_init(&e.loop, &st.t));
    st.t.data = &st;
    ASSERT_OK(uv_timer_start(&st.t, stall_tick, 5, 5));
    uint64_t t0 = tkm_now_ms();
    while (!st.cancelled || tkm_verify_ctx_jobs(e.ctx))
        uv_run(&e.loop, UV_RUN_ONCE);
    /* the cancel ended it, not the request timeout */
    ASSERT(tkm_now_ms() - t0 < 4000u * tkm_test_timeout_scale());
    ASSERT_NULL(never_called);
    env_close(&e);
    tsrv_stop(&srv);
}

TEST(cancel_and_close_with_an_apiserver_read_in_flight)
{
    static const struct tsrv_reply hang = {200, JSONH, "{}", .hang_ms = -1};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(
        tsrv_route(&srv, "GET", "/api/v1/namespaces/ns1/secrets/pull", TSRV_EXACT, NULL, &hang, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct env e;
    env_open(&e, port);
    char image[128];
    struct tkm_err err = {0};
    snprintf(image, sizeof image, "127.0.0.1:%d/e2e/x:v1", port);
    struct tkm_api_cache c;
    cache_of(&c, image, "\"imagePullSecrets\":[{\"name\":\"pull\"}]");
    struct tkm_verify_req q = {
        .flags = TKM_VERIFY_RESOLVE, .kc = e.kc, .cache = &c, .config_ns = "tkm-system"};
    struct stall st = {.srv = &srv, .s = calloc(1, sizeof(struct seen)), .n = 1};
    ASSERT_NOT_NULL(st.s);
    ASSERT_OK(tkm_verify_start(e.ctx, &q, on_never, st.s, &st.job, &err));
    tkm_api_cache_release(&c); /* borrowed for the start only */
    ASSERT_OK(uv_timer_init(&e.loop, &st.t));
    st.t.data = &st;
    ASSERT_OK(uv_timer_start(&st.t, stall_tick, 5, 5));
    while (!st.cancelled)
        uv_run(&e.loop, UV_RUN_ONCE);
    /* The Secret's read cannot be cancelled: the context waits for it. */
    ASSERT_UEQ(tkm_verify_ctx_jobs(e.ctx), 1);
    int closed = 0, kc_closed = 0;
    tkm_verify_ctx_close(e.ctx, flag, &closed);
    uv_run(&e.loop, UV_RUN_NOWAIT);
    ASSERT_EQ(closed, 0);
    struct tkm_verify_req q2 = {.flags = TKM_VERIFY_RESOLVE, .image = "127.0.0.1:1/a/b:v1"};
    ASSERT_EQ(tkm_verify_start(e.ctx, &q2, on_never, NULL, NULL, &err), -ESHUTDOWN);
    /* Closing the client ends the read (-ECANCELED): then the context. */
    k8s_client_close(e.kc, flag, &kc_closed);
    while (!closed || !kc_closed)
        uv_run(&e.loop, UV_RUN_ONCE);
    ASSERT_EQ(closed, 1);
    ASSERT_NULL(never_called);
    tkm_http_close(e.http, NULL, NULL);
    ASSERT_OK(uv_run(&e.loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&e.loop));
    tsrv_stop(&srv);
}

TEST(start_failures_never_call_back)
{
    struct env e;
    struct tkm_err err = {0};
    env_open(&e, 1);
    struct tkm_verify_req q = {.flags = TKM_VERIFY_RESOLVE, .image = "Not A Reference!"};
    ASSERT_EQ(tkm_verify_start(e.ctx, &q, on_never, NULL, NULL, &err), -EINVAL);
    ASSERT(err.msg[0]);
    memset(&err, 0, sizeof err);
    q = (struct tkm_verify_req){.flags = TKM_VERIFY_INSPECT, .image = "127.0.0.1:1/a/b:v1"};
    ASSERT_EQ(tkm_verify_start(e.ctx, &q, on_never, NULL, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "no digest");
    q.flags = TKM_VERIFY_SIGNATURE;
    q.digest = COSIGN3_IMG;
    ASSERT_EQ(tkm_verify_start(e.ctx, &q, on_never, NULL, NULL, &err), -EINVAL); /* no client */
    q.flags = TKM_VERIFY_RESOLVE;
    memset(&err, 0, sizeof err);
    ASSERT_EQ(tkm_verify_start(e.ctx, &q, on_never, NULL, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "nothing to do");
    q.digest = "sha256:nope";
    ASSERT_EQ(tkm_verify_start(e.ctx, &q, on_never, NULL, NULL, &err), -EINVAL);
    ASSERT_UEQ(tkm_verify_ctx_jobs(e.ctx), 0);
    ASSERT_UEQ(tkm_verify_ctx_sessions(e.ctx), 0);
    uv_run(&e.loop, UV_RUN_NOWAIT);
    ASSERT_NULL(never_called);
    env_close(&e);
}

/* tkm-config pullDeadline reaches the pool's sessions, those already made
 * and those made later; unset, the daemon's --pull-deadline comes back. */
TEST(pull_deadline_reaches_every_session)
{
    struct env e;
    struct tkm_err err = {0};
    struct tkm_oci_session *s1 = NULL, *s2 = NULL;
    env_open(&e, 1);
    ASSERT_OK(tkm_verify_ctx_session(e.ctx, "127.0.0.1:1", NULL, 0, &s1, &err));
    ASSERT_UEQ(tkm_oci_session_deadline(s1), 30u * 60 * 1000); /* opts 0: the default */
    tkm_verify_ctx_set_pull_deadline(e.ctx, 1500);
    ASSERT_UEQ(tkm_oci_session_deadline(s1), 1500);
    ASSERT_OK(tkm_verify_ctx_session(e.ctx, "127.0.0.1:2", NULL, 0, &s2, &err));
    ASSERT_UEQ(tkm_oci_session_deadline(s2), 1500);
    tkm_verify_ctx_set_pull_deadline(e.ctx, 0);
    ASSERT_UEQ(tkm_oci_session_deadline(s1), 30u * 60 * 1000);
    ASSERT_UEQ(tkm_oci_session_deadline(s2), 30u * 60 * 1000);
    tkm_verify_ctx_set_pull_deadline(NULL, 5); /* nothing */
    env_close(&e);
}

TEST(registry_reasons)
{
    int retry;
    ASSERT_STREQ(tkm_verify_registry_reason(-ENOENT, "manifest unknown", &retry), "ImageNotFound");
    ASSERT_EQ(retry, 0);
    ASSERT_STREQ(tkm_verify_registry_reason(-ENOENT, "no summary label", &retry),
                 "NotATritonCache");
    ASSERT_STREQ(tkm_verify_registry_reason(-EBADMSG, "", &retry), "DigestMismatch");
    ASSERT_STREQ(tkm_verify_registry_reason(-EPROTO, "", &retry), "InvalidImage");
    ASSERT_EQ(retry, 0);
    ASSERT_STREQ(tkm_verify_registry_reason(-EACCES, "", &retry), "RegistryUnauthorized");
    ASSERT_EQ(retry, 1);
    ASSERT_STREQ(tkm_verify_registry_reason(-EPERM, "", &retry), "RegistryForbidden");
    ASSERT_STREQ(tkm_verify_registry_reason(-ECONNREFUSED, "", &retry), "RegistryUnreachable");
    ASSERT_EQ(retry, 1);
    retry = 0;
    ASSERT_STREQ(tkm_verify_registry_reason(-ETIME, "", &retry), "PullDeadlineExceeded");
    ASSERT_EQ(retry, 1);
}

TEST(policy_fingerprint_changes_with_the_key)
{
    struct tkm_sig_key k1 = {"key-one", 7}, k2 = {"key-two", 7};
    struct tkm_sig_policy p = {.mode = TKM_SIG_MODE_ENFORCE, .keys = &k1, .nkeys = 1};
    char a[72], b[72], c[72];
    tkm_verify_policy_fingerprint(&p, a);
    p.keys = &k2;
    tkm_verify_policy_fingerprint(&p, b);
    p.mode = TKM_SIG_MODE_AUDIT;
    tkm_verify_policy_fingerprint(&p, c);
    ASSERT(strcmp(a, b) != 0);
    ASSERT(strcmp(b, c) != 0);
    p.keys = &k1;
    p.mode = TKM_SIG_MODE_ENFORCE;
    tkm_verify_policy_fingerprint(&p, c);
    ASSERT_STREQ(a, c);
}
