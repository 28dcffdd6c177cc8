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
#include <tkm/oci/layout.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>
#include <tkm/triton/image.h>

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

/* ---- session and jobs (the asynchronous core) ------------------------------ */

/* A server that answers any GET with 200, a Content-Length of total bytes,
 * sends the first `sent` of them and then waits for the client to go away:
 * a transfer cut midway, or one to cancel while it runs. */
struct slow_server {
    int fd, port;
    size_t total, sent;
    int cut; /* 1: close right after the first bytes (a registry cut midway) */
    pthread_t th;
    volatile int started; /* connections that got their first bytes */
};

static void *slow_serve(void *arg)
{
    struct slow_server *s = arg;
    for (;;) {
        char req[4096], junk[256];
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        ssize_t r = read(c, req, sizeof req);
        (void)r;
        char *out = calloc(1, s->sent + 128);
        int n = snprintf(out, 128, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", s->total);
        memset(out + n, 'x', s->sent);
        ssize_t w = write(c, out, (size_t)n + s->sent);
        (void)w;
        free(out);
        __atomic_add_fetch(&s->started, 1, __ATOMIC_SEQ_CST);
        while (!s->cut && read(c, junk, sizeof junk) > 0) /* until the client closes */
            ;
        close(c);
    }
}

static void slow_start(struct slow_server *s, size_t total, size_t sent)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    memset(s, 0, sizeof *s);
    s->total = total;
    s->sent = sent;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT(s->fd >= 0);
    ASSERT_EQ(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    ASSERT_EQ(listen(s->fd, 16), 0);
    ASSERT_EQ(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
    s->port = ntohs(a.sin_port);
    ASSERT_EQ(pthread_create(&s->th, NULL, slow_serve, s), 0);
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
    ir->routes[0] = (struct route){"GET", "/v2/a/b/manifests/v1", 200, ct, ir->man, 0, 0};
    ir->routes[1] = (struct route){"GET", ir->mpath, 200, ct, ir->man, 0, 0};
    ir->routes[2] = (struct route){"GET", ir->cpath, 200, NULL, ir->cfg, 0, 0};
    ir->routes[3] = (struct route){"GET", ir->lpath, 200, NULL, layer, layer_n, 0};
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
    struct server s;
    image_routes(&ir, layer, strlen(layer));
    server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, s.port, ":v1");
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
}

TEST(failed_pull_leaves_no_directory)
{
    static const char layer[] = "the bytes the manifest promises";
    static const char other[] = "THE bytes the manifest promises"; /* same size, other digest */
    struct image_routes ir;
    struct server s;
    image_routes(&ir, layer, strlen(layer));
    ir.routes[3].body = other;
    server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, s.port, ":v1");
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
    slow_start(&cut, strlen(layer), strlen(layer) / 2);
    cut.cut = 1;
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", cut.port);
    struct route routes2[4];
    memcpy(routes2, ir.routes, sizeof routes2);
    routes2[3] = (struct route){"GET", ir.lpath, 307, loc, NULL, 0, 0};
    struct server s2;
    server_start(&s2, routes2, 4);
    parse_ref(&ref, s2.port, ":v1");
    tkm_err_clear(&e);
    int rc = tkm_oci_pull(&ref, &o, out, NULL, 1, &res, &e);
    ASSERT_EQ(rc, -ECONNRESET);
    ASSERT_STRCONTAINS(e.msg, ir.ldg);
    ASSERT_STRCONTAINS(e.msg, "gave up after 4 attempts"); /* retried on loop timers */
    ASSERT_EQ(__atomic_load_n(&cut.started, __ATOMIC_SEQ_CST), 4);
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
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
    if (__atomic_load_n(&js->slow->started, __ATOMIC_SEQ_CST) == 0)
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
    slow_start(&slow, sizeof layer, sizeof layer / 4);
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer);
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", slow.port);
    ir.routes[3] = (struct route){"GET", ir.lpath, 307, loc, NULL, 0, 0};
    struct server s;
    server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, s.port, ":v1");
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
    ASSERT_EQ(__atomic_load_n(&slow.started, __ATOMIC_SEQ_CST), 1); /* it was midway */
    ASSERT_EQ(access(out, F_OK), -1);
    ASSERT_OK(leftovers(tkm_test_tmpdir(), "layout"));
    ASSERT_EQ(tkm_oci_session_jobs(ses), 0);
    uv_close((uv_handle_t *)&t, NULL);
    tkm_oci_session_free(ses);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop)); /* every handle closed: nothing leaked on the loop */
}

TEST(session_free_cancels_its_jobs)
{
    static char layer[64 << 10];
    memset(layer, 'y', sizeof layer);
    struct slow_server slow;
    slow_start(&slow, sizeof layer, 1024);
    struct image_routes ir;
    image_routes(&ir, layer, sizeof layer);
    char loc[200];
    snprintf(loc, sizeof loc, "Location: http://127.0.0.1:%d/blob\r\n", slow.port);
    ir.routes[3] = (struct route){"GET", ir.lpath, 307, loc, NULL, 0, 0};
    struct server s;
    server_start(&s, ir.routes, 4);
    struct tkm_oci_ref ref;
    parse_ref(&ref, s.port, ":v1");
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
    while (__atomic_load_n(&slow.started, __ATOMIC_SEQ_CST) == 0 || c.calls == 0)
        uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_OK(c.rc); /* the resolve finished on its own */
    ASSERT_EQ(a.calls + b.calls, 0);
    tkm_oci_session_free(ses);
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
        {"GET", p1, 200, "Content-Type: " TKM_OCI_MT_INDEX "\r\n", idx, 0, 0},
        {"GET", p2, 404, NULL, "{\"errors\":[{\"code\":\"NAME_UNKNOWN\",\"message\":\"x\"}]}", 0,
         0},
    };
    struct server s;
    server_start(&s, routes, 2);
    struct tkm_oci_registry *r = client(s.port, NULL);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err e = {0};
    ASSERT_OK(tkm_oci_registry_get_referrers(
        r, "a/b", d1, "application/vnd.dev.sigstore.bundle.v0.3+json", &body, &e));
    ASSERT_STREQ(body.data, idx);
    /* a 404 with an OCI error body: the repository is missing */
    ASSERT_EQ(tkm_oci_registry_get_referrers(r, "a/b", d2, NULL, &body, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "NAME_UNKNOWN");
    /* a bare 404 (the server's unknown route): no referrers API */
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_registry_get_referrers(r, "a/b", d1, NULL, &body, &e), -ENOTSUP);
    ASSERT_STRCONTAINS(e.msg, "no referrers API");
    ASSERT_EQ(tkm_oci_registry_get_referrers(r, "a/b", "sha256:nope", NULL, &body, &e), -EINVAL);
    ASSERT_EQ(tkm_oci_registry_get_referrers(r, "a/b", d1, "a&b=c", &body, &e), -EINVAL);
    tkm_buf_release(&body);
    tkm_oci_registry_free(r);
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
    struct server s;
    server_start(&s, ir.routes, 3);
    struct server s2;
    server_start(&s2, plain.routes, 3);
    struct tkm_err e = {0};
    uv_loop_t loop;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL, *ses2 = NULL;
    struct tkm_oci_registry_opts o = {.anonymous = 1};
    struct tkm_oci_ref ref, ref2;
    parse_ref(&ref, s.port, ":v1");
    parse_ref(&ref2, s2.port, ":v1");
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
    tkm_oci_session_free(ses);
    tkm_oci_session_free(ses2);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop));
}
