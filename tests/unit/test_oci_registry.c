/* test_oci_registry.c - the registry client against scripted loopback HTTP servers:
 * redirects drop Authorization across hosts, exact blob size limits, digest checks,
 * manifest size cap, Basic auth from Secret bytes. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>

#include "test.h"

struct route {
    const char *method, *path; /* exact match */
    int status;
    const char *headers; /* extra header lines, each ending "\r\n" */
    const char *body;
    size_t body_len;
    int need_auth; /* 401 Basic unless "Authorization: Basic" is present */
};

struct server {
    int fd, port;
    const struct route *routes;
    size_t n_routes;
    pthread_t th;
    char last_request[8192]; /* the last request head seen */
    int saw_authorization;   /* any request carried Authorization */
};

static void serve_one(struct server *s, int c)
{
    char req[8192];
    size_t n = 0;
    while (n < sizeof req - 1) {
        ssize_t r = read(c, req + n, sizeof req - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[n] = '\0';
    memcpy(s->last_request, req, n + 1);
    int has_auth = strcasestr(req, "\r\nAuthorization:") != NULL;
    if (has_auth)
        s->saw_authorization = 1;
    char method[16] = "", path[2048] = "";
    if (sscanf(req, "%15s %2047s", method, path) != 2)
        return;
    const struct route *rt = NULL;
    for (size_t i = 0; i < s->n_routes; i++)
        if (strcmp(s->routes[i].method, method) == 0 && strcmp(s->routes[i].path, path) == 0)
            rt = &s->routes[i];
    struct tkm_buf out = TKM_BUF_INIT(16 << 20);
    if (!rt) {
        tkm_buf_puts(&out,
                     "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    } else if (rt->need_auth && !strcasestr(req, "\r\nAuthorization: Basic ")) {
        tkm_buf_puts(&out, "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"t\"\r\n"
                           "Content-Length: 0\r\nConnection: close\r\n\r\n");
    } else {
        size_t len = rt->body ? (rt->body_len ? rt->body_len : strlen(rt->body)) : 0;
        tkm_buf_printf(&out, "HTTP/1.1 %d X\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n",
                       rt->status, rt->headers ? rt->headers : "", len);
        if (strcmp(method, "HEAD") != 0 && len)
            tkm_buf_append(&out, rt->body, len);
    }
    for (size_t off = 0; off < out.len;) {
        ssize_t w = write(c, out.data + off, out.len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    tkm_buf_release(&out);
}

static void *serve(void *arg)
{
    struct server *s = arg;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        serve_one(s, c);
        close(c);
    }
}

static void server_start(struct server *s, const struct route *routes, size_t n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    memset(s, 0, sizeof *s);
    s->routes = routes;
    s->n_routes = n;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT(s->fd >= 0);
    ASSERT_EQ(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(listen(s->fd, 16), 0);
    ASSERT_EQ(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    ASSERT_EQ(pthread_create(&s->th, NULL, serve, s), 0);
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
    ASSERT_STREQ(tkm_oci_registry_scheme(r), "http");
    return r;
}

static const char blob[] = "the layer bytes, as served by the CDN";

TEST(blob_redirect_to_other_host_drops_authorization)
{
    struct server cdn, reg;
    struct route cdn_routes[] = {{"GET", "/signed/blob?sig=1", 200, NULL, blob, 0, 0}};
    server_start(&cdn, cdn_routes, 1);
    char loc[256], dg[TKM_OCI_DIGEST_LEN + 1], path[256], auth[256];
    ASSERT_OK(tkm_oci_digest_bytes(blob, strlen(blob), dg));
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/signed/blob?sig=1\r\n", cdn.port);
    snprintf(path, sizeof path, "/v2/a/b/blobs/%s", dg);
    struct route reg_routes[] = {{"GET", path, 307, loc, NULL, 0, 1}};
    server_start(&reg, reg_routes, 1);
    /* Secret bytes (.dockerconfigjson) with user:pass for the registry only */
    snprintf(auth, sizeof auth, "{\"auths\":{\"127.0.0.1:%d\":{\"auth\":\"dXNlcjpwYXNz\"}}}",
             reg.port);
    struct tkm_oci_registry *r = client(reg.port, auth);
    struct tkm_oci_desc d = {.size = strlen(blob)};
    memcpy(d.digest, dg, sizeof dg);
    struct tkm_buf out = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    int rc = tkm_oci_registry_fetch_blob_mem(r, "a/b", &d, &out, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    ASSERT_OK(rc);
    ASSERT_STREQ(out.data, blob);
    ASSERT_EQ(reg.saw_authorization, 1); /* Basic went to the registry */
    ASSERT_EQ(cdn.saw_authorization, 0); /* ...and never to the redirect target */
    ASSERT_STRCONTAINS(reg.last_request, "Authorization: Basic dXNlcjpwYXNz");
    tkm_buf_release(&out);
    tkm_oci_registry_free(r);
}

TEST(blob_size_and_digest_are_exact)
{
    struct server s;
    char dg[TKM_OCI_DIGEST_LEN + 1], p1[256];
    ASSERT_OK(tkm_oci_digest_bytes(blob, strlen(blob), dg));
    snprintf(p1, sizeof p1, "/v2/a/b/blobs/%s", dg);
    struct route routes[] = {{"GET", p1, 200, NULL, blob, 0, 0}};
    server_start(&s, routes, 1);
    struct tkm_oci_registry *r = client(s.port, NULL);
    struct tkm_oci_desc d = {.size = strlen(blob) - 5}; /* declares fewer bytes than served */
    memcpy(d.digest, dg, sizeof dg);
    struct tkm_err e = {0};
    char file[1200];
    snprintf(file, sizeof file, "%s/blob", tkm_test_tmpdir());
    ASSERT_EQ(tkm_oci_registry_fetch_blob(r, "a/b", &d, file, &e), -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, "more bytes than the 32 its descriptor declares");
    ASSERT_STRCONTAINS(e.msg, dg);
    ASSERT_EQ(access(file, F_OK), -1); /* nothing left behind */
    d.size = strlen(blob) + 5;         /* declares more */
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_fetch_blob(r, "a/b", &d, file, &e), -EBADMSG);
    ASSERT_STRCONTAINS(e.msg, "got 37 bytes, the descriptor says 42");
    ASSERT_EQ(access(file, F_OK), -1);
    d.size = strlen(blob);
    ASSERT_OK(tkm_oci_registry_fetch_blob(r, "a/b", &d, file, &e));
    ASSERT_EQ(access(file, F_OK), 0);
    tkm_oci_registry_free(r);
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
        {"GET", p1, 200, "Content-Type: x/y\r\n", man, 0, 0}, /* bytes that are not `wrong` */
        {"GET", p2, 200, "Content-Type: x/y\r\n", man, 0, 0},
        {"HEAD", "/v2/a/b/manifests/v1", 200, hdr, NULL, 0, 0},
        {"GET", "/v2/a/b/manifests/v1", 200, hdr, man, 0, 0},
        {"GET", "/v2/a/b/manifests/big", 200, NULL, big, big_n, 0},
    };
    struct server s;
    server_start(&s, routes, 5);
    struct tkm_oci_registry *r = client(s.port, NULL);
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
    ASSERT_OK(tkm_oci_registry_resolve(r, "a/b", "v1", got, &e));
    ASSERT_STREQ(got, dg);
    ASSERT_STRCONTAINS(s.last_request, "GET /v2/a/b/manifests/v1 ");
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
    free(big);
    tkm_oci_registry_free(r);
}

TEST(basic_auth_missing_credentials_is_explained)
{
    struct server s;
    struct route routes[] = {{"GET", "/v2/a/b/manifests/v1", 200, NULL, "{}", 0, 1}};
    server_start(&s, routes, 1);
    struct tkm_oci_registry *r = client(s.port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1024);
    char got[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", "v1", &body, NULL, 0, got, &e), -EACCES);
    ASSERT_STRCONTAINS(e.msg, "401 Unauthorized");
    ASSERT_STRCONTAINS(e.msg, "anonymous access requested");
    ASSERT_EQ(s.saw_authorization, 0);
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
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
        {"GET", "/v2/a/b/manifests/v1", 200, hdr, man, 0, 0},
        {"GET", mpath, 200, hdr, man, 0, 0},
        {"GET", cpath, 200, NULL, cfg, 0, 0},
    };
    struct server s;
    server_start(&s, routes, 3);
    struct tkm_err e = {0};
    ASSERT_OK(tkm_http_global_init(&e));
    char refs[128];
    struct tkm_oci_ref ref;
    snprintf(refs, sizeof refs, "127.0.0.1:%d/a/b:v1", s.port);
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
    snprintf(refs, sizeof refs, "127.0.0.1:%d/a/b:nope", s.port);
    ASSERT_OK(tkm_oci_ref_parse(&ref, refs, &e));
    ASSERT_OK(tkm_oci_job_inspect(ses, &ref, async_cb, &bad, NULL, &e));
    ASSERT_EQ(tkm_oci_session_jobs(ses), 2);
    while (seen.calls + bad.calls < 2)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(tkm_oci_session_jobs(ses), 0);
    tkm_oci_session_free(ses);
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
}

/* A Bearer challenge pointing at a plain-http, non-loopback realm: no credentials are sent. */
TEST(bearer_realm_must_be_https)
{
    struct route routes[] = {{"GET", "/v2/a/b/manifests/v1", 401,
                              "WWW-Authenticate: Bearer realm=\"http://auth.example.com/token\","
                              "service=\"s\"\r\n",
                              NULL, 0, 0}};
    struct server s;
    server_start(&s, routes, 1);
    char auth[256];
    snprintf(auth, sizeof auth, "{\"auths\":{\"127.0.0.1:%d\":{\"auth\":\"dXNlcjpwYXNz\"}}}",
             s.port);
    struct tkm_oci_registry *r = client(s.port, auth);
    struct tkm_buf body = TKM_BUF_INIT(1024);
    char got[TKM_OCI_DIGEST_LEN + 1];
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_oci_registry_get_manifest(r, "a/b", "v1", &body, NULL, 0, got, &e), -EPERM);
    ASSERT_STRCONTAINS(e.msg, "token realm 'http://auth.example.com/token' is not https");
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
}
