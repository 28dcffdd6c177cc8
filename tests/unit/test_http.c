/* test_http.c - lib/http against the route-table fake server (tsrv.h) on 127.0.0.1. */
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/http.h>
#include <tkm/util.h>

#include "test.h"
#include "tsrv.h"

/* ---- a synchronous request (the test's own loop and client) ------------- */

struct do_ctx {
    struct tkm_http_resp *resp;
    int done;
};

static void do_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    (void)req;
    struct do_ctx *ctx = data;
    struct tkm_http_resp *dst = ctx->resp;
    tkm_buf_release(&dst->body);
    tkm_buf_release(&dst->headers);
    *dst = *resp; /* takes the buffers */
    tkm_buf_init(&resp->body, resp->body.max);
    tkm_buf_init(&resp->headers, resp->headers.max);
    dst->url = NULL; /* points into the request, which is about to be freed */
    ctx->done = 1;
}

struct do_stream {
    tkm_http_data_cb cb;
    void *data;
    struct do_ctx *ctx;
};

static int do_data(struct tkm_http_req *req, const char *p, size_t n, void *data)
{
    struct do_stream *s = data;
    return s->cb(req, p, n, s->data);
}

static void do_stream_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    struct do_stream *s = data;
    do_done(req, resp, s->ctx);
}

/* Runs a private loop with a private client until the one request completes.
 * o->done_cb and o->data are ignored (o->data_cb, if set, is called as usual
 * with o->data). resp: tkm_http_resp_init() before, tkm_http_resp_release()
 * after. Returns 0 when a response arrived (check resp->status) or
 * resp->code on transport errors, with err naming the URL. */
static int http_do(const struct tkm_http_req_opts *o, struct tkm_http_resp *resp,
                   struct tkm_err *err)
{
    uv_loop_t loop;
    struct tkm_http *h = NULL;
    struct do_ctx ctx = {.resp = resp, .done = 0};
    struct do_stream ds = {.cb = o->data_cb, .data = o->data, .ctx = &ctx};
    int rc = uv_loop_init(&loop);
    if (rc)
        return tkm_err_set(err, rc, "%s: cannot create an event loop: %s", o->url, uv_strerror(rc));
    if ((rc = tkm_http_new(&loop, NULL, &h, err)))
        goto out;
    struct tkm_http_req_opts ro = *o;
    if (o->data_cb) {
        ro.data_cb = do_data;
        ro.done_cb = do_stream_done;
        ro.data = &ds;
    } else {
        ro.done_cb = do_done;
        ro.data = &ctx;
    }
    if ((rc = tkm_http_start(h, &ro, NULL, err)))
        goto out;
    while (!ctx.done)
        uv_run(&loop, UV_RUN_ONCE);
    resp->url = o->url;
    rc = resp->code;
    if (rc)
        tkm_err_set(err, rc, "%s", resp->error);
out:
    if (h)
        tkm_http_close(h, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

struct got {
    int done;
    int code;
    long status;
    char body[65536];
    size_t body_len;
    char streamed[65536];
    size_t streamed_len;
    int data_calls;
    char error[512];
    char ctype[128];
};

static void on_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    (void)req;
    struct got *g = data;
    g->done++;
    g->code = resp->code;
    g->status = resp->status;
    g->body_len = resp->body.len < sizeof g->body ? resp->body.len : sizeof g->body - 1;
    memcpy(g->body, resp->body.data, g->body_len);
    snprintf(g->error, sizeof g->error, "%s", resp->error);
    tkm_http_resp_header(resp, "content-type", g->ctype, sizeof g->ctype);
}

static int on_data(struct tkm_http_req *req, const char *p, size_t n, void *data)
{
    (void)req;
    struct got *g = data;
    g->data_calls++;
    if (g->streamed_len + n < sizeof g->streamed) {
        memcpy(g->streamed + g->streamed_len, p, n);
        g->streamed_len += n;
    }
    return 0;
}

static void url_of(char *out, size_t n, int port, const char *path)
{
    snprintf(out, n, "http://127.0.0.1:%d%s", port, path);
}

static void run_until(uv_loop_t *loop, struct got *g)
{
    while (!g->done)
        uv_run(loop, UV_RUN_ONCE);
}

static void close_and_drain(uv_loop_t *loop, struct tkm_http *h)
{
    tkm_http_close(h, NULL, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(loop), 0);
}

TEST(sync_get_headers_and_body)
{
    struct tsrv s;
    struct tsrv_reply r = {200, "Content-Type: application/json\r\n", "{\"a\":1}", 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    ASSERT(port > 0);
    char url[128];
    url_of(url, sizeof url, port, "/x?y=1");
    const char *hdrs[] = {"X-Test: yes", NULL};
    struct tkm_http_req_opts o = {.url = url, .headers = hdrs};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    ASSERT_OK(http_do(&o, &resp, &err));
    ASSERT_EQ(resp.status, 200);
    ASSERT_STREQ(resp.body.data, "{\"a\":1}");
    char ct[64];
    ASSERT_EQ(tkm_http_resp_header(&resp, "Content-Type", ct, sizeof ct), 16);
    ASSERT_STREQ(ct, "application/json");
    ASSERT_EQ(tkm_http_resp_header(&resp, "Retry-After", ct, sizeof ct), -ENOENT);
    const char *req = tsrv_req(&s, 0);
    ASSERT_STRCONTAINS(req, "GET /x?y=1 HTTP/1.1\r\n");
    ASSERT_STRCONTAINS(req, "X-Test: yes\r\n");
    ASSERT_STRCONTAINS(req, "User-Agent: tkm/");
    tkm_http_resp_release(&resp);
    tsrv_stop(&s);
}

TEST(methods_and_bodies)
{
    struct tsrv s;
    struct tsrv_reply r = {201, NULL, "ok", 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128];
    url_of(url, sizeof url, port, "/obj");
    const char *methods[] = {"POST", "PUT", "PATCH", "DELETE"};
    for (int i = 0; i < 4; i++) {
        const char *hdrs[] = {"Content-Type: application/json", NULL};
        struct tkm_http_req_opts o = {.method = methods[i],
                                      .url = url,
                                      .headers = hdrs,
                                      .body = "{\"k\":\"v\"}",
                                      .body_len = 9};
        struct tkm_http_resp resp;
        tkm_http_resp_init(&resp);
        ASSERT_OK(http_do(&o, &resp, NULL));
        ASSERT_EQ(resp.status, 201);
        tkm_http_resp_release(&resp);
        const char *req = tsrv_req(&s, i);
        char line[64];
        snprintf(line, sizeof line, "%s /obj HTTP/1.1\r\n", methods[i]);
        ASSERT_STRCONTAINS(req, line);
        ASSERT_STRCONTAINS(req, "Content-Length: 9\r\n");
        ASSERT_STRCONTAINS(req, "Content-Type: application/json\r\n");
        ASSERT_STRCONTAINS(req, "\r\n\r\n{\"k\":\"v\"}");
    }
    tsrv_stop(&s);
}

TEST(connection_reused_on_one_client)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "hello", 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128];
    url_of(url, sizeof url, port, "/");
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct tkm_http *h;
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, NULL));
    for (int i = 0; i < 3; i++) {
        struct got g = {0};
        struct tkm_http_req_opts o = {.url = url, .done_cb = on_done, .data = &g};
        ASSERT_OK(tkm_http_start(h, &o, NULL, NULL));
        ASSERT_EQ(g.done, 0); /* never called from inside start */
        run_until(&loop, &g);
        ASSERT_EQ(g.code, 0);
        ASSERT_STREQ(g.body, "hello");
    }
    ASSERT_EQ(tsrv_nreqs(&s), 3);
    ASSERT_EQ(tsrv_conns(&s), 1);
    ASSERT_EQ(tkm_http_inflight(h), 0);
    close_and_drain(&loop, h);
    tsrv_stop(&s);
}

TEST(streaming_any_split)
{
    struct tsrv s;
    char body[3000];
    for (size_t i = 0; i < sizeof body - 1; i++)
        body[i] = (char)('a' + i % 26);
    body[sizeof body - 1] = '\0';
    struct tsrv_reply r[] = {{200, NULL, body, 0, 0, 7},
                             {404, NULL, "{\"kind\":\"Status\"}", 0, 0, 0}};
    int port = tsrv_start(&s, r, 2);
    char url[128];
    url_of(url, sizeof url, port, "/watch");
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct tkm_http *h;
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, NULL));
    struct got g = {0};
    struct tkm_http_req_opts o = {.url = url, .data_cb = on_data, .done_cb = on_done, .data = &g};
    ASSERT_OK(tkm_http_start(h, &o, NULL, NULL));
    run_until(&loop, &g);
    ASSERT_EQ(g.code, 0);
    ASSERT_UEQ(g.streamed_len, strlen(body));
    ASSERT_MEMEQ(g.streamed, body, strlen(body));
    ASSERT(g.data_calls >= 2);
    ASSERT_UEQ(g.body_len, 0); /* streamed, not buffered */
    /* A non-2xx reply is buffered for the caller to decode, not streamed. */
    struct got g2 = {0};
    o.data = &g2;
    ASSERT_OK(tkm_http_start(h, &o, NULL, NULL));
    run_until(&loop, &g2);
    ASSERT_EQ(g2.status, 404);
    ASSERT_EQ(g2.data_calls, 0);
    ASSERT_STREQ(g2.body, "{\"kind\":\"Status\"}");
    close_and_drain(&loop, h);
    tsrv_stop(&s);
}

TEST(total_timeout)
{
    struct tsrv s;
    /* the server accepts and answers nothing until stopped */
    struct tsrv_reply r = {200, NULL, "late", 0, -1, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128], want[96];
    url_of(url, sizeof url, port, "/slow");
    /* 300 ms, 3 s under valgrind: a process starved for longer than the limit (valgrind in
     * CI's background phases, nice 19) would time out before curl saw its connection */
    uint64_t limit = 300u * (uint64_t)tkm_test_timeout_scale();
    struct tkm_http_req_opts o = {.url = url, .timeout_ms = limit};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(http_do(&o, &resp, &err), -ETIMEDOUT);
    ASSERT(tkm_now_ms() - t0 < limit + 2200);
    ASSERT_STRCONTAINS(err.msg, url);
    /* the cause in words: the whole-request limit, not a stall */
    snprintf(want, sizeof want, "timed out: no complete response within %llu ms (0 bytes received)",
             (unsigned long long)limit);
    ASSERT_STRCONTAINS(err.msg, want);
    ASSERT_EQ(resp.status, 0);
    tkm_http_resp_release(&resp);
    tsrv_stop(&s);
}

TEST(idle_timeout)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "late", 0, -1, 0}; /* nothing until stopped */
    int port = tsrv_start(&s, &r, 1);
    char url[128], want[80];
    url_of(url, sizeof url, port, "/idle");
    /* 1 s, 10 s under valgrind (a starved process: see total_timeout) */
    uint64_t sc = tkm_test_timeout_scale();
    struct tkm_http_req_opts o = {.url = url, .idle_timeout_ms = 1000 * sc};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(http_do(&o, &resp, &err), -ETIMEDOUT);
    ASSERT(tkm_now_ms() - t0 < 1000 * sc + 2500);
    /* a stall is named as one */
    snprintf(want, sizeof want, "stalled: no data for %llu s (0 bytes received)",
             (unsigned long long)sc);
    ASSERT_STRCONTAINS(err.msg, want);
    tkm_http_resp_release(&resp);
    tsrv_stop(&s);
}

TEST(body_cap)
{
    struct tsrv s;
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    struct tsrv_reply r = {200, NULL, big, 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128];
    url_of(url, sizeof url, port, "/big");
    struct tkm_http_req_opts o = {.url = url, .max_body = 100};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    ASSERT_EQ(http_do(&o, &resp, &err), -E2BIG);
    ASSERT_STRCONTAINS(err.msg, "larger than the configured limit");
    tkm_http_resp_release(&resp);
    tsrv_stop(&s);
}

TEST(connection_refused)
{
    /* A port that was bound and released: nothing listens there. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    ASSERT_OK(bind(fd, (struct sockaddr *)&a, sizeof a));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&a, &al));
    close(fd);
    char url[128];
    url_of(url, sizeof url, ntohs(a.sin_port), "/");
    struct tkm_http_req_opts o = {.url = url, .timeout_ms = 2000};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    ASSERT_EQ(http_do(&o, &resp, &err), -ECONNREFUSED);
    ASSERT_STRCONTAINS(err.msg, url);
    tkm_http_resp_release(&resp);
}

static void cancel_cb(uv_timer_t *t)
{
    tkm_http_cancel(t->data);
    uv_close((uv_handle_t *)t, NULL);
}

TEST(cancel_in_flight)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "late", 0, 3000, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128];
    url_of(url, sizeof url, port, "/hang");
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct tkm_http *h;
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, NULL));
    struct got g = {0};
    struct tkm_http_req *req = NULL;
    struct tkm_http_req_opts o = {.url = url, .done_cb = on_done, .data = &g};
    ASSERT_OK(tkm_http_start(h, &o, &req, NULL));
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    t.data = req;
    uv_timer_start(&t, cancel_cb, 100, 0);
    uint64_t t0 = tkm_now_ms();
    run_until(&loop, &g);
    ASSERT(tkm_now_ms() - t0 < 2000 * tkm_test_timeout_scale());
    ASSERT_EQ(g.done, 1);
    ASSERT_EQ(g.code, -ECANCELED);
    close_and_drain(&loop, h);
    ASSERT_EQ(g.done, 1);
    tsrv_stop(&s);
}

static void set_int(void *data)
{
    *(int *)data = 1;
}

TEST(close_cancels_inflight)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "late", 0, 3000, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128];
    url_of(url, sizeof url, port, "/hang");
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct tkm_http *h;
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, NULL));
    struct got g = {0};
    struct tkm_http_req_opts o = {.url = url, .done_cb = on_done, .data = &g};
    ASSERT_OK(tkm_http_start(h, &o, NULL, NULL));
    uv_run(&loop, UV_RUN_NOWAIT);
    int closed = 0;
    tkm_http_close(h, set_int, &closed);
    ASSERT_EQ(g.done, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(g.done, 1);
    ASSERT_EQ(g.code, -ECANCELED);
    ASSERT_EQ(closed, 1);
    ASSERT_EQ(uv_loop_close(&loop), 0);
    tsrv_stop(&s);
}

TEST(retry_after_parsing)
{
    struct tsrv s;
    struct tsrv_reply r[] = {{429, "Retry-After: 7\r\n", "", 0, 0, 0},
                             {503, "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n", "", 0, 0, 0},
                             {503, "Retry-After: 99999\r\n", "", 0, 0, 0},
                             {503, NULL, "", 0, 0, 0}};
    int port = tsrv_start(&s, r, 4);
    char url[128];
    url_of(url, sizeof url, port, "/");
    long want[] = {7, 0, 30, -1};
    for (int i = 0; i < 4; i++) {
        struct tkm_http_req_opts o = {.url = url};
        struct tkm_http_resp resp;
        tkm_http_resp_init(&resp);
        ASSERT_OK(http_do(&o, &resp, NULL));
        ASSERT_EQ(tkm_http_retry_after(&resp, 30), want[i]);
        tkm_http_resp_release(&resp);
    }
    tsrv_stop(&s);
}

TEST(redirects_drop_authorization_across_hosts)
{
    struct tsrv a, b;
    struct tsrv_reply rb = {200, NULL, "blob", 0, 0, 0};
    int pb = tsrv_start(&b, &rb, 1);
    char loc[256];
    /* "localhost" is another host name than 127.0.0.1 for curl. */
    snprintf(loc, sizeof loc, "Location: http://localhost:%d/blob\r\n", pb);
    struct tsrv_reply ra = {307, loc, "", 0, 0, 0};
    int pa = tsrv_start(&a, &ra, 1);
    char url[128];
    url_of(url, sizeof url, pa, "/v2/x/blobs/sha256:1");
    const char *hdrs[] = {"Authorization: Bearer secret-token", NULL};
    struct tkm_http_req_opts o = {.url = url, .headers = hdrs};
    struct tkm_http_resp resp;
    tkm_http_resp_init(&resp);
    /* Without follow_redirects the 307 itself comes back. */
    ASSERT_OK(http_do(&o, &resp, NULL));
    ASSERT_EQ(resp.status, 307);
    ASSERT_EQ(tsrv_nreqs(&b), 0);
    tkm_http_resp_release(&resp);
    o.follow_redirects = 1;
    tkm_http_resp_init(&resp);
    ASSERT_OK(http_do(&o, &resp, NULL));
    ASSERT_EQ(resp.status, 200);
    ASSERT_STREQ(resp.body.data, "blob");
    tkm_http_resp_release(&resp);
    ASSERT_STRCONTAINS(tsrv_req(&a, 1), "Authorization: Bearer secret-token");
    const char *breq = tsrv_req(&b, 0);
    ASSERT_STRCONTAINS(breq, "GET /blob HTTP/1.1");
    ASSERT(strstr(breq, "Authorization") == NULL);
    ASSERT(strstr(breq, "secret-token") == NULL);
    tsrv_stop(&a);
    tsrv_stop(&b);
}

TEST(bad_url_rejected_without_callback)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct tkm_http *h;
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, NULL));
    struct got g = {0};
    struct tkm_err err = {0};
    struct tkm_http_req_opts o = {.url = "ftp://127.0.0.1/x", .done_cb = on_done, .data = &g};
    ASSERT_EQ(tkm_http_start(h, &o, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "ftp://127.0.0.1/x");
    close_and_drain(&loop, h);
    ASSERT_EQ(g.done, 0);
}

TEST(https_to_plain_server_fails_tls)
{
    struct tsrv s;
    struct tsrv_reply r = {200, NULL, "plain", 0, 0, 0};
    int port = tsrv_start(&s, &r, 1);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/", port);
    /* The handshake fails at once; the timeout only bounds a slow (valgrind) run. */
    struct tkm_http_req_opts o = {.url = url, .timeout_ms = 20000};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    int rc = http_do(&o, &resp, &err);
    ASSERT(rc == -EPROTO || rc == -ECONNRESET);
    ASSERT_STRCONTAINS(err.msg, url);
    tkm_http_resp_release(&resp);
    tsrv_stop(&s);
}

/* A server that answers with an error status and then ends the exchange early
 * (an HTTP/2 reset after a 401 to a slow upload, a short error body): the
 * status is the answer, not a transport error. A 2xx cut short stays an error. */
TEST(error_status_then_cut_is_the_answer)
{
    struct tsrv s;
    struct tsrv_reply r[2] = {
        {401, NULL, "{\"kind\":\"Status\",\"code\":401", 0, 0, 0, .short_by = 50},
        {200, NULL, "partial", 0, 0, 0, .short_by = 50}};
    int port = tsrv_start(&s, r, 2);
    char url[128];
    url_of(url, sizeof url, port, "/apis/x");
    struct tkm_http_req_opts o = {.url = url, .timeout_ms = 20000};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    ASSERT_OK(http_do(&o, &resp, &err));
    ASSERT_EQ(resp.status, 401);
    ASSERT_STRCONTAINS(resp.body.data, "\"code\":401");
    tkm_http_resp_release(&resp);
    tkm_http_resp_init(&resp);
    int rc = http_do(&o, &resp, &err);
    ASSERT(rc < 0);
    ASSERT_EQ(resp.status, 200);
    ASSERT_STRCONTAINS(err.msg, url);
    tkm_http_resp_release(&resp);
    tsrv_stop(&s);
}

/* TLS through tsrv: the right CA verifies, another CA is refused, and the
 * server's certificate can be switched while it runs. */
TEST(tls_verifies_against_the_given_ca)
{
    const char *dir = tkm_test_tmpdir();
    char ca1[512], ca2[512], crt1[512], key1[512], crt2[512], key2[512];
    ASSERT_OK(tsrv_make_pki(dir, "one"));
    ASSERT_OK(tsrv_make_pki(dir, "two"));
    snprintf(ca1, sizeof ca1, "%s/one-ca.crt", dir);
    snprintf(ca2, sizeof ca2, "%s/two-ca.crt", dir);
    snprintf(crt1, sizeof crt1, "%s/one.crt", dir);
    snprintf(key1, sizeof key1, "%s/one.key", dir);
    snprintf(crt2, sizeof crt2, "%s/two.crt", dir);
    snprintf(key2, sizeof key2, "%s/two.key", dir);
    struct tsrv s;
    static const struct tsrv_reply r = {200, NULL, "secure"};
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, "GET", "/", TSRV_EXACT, NULL, &r, 1));
    ASSERT_OK(tsrv_tls(&s, crt1, key1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    char url[128];
    snprintf(url, sizeof url, "https://127.0.0.1:%d/", port);
    struct tkm_http_tls tls = {.ca_file = ca1};
    struct tkm_http_req_opts o = {.url = url, .tls = &tls, .timeout_ms = 20000};
    struct tkm_http_resp resp;
    struct tkm_err err = {0};
    tkm_http_resp_init(&resp);
    ASSERT_OK(http_do(&o, &resp, &err));
    ASSERT_EQ(resp.status, 200);
    ASSERT_STREQ(resp.body.data, "secure");
    tkm_http_resp_release(&resp);
    tls.ca_file = ca2;
    tkm_http_resp_init(&resp);
    ASSERT_EQ(http_do(&o, &resp, &err), -EPROTO);
    tkm_http_resp_release(&resp);
    /* The server now presents the second chain. */
    ASSERT_OK(tsrv_tls(&s, crt2, key2));
    tkm_http_resp_init(&resp);
    ASSERT_OK(http_do(&o, &resp, &err));
    ASSERT_STREQ(resp.body.data, "secure");
    tkm_http_resp_release(&resp);
    ASSERT_EQ(tsrv_nreqs(&s), 2); /* the refused handshake sent no request */
    tsrv_stop(&s);
}

static int echo_handler(const struct tsrv_request *req, struct tsrv_reply *out, char *scratch,
                        size_t n, void *data)
{
    (void)data;
    snprintf(scratch, n, "%s %s q=%s len=%zu", req->method, req->path, req->query, req->body_len);
    out->status = 200;
    out->body = scratch;
    return 0;
}

/* Routes by method, exact or prefix path and query; sequences repeat their
 * last reply; records are stable copies. */
TEST(tsrv_routes_sequences_and_records)
{
    static const struct tsrv_reply seq[] = {{503, "Retry-After: 0\r\n", "busy"},
                                            {200, NULL, "exact"}};
    static const struct tsrv_reply pre[] = {{200, NULL, "prefix"}};
    static const struct tsrv_reply q[] = {{200, NULL, "query"}};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, "GET", "/a", TSRV_EXACT, NULL, seq, 2));
    ASSERT_OK(tsrv_route(&s, "GET", "/a", TSRV_PREFIX, "watch=1", q, 1));
    ASSERT_OK(tsrv_route(&s, "GET", "/a", TSRV_PREFIX, NULL, pre, 1));
    ASSERT_OK(tsrv_route_fn(&s, "POST", NULL, TSRV_PREFIX, NULL, echo_handler, NULL));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    const char *paths[] = {"/a", "/a", "/a", "/a/b", "/a/b?x=1&watch=1", "/zz"};
    const long want_status[] = {503, 200, 200, 200, 200, 404};
    const char *want_body[] = {"busy", "exact", "exact", "prefix", "query", "no route"};
    for (int i = 0; i < 6; i++) {
        char url[128];
        url_of(url, sizeof url, port, paths[i]);
        struct tkm_http_req_opts o = {.url = url};
        struct tkm_http_resp resp;
        tkm_http_resp_init(&resp);
        ASSERT_OK(http_do(&o, &resp, NULL));
        ASSERT_EQ(resp.status, want_status[i]);
        ASSERT_STREQ(resp.body.data, want_body[i]);
        tkm_http_resp_release(&resp);
    }
    char url[128];
    url_of(url, sizeof url, port, "/p?k=v");
    struct tkm_http_req_opts o = {.method = "POST", .url = url, .body = "12345", .body_len = 5};
    struct tkm_http_resp resp;
    tkm_http_resp_init(&resp);
    ASSERT_OK(http_do(&o, &resp, NULL));
    ASSERT_STREQ(resp.body.data, "POST /p q=k=v len=5");
    tkm_http_resp_release(&resp);
    struct tsrv_request rq;
    ASSERT_OK(tsrv_get(&s, 4, &rq));
    const char *held = rq.query;
    ASSERT_STREQ(rq.path, "/a/b");
    ASSERT_STREQ(rq.target, "/a/b?x=1&watch=1");
    ASSERT_OK(tsrv_get(&s, 6, &rq));
    ASSERT_STREQ(rq.method, "POST");
    ASSERT_STREQ(rq.body, "12345");
    ASSERT_STREQ(held, "x=1&watch=1"); /* still valid after later requests */
    char ua[64];
    ASSERT(tsrv_header(&s, 0, "user-agent", ua, sizeof ua) > 0);
    ASSERT_STRCONTAINS(ua, "tkm/");
    ASSERT_EQ(tsrv_get(&s, 7, &rq), -ENOENT);
    tsrv_stop(&s);
}

/* tsrv serves overlapping requests on several connections at once (a thread
 * each) and records every one exactly once. */
TEST(tsrv_concurrent_connections_recorded_once)
{
    static const struct tsrv_reply slow[] = {{200, NULL, "slow", 200}};
    struct tsrv s;
    tsrv_init(&s);
    ASSERT_OK(tsrv_route(&s, "GET", "/c/", TSRV_PREFIX, NULL, slow, 1));
    int port = tsrv_listen(&s);
    ASSERT(port > 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct tkm_http *h;
    ASSERT_OK(tkm_http_new(&loop, NULL, &h, NULL));
    struct got g[6];
    char url[6][128];
    memset(g, 0, sizeof g);
    for (int i = 0; i < 6; i++) {
        char path[32];
        snprintf(path, sizeof path, "/c/%d", i);
        url_of(url[i], sizeof url[i], port, path);
        struct tkm_http_req_opts o = {.url = url[i], .done_cb = on_done, .data = &g[i]};
        ASSERT_OK(tkm_http_start(h, &o, NULL, NULL));
    }
    for (int i = 0; i < 6; i++)
        run_until(&loop, &g[i]);
    ASSERT_EQ(tsrv_nreqs(&s), 6);
    ASSERT(tsrv_conns(&s) >= 2); /* served side by side, not one after another */
    int seen = 0;
    for (int i = 0; i < 6; i++) {
        struct tsrv_request rq;
        ASSERT_OK(tsrv_get(&s, i, &rq));
        ASSERT_EQ(strncmp(rq.path, "/c/", 3), 0);
        seen |= 1 << (rq.path[3] - '0');
        ASSERT_STREQ(g[i].body, "slow");
    }
    ASSERT_EQ(seen, 0x3f);
    close_and_drain(&loop, h);
    tsrv_stop(&s);
}
