/* test_oci_registry.c - the registry client against scripted loopback HTTP servers:
 * redirects drop Authorization across hosts, exact blob size limits, digest checks,
 * manifest size cap, Basic auth from Secret bytes. */
#include <fcntl.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/layout.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>
#include <tkm/reach.h>
#include <tkm/triton/image.h>
#include <tkm/util.h>

#include "sup_oci.h"
#include "test.h"
#include "tsrv.h"

/* One entry of a registry's route table: method and request target (path and
 * query) matched exactly, the reply, and need_auth: 401 Basic unless the
 * request carries "Authorization: Basic". */
struct route {
    const char *method, *path;
    struct tsrv_reply reply;
    int need_auth;
};

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

/* Serves routes (borrowed until tsrv_stop()) on s; anything else is a bare
 * 404 with no body. Returns the port. */
static int server_start(struct tsrv *s, const struct route *routes, size_t n)
{
    static const struct tsrv_reply not_found = {404, NULL, ""};
    tsrv_init(s);
    for (size_t i = 0; i < n; i++) {
        const struct route *rt = &routes[i];
        if (rt->need_auth)
            ASSERT_OK(tsrv_route_fn(s, rt->method, rt->path, TSRV_TARGET, NULL, basic_gate,
                                    (void *)&rt->reply));
        else
            ASSERT_OK(tsrv_route(s, rt->method, rt->path, TSRV_TARGET, NULL, &rt->reply, 1));
    }
    ASSERT_OK(tsrv_route(s, NULL, NULL, TSRV_PREFIX, NULL, &not_found, 1));
    int port = tsrv_listen(s);
    ASSERT(port > 0);
    return port;
}

/* The head of the last request s saw ("" when none). */
static const char *last_request(struct tsrv *s)
{
    struct tsrv_request rq;
    return tsrv_get(s, tsrv_nreqs(s) - 1, &rq) == 0 ? rq.head : "";
}

/* 1 when any request s saw carried Authorization. */
static int saw_authorization(struct tsrv *s)
{
    char v[512];
    for (int i = 0; i < tsrv_nreqs(s); i++)
        if (tsrv_header(s, i, "Authorization", v, sizeof v) >= 0)
            return 1;
    return 0;
}

static struct tkm_oci_registry *client(int port, const char *auth_json)
{
    char host[64];
    struct tkm_oci_registry *r = NULL;
    struct tkm_oci_registry_opts o = {.auth_json = auth_json,
                                      .auth_json_len = auth_json ? strlen(auth_json) : 0,
                                      .anonymous = auth_json == NULL,
                                      .timeout_ms = 5000};
    struct tkm_err e = {0};
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    ASSERT_OK(tkm_http_global_init(&e));
    int rc = tkm_oci_registry_new(host, &o, &r, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_STREQ(sup_oci_scheme(r), "http");
    return r;
}

static const char blob[] = "the layer bytes, as served by the CDN";

TEST(blob_redirect_to_other_host_drops_authorization)
{
    struct tsrv cdn, reg;
    struct route cdn_routes[] = {{"GET", "/signed/blob?sig=1", {200, NULL, blob}}};
    int cdn_port = server_start(&cdn, cdn_routes, 1);
    char loc[256], dg[TKM_OCI_DIGEST_LEN + 1], path[256], auth[256];
    ASSERT_OK(tkm_oci_digest_bytes(blob, strlen(blob), dg));
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/signed/blob?sig=1\r\n", cdn_port);
    snprintf(path, sizeof path, "/v2/a/b/blobs/%s", dg);
    struct route reg_routes[] = {{"GET", path, {307, loc}, 1}};
    int reg_port = server_start(&reg, reg_routes, 1);
    /* Secret bytes (.dockerconfigjson) with user:pass for the registry only */
    snprintf(auth, sizeof auth, "{\"auths\":{\"127.0.0.1:%d\":{\"auth\":\"dXNlcjpwYXNz\"}}}",
             reg_port);
    struct tkm_oci_registry *r = client(reg_port, auth);
    struct tkm_oci_desc d = {.size = strlen(blob)};
    memcpy(d.digest, dg, sizeof dg);
    struct tkm_buf out = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    int rc = sup_oci_fetch_blob_mem(r, "a/b", &d, &out, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_STREQ(out.data, blob);
    ASSERT_EQ(saw_authorization(&reg), 1); /* Basic went to the registry */
    ASSERT_EQ(saw_authorization(&cdn), 0); /* ...and never to the redirect target */
    ASSERT_STRCONTAINS(last_request(&reg), "Authorization: Basic dXNlcjpwYXNz");
    tkm_buf_release(&out);
    tkm_oci_registry_free(r);
    tsrv_stop(&reg);
    tsrv_stop(&cdn);
}

TEST(blob_size_and_digest_are_exact)
{
    struct tsrv s;
    char dg[TKM_OCI_DIGEST_LEN + 1], p1[256];
    ASSERT_OK(tkm_oci_digest_bytes(blob, strlen(blob), dg));
    snprintf(p1, sizeof p1, "/v2/a/b/blobs/%s", dg);
    struct route routes[] = {{"GET", p1, {200, NULL, blob}}};
    int port = server_start(&s, routes, 1);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_oci_desc d = {.size = strlen(blob) - 5}; /* declares fewer bytes than served */
    memcpy(d.digest, dg, sizeof dg);
    struct tkm_err e = {0};
    char file[1200];
    snprintf(file, sizeof file, "%s/blob", tkm_test_tmpdir());
    ASSERT_EQ(sup_oci_fetch_blob(r, "a/b", &d, file, &e), -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, "more bytes than the 32 its descriptor declares");
    ASSERT_STRCONTAINS(e.msg, dg);
    ASSERT_EQ(access(file, F_OK), -1); /* nothing left behind */
    d.size = strlen(blob) + 5;         /* declares more */
    tkm_err_clear(&e);
    ASSERT_EQ(sup_oci_fetch_blob(r, "a/b", &d, file, &e), -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, "got 37 bytes, the descriptor says 42");
    ASSERT_EQ(access(file, F_OK), -1);
    d.size = strlen(blob);
    ASSERT_OK(sup_oci_fetch_blob(r, "a/b", &d, file, &e));
    ASSERT_EQ(access(file, F_OK), 0);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

TEST(manifest_digest_verified_and_capped)
{
    static const char man[] = "{\"schemaVersion\":2}";
    char dg[TKM_OCI_DIGEST_LEN + 1], wrong[TKM_OCI_DIGEST_LEN + 1], p1[256], p2[256], hdr[200];
    ASSERT_OK(tkm_oci_digest_bytes(man, strlen(man), dg));
    ASSERT_OK(tkm_oci_digest_bytes("other", 5, wrong));
    snprintf(p1, sizeof p1, "/v2/a/b/manifests/%s", wrong);
    snprintf(p2, sizeof p2, "/v2/a/b/manifests/%s", dg);
    /* a Docker-Content-Digest that lies: never trusted */
    snprintf(hdr, sizeof hdr, "Docker-Content-Digest: %s\r\nContent-Type: x/y\r\n", wrong);
    size_t big_n = TKM_OCI_MANIFEST_MAX + 10;
    char *big = malloc(big_n);
    ASSERT_NOT_NULL(big);
    memset(big, ' ', big_n);
    struct route routes[] = {
        {"GET", p1, {200, "Content-Type: x/y\r\n", man}}, /* bytes that are not `wrong` */
        {"GET", p2, {200, "Content-Type: x/y\r\n", man}},
        {"HEAD", "/v2/a/b/manifests/v1", {200, hdr}},
        {"GET", "/v2/a/b/manifests/v1", {200, hdr, man}},
        {"GET", "/v2/a/b/manifests/big", {200, NULL, big, .body_len = big_n}},
    };
    struct tsrv s;
    int port = server_start(&s, routes, 5);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    char ct[64], got[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_err e = {0};
    /* by digest: the bytes must hash to it */
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", wrong, &body, ct, sizeof ct, got, &e),
              -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, "digest mismatch: expected");
    ASSERT_STRCONTAINS(e.msg, wrong);
    ASSERT_OK(tkm_oci_registry_get_manifest(r, "a/b", dg, &body, ct, sizeof ct, got, &e));
    ASSERT_STREQ(got, dg);
    ASSERT_STREQ(ct, "x/y");
    ASSERT_STREQ(body.data, man);
    /* a tag resolves to the hash of the bytes, not to the header */
    ASSERT_OK(sup_oci_resolve(r, "a/b", "v1", got, &e));
    ASSERT_STREQ(got, dg);
    ASSERT_STRCONTAINS(last_request(&s), "GET /v2/a/b/manifests/v1 ");
    /* more than 4 MiB is refused */
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", "big", &body, ct, sizeof ct, got, &e),
              -E2BIG);
    ASSERT_STRCONTAINS(e.msg, "manifest larger than 4194304 bytes");
    /* an unknown tag is -ENOENT, naming the URL */
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", "nope", &body, ct, sizeof ct, got, &e),
              -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "/v2/a/b/manifests/nope: HTTP 404");
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
    free(big);
}

TEST(basic_auth_missing_credentials_is_explained)
{
    struct tsrv s;
    struct route routes[] = {{"GET", "/v2/a/b/manifests/v1", {200, NULL, "{}"}, 1}};
    int port = server_start(&s, routes, 1);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1024);
    char got[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", "v1", &body, NULL, 0, got, &e), -EACCES);
    ASSERT_STRCONTAINS(e.msg, "401 Unauthorized");
    ASSERT_STRCONTAINS(e.msg, "anonymous access requested");
    ASSERT_EQ(saw_authorization(&s), 0);
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

struct async_seen {
    int calls, rc;
    char digest[TKM_OCI_DIGEST_LEN + 1];
    char label[64];
    char err[256];
};

static void async_cb(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                     const struct tkm_err *err, void *data)
{
    struct async_seen *s = data;
    (void)job;
    s->calls++;
    s->rc = rc;
    if (rc == 0) {
        snprintf(s->digest, sizeof s->digest, "%s", res->image.manifest.digest);
        const char *l = tkm_oci_config_label(&res->image.config, "cache.triton.image/entry-count");
        snprintf(s->label, sizeof s->label, "%s", l ? l : "(none)");
    } else {
        snprintf(s->err, sizeof s->err, "%s", tkm_err_str(err));
    }
}

TEST(async_inspect_reports_on_the_loop)
{
    static const char cfg[] =
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Labels\":{\"cache.triton."
        "image/entry-count\":\"4\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
    char cdg[TKM_OCI_DIGEST_LEN + 1], mdg[TKM_OCI_DIGEST_LEN + 1], man[1024], mpath[256],
        cpath[256], hdr[256];
    ASSERT_OK(tkm_oci_digest_bytes(cfg, strlen(cfg), cdg));
    snprintf(man, sizeof man,
             "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"config\":{"
             "\"mediaType\":\"" TKM_OCI_MT_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[]}",
             cdg, strlen(cfg));
    ASSERT_OK(tkm_oci_digest_bytes(man, strlen(man), mdg));
    snprintf(mpath, sizeof mpath, "/v2/a/b/manifests/%s", mdg);
    snprintf(cpath, sizeof cpath, "/v2/a/b/blobs/%s", cdg);
    snprintf(hdr, sizeof hdr, "Content-Type: " TKM_OCI_MT_MANIFEST "\r\n");
    struct route routes[] = {
        {"GET", "/v2/a/b/manifests/v1", {200, hdr, man}},
        {"GET", mpath, {200, hdr, man}},
        {"GET", cpath, {200, NULL, cfg}},
    };
    struct tsrv s;
    int port = server_start(&s, routes, 3);
    struct tkm_err e = {0};
    ASSERT_OK(tkm_http_global_init(&e));
    char refs[128];
    struct tkm_oci_ref ref;
    snprintf(refs, sizeof refs, "127.0.0.1:%d/a/b:v1", port);
    ASSERT_OK(tkm_oci_ref_parse(&ref, refs, &e));
    uv_loop_t loop;
    ASSERT_OK(uv_loop_init(&loop));
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL;
    ASSERT_OK(tkm_http_new(&loop, NULL, &http, &e));
    struct async_seen seen = {0};
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    ASSERT_OK(tkm_oci_session_new(http, ref.host, &o, &ses, &e));
    ASSERT_OK(tkm_oci_job_inspect(ses, &ref, async_cb, &seen, NULL, &e));
    ASSERT_EQ(seen.calls, 0); /* never from inside _start */
    /* an unknown tag fails through the same path */
    struct async_seen bad = {0};
    snprintf(refs, sizeof refs, "127.0.0.1:%d/a/b:nope", port);
    ASSERT_OK(tkm_oci_ref_parse(&ref, refs, &e));
    ASSERT_OK(tkm_oci_job_inspect(ses, &ref, async_cb, &bad, NULL, &e));
    ASSERT_EQ(tkm_oci_session_jobs(ses), 2);
    while (seen.calls + bad.calls < 2)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(tkm_oci_session_jobs(ses), 0);
    tkm_oci_session_close(ses, NULL, NULL);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(seen.calls, 1);
    ASSERT_OK(seen.rc);
    ASSERT_STREQ(seen.digest, mdg);
    ASSERT_STREQ(seen.label, "4");
    ASSERT_EQ(bad.calls, 1);
    ASSERT_EQ(bad.rc, -ENOENT);
    ASSERT_STRCONTAINS(bad.err, "HTTP 404");
    ASSERT_OK(uv_loop_close(&loop));
    tsrv_stop(&s);
}

/* One inspect on ses under the policy (allow, private, plain), run to its
 * callback. */
static void reach_inspect(uv_loop_t *loop, struct tkm_oci_session *ses,
                          const struct tkm_oci_ref *ref, const char *allow, const char *priv,
                          const char *plain, struct async_seen *seen)
{
    struct tkm_reach_policy pol;
    struct tkm_err e = {0};
    const struct tkm_reach_config cfg = {
        .allow = allow, .private_hosts = priv, .plain_http = plain};
    ASSERT_OK(tkm_reach_policy_parse(&pol, &cfg, &e));
    struct tkm_oci_reach *r = tkm_oci_reach_new(&pol);
    ASSERT(r != NULL);
    tkm_oci_session_set_reach(ses, r);
    tkm_oci_reach_unref(r); /* the session holds its own */
    memset(seen, 0, sizeof *seen);
    ASSERT_OK(tkm_oci_job_inspect(ses, ref, async_cb, seen, NULL, &e));
    while (!seen->calls)
        uv_run(loop, UV_RUN_ONCE);
}

/* Registry reach (<tkm/oci/session.h>): a refused registry gets no request at
 * all; a redirect's host is decided too (an unlisted IP literal is refused,
 * nothing reaches it), and followed by the session once listed; the scheme is
 * registryPlainHTTP's. */
TEST(reach_policy_decides_the_registry_and_each_redirect)
{
    static const char cfg[] =
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Labels\":{\"cache.triton."
        "image/entry-count\":\"4\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
    char cdg[TKM_OCI_DIGEST_LEN + 1], mdg[TKM_OCI_DIGEST_LEN + 1], man[1024], mpath[256],
        cpath[256], hdr[256], loc[256], refs[128], want[128];
    ASSERT_OK(tkm_oci_digest_bytes(cfg, strlen(cfg), cdg));
    snprintf(man, sizeof man,
             "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"config\":{"
             "\"mediaType\":\"" TKM_OCI_MT_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[]}",
             cdg, strlen(cfg));
    ASSERT_OK(tkm_oci_digest_bytes(man, strlen(man), mdg));
    snprintf(mpath, sizeof mpath, "/v2/a/b/manifests/%s", mdg);
    snprintf(cpath, sizeof cpath, "/v2/a/b/blobs/%s", cdg);
    snprintf(hdr, sizeof hdr, "Content-Type: " TKM_OCI_MT_MANIFEST "\r\n");
    struct tsrv cdn, reg;
    struct route cdn_routes[] = {{"GET", "/cfg", {200, NULL, cfg}}};
    int cdn_port = server_start(&cdn, cdn_routes, 1);
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/cfg\r\n", cdn_port);
    struct route routes[] = {
        {"GET", "/v2/a/b/manifests/v1", {200, hdr, man}},
        {"GET", mpath, {200, hdr, man}},
        {"GET", cpath, {307, loc, ""}},
    };
    int port = server_start(&reg, routes, 3);
    struct tkm_err e = {0};
    ASSERT_OK(tkm_http_global_init(&e));
    struct tkm_oci_ref ref;
    snprintf(refs, sizeof refs, "127.0.0.1:%d/a/b:v1", port);
    ASSERT_OK(tkm_oci_ref_parse(&ref, refs, &e));
    uv_loop_t loop;
    ASSERT_OK(uv_loop_init(&loop));
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL;
    ASSERT_OK(tkm_http_new(&loop, NULL, &http, &e));
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    ASSERT_OK(tkm_oci_session_new(http, ref.host, &o, &ses, &e));
    struct async_seen seen;

    /* the default policy: an IP literal is refused before any request */
    char lit[32];
    snprintf(lit, sizeof lit, "127.0.0.1:%d", port);
    reach_inspect(&loop, ses, &ref, "*", "", "", &seen);
    ASSERT_EQ(seen.rc, TKM_OCI_EREACH);
    snprintf(want, sizeof want, "registry \"127.0.0.1:%d\" is not allowed: an IP address", port);
    ASSERT_STRCONTAINS(seen.err, want);
    ASSERT_EQ(tsrv_nreqs(&reg), 0);

    /* listed, but not as plain HTTP: the scheme is https (refused by the fake's plain server) */
    reach_inspect(&loop, ses, &ref, lit, lit, "", &seen);
    ASSERT_STREQ(tkm_oci_session_scheme(ses), "https");
    ASSERT(seen.rc < 0);

    /* the registry listed; its redirect to another (unlisted) literal is refused */
    reach_inspect(&loop, ses, &ref, lit, lit, lit, &seen);
    ASSERT_STREQ(tkm_oci_session_scheme(ses), "http");
    ASSERT_EQ(seen.rc, TKM_OCI_EREACH);
    snprintf(want, sizeof want, "registry \"127.0.0.1:%d\" is not allowed", cdn_port);
    ASSERT_STRCONTAINS(seen.err, want);
    ASSERT(tsrv_nreqs(&reg) > 0);
    ASSERT_EQ(tsrv_nreqs(&cdn), 0);

    /* the redirect's host listed: the session follows it */
    reach_inspect(&loop, ses, &ref, "127.0.0.1", "127.0.0.1", "127.0.0.1", &seen);
    if (seen.rc)
        fprintf(stderr, "%s\n", seen.err);
    ASSERT_OK(seen.rc);
    ASSERT_STREQ(seen.label, "4");
    ASSERT_EQ(tsrv_nreqs(&cdn), 1);

    tkm_oci_session_close(ses, NULL, NULL);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop));
    tsrv_stop(&reg);
    tsrv_stop(&cdn);
}

/* A Bearer challenge pointing at a plain-http, non-loopback realm: no credentials are sent. */
/* A failed check naming the message it failed for. */
#define CHECK(cond, msg)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            tkm_test_fail(__FILE__, __LINE__, "%s failed for \"%s\"", #cond, (msg));               \
    } while (0)

/* 1 when msg holds a control byte or DEL. */
static int has_control(const char *msg)
{
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 1;
    return 0;
}

/* Issue 23: whatever answers at a reference (an internal server a tenant
 * names) never has its words copied into an error: only the status, a code
 * from the distribution spec's list and the URL tkm built. */
TEST(error_replies_are_never_echoed)
{
#define SECRET_BODY(code)                                                                          \
    "{\"errors\":[{\"code\":\"" code "\",\"message\":\"INTERNAL-SECRET-abc\\u001b[31m\\r\\nX\","   \
    "\"detail\":{\"k\":\"INTERNAL-SECRET-def\"}}]}"
    struct route routes[] = {
        {"GET", "/v2/a/b/manifests/v403", {403, NULL, SECRET_BODY("DENIED")}},
        {"GET", "/v2/a/b/manifests/v418", {418, NULL, "INTERNAL-SECRET-abc\x1b]0;t\a\r\n<html>"}},
        {"GET", "/v2/a/b/manifests/vx", {403, NULL, SECRET_BODY("INTERNAL-SECRET-code\\n")}},
        {"GET",
         "/v2/a/b/manifests/v401",
         {401, "WWW-Authenticate: INTERNAL-SECRET-abc \x01\"\r\n", SECRET_BODY("UNAUTHORIZED")}},
        {"GET",
         "/v2/a/b/manifests/vbearer",
         {401,
          "WWW-Authenticate: Bearer "
          "realm=\"http://INTERNAL-SECRET-abc.example/\",service=\"s\"\r\n",
          ""}},
    };
    static const struct {
        const char *tag, *want;
    } cases[] = {
        {"v403", "/v2/a/b/manifests/v403: HTTP 403 DENIED"},
        {"v418", "/v2/a/b/manifests/v418: HTTP 418"},
        {"vx", "/v2/a/b/manifests/vx: HTTP 403"},
        {"v401", "WWW-Authenticate: malformed"},
        {"vbearer", "token realm is not https"},
    };
#undef SECRET_BODY
    struct tsrv s;
    int port = server_start(&s, routes, sizeof routes / sizeof routes[0]);
    char auth[256];
    snprintf(auth, sizeof auth, "{\"auths\":{\"127.0.0.1:%d\":{\"auth\":\"dXNlcjpwYXNz\"}}}", port);
    struct tkm_oci_registry *r = client(port, auth);
    struct tkm_buf body = TKM_BUF_INIT(1024);
    char got[TKM_OCI_DIGEST_LEN + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tkm_err e = {0};
        ASSERT(tkm_oci_registry_get_manifest(r, "a/b", cases[i].tag, &body, NULL, 0, got, &e) < 0);
        CHECK(strstr(e.msg, cases[i].want) != NULL, e.msg);
        CHECK(strstr(e.msg, "SECRET") == NULL, e.msg);
        CHECK(!has_control(e.msg), e.msg);
    }
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

TEST(bearer_realm_must_be_https)
{
    struct route routes[] = {
        {"GET",
         "/v2/a/b/manifests/v1",
         {401, "WWW-Authenticate: Bearer realm=\"http://auth.example.com/token\","
               "service=\"s\"\r\n"}}};
    struct tsrv s;
    int port = server_start(&s, routes, 1);
    char auth[256];
    snprintf(auth, sizeof auth, "{\"auths\":{\"127.0.0.1:%d\":{\"auth\":\"dXNlcjpwYXNz\"}}}", port);
    struct tkm_oci_registry *r = client(port, auth);
    struct tkm_buf body = TKM_BUF_INIT(1024);
    char got[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", "v1", &body, NULL, 0, got, &e), -EPERM);
    ASSERT_STRCONTAINS(e.msg, "token realm is not https");
    ASSERT_NULL(strstr(e.msg, "auth.example.com")); /* the registry's text is never echoed */
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

/* ---- session and jobs (the asynchronous core) ------------------------------ */

/* A server that answers any GET with 200, a Content-Length of total bytes,
 * sends the first `sent` of them and then either closes (cut: a registry cut
 * midway) or holds the connection until the client goes away (a transfer to
 * cancel while it runs). */
struct slow_server {
    struct tsrv s;
    struct tsrv_reply reply;
    char *bytes;
    int port;
};

static void slow_start(struct slow_server *sl, size_t total, size_t sent, int cut)
{
    memset(sl, 0, sizeof *sl);
    sl->bytes = malloc(sent);
    ASSERT_NOT_NULL(sl->bytes);
    memset(sl->bytes, 'x', sent);
    sl->reply = (struct tsrv_reply){
        200, NULL, sl->bytes, .body_len = sent, .short_by = (int)(total - sent), .hold = !cut};
    tsrv_init(&sl->s);
    ASSERT_OK(tsrv_route(&sl->s, "GET", NULL, TSRV_PREFIX, NULL, &sl->reply, 1));
    sl->port = tsrv_listen(&sl->s);
    ASSERT(sl->port > 0);
}

/* Connections that got their first bytes: each reply is the last on its
 * connection (it closes or holds), so replies written count connections. */
static int slow_started(struct slow_server *sl)
{
    return tsrv_nreplies(&sl->s);
}

static void slow_stop(struct slow_server *sl)
{
    tsrv_stop(&sl->s);
    free(sl->bytes);
}

/* An image with one layer of layer_n bytes: manifest (by tag "v1" and by
 * digest) and config routes, plus the layer's route answered by layer_route
 * (filled by the caller: a 200 with bytes, or a 307 elsewhere). */
struct image_routes {
    char cfg[1024], cdg[TKM_OCI_DIGEST_LEN + 1], ldg[TKM_OCI_DIGEST_LEN + 1];
    char man[1024], mdg[TKM_OCI_DIGEST_LEN + 1];
    char mpath[256], cpath[256], lpath[256];
    struct route routes[4];
};

static void image_routes(struct image_routes *ir, const char *layer, size_t layer_n)
{
    snprintf(ir->cfg, sizeof ir->cfg,
             "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\","
             "\"diff_ids\":[]}}");
    ASSERT_OK(tkm_oci_digest_bytes(ir->cfg, strlen(ir->cfg), ir->cdg));
    ASSERT_OK(tkm_oci_digest_bytes(layer, layer_n, ir->ldg));
    snprintf(ir->man, sizeof ir->man,
             "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"config\":{"
             "\"mediaType\":\"" TKM_OCI_MT_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[{\"mediaType\":\"" TKM_OCI_MT_LAYER_TAR "\",\"digest\":\"%s\","
             "\"size\":%zu}]}",
             ir->cdg, strlen(ir->cfg), ir->ldg, layer_n);
    ASSERT_OK(tkm_oci_digest_bytes(ir->man, strlen(ir->man), ir->mdg));
    snprintf(ir->mpath, sizeof ir->mpath, "/v2/a/b/manifests/%s", ir->mdg);
    snprintf(ir->cpath, sizeof ir->cpath, "/v2/a/b/blobs/%s", ir->cdg);
    snprintf(ir->lpath, sizeof ir->lpath, "/v2/a/b/blobs/%s", ir->ldg);
    static const char ct[] = "Content-Type: " TKM_OCI_MT_MANIFEST "\r\n";
    ir->routes[0] = (struct route){"GET", "/v2/a/b/manifests/v1", {200, ct, ir->man}};
    ir->routes[1] = (struct route){"GET", ir->mpath, {200, ct, ir->man}};
    ir->routes[2] = (struct route){"GET", ir->cpath, {200, NULL, ir->cfg}};
    ir->routes[3] = (struct route){"GET", ir->lpath, {200, NULL, layer, .body_len = layer_n}};
}

/* 0 when nothing named like path or a staging sibling of it exists. */
static int leftovers(const char *dir, const char *base)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s' | grep -F -e '%s')\"", dir, base);
    return system(cmd);
}

static void parse_ref(struct tkm_oci_ref *ref, int port, const char *tail)
{
    char refs[128];
    struct tkm_err e = {0};
    snprintf(refs, sizeof refs, "127.0.0.1:%d/a/b%s", port, tail);
    ASSERT_OK(tkm_oci_ref_parse(ref, refs, &e));
}

TEST(pull_into_new_then_existing_layout)
{
    static const char layer[] = "layer bytes of a tiny image";
    struct image_routes ir;
    struct tsrv s;
    image_routes(&ir, layer, strlen(layer));
    int port = server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, port, ":v1");
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    struct tkm_oci_pull_result res;
    struct tkm_err e = {0};
    char out[1200], bpath[1400];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    int rc = tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_STREQ(res.manifest.digest, ir.mdg);
    ASSERT_UEQ(res.bytes_fetched, strlen(layer));
    tkm_oci_pull_result_release(&res);
    snprintf(bpath, sizeof bpath, "%s/blobs/sha256/%s", out, tkm_oci_digest_hex(ir.ldg));
    ASSERT_OK(access(bpath, F_OK));
    ASSERT_OK(leftovers(tkm_test_tmpdir(), ".layout.pull-")); /* the staging dir is gone */
    /* into the existing layout: the layer is verified, not fetched again */
    ASSERT_OK(tkm_oci_pull(&ref, &o, out, "again", 1, &res, &e));
    ASSERT_UEQ(res.bytes_fetched, 0);
    tkm_oci_pull_result_release(&res);
    struct tkm_oci_desc d;
    ASSERT_OK(tkm_oci_layout_find(out, "again", &d, &e));
    ASSERT_STREQ(d.digest, ir.mdg);
    ASSERT_OK(tkm_oci_layout_find(out, "v1", &d, &e));
    tsrv_stop(&s);
}

TEST(failed_pull_leaves_no_directory)
{
    static const char layer[] = "the bytes the manifest promises";
    static const char other[] = "THE bytes the manifest promises"; /* same size, other digest */
    struct image_routes ir;
    struct tsrv s;
    image_routes(&ir, layer, strlen(layer));
    ir.routes[3].reply.body = other;
    int port = server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, port, ":v1");
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    struct tkm_oci_pull_result res;
    struct tkm_err e = {0};
    char out[1200];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    ASSERT_EQ(tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e), -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, "digest mismatch");
    ASSERT_STRCONTAINS(e.msg, ir.ldg);
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    /* a registry cut midway (the connection closes after half the layer) */
    struct slow_server cut;
    slow_start(&cut, strlen(layer), strlen(layer) / 2, 1);
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", cut.port);
    struct route routes2[4];
    memcpy(routes2, ir.routes, sizeof routes2);
    routes2[3] = (struct route){"GET", ir.lpath, {307, loc}};
    struct tsrv s2;
    int port2 = server_start(&s2, routes2, 4);
    parse_ref(&ref, port2, ":v1");
    tkm_err_clear(&e);
    int rc = tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e);
    ASSERT_EQ(rc, -ECONNRESET);
    ASSERT_STRCONTAINS(e.msg, ir.ldg);
    ASSERT_STRCONTAINS(e.msg, "gave up after 4 attempts"); /* retried on loop timers */
    ASSERT_EQ(slow_started(&cut), 4);
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    tsrv_stop(&s2);
    slow_stop(&cut);
    tsrv_stop(&s);
}

/* An image whose layer route redirects to a slow server on slow_port: the
 * registry (s, borrowed until tsrv_stop) and the reference to pull. */
struct redirected {
    struct image_routes ir;
    char loc[200];
    struct tsrv s;
    struct tkm_oci_ref ref;
};

static void redirected_start(struct redirected *rd, const char *layer, size_t n, int slow_port)
{
    image_routes(&rd->ir, layer, n);
    snprintf(rd->loc, sizeof rd->loc, "Location: http://127.0.0.1:%d/blob\r\n", slow_port);
    rd->ir.routes[3] = (struct route){"GET", rd->ir.lpath, {307, rd->loc}};
    parse_ref(&rd->ref, server_start(&rd->s, rd->ir.routes, 4), ":v1");
}

/* Runs tkm_oci_pull with stderr sent to log (the log lines it writes). */
static int pull_logged(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *o,
                       const char *out, const char *log, struct tkm_err *e)
{
    struct tkm_oci_pull_result res;
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT(saved >= 0 && fd >= 0);
    ASSERT(dup2(fd, 2) == 2);
    int rc = tkm_oci_pull(ref, o, out, NULL, 1, &res, e);
    fflush(stderr);
    ASSERT(dup2(saved, 2) == 2);
    close(fd);
    close(saved);
    if (rc == 0)
        tkm_oci_pull_result_release(&res);
    return rc;
}

/* A layer that stops after 100 bytes: each retry is logged with its cause (a
 * stall, not the "HTTP 200" seen before it) and the download's deadline ends
 * the retries with its own reason. */
TEST(stalled_download_names_the_stall_and_meets_its_deadline)
{
    static char layer[4096];
    memset(layer, 's', sizeof layer);
    struct slow_server slow; /* 100 bytes, then nothing: the connection is held */
    slow_start(&slow, sizeof layer, 100, 0);
    struct redirected rd;
    redirected_start(&rd, layer, sizeof layer, slow.port);
    struct tkm_oci_registry_opts o = {.anonymous = 1, .idle_timeout_ms = 1000, .deadline_ms = 3000};
    struct tkm_err e = {0};
    char out[1200], log[1200], text[8192];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    snprintf(log, sizeof log, "%s/log", tkm_test_tmpdir());
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(pull_logged(&rd.ref, &o, out, log, &e), -ETIME);
    uint64_t took = tkm_now_ms() - t0;
    ASSERT(took >= 1000 && took < 6000u * tkm_test_timeout_scale());
    ASSERT_STRCONTAINS(e.msg, "download deadline of 3 s reached");
    ASSERT_STRCONTAINS(e.msg, "stalled: no data for 1 s (100 bytes received)");
    ASSERT_STRCONTAINS(e.msg, rd.ir.ldg);
    ASSERT(slow_started(&slow) >= 2); /* retried before the deadline */
    FILE *f = fopen(log, "r");
    ASSERT_NOT_NULL(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    ASSERT_STRCONTAINS(text, "stalled: no data for 1 s (100 bytes received), "
                             "retrying in ");
    ASSERT_NULL(strstr(text, "HTTP 200"));
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    tsrv_stop(&rd.s);
    slow_stop(&slow);
}

/* A registry that trickles the layer (2 bytes every 20 ms: never slow
 * enough for the idle limit, 40 s for the whole layer) is stopped by the
 * download's deadline, with its reason, within bounds. Without a deadline
 * (tkmctl's TKM_OCI_NO_DEADLINE) a trickle that ends is pulled whole. */
TEST(trickled_download_ends_at_its_deadline)
{
    static char layer[4000];
    memset(layer, 't', sizeof layer);
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer);
    ir.routes[3].reply.chunks = (int)sizeof layer;
    struct tsrv s;
    int port = server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, port, ":v1");
    struct tkm_oci_registry_opts o = {.anonymous = 1, .idle_timeout_ms = 1000, .deadline_ms = 1500};
    struct tkm_err e = {0};
    char out[1200], log[1200];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    snprintf(log, sizeof log, "%s/log", tkm_test_tmpdir());
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(pull_logged(&ref, &o, out, log, &e), -ETIME);
    uint64_t took = tkm_now_ms() - t0;
    ASSERT(took >= 1400 && took < 5000u * tkm_test_timeout_scale());
    ASSERT_STRCONTAINS(e.msg, "download deadline of 1500 ms reached (1 attempt; last: ");
    ASSERT_STRCONTAINS(e.msg, "timed out: no complete response within");
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    tsrv_stop(&s);
    /* 160 bytes in 2-byte pieces: 1.6 s, more than the 1.5 s above */
    image_routes(&ir, layer, 160);
    ir.routes[3].reply.chunks = 160;
    parse_ref(&ref, server_start(&s, ir.routes, 4), ":v1");
    o.deadline_ms = TKM_OCI_NO_DEADLINE;
    t0 = tkm_now_ms();
    ASSERT_OK(pull_logged(&ref, &o, out, log, &e));
    ASSERT(tkm_now_ms() - t0 >= 1500);
    ASSERT_OK(access(out, F_OK));
    tsrv_stop(&s);
}

struct job_seen {
    int calls, rc;
    char err[512];
    uv_timer_t *timer;
    struct tkm_oci_job *job;
    struct slow_server *slow;
};

static void job_cb(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                   const struct tkm_err *err, void *data)
{
    struct job_seen *js = data;
    (void)job;
    (void)res;
    js->calls++;
    js->rc = rc;
    snprintf(js->err, sizeof js->err, "%s", rc ? tkm_err_str(err) : "");
}

static void cancel_when_flowing(uv_timer_t *t)
{
    struct job_seen *js = t->data;
    if (slow_started(js->slow) == 0)
        return; /* not yet: the repeat timer comes back */
    uv_timer_stop(t);
    tkm_oci_job_cancel(js->job);
    ASSERT_EQ(js->calls, 0); /* never from inside cancel */
}

TEST(pull_job_cancelled_midway_leaves_nothing)
{
    static char layer[256 << 10];
    memset(layer, 'x', sizeof layer);
    struct slow_server slow;
    slow_start(&slow, sizeof layer, sizeof layer / 4, 0);
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer);
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", slow.port);
    ir.routes[3] = (struct route){"GET", ir.lpath, {307, loc}};
    struct tsrv s;
    int port = server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, port, ":v1");
    struct tkm_err e = {0};
    uv_loop_t loop;
    uv_timer_t t;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL;
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    char out[1200];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    ASSERT_OK(tkm_http_global_init(&e));
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(tkm_http_new(&loop, NULL, &http, &e));
    ASSERT_OK(tkm_oci_session_new(http, ref.host, &o, &ses, &e));
    struct job_seen js = {.timer = &t, .slow = &slow};
    ASSERT_OK(tkm_oci_job_pull(ses, &ref, out, NULL, job_cb, &js, &js.job, &e));
    ASSERT_OK(uv_timer_init(&loop, &t));
    t.data = &js;
    ASSERT_OK(uv_timer_start(&t, cancel_when_flowing, 10, 10));
    while (js.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(js.rc, -ECANCELED);
    ASSERT_STRCONTAINS(js.err, "cancel");
    ASSERT_EQ(slow_started(&slow), 1); /* it was midway */
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    ASSERT_EQ(tkm_oci_session_jobs(ses), 0);
    uv_close((uv_handle_t *)&t, NULL);
    tkm_oci_session_close(ses, NULL, NULL);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop)); /* every handle closed: nothing leaked on the loop */
    tsrv_stop(&s);
    slow_stop(&slow);
}

/* The progress callback of the test below: raises the cancel flag once
 * bytes of the layer (not the config) arrive, as a signal handler would
 * mid-download. */
struct raise_flag {
    atomic_int flag;
    uint64_t layer_size;
};

static void raise_on_bytes(void *ud, uint64_t done, uint64_t total)
{
    struct raise_flag *rf = ud;
    if (done > 0 && total == rf->layer_size)
        atomic_store(&rf->flag, 1);
}

TEST(sync_pull_cancel_flag_stops_it_midway)
{
    static char layer[256 << 10];
    memset(layer, 'z', sizeof layer);
    struct slow_server slow; /* holds the connection: only the flag can end the pull */
    slow_start(&slow, sizeof layer, sizeof layer / 4, 0);
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer);
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", slow.port);
    ir.routes[3] = (struct route){"GET", ir.lpath, {307, loc}};
    struct tsrv s;
    int port = server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, port, ":v1");
    struct raise_flag rf = {.layer_size = sizeof layer};
    struct tkm_oci_registry_opts o = {
        .anonymous = 1, .progress = raise_on_bytes, .progress_ud = &rf, .cancel = &rf.flag};
    struct tkm_oci_pull_result res;
    struct tkm_err e = {0};
    char out[1200];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    ASSERT_EQ(tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e), -ECANCELED);
    ASSERT_STRCONTAINS(e.msg, "cancel");
    ASSERT_EQ(atomic_load(&rf.flag), 1);
    ASSERT_EQ(slow_started(&slow), 1); /* it was midway through the layer */
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout")); /* the staging dir was removed */
    /* a flag already raised: nothing is requested, nothing is made */
    int before = tsrv_nreplies(&s);
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e), -ECANCELED);
    ASSERT_STRCONTAINS(e.msg, "cancelled");
    ASSERT_EQ(tkm_oci_inspect(&ref, &o, &res, &e), -ECANCELED);
    ASSERT_EQ(tsrv_nreplies(&s), before);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    /* a flag that stays 0 changes nothing: the same image pulls from a whole server */
    struct image_routes ok;
    image_routes(&ok, layer, sizeof layer);
    struct tsrv s2;
    int port2 = server_start(&s2, ok.routes, 4);
    parse_ref(&ref, port2, ":v1");
    atomic_store(&rf.flag, 0);
    o.progress = NULL;
    ASSERT_OK(tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e));
    ASSERT_UEQ(res.bytes_fetched, sizeof layer);
    tkm_oci_pull_result_release(&res);
    tsrv_stop(&s2);
    tsrv_stop(&s);
    slow_stop(&slow);
}

/* Raises *flag after ms milliseconds, on its own thread (a signal handler's
 * part in tkmctl). */
struct later_flag {
    atomic_int *flag;
    int ms;
};

static void *raise_later(void *data)
{
    struct later_flag *l = data;
    usleep((useconds_t)l->ms * 1000);
    atomic_store(l->flag, 1);
    return NULL;
}

TEST_TIMEOUT(sync_push_cancel_flag_stops_a_request_that_never_answers, 60)
{
    /* a layout to push: a tiny image pulled from a whole server */
    static const char layer[] = "layer bytes to push";
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer - 1);
    struct tsrv src;
    int sport = server_start(&src, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, sport, ":v1");
    struct tkm_oci_pull_result res;
    struct tkm_err e = {0};
    char out[1200];
    snprintf(out, sizeof out, "%s/layout", tkm_test_tmpdir());
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    ASSERT_OK(tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e));
    tkm_oci_pull_result_release(&res);
    tsrv_stop(&src);
    /* a registry that takes the connection and never answers the upload: only
     * the flag ends the push (its timeouts are 60 s a try, 4 tries) */
    static const struct tsrv_reply missing = {404, NULL, ""};
    static const struct tsrv_reply never = {.hang_ms = -1};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, "HEAD", "/v2/a/b/blobs/", TSRV_PREFIX, NULL, &missing, 1));
    ASSERT_OK(tsrv_route(&s, NULL, NULL, TSRV_PREFIX, NULL, &never, 1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    parse_ref(&ref, port, ":v1");
    atomic_int flag = 0;
    struct later_flag lf = {&flag, 300};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, raise_later, &lf), 0);
    o.cancel = &flag;
    uint64_t t0 = tkm_now_ms();
    char digest[TKM_OCI_DIGEST_LEN + 1] = "";
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_push(out, NULL, &ref, &o, digest, NULL, &e), -ECANCELED);
    uint64_t took = tkm_now_ms() - t0;
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_STRCONTAINS(e.msg, "cancelled");
    ASSERT(took < 10000 * tkm_test_timeout_scale()); /* about 300 ms + one 50 ms poll */
    ASSERT_STREQ(digest, "");
    ASSERT(tsrv_nreqs(&s) >= 2); /* the HEAD, then the upload that never answered */
    /* a flag raised before: nothing more is sent */
    int before = tsrv_nreqs(&s);
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_push(out, NULL, &ref, &o, digest, NULL, &e), -ECANCELED);
    ASSERT_STRCONTAINS(e.msg, "cancelled");
    ASSERT_EQ(tsrv_nreqs(&s), before);
    tsrv_stop(&s);
}

TEST(session_free_cancels_its_jobs)
{
    static char layer[64 << 10];
    memset(layer, 'y', sizeof layer);
    struct slow_server slow;
    slow_start(&slow, sizeof layer, 1024, 0);
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer);
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", slow.port);
    ir.routes[3] = (struct route){"GET", ir.lpath, {307, loc}};
    struct tsrv s;
    int port = server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, port, ":v1");
    struct tkm_err e = {0};
    uv_loop_t loop;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL;
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    char out1[1200], out2[1200];
    snprintf(out1, sizeof out1, "%s/one", tkm_test_tmpdir());
    snprintf(out2, sizeof out2, "%s/two", tkm_test_tmpdir());
    ASSERT_OK(tkm_http_global_init(&e));
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(tkm_http_new(&loop, NULL, &http, &e));
    ASSERT_OK(tkm_oci_session_new(http, ref.host, &o, &ses, &e));
    struct job_seen a = {0}, b = {0}, c = {0};
    ASSERT_OK(tkm_oci_job_pull(ses, &ref, out1, NULL, job_cb, &a, NULL, &e));
    ASSERT_OK(tkm_oci_job_pull(ses, &ref, out2, NULL, job_cb, &b, NULL, &e));
    ASSERT_OK(tkm_oci_job_resolve(ses, "a/b", "v1", job_cb, &c, NULL, &e));
    /* a job on another host is refused at once, without a callback */
    struct tkm_oci_ref other;
    ASSERT_OK(tkm_oci_ref_parse(&other, "127.0.0.2:1/a/b:v1", &e));
    ASSERT_EQ(tkm_oci_job_inspect(ses, &other, job_cb, &c, NULL, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "not on the session's registry");
    while (slow_started(&slow) == 0 || c.calls == 0)
        uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_OK(c.rc); /* the resolve finished on its own */
    ASSERT_EQ(a.calls + b.calls, 0);
    tkm_oci_session_close(ses, NULL, NULL);
    ASSERT_EQ(a.calls + b.calls, 0); /* not from inside free */
    while (a.calls == 0 || b.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(a.rc, -ECANCELED);
    ASSERT_EQ(b.rc, -ECANCELED);
    ASSERT_EQ(access(out1, F_OK), -1);
    ASSERT_EQ(access(out2, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), ".pull-"));
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop));
    tsrv_stop(&s);
    slow_stop(&slow);
}

TEST(referrers_api_and_its_absence)
{
    static const char idx[] =
        "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_INDEX "\",\"manifests\":[]}";
    char d1[TKM_OCI_DIGEST_LEN + 1], d2[TKM_OCI_DIGEST_LEN + 1], p1[300], p2[300];
    ASSERT_OK(tkm_oci_digest_bytes("one", 3, d1));
    ASSERT_OK(tkm_oci_digest_bytes("two", 3, d2));
    snprintf(p1, sizeof p1,
             "/v2/a/b/referrers/%s?artifactType=application%%2Fvnd.dev.sigstore."
             "bundle.v0.3%%2Bjson",
             d1);
    snprintf(p2, sizeof p2, "/v2/a/b/referrers/%s", d2);
    struct route routes[] = {
        {"GET", p1, {200, "Content-Type: " TKM_OCI_MT_INDEX "\r\n", idx}},
        {"GET", p2, {404, NULL, "{\"errors\":[{\"code\":\"NAME_UNKNOWN\",\"message\":\"x\"}]}"}},
    };
    struct tsrv s;
    int port = server_start(&s, routes, 2);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    ASSERT_OK(sup_oci_get_referrers(r, "a/b", d1, "application/vnd.dev.sigstore.bundle.v0.3+json",
                                    &body, &e));
    ASSERT_STREQ(body.data, idx);
    /* a 404 with an OCI error body: the repository is missing */
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d2, NULL, &body, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "NAME_UNKNOWN");
    /* a bare 404 (the server's unknown route): no referrers API */
    tkm_err_clear(&e);
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d1, NULL, &body, &e), -ENOTSUP);
    ASSERT_STRCONTAINS(e.msg, "no referrers API");
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", "sha256:nope", NULL, &body, &e), -EINVAL);
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d1, "a&b=c", &body, &e), -EINVAL);
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

struct ti_seen {
    int calls, rc;
    char digest[TKM_OCI_DIGEST_LEN + 1], arch[16], entries[16], err[512];
    size_t targets;
};

static void ti_cb(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                  const struct tkm_err *err, void *data)
{
    struct ti_seen *t = data;
    (void)job;
    t->calls++;
    t->rc = rc;
    if (rc == 0) {
        const struct tkm_triton_image *im = res->detail;
        snprintf(t->digest, sizeof t->digest, "%s", im->manifest_digest);
        t->targets = im->summary.n_targets;
        snprintf(t->arch, sizeof t->arch, "%s", im->summary.targets[0].target.arch);
        snprintf(t->entries, sizeof t->entries, "%s", im->entry_count ? im->entry_count : "");
    } else {
        snprintf(t->err, sizeof t->err, "%s", tkm_err_str(err));
    }
}

TEST(triton_inspect_job_reads_the_summary)
{
    static const char cfg[] =
        "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Labels\":{"
        "\"cache.triton.image/entry-count\":\"4\",\"cache.triton.image/summary\":"
        "\"{\\\"targets\\\":[{\\\"backend\\\":\\\"cuda\\\",\\\"arch\\\":\\\"90\\\",\\\"warp_"
        "size\\\":"
        "32}],\\\"triton_versions\\\":[\\\"3.6.0\\\"],\\\"ptx_versions\\\":[\\\"8.7\\\"]}\"}},"
        "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
    static const char layer[] = "x";
    struct image_routes ir, plain;
    image_routes(&plain, layer, 1); /* a config without Triton labels */
    image_routes(&ir, layer, 1);
    snprintf(ir.cfg, sizeof ir.cfg, "%s", cfg);
    ASSERT_OK(tkm_oci_digest_bytes(ir.cfg, strlen(ir.cfg), ir.cdg));
    snprintf(ir.man, sizeof ir.man,
             "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\",\"config\":{"
             "\"mediaType\":\"" TKM_OCI_MT_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[]}",
             ir.cdg, strlen(ir.cfg));
    ASSERT_OK(tkm_oci_digest_bytes(ir.man, strlen(ir.man), ir.mdg));
    snprintf(ir.mpath, sizeof ir.mpath, "/v2/a/b/manifests/%s", ir.mdg);
    snprintf(ir.cpath, sizeof ir.cpath, "/v2/a/b/blobs/%s", ir.cdg);
    ir.routes[1].path = ir.mpath;
    ir.routes[2].path = ir.cpath;
    struct tsrv s;
    int port = server_start(&s, ir.routes, 3);
    struct tsrv s2;
    int port2 = server_start(&s2, plain.routes, 3);
    struct tkm_err e = {0};
    uv_loop_t loop;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL, *ses2 = NULL;
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    struct tkm_oci_ref ref, ref2;
    parse_ref(&ref, port, ":v1");
    parse_ref(&ref2, port2, ":v1");
    ASSERT_OK(tkm_http_global_init(&e));
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(tkm_http_new(&loop, NULL, &http, &e));
    ASSERT_OK(tkm_oci_session_new(http, ref.host, &o, &ses, &e));
    ASSERT_OK(tkm_oci_session_new(http, ref2.host, &o, &ses2, &e));
    struct ti_seen good = {0}, bad = {0}, cancelled = {0};
    struct tkm_oci_job *job = NULL;
    ASSERT_OK(tkm_triton_job_inspect(ses, &ref, ti_cb, &good, NULL, &e));
    ASSERT_OK(tkm_triton_job_inspect(ses2, &ref2, ti_cb, &bad, NULL, &e));
    ASSERT_OK(tkm_triton_job_inspect(ses, &ref, ti_cb, &cancelled, &job, &e));
    tkm_oci_job_cancel(job);
    ASSERT_EQ(good.calls + bad.calls + cancelled.calls, 0);
    while (good.calls + bad.calls + cancelled.calls < 3)
        uv_run(&loop, UV_RUN_ONCE);
    if (good.rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", good.err);
    ASSERT_STREQ(good.digest, ir.mdg);
    ASSERT_EQ(good.targets, 1);
    ASSERT_STREQ(good.arch, "90");
    ASSERT_STREQ(good.entries, "4");
    ASSERT_EQ(bad.rc, -ENOENT);
    ASSERT_STRCONTAINS(bad.err, "not a Triton cache image");
    ASSERT_EQ(cancelled.rc, -ECANCELED);
    ASSERT_EQ(tkm_oci_session_jobs(ses), 0);
    tkm_oci_session_close(ses, NULL, NULL);
    tkm_oci_session_close(ses2, NULL, NULL);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop));
    tsrv_stop(&s);
    tsrv_stop(&s2);
}

/* ---- referrers pagination (Link: <url>; rel="next") --------------------- */

#define IDX_CT "Content-Type: " TKM_OCI_MT_INDEX "\r\n"

/* An index listing count referrers, "ref<first>".."ref<first+count-1>" hashed. */
static void ref_page(struct tkm_buf *b, int first, int count)
{
    char d[TKM_OCI_DIGEST_LEN + 1], in[32];
    tkm_buf_init(b, 1 << 20);
    ASSERT_OK(tkm_buf_printf(b, "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_INDEX
                                "\",\"manifests\":["));
    for (int i = first; i < first + count; i++) {
        snprintf(in, sizeof in, "ref%d", i);
        ASSERT_OK(tkm_oci_digest_bytes(in, strlen(in), d));
        ASSERT_OK(tkm_buf_printf(b,
                                 "%s{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                                 "\"size\":1,\"digest\":\"%s\"}",
                                 i > first ? "," : "", d));
    }
    ASSERT_OK(tkm_buf_puts(b, "]}"));
}

/* 1 when body lists "ref<i>" (as ref_page wrote it). */
static const char *ref_at(const char *body, int i)
{
    char d[TKM_OCI_DIGEST_LEN + 1], in[32];
    snprintf(in, sizeof in, "ref%d", i);
    ASSERT_OK(tkm_oci_digest_bytes(in, strlen(in), d));
    return strstr(body, d);
}

TEST(referrers_two_pages_merged_query_link)
{
    struct tkm_buf p1, p2;
    char d[TKM_OCI_DIGEST_LEN + 1], u1[200], u2[220];
    ASSERT_OK(tkm_oci_digest_bytes("subject", 7, d));
    ref_page(&p1, 0, 2);
    ref_page(&p2, 2, 2);
    snprintf(u1, sizeof u1, "/v2/a/b/referrers/%s", d);
    snprintf(u2, sizeof u2, "/v2/a/b/referrers/%s?last=x&n=2", d);
    /* a "?query" link, after a rel="prev" one and with other params */
    struct route routes[] = {
        {"GET",
         u1,
         {200,
          IDX_CT "Link: </v2/a/b/referrers/x?n=0>; rel=\"prev\", <?last=x&n=2>; "
                 "type=\"application/json\"; rel=\"next\"\r\n",
          p1.data}},
        {"GET", u2, {200, IDX_CT, p2.data}},
    };
    struct tsrv s;
    int port = server_start(&s, routes, 2);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    int rc = sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_EQ(tsrv_nreqs(&s), 2);
    for (int i = 0; i < 4; i++)
        ASSERT_NOT_NULL(ref_at(body.data, i));
    ASSERT(ref_at(body.data, 1) < ref_at(body.data, 2)); /* page order kept */
    ASSERT_STRCONTAINS(body.data, "\"schemaVersion\":2");
    tkm_buf_release(&body);
    tkm_buf_release(&p1);
    tkm_buf_release(&p2);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

TEST(referrers_three_pages_relative_and_absolute_links)
{
    struct tkm_buf p1, p2, p3;
    char d[TKM_OCI_DIGEST_LEN + 1], u1[200], u2[220], u3[220], h2[300];
    ASSERT_OK(tkm_oci_digest_bytes("subject", 7, d));
    ref_page(&p1, 0, 3);
    ref_page(&p2, 3, 3);
    ref_page(&p3, 6, 1);
    snprintf(u1, sizeof u1, "/v2/a/b/referrers/%s?artifactType=x%%2Fy", d);
    snprintf(u2, sizeof u2, "/v2/a/b/referrers/%s?page=2", d);
    snprintf(u3, sizeof u3, "/v2/a/b/referrers/%s?page=3", d);
    char h1[300];
    snprintf(h1, sizeof h1, IDX_CT "Link: <%s>; rel=next\r\n", u2); /* path, unquoted rel */
    struct route routes[] = {
        {"GET", u1, {200, h1, p1.data}},
        {"GET", u2, {200, h2, p2.data}},
        {"GET", u3, {200, IDX_CT, p3.data}},
    };
    struct tsrv s;
    int port = server_start(&s, routes, 3);
    /* the absolute link needs the port: the header string is borrowed, read per request */
    snprintf(h2, sizeof h2, IDX_CT "link: <http://127.0.0.1:%d%s>; rel=\"last next\"\r\n", port,
             u3);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    int rc = sup_oci_get_referrers(r, "a/b", d, "x/y", &body, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    for (int i = 0; i < 7; i++)
        ASSERT_NOT_NULL(ref_at(body.data, i));
    ASSERT(ref_at(body.data, 5) < ref_at(body.data, 6));
    tkm_buf_release(&body);
    tkm_buf_release(&p1);
    tkm_buf_release(&p2);
    tkm_buf_release(&p3);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

TEST(referrers_next_link_to_other_host_refused)
{
    struct tkm_buf p1, p2;
    char d[TKM_OCI_DIGEST_LEN + 1], u1[200], h1[300];
    ASSERT_OK(tkm_oci_digest_bytes("subject", 7, d));
    ref_page(&p1, 0, 1);
    ref_page(&p2, 1, 1);
    struct tsrv other;
    struct route oroutes[] = {{"GET", "/v2/a/b/referrers/next", {200, IDX_CT, p2.data}}};
    int oport = server_start(&other, oroutes, 1);
    snprintf(u1, sizeof u1, "/v2/a/b/referrers/%s", d);
    struct route routes[] = {{"GET", u1, {200, h1, p1.data}}};
    struct tsrv s;
    int port = server_start(&s, routes, 1);
    snprintf(h1, sizeof h1,
             IDX_CT "Link: <http://127.0.0.1:%d/v2/a/b/referrers/next>; rel=\"next\"\r\n", oport);
    struct tkm_oci_registry *r = client(port, "{\"auths\":{}}");
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e), -EPERM);
    ASSERT_STRCONTAINS(e.msg, "Link header's next page is not on");
    ASSERT_STRCONTAINS(e.msg, "not followed");
    ASSERT_NULL(strstr(e.msg, "/v2/a/b/referrers/next")); /* the registry's text is not echoed */
    ASSERT_EQ(tsrv_nreqs(&other), 0);
    /* a scheme-relative link to another host, and the userinfo trick, too */
    snprintf(h1, sizeof h1, IDX_CT "Link: <//127.0.0.1:%d/v2/a/b/referrers/next>; rel=\"next\"\r\n",
             oport);
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e), -EPERM);
    snprintf(h1, sizeof h1,
             IDX_CT "Link: <http://127.0.0.1:%d@127.0.0.1:%d/v2/a/b/referrers/next>; rel=next\r\n",
             port, oport);
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e), -EPERM);
    ASSERT_EQ(tsrv_nreqs(&other), 0);
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    tkm_buf_release(&body);
    tkm_buf_release(&p1);
    tkm_buf_release(&p2);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
    tsrv_stop(&other);
}

TEST(referrers_page_loop_stopped_by_page_cap)
{
    struct tkm_buf p1, p2;
    char d[TKM_OCI_DIGEST_LEN + 1], u1[200], u2[220], h1[300], h2[300];
    ASSERT_OK(tkm_oci_digest_bytes("subject", 7, d));
    ref_page(&p1, 0, 1);
    ref_page(&p2, 1, 1);
    snprintf(u1, sizeof u1, "/v2/a/b/referrers/%s", d);
    snprintf(u2, sizeof u2, "/v2/a/b/referrers/%s?last=1", d);
    snprintf(h1, sizeof h1, IDX_CT "Link: <%s>; rel=\"next\"\r\n", u2);
    snprintf(h2, sizeof h2, IDX_CT "Link: <%s>; rel=\"next\"\r\n", u1); /* back to page 1 */
    struct route routes[] = {{"GET", u1, {200, h1, p1.data}}, {"GET", u2, {200, h2, p2.data}}};
    struct tsrv s;
    int port = server_start(&s, routes, 2);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e), -ELOOP);
    ASSERT_STRCONTAINS(e.msg, "stopped after 16 pages");
    ASSERT_EQ(tsrv_nreqs(&s), TKM_OCI_REFERRERS_MAX_PAGES);
    tkm_buf_release(&body);
    tkm_buf_release(&p1);
    tkm_buf_release(&p2);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

TEST(referrers_total_cap)
{
    struct tkm_buf p1, p2;
    char d[TKM_OCI_DIGEST_LEN + 1], u1[200], u2[220], h1[300];
    ASSERT_OK(tkm_oci_digest_bytes("subject", 7, d));
    ref_page(&p1, 0, 300);
    ref_page(&p2, 300, 213); /* 513 in all */
    snprintf(u1, sizeof u1, "/v2/a/b/referrers/%s", d);
    snprintf(u2, sizeof u2, "/v2/a/b/referrers/%s?last=1", d);
    snprintf(h1, sizeof h1, IDX_CT "Link: <%s>; rel=\"next\"\r\n", u2);
    struct route routes[] = {{"GET", u1, {200, h1, p1.data}}, {"GET", u2, {200, IDX_CT, p2.data}}};
    struct tsrv s;
    int port = server_start(&s, routes, 2);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e), -E2BIG);
    ASSERT_STRCONTAINS(e.msg, "more than 512 referrers");
    tkm_buf_release(&body);
    tkm_buf_release(&p1);
    tkm_buf_release(&p2);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

TEST(referrers_malformed_link_refused_other_rels_ignored)
{
    struct tkm_buf p1;
    char d[TKM_OCI_DIGEST_LEN + 1], u1[200], h1[300];
    ASSERT_OK(tkm_oci_digest_bytes("subject", 7, d));
    ref_page(&p1, 0, 1);
    snprintf(u1, sizeof u1, "/v2/a/b/referrers/%s", d);
    struct route routes[] = {{"GET", u1, {200, h1, p1.data}}};
    struct tsrv s;
    int port = server_start(&s, routes, 1);
    struct tkm_oci_registry *r = client(port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    static const char *const bad[] = {
        "Link: /v2/a/b/referrers/x?n=1; rel=\"next\"\r\n",  /* no angle brackets */
        "Link: </v2/a/b/referrers/x?n=1; rel=\"next\"\r\n", /* unclosed */
        "Link: </v2/x>; rel=\"next\r\n",                    /* unterminated quote */
        "Link: </v2/x>; rel=\r\n",                          /* empty value */
        "Link: </v2/x> rel=\"next\"\r\n",                   /* no ';' */
        "Link: <>; rel=\"next\"\r\n",                       /* empty URL */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(h1, sizeof h1, IDX_CT "%s", bad[i]);
        tkm_err_clear(&e);
        ASSERT_EQ(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e), -EBADMSG);
        ASSERT_STRCONTAINS(e.msg, "malformed Link header");
    }
    /* well-formed links with other rels: one page, its bytes as they came */
    snprintf(h1, sizeof h1,
             IDX_CT "Link: </v2/a/b/referrers/x?n=0>; rel=\"prev\", <https://"
                    "docs.example/r>; rel=\"help nextpage\"\r\n");
    ASSERT_OK(sup_oci_get_referrers(r, "a/b", d, NULL, &body, &e));
    ASSERT_STREQ(body.data, p1.data);
    ASSERT_EQ(tsrv_nreqs(&s), (int)(sizeof bad / sizeof bad[0]) + 1);
    tkm_buf_release(&body);
    tkm_buf_release(&p1);
    tkm_oci_registry_free(r);
    tsrv_stop(&s);
}

/* A session set up as a mirror endpoint (mirrors.h): the path prefix replaces
 * /v2, ?ns= names the upstream on every API URL, the extra headers go to the
 * mirror (never to a redirect's host), and a bad header or path is refused. */
TEST(mirror_endpoint_path_ns_and_headers)
{
    struct tsrv cdn, mir;
    struct route cdn_routes[] = {{"GET", "/b?sig=1", {200, NULL, blob}}};
    int cdn_port = server_start(&cdn, cdn_routes, 1);
    char loc[256], dg[TKM_OCI_DIGEST_LEN + 1], path[256], host[64];
    ASSERT_OK(tkm_oci_digest_bytes(blob, strlen(blob), dg));
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/b?sig=1\r\n", cdn_port);
    snprintf(path, sizeof path, "/cache/v2/a/b/blobs/%s?ns=registry.example", dg);
    struct route mir_routes[] = {{"GET", path, {307, loc}}};
    int port = server_start(&mir, mir_routes, 1);
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    const char *const headers[] = {"X-Mirror-Token: t0k", "Authorization: Basic bWlycm9yOnB3",
                                   NULL};
    struct tkm_oci_registry_opts o = {.anonymous = 1,
                                      .timeout_ms = 5000,
                                      .scheme = "http",
                                      .path_prefix = "/cache/v2",
                                      .ns = "registry.example",
                                      .headers = headers};
    struct tkm_oci_registry *r = NULL;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_http_global_init(&e));
    ASSERT_OK(tkm_oci_registry_new(host, &o, &r, &e));
    struct tkm_oci_desc d = {.size = strlen(blob)};
    memcpy(d.digest, dg, sizeof dg);
    struct tkm_buf out = TKM_BUF_INIT(1 << 20);
    int rc = sup_oci_fetch_blob_mem(r, "a/b", &d, &out, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_STREQ(out.data, blob);
    ASSERT_EQ(tsrv_nreqs(&mir), 1); /* the route matched: prefix and ns exactly */
    ASSERT_STRCONTAINS(last_request(&mir), "X-Mirror-Token: t0k");
    ASSERT_STRCONTAINS(last_request(&mir), "Authorization: Basic bWlycm9yOnB3");
    ASSERT_EQ(saw_authorization(&cdn), 0); /* the mirror's headers stay with the mirror */
    ASSERT(!strstr(last_request(&cdn), "X-Mirror-Token"));
    tkm_buf_release(&out);
    tkm_oci_registry_free(r);
    r = NULL;
    /* refused settings name what is wrong */
    const char *const bad_hdr[] = {"no colon here", NULL};
    o.headers = bad_hdr;
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_new(host, &o, &r, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "header 1 is not one 'Name: value' line");
    o.headers = NULL;
    o.path_prefix = "cache/v2?x=1";
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_new(host, &o, &r, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "must start with / and hold no query");
    o.path_prefix = NULL;
    o.scheme = "ftp";
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_new(host, &o, &r, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "is not http or https");
    tsrv_stop(&mir);
    tsrv_stop(&cdn);
}
