/* test_httpd.c - lib/httpd on 127.0.0.1:0, queried with lib/http on the same loop and with raw
 * sockets (half requests, stalled clients, oversized headers). */
#include <tkm/http.h>
#include <tkm/httpd.h>
#include <tkm/util.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

/* The port srv is bound to, from its "host:port" address (0 for a NULL server). */
static unsigned port_of(const struct tkm_httpd *srv)
{
    const char *colon = strrchr(tkm_httpd_addr(srv), ':');
    uint64_t port = 0;
    if (colon)
        ASSERT_OK(tkm_parse_u64(colon + 1, 65535, &port));
    return (unsigned)port;
}

struct got {
    int done;
    int code;
    long status;
    char body[8192];
    char ctype[128];
    char allow[64];
    char clen[32];
};

static void on_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    (void)req;
    struct got *g = data;
    g->done = 1;
    g->code = resp->code;
    g->status = resp->status;
    snprintf(g->body, sizeof g->body, "%s", resp->body.data);
    tkm_http_resp_header(resp, "content-type", g->ctype, sizeof g->ctype);
    tkm_http_resp_header(resp, "allow", g->allow, sizeof g->allow);
    tkm_http_resp_header(resp, "content-length", g->clen, sizeof g->clen);
}

static void start(struct tkm_http *h, struct got *g, const char *method, unsigned port,
                  const char *path)
{
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    memset(g, 0, sizeof *g);
    struct tkm_http_req_opts o = {
        .method = method, .url = url, .timeout_ms = 10000, .done_cb = on_done, .data = g};
    struct tkm_err err = {0};
    ASSERT_OK(tkm_http_start(h, &o, NULL, &err));
}

static void fetch(uv_loop_t *loop, struct tkm_http *h, struct got *g, const char *method,
                  unsigned port, const char *path)
{
    start(h, g, method, port, path);
    while (!g->done)
        uv_run(loop, UV_RUN_ONCE);
}

static void on_closed(void *data)
{
    (*(int *)data)++;
}

/* Closes srv and the client, runs the loop dry and checks every handle closed. */
static void finish(uv_loop_t *loop, struct tkm_httpd *srv, struct tkm_http *h)
{
    int closed = 0;
    tkm_httpd_close(srv, on_closed, &closed);
    tkm_http_close(h, NULL, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    ASSERT_EQ(closed, srv ? 1 : 0);
    ASSERT_EQ(uv_loop_close(loop), 0);
}

static struct tkm_httpd *serve(uv_loop_t *loop, const char *addr, const struct tkm_httpd_opts *o)
{
    struct tkm_httpd *srv = NULL;
    struct tkm_err err = {0};
    int rc = tkm_httpd_new(loop, addr, o, &srv, &err);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "tkm_httpd_new(%s): %s", addr, tkm_err_str(&err));
    ASSERT_NOT_NULL(srv);
    ASSERT(port_of(srv) > 0);
    return srv;
}

static int h_hello(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                   struct tkm_httpd_resp *resp, void *data)
{
    (void)srv;
    (*(int *)data)++;
    snprintf(resp->content_type, sizeof resp->content_type, "application/x-test");
    return tkm_buf_printf(&resp->body, "hello %s %s\n", req->method, req->path);
}

static int h_fail(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                  struct tkm_httpd_resp *resp, void *data)
{
    (void)srv;
    (void)req;
    (void)data;
    tkm_buf_puts(&resp->body, "secret partial output");
    return -EIO;
}

static int h_query(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                   struct tkm_httpd_resp *resp, void *data)
{
    (void)srv;
    (void)data;
    const char *v = NULL;
    int has = tkm_httpd_req_query(req, "k", &v);
    resp->status = 202;
    return tkm_buf_printf(&resp->body, "%d:%s", has, v ? v : "(null)");
}

static void setup(uv_loop_t *loop, struct tkm_http **h)
{
    struct tkm_err err = {0};
    ASSERT_OK(tkm_http_global_init(&err));
    ASSERT_OK(uv_loop_init(loop));
    ASSERT_OK(tkm_http_new(loop, NULL, h, &err));
}

TEST(get_head_404_405_500)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0;
    setup(&loop, &h);
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", NULL);
    unsigned port = port_of(srv);
    struct tkm_err err = {0};
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, &err));
    ASSERT_OK(tkm_httpd_handle(srv, "/fail", h_fail, NULL, &err));
    ASSERT_OK(tkm_httpd_handle(srv, "/q", h_query, NULL, &err));
    ASSERT_EQ(tkm_httpd_handle(srv, "/hello", h_hello, &calls, &err), -EEXIST);
    ASSERT_STRCONTAINS(err.msg, "/hello is already registered");
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_httpd_handle(srv, "nohash", h_hello, &calls, &err), -EINVAL);

    fetch(&loop, h, &g, "GET", port, "/hello");
    ASSERT_EQ(g.code, 0);
    ASSERT_EQ(g.status, 200);
    ASSERT_STREQ(g.body, "hello GET /hello\n");
    ASSERT_STREQ(g.ctype, "application/x-test");
    ASSERT_EQ(tkm_httpd_connections(srv), 1); /* kept alive for the next request */

    fetch(&loop, h, &g, "HEAD", port, "/hello");
    ASSERT_EQ(g.status, 200);
    ASSERT_STREQ(g.body, "");
    ASSERT_STREQ(g.clen, "18"); /* the GET body's length: "hello HEAD /hello\n" */
    ASSERT_EQ(calls, 2);

    fetch(&loop, h, &g, "GET", port, "/hello/");
    ASSERT_EQ(g.status, 404);
    fetch(&loop, h, &g, "GET", port, "/nope?x=1");
    ASSERT_EQ(g.status, 404);
    ASSERT_STRCONTAINS(g.body, "404 page not found");

    fetch(&loop, h, &g, "POST", port, "/hello");
    ASSERT_EQ(g.status, 405);
    ASSERT_STREQ(g.allow, "GET, HEAD");
    fetch(&loop, h, &g, "DELETE", port, "/hello");
    ASSERT_EQ(g.status, 405);
    ASSERT_EQ(calls, 2); /* never called for other methods */

    fetch(&loop, h, &g, "GET", port, "/fail");
    ASSERT_EQ(g.status, 500);
    ASSERT(!strstr(g.body, "secret"));

    fetch(&loop, h, &g, "GET", port, "/q?k=a%20b");
    ASSERT_EQ(g.status, 202);
    ASSERT_STREQ(g.body, "1:a b");
    fetch(&loop, h, &g, "GET", port, "/q");
    ASSERT_STREQ(g.body, "0:(null)");
    finish(&loop, srv, h);
}

TEST(zero_disables)
{
    uv_loop_t loop;
    struct tkm_http *h;
    setup(&loop, &h);
    struct tkm_httpd *srv = (struct tkm_httpd *)&loop; /* must be overwritten */
    struct tkm_err err = {0};
    ASSERT_OK(tkm_httpd_new(&loop, "0", NULL, &srv, &err));
    ASSERT_NULL(srv);
    ASSERT_EQ(err.code, 0);
    ASSERT_OK(tkm_httpd_handle(srv, "/x", h_fail, NULL, &err));
    ASSERT_OK(tkm_httpd_add_check(srv, "/readyz", "x", NULL, NULL, &err));
    ASSERT_EQ(port_of(srv), 0);
    ASSERT_STREQ(tkm_httpd_addr(srv), "0");
    finish(&loop, srv, h); /* close(NULL): no callback, nothing left on the loop */
}

TEST(parse_addr)
{
    char host[64];
    unsigned port = 1;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_httpd_parse_addr(":8080", host, sizeof host, &port, &err), 1);
    ASSERT_STREQ(host, "");
    ASSERT_EQ(port, 8080);
    ASSERT_EQ(tkm_httpd_parse_addr("127.0.0.1:0", host, sizeof host, &port, &err), 1);
    ASSERT_STREQ(host, "127.0.0.1");
    ASSERT_EQ(port, 0);
    ASSERT_EQ(tkm_httpd_parse_addr("[::1]:9090", host, sizeof host, &port, &err), 1);
    ASSERT_STREQ(host, "::1");
    ASSERT_EQ(port, 9090);
    ASSERT_EQ(tkm_httpd_parse_addr("0", host, sizeof host, &port, &err), 0);
    ASSERT_EQ(err.code, 0);
    const char *bad[] = {"", "8080", "host:99999", "a:b:c", "1.2.3.4:", "[::1]8080", "h:-1", NULL};
    for (int i = 0; bad[i]; i++) {
        tkm_err_clear(&err);
        ASSERT_EQ(tkm_httpd_parse_addr(bad[i], host, sizeof host, &port, &err), -EINVAL);
        ASSERT_STRCONTAINS(err.msg, "bind address");
    }
    /* A host name would need a blocking resolve: refused with a clear message. */
    uv_loop_t loop;
    struct tkm_httpd *srv = NULL;
    ASSERT_OK(uv_loop_init(&loop));
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_httpd_new(&loop, "example.com:0", NULL, &srv, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not an IP address");
    ASSERT_NULL(srv);
    ASSERT_EQ(uv_loop_close(&loop), 0);
}

TEST(busy_port_fails_clearly)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof sa));
    ASSERT_OK(listen(fd, 1));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &len));
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", ntohs(sa.sin_port));
    uv_loop_t loop;
    ASSERT_OK(uv_loop_init(&loop));
    struct tkm_httpd *srv = NULL;
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_httpd_new(&loop, addr, NULL, &srv, &err), -EADDRINUSE);
    ASSERT_NULL(srv);
    ASSERT_STRCONTAINS(err.msg, addr);
    ASSERT_STRCONTAINS(err.msg, "in use");
    ASSERT_EQ(uv_loop_close(&loop), 0);
    close(fd);
}

TEST(all_interfaces)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0;
    setup(&loop, &h);
    struct tkm_httpd *srv = serve(&loop, ":0", NULL);
    const char *a = tkm_httpd_addr(srv);
    ASSERT(strncmp(a, "[::]:", 5) == 0 || strncmp(a, "0.0.0.0:", 8) == 0);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    fetch(&loop, h, &g, "GET", port_of(srv), "/hello"); /* IPv4 into the dual stack */
    ASSERT_EQ(g.status, 200);
    finish(&loop, srv, h);
}

/* ---- health --------------------------------------------------------------- */

struct flag {
    int ok;
    const char *why;
};

static int check_flag(void *data, char *reason, size_t n)
{
    struct flag *f = data;
    if (f->ok)
        return 0;
    snprintf(reason, n, "%s", f->why);
    return 1;
}

TEST(readyz_flips)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    setup(&loop, &h);
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", NULL);
    unsigned port = port_of(srv);
    struct flag synced = {0, "caches not synced\nyet"}, leader = {1, ""};
    struct tkm_err err = {0};
    ASSERT_OK(tkm_httpd_health(srv, "/healthz", &err));
    ASSERT_OK(tkm_httpd_health(srv, "/healthz", &err)); /* twice is fine */
    ASSERT_OK(tkm_httpd_add_check(srv, "/readyz", "leader", check_flag, &leader, &err));
    ASSERT_OK(tkm_httpd_add_check(srv, "/readyz", "informers", check_flag, &synced, &err));
    ASSERT_EQ(tkm_httpd_add_check(srv, "/readyz", "informers", check_flag, &synced, &err), -EEXIST);
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_httpd_add_check(srv, "/readyz", "bad name", check_flag, &synced, &err), -EINVAL);

    fetch(&loop, h, &g, "GET", port, "/healthz");
    ASSERT_EQ(g.status, 200);
    ASSERT_STREQ(g.body, "ok");

    fetch(&loop, h, &g, "GET", port, "/readyz");
    ASSERT_EQ(g.status, 503);
    ASSERT_STREQ(g.body,
                 "[+]leader ok\n[-]informers failed: caches not synced yet\nreadyz check failed\n");
    fetch(&loop, h, &g, "GET", port, "/readyz/informers");
    ASSERT_EQ(g.status, 503);
    ASSERT_STREQ(g.body, "caches not synced yet\n");
    fetch(&loop, h, &g, "GET", port, "/readyz/leader");
    ASSERT_EQ(g.status, 200);
    ASSERT_STREQ(g.body, "ok");

    synced.ok = 1;
    fetch(&loop, h, &g, "GET", port, "/readyz");
    ASSERT_EQ(g.status, 200);
    ASSERT_STREQ(g.body, "ok");
    fetch(&loop, h, &g, "GET", port, "/readyz?verbose");
    ASSERT_EQ(g.status, 200);
    ASSERT_STREQ(g.body, "[+]leader ok\n[+]informers ok\nreadyz check passed\n");
    fetch(&loop, h, &g, "HEAD", port, "/readyz");
    ASSERT_EQ(g.status, 200);

    leader.ok = 0;
    leader.why = "";
    fetch(&loop, h, &g, "GET", port, "/readyz");
    ASSERT_EQ(g.status, 503);
    ASSERT_STRCONTAINS(g.body, "[-]leader failed: not ready\n");
    finish(&loop, srv, h);
}

/* ---- raw sockets ------------------------------------------------------------ */

static int raw_connect(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ASSERT(fd >= 0);
    ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof sa)); /* the kernel's backlog answers */
    ASSERT_OK(fcntl(fd, F_SETFL, O_NONBLOCK));
    return fd;
}

static void raw_send(int fd, const char *s)
{
    ASSERT_EQ(send(fd, s, strlen(s), MSG_NOSIGNAL), (long long)strlen(s));
}

struct raw {
    uv_poll_t poll;
    int fd;
    int eof;
    char buf[4096];
    size_t len;
};

static void raw_on_readable(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct raw *r = p->data;
    for (;;) {
        char tmp[1024];
        ssize_t n = recv(r->fd, tmp, sizeof tmp, 0);
        if (n > 0) {
            size_t c =
                (size_t)n < sizeof r->buf - 1 - r->len ? (size_t)n : sizeof r->buf - 1 - r->len;
            memcpy(r->buf + r->len, tmp, c);
            r->len += c;
            r->buf[r->len] = '\0';
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            r->eof = 1;
            uv_poll_stop(p);
        }
        return;
    }
}

static void raw_watch(uv_loop_t *loop, struct raw *r, int fd)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
    r->poll.data = r;
    ASSERT_OK(uv_poll_init(loop, &r->poll, fd));
    ASSERT_OK(uv_poll_start(&r->poll, UV_READABLE, raw_on_readable));
}

static void raw_unwatch(struct raw *r)
{
    uv_close((uv_handle_t *)&r->poll, NULL);
}

TEST(stalled_client_does_not_block_others)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0;
    setup(&loop, &h);
    /* 2 s, 20 s under valgrind: a starved process (valgrind in CI's background phases) must
     * still serve the second client before the first one's timeout */
    unsigned sc = tkm_test_timeout_scale();
    struct tkm_httpd_opts o = {.timeout_s = 2 * sc};
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", &o);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    int fd = raw_connect(port);
    raw_send(fd, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Half: "); /* and nothing more */
    struct raw r;
    raw_watch(&loop, &r, fd);
    uint64_t t0 = tkm_now_ms();
    fetch(&loop, h, &g, "GET", port, "/hello");
    ASSERT_EQ(g.status, 200);
    ASSERT(tkm_now_ms() - t0 < 1500u * sc); /* served before the stalled one's timeout */
    ASSERT_EQ(r.eof, 0);
    while (!r.eof && tkm_now_ms() - t0 < 8000u * sc)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(r.eof, 1); /* the server closed the stalled connection */
    ASSERT(tkm_now_ms() - t0 >= 1500u * sc);
    ASSERT_EQ(r.len, 0); /* without an answer: the request never completed */
    ASSERT_EQ(calls, 1);
    raw_unwatch(&r);
    close(fd);
    finish(&loop, srv, h);
}

TEST(oversized_request_refused)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0;
    setup(&loop, &h);
    struct tkm_httpd_opts o = {.conn_memory = 8192};
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", &o);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    int fd = raw_connect(port);
    struct raw r;
    raw_watch(&loop, &r, fd);
    raw_send(fd, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: ");
    char chunk[1025];
    memset(chunk, 'a', sizeof chunk - 1);
    chunk[sizeof chunk - 1] = '\0';
    uint64_t t0 = tkm_now_ms();
    for (int i = 0; i < 64 && !r.eof; i++) { /* 64 KiB of one header, far over 8 KiB */
        if (send(fd, chunk, strlen(chunk), MSG_NOSIGNAL) < 0)
            break;
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    while (!r.eof && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale())
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(r.eof, 1);
    ASSERT(strncmp(r.buf, "HTTP/1.1 4", 10) == 0); /* 413 or 431, then closed */
    ASSERT_EQ(calls, 0);
    raw_unwatch(&r);
    close(fd);
    fetch(&loop, h, &g, "GET", port, "/hello"); /* still serving */
    ASSERT_EQ(g.status, 200);
    finish(&loop, srv, h);
}

TEST(connection_limit)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0;
    setup(&loop, &h);
    struct tkm_httpd_opts o = {.max_connections = 2, .timeout_s = 30};
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", &o);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    int fds[2];
    for (int i = 0; i < 2; i++) {
        fds[i] = raw_connect(port);
        raw_send(fds[i], "GET /hel");
    }
    uint64_t t0 = tkm_now_ms();
    while (tkm_httpd_connections(srv) < 2 && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale())
        uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(tkm_httpd_connections(srv), 2);
    /* A third waits in the kernel's backlog until a slot frees. */
    start(h, &g, "GET", port, "/hello");
    t0 = tkm_now_ms();
    while (tkm_now_ms() - t0 < 300)
        uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(g.done, 0);
    ASSERT_EQ(calls, 0);
    close(fds[0]);
    while (!g.done)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(g.status, 200);
    ASSERT_EQ(calls, 1);
    close(fds[1]);
    fetch(&loop, h, &g, "GET", port, "/hello"); /* room again */
    ASSERT_EQ(g.status, 200);
    finish(&loop, srv, h);
}

TEST(many_concurrent_connections)
{
    enum { N = 60 };
    uv_loop_t loop;
    struct tkm_http *h;
    static struct got gs[N];
    int calls = 0;
    setup(&loop, &h);
    struct tkm_httpd_opts o = {.max_connections = 128, .max_connections_per_ip = 128};
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", &o);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    /* Plain HTTP/1.1, all at once: curl opens a connection per request. */
    for (int i = 0; i < N; i++)
        start(h, &gs[i], "GET", port, "/hello");
    unsigned peak = 0;
    for (int left = N; left;) {
        uv_run(&loop, UV_RUN_ONCE);
        unsigned c = tkm_httpd_connections(srv);
        peak = c > peak ? c : peak;
        left = 0;
        for (int i = 0; i < N; i++)
            left += !gs[i].done;
    }
    for (int i = 0; i < N; i++) {
        ASSERT_EQ(gs[i].status, 200);
        ASSERT_STREQ(gs[i].body, "hello GET /hello\n");
    }
    ASSERT_EQ(calls, N);
    ASSERT(peak > 1); /* really concurrent */
    finish(&loop, srv, h);
}

TEST(default_per_ip_limit)
{
    enum { N = 40 };
    uv_loop_t loop;
    struct tkm_http *h;
    static struct got gs[N];
    int calls = 0, ok = 0, refused = 0;
    setup(&loop, &h);
    struct tkm_httpd_opts o = {.timeout_s = 30};
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", &o);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    int fds[N];
    for (int i = 0; i < N; i++) { /* 40 idle clients from one address: 32 are kept */
        fds[i] = raw_connect(port);
        raw_send(fds[i], "G");
    }
    uint64_t t0 = tkm_now_ms();
    while (tkm_httpd_connections(srv) < 32 && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale())
        uv_run(&loop, UV_RUN_NOWAIT);
    t0 = tkm_now_ms();
    while (tkm_now_ms() - t0 < 300) /* the other 8 are turned away, not queued */
        uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(tkm_httpd_connections(srv), 32);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    for (int i = 0; i < 4; i++) {
        fetch(&loop, h, &gs[i], "GET", port, "/hello");
        ok += gs[i].status == 200;
        refused += gs[i].status == 0;
    }
    ASSERT_EQ(ok + refused, 4);
    ASSERT(ok >= 1); /* the closed ones free their slots */
    finish(&loop, srv, h);
}

/* ---- shutdown --------------------------------------------------------------- */

TEST(shutdown_with_open_connections)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0, closed = 0;
    setup(&loop, &h);
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", NULL);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    ASSERT_OK(tkm_httpd_add_check(srv, "/readyz", "x", check_flag, &(struct flag){1, ""}, NULL));
    fetch(&loop, h, &g, "GET", port, "/hello"); /* leaves a keep-alive connection in curl */
    ASSERT_EQ(g.status, 200);
    struct raw r[3];
    int fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = raw_connect(port);
        raw_send(fds[i], "GET /hello HTTP/1.1\r\n");
        raw_watch(&loop, &r[i], fds[i]);
    }
    uint64_t t0 = tkm_now_ms();
    while (tkm_httpd_connections(srv) < 4 && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale())
        uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(tkm_httpd_connections(srv), 4);
    tkm_httpd_close(srv, on_closed, &closed);
    t0 = tkm_now_ms();
    int eofs = 0;
    while ((!closed || eofs < 3) && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale()) {
        uv_run(&loop, UV_RUN_ONCE);
        eofs = r[0].eof + r[1].eof + r[2].eof;
    }
    ASSERT_EQ(closed, 1);
    ASSERT_EQ(eofs, 3);
    for (int i = 0; i < 3; i++) {
        raw_unwatch(&r[i]);
        close(fds[i]);
    }
    tkm_http_close(h, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&loop), 0); /* every handle closed; ASan/valgrind check the rest */
}

static int h_close(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                   struct tkm_httpd_resp *resp, void *data)
{
    (void)req;
    tkm_httpd_close(srv, on_closed, data);
    return tkm_buf_puts(&resp->body, "bye");
}

TEST(close_from_handler)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int closed = 0;
    setup(&loop, &h);
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", NULL);
    ASSERT_OK(tkm_httpd_handle(srv, "/quit", h_close, &closed, NULL));
    fetch(&loop, h, &g, "GET", port_of(srv), "/quit");
    ASSERT(g.status == 200 || g.code != 0); /* the answer may be cut by the close */
    while (!closed)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(closed, 1);
    tkm_http_close(h, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&loop), 0);
}

TEST(get_with_body_refused)
{
    uv_loop_t loop;
    struct tkm_http *h;
    struct got g;
    int calls = 0;
    setup(&loop, &h);
    struct tkm_httpd *srv = serve(&loop, "127.0.0.1:0", NULL);
    unsigned port = port_of(srv);
    ASSERT_OK(tkm_httpd_handle(srv, "/hello", h_hello, &calls, NULL));
    int fd = raw_connect(port);
    struct raw r;
    raw_watch(&loop, &r, fd);
    raw_send(fd, "GET /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde");
    uint64_t t0 = tkm_now_ms();
    while (!r.eof && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale())
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(r.eof, 1);
    ASSERT(strncmp(r.buf, "HTTP/1.1 413", 12) == 0);
    ASSERT_EQ(calls, 0);
    raw_unwatch(&r);
    close(fd);
    /* Two requests on one connection (keep-alive): both answered. */
    struct raw r2;
    fd = raw_connect(port);
    raw_watch(&loop, &r2, fd);
    raw_send(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                 "HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    t0 = tkm_now_ms();
    while (!r2.eof && tkm_now_ms() - t0 < 5000u * tkm_test_timeout_scale())
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(r2.eof, 1);
    ASSERT_STRCONTAINS(r2.buf, "hello GET /hello\n");
    ASSERT_STRCONTAINS(strstr(r2.buf, "hello GET /hello\n"), "HTTP/1.1 200");
    ASSERT_EQ(calls, 2);
    raw_unwatch(&r2);
    close(fd);
    fetch(&loop, h, &g, "GET", port, "/hello");
    ASSERT_EQ(g.status, 200);
    finish(&loop, srv, h);
}
