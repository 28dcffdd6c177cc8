/*
 * httpd.c - libmicrohttpd on a libuv loop. See httpd.h for the contract.
 *
 * How it fits together:
 *   - We create, bind and listen on the socket ourselves (so a busy port is
 *     reported with the address, and the bound port is known), then hand it
 *     to MHD with MHD_OPTION_LISTEN_SOCKET; MHD closes it when it stops.
 *   - MHD runs in external epoll mode (MHD_USE_EPOLL, no internal thread):
 *     its epoll fd is readable whenever a listen or client socket has work.
 *     One uv_poll_t watches that fd and one uv_timer_t follows
 *     MHD_get_timeout(); both call MHD_run() and then re-arm the timer (MHD
 *     asks for 0 ms while it still has buffered work).
 *   - Every request is answered from the first access-handler call (GET and
 *     HEAD carry no body; other methods get 405 without reading theirs).
 *   - Closing never stops MHD inside MHD_run(): a close requested from a
 *     handler is carried out when MHD_run() returns. The uv handles are
 *     closed first (uv_close removes the epoll fd from the loop at once),
 *     then MHD_stop_daemon() closes the connections, the listen socket and
 *     its epoll fd; the memory goes from the last uv close callback.
 */
#include <tkm/httpd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <microhttpd.h>

#include <tkm/bug.h>
#include <tkm/log.h>
#include <tkm/util.h>

#define HTTPD_DEF_CONNS     64u
#define HTTPD_DEF_PER_IP    32u
#define HTTPD_DEF_TIMEOUT_S 10u
#define HTTPD_DEF_CONN_MEM  (32u * 1024)
#define HTTPD_DEF_MAX_BODY  (16u * 1024 * 1024)
#define HTTPD_BACKLOG       128
#define HTTPD_TEXT          "text/plain; charset=utf-8"

struct httpd_check {
    char *name;
    tkm_health_check_fn fn;
    void *data;
    struct httpd_check *next;
};

struct httpd_health {
    char *endpoint;
    struct httpd_check *checks, **tail;
};

struct httpd_route {
    char *path;
    tkm_httpd_handler fn;
    void *data;
    struct httpd_health *health; /* owned when this is a health endpoint */
    struct httpd_route *next;
};

struct tkm_httpd {
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;
    uv_poll_t poll;
    uv_timer_t timer;
    unsigned max_conns;
    char addr[80];
    size_t max_body;
    struct httpd_route *routes;
    int in_run;
    int closing;
    int torn_down;
    unsigned open_handles;
    void (*closed_cb)(void *data);
    void *closed_data;
};

/* ---- addresses ------------------------------------------------------------ */

int tkm_httpd_parse_addr(const char *addr, char *host, size_t hostlen, unsigned *port,
                         struct tkm_err *err)
{
    uint64_t p = 0;
    const char *colon, *hs, *he;
    if (!addr || !*addr)
        return tkm_err_set(err, -EINVAL, "bind address \"\": want host:port, :port or 0");
    if (strcmp(addr, "0") == 0)
        return 0;
    if (addr[0] == '[') {
        he = strchr(addr, ']');
        if (!he || he[1] != ':')
            return tkm_err_set(err, -EINVAL, "bind address \"%s\": want [IPv6]:port", addr);
        hs = addr + 1;
        colon = he + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
            return tkm_err_set(
                err, -EINVAL, "bind address \"%s\": want host:port, :port, [IPv6]:port or 0", addr);
        hs = addr;
        he = colon;
    }
    if (tkm_parse_u64(colon + 1, 65535, &p) != 0)
        return tkm_err_set(err, -EINVAL, "bind address \"%s\": port \"%s\" is not 0-65535", addr,
                           colon + 1);
    if ((size_t)(he - hs) >= hostlen)
        return tkm_err_set(err, -EINVAL, "bind address \"%s\": host too long", addr);
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    *port = (unsigned)p;
    return 1;
}

/* Fills ss for host (a literal, "localhost" or "" = all interfaces). */
static int addr_resolve(const char *addr, const char *host, unsigned port, int v6_any,
                        struct sockaddr_storage *ss, socklen_t *len, struct tkm_err *err)
{
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    memset(ss, 0, sizeof *ss);
    if (!*host && v6_any) {
        in6->sin6_family = AF_INET6;
        in6->sin6_addr = in6addr_any;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof *in6;
        return 0;
    }
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)port);
    *len = sizeof *in4;
    if (!*host)
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &in4->sin_addr) != 1) {
        memset(ss, 0, sizeof *ss);
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
            return tkm_err_set(err, -EINVAL,
                               "bind address \"%s\": \"%s\" is not an IP address (host names are "
                               "not resolved; use an IP, localhost or :port)",
                               addr, host);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof *in6;
    }
    return 0;
}

/* socket + bind + listen; *fd_out non-blocking, close-on-exec. */
static int listen_on(const char *addr, const char *host, unsigned port, int *fd_out,
                     struct sockaddr_storage *ss, struct tkm_err *err)
{
    socklen_t len = 0;
    int fd = -1, one = 1, zero = 0, rc;
    for (int v6_any = 1; v6_any >= 0; v6_any--) {
        if ((rc = addr_resolve(addr, host, port, v6_any, ss, &len, err)))
            return rc;
        fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0)
            break;
        if (*host || (errno != EAFNOSUPPORT && errno != EPROTONOSUPPORT))
            return tkm_err_set(err, -errno, "bind address \"%s\": socket: %s", addr,
                               strerror(errno));
        /* ":port" without IPv6 in this kernel: fall back to 0.0.0.0 */
    }
    if (fd < 0)
        return tkm_err_set(err, -EAFNOSUPPORT, "bind address \"%s\": no usable address family",
                           addr);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss->ss_family == AF_INET6 && !*host)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, (struct sockaddr *)ss, len) != 0) {
        rc = -errno;
        close(fd);
        return tkm_err_set(err, rc, "bind address \"%s\": bind: %s", addr, strerror(-rc));
    }
    if (listen(fd, HTTPD_BACKLOG) != 0) {
        rc = -errno;
        close(fd);
        return tkm_err_set(err, rc, "bind address \"%s\": listen: %s", addr, strerror(-rc));
    }
    len = sizeof *ss;
    if (getsockname(fd, (struct sockaddr *)ss, &len) != 0) {
        rc = -errno;
        close(fd);
        return tkm_err_set(err, rc, "bind address \"%s\": getsockname: %s", addr, strerror(-rc));
    }
    *fd_out = fd;
    return 0;
}

static void format_bound(struct tkm_httpd *s, const struct sockaddr_storage *ss)
{
    char ip[INET6_ADDRSTRLEN] = "";
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        snprintf(s->addr, sizeof s->addr, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &in4->sin_addr, ip, sizeof ip);
        snprintf(s->addr, sizeof s->addr, "%s:%u", ip, ntohs(in4->sin_port));
    }
}

/* ---- responses ------------------------------------------------------------ */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, const char *ctype,
                             char *body, size_t len, const char *allow)
{
    /* body is taken: MHD frees it with free() once sent */
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, free);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (ok == MHD_YES)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (ok == MHD_YES && allow)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result queue_text(struct MHD_Connection *c, unsigned status, const char *text,
                                  const char *allow)
{
    char *b = strdup(text);
    if (!b)
        return MHD_NO;
    return queue(c, status, HTTPD_TEXT, b, strlen(b), allow);
}

static struct httpd_route *route_find(const struct tkm_httpd *s, const char *path)
{
    for (struct httpd_route *r = s->routes; r; r = r->next)
        if (strcmp(r->path, path) == 0)
            return r;
    return NULL;
}

/* A request that announces a body (GET and HEAD have none). */
static int has_body(struct MHD_Connection *c)
{
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (cl && strcmp(cl, "0") != 0) ||
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **con_cls)
{
    (void)version;
    (void)upload;
    struct tkm_httpd *s = cls;
    if (s->closing)
        return MHD_NO; /* closes the connection */
    struct httpd_route *rt = route_find(s, url);
    /* Errors are answered at the first call, before any body is read (MHD
     * then closes the connection). A good request is answered at the
     * second call, once MHD has read all of it, so the connection stays
     * open for the next request (keep-alive). */
    if (!rt)
        return queue_text(c, MHD_HTTP_NOT_FOUND, "404 page not found\n", NULL);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return queue_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "405 method not allowed\n", "GET, HEAD");
    if (has_body(c))
        return queue_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "413 a GET or HEAD has no body\n", NULL);
    if (!*con_cls) {
        *con_cls = s;
        return MHD_YES;
    }
    *upload_len = 0;
    struct tkm_httpd_req req = {.method = method, .path = rt->path, .conn = c};
    struct tkm_httpd_resp resp = {.status = 200};
    snprintf(resp.content_type, sizeof resp.content_type, "%s", HTTPD_TEXT);
    tkm_buf_init(&resp.body, s->max_body);
    int rc = rt->fn(s, &req, &resp, rt->data);
    if (rc < 0 || resp.status < 100 || resp.status > 599) {
        tkm_buf_release(&resp.body);
        tkm_warn("http server %s: %s %s: handler failed: %s", s->addr, method, url,
                 rc < 0 ? strerror(-rc) : "invalid status");
        return queue_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "500 internal server error\n", NULL);
    }
    size_t len = 0;
    char *body = tkm_buf_detach(&resp.body, &len);
    if (!body)
        return MHD_NO;
    return queue(c, (unsigned)resp.status, resp.content_type, body, len, NULL);
}

/* ---- driving MHD from the loop ------------------------------------------- */

static void srv_run(struct tkm_httpd *s);

static void on_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    srv_run(p->data);
}

static void on_timer(uv_timer_t *t)
{
    srv_run(t->data);
}

static void srv_free_if_done(struct tkm_httpd *s)
{
    if (!s->torn_down || s->open_handles)
        return;
    void (*cb)(void *) = s->closed_cb;
    void *cbd = s->closed_data;
    struct httpd_route *r = s->routes;
    while (r) {
        struct httpd_route *next = r->next;
        if (r->health) {
            struct httpd_check *ck = r->health->checks;
            while (ck) {
                struct httpd_check *cn = ck->next;
                free(ck->name);
                free(ck);
                ck = cn;
            }
            free(r->health->endpoint);
            free(r->health);
        }
        free(r->path);
        free(r);
        r = next;
    }
    free(s);
    if (cb)
        cb(cbd);
}

static void handle_closed(uv_handle_t *h)
{
    struct tkm_httpd *s = h->data;
    s->open_handles--;
    srv_free_if_done(s);
}

static void teardown(struct tkm_httpd *s)
{
    s->torn_down = 1;
    uv_close((uv_handle_t *)&s->poll, handle_closed);
    uv_close((uv_handle_t *)&s->timer, handle_closed);
    /* The poll handle no longer watches the epoll fd: MHD may close it. */
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}

static void srv_run(struct tkm_httpd *s)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    unsigned before = 0;
    if (s->torn_down)
        return;
    if (!s->closing) {
        before = tkm_httpd_connections(s);
        s->in_run = 1;
        MHD_run(s->mhd);
        s->in_run = 0;
    }
    if (s->closing) {
        teardown(s);
        return;
    }
    /* At the connection limit MHD takes the listen socket out of its epoll
     * set and puts it back only at the start of a run: when a run freed a
     * slot, run once more so that connections waiting in the backlog are
     * accepted (nothing else would wake us). */
    if (before >= s->max_conns && tkm_httpd_connections(s) < s->max_conns)
        ms = 0;
    else if (MHD_get_timeout(s->mhd, &ms) != MHD_YES)
        ms = UINT64_MAX;
    if (ms != UINT64_MAX)
        uv_timer_start(&s->timer, on_timer, (uint64_t)ms, 0);
    else
        uv_timer_stop(&s->timer);
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct tkm_httpd *s = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    tkm_dbg("http server %s: %s", s->addr, line);
}

static int mhd_start(struct tkm_httpd *s, int fd, int v6, const struct tkm_httpd_opts *o,
                     struct tkm_err *err)
{
    unsigned conns = o && o->max_connections ? o->max_connections : HTTPD_DEF_CONNS;
    unsigned per_ip = o && o->max_connections_per_ip ? o->max_connections_per_ip : HTTPD_DEF_PER_IP;
    unsigned tmo = o && o->timeout_s ? o->timeout_s : HTTPD_DEF_TIMEOUT_S;
    size_t mem = o && o->conn_memory ? o->conn_memory : HTTPD_DEF_CONN_MEM;
    s->max_conns = conns;
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, tmo, MHD_OPTION_CONNECTION_MEMORY_LIMIT, mem,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!s->mhd) {
        close(fd);
        return tkm_err_set(err, -EIO, "http server %s: libmicrohttpd failed to start", s->addr);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di || di->epoll_fd < 0 || uv_poll_init(s->loop, &s->poll, di->epoll_fd) != 0) {
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
        return tkm_err_set(err, -EIO, "http server %s: cannot watch libmicrohttpd's epoll fd",
                           s->addr);
    }
    return 0;
}

/* ---- public ------------------------------------------------------------- */

int tkm_httpd_new(uv_loop_t *loop, const char *addr, const struct tkm_httpd_opts *opts,
                  struct tkm_httpd **out, struct tkm_err *err)
{
    char host[64];
    unsigned port = 0;
    int fd = -1;
    struct sockaddr_storage ss;
    *out = NULL;
    int rc = tkm_httpd_parse_addr(addr, host, sizeof host, &port, err);
    if (rc <= 0)
        return rc; /* 0: "0", disabled */
    struct tkm_httpd *s = calloc(1, sizeof *s);
    if (!s)
        return tkm_err_set(err, -ENOMEM, "http server %s: out of memory", addr);
    s->loop = loop;
    s->max_body = opts && opts->max_body ? opts->max_body : HTTPD_DEF_MAX_BODY;
    if ((rc = listen_on(addr, host, port, &fd, &ss, err)))
        goto fail;
    format_bound(s, &ss);
    if ((rc = mhd_start(s, fd, ss.ss_family == AF_INET6, opts, err))) /* takes fd */
        goto fail;
    uv_timer_init(loop, &s->timer);
    s->poll.data = s;
    s->timer.data = s;
    s->open_handles = 2;
    uv_poll_start(&s->poll, UV_READABLE, on_poll);
    uv_timer_start(&s->timer, on_timer, 0, 0);
    tkm_info("http server listening on %s", s->addr);
    *out = s;
    return 0;
fail:
    free(s);
    return rc;
}

static int route_add(struct tkm_httpd *s, const char *path, tkm_httpd_handler fn, void *data,
                     struct httpd_health *health, struct tkm_err *err)
{
    if (!path || path[0] != '/' || !fn)
        return tkm_err_set(err, -EINVAL, "http server %s: route \"%s\": path must start with /",
                           s->addr, path ? path : "(null)");
    if (route_find(s, path))
        return tkm_err_set(err, -EEXIST, "http server %s: route %s is already registered", s->addr,
                           path);
    struct httpd_route *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return tkm_err_set(err, -ENOMEM, "http server %s: out of memory", s->addr);
    }
    r->fn = fn;
    r->data = data;
    r->health = health;
    r->next = s->routes;
    s->routes = r;
    return 0;
}

int tkm_httpd_handle(struct tkm_httpd *srv, const char *path, tkm_httpd_handler fn, void *data,
                     struct tkm_err *err)
{
    if (!srv)
        return 0;
    return route_add(srv, path, fn, data, NULL, err);
}

const char *tkm_httpd_addr(const struct tkm_httpd *srv)
{
    return srv ? srv->addr : "0";
}

unsigned tkm_httpd_connections(const struct tkm_httpd *srv)
{
    if (!srv || !srv->mhd)
        return 0;
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di ? di->num_connections : 0;
}

void tkm_httpd_close(struct tkm_httpd *srv, void (*closed_cb)(void *data), void *data)
{
    if (!srv || TKM_BUG(srv->closing)) /* a second close would wait forever */
        return;
    srv->closing = 1;
    srv->closed_cb = closed_cb;
    srv->closed_data = data;
    if (!srv->in_run)
        teardown(srv);
    /* else srv_run() tears down when MHD_run() returns */
}

int tkm_httpd_req_query(const struct tkm_httpd_req *req, const char *key, const char **value)
{
    const char *v = NULL;
    size_t vlen = 0;
    if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), &v,
                                      &vlen) != MHD_YES)
        return 0;
    if (value)
        *value = v;
    return 1;
}

/* ---- health ------------------------------------------------------------- */

/* One check's result, as one line of reason (control characters become ' '). */
static int check_run(const struct httpd_check *ck, char *reason, size_t n)
{
    reason[0] = '\0';
    int bad = ck->fn(ck->data, reason, n);
    reason[n - 1] = '\0';
    if (!bad)
        return 0;
    if (!reason[0])
        snprintf(reason, n, "not ready");
    for (char *p = reason; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
    return 1;
}

static int health_all(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                      struct tkm_httpd_resp *resp, void *data)
{
    struct httpd_health *hl = data;
    struct tkm_buf *b = &resp->body;
    const char *ep = hl->endpoint + 1; /* "readyz" */
    char reason[512];
    int failed = 0, rc = 0;
    for (const struct httpd_check *ck = hl->checks; ck && !rc; ck = ck->next) {
        if (check_run(ck, reason, sizeof reason)) {
            failed = 1;
            tkm_warn("http server %s: %s check %s failed: %s", srv->addr, ep, ck->name, reason);
            rc = tkm_buf_printf(b, "[-]%s failed: %s\n", ck->name, reason);
        } else {
            rc = tkm_buf_printf(b, "[+]%s ok\n", ck->name);
        }
    }
    if (rc)
        return rc;
    if (failed) {
        resp->status = 503;
        return tkm_buf_printf(b, "%s check failed\n", ep);
    }
    if (!tkm_httpd_req_query(req, "verbose", NULL)) {
        tkm_buf_reset(b);
        return tkm_buf_puts(b, "ok");
    }
    return tkm_buf_printf(b, "%s check passed\n", ep);
}

static int health_one(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                      struct tkm_httpd_resp *resp, void *data)
{
    (void)srv;
    (void)req;
    const struct httpd_check *ck = data;
    char reason[512];
    if (!check_run(ck, reason, sizeof reason))
        return tkm_buf_puts(&resp->body, "ok");
    resp->status = 503;
    return tkm_buf_printf(&resp->body, "%s\n", reason);
}

static struct httpd_health *health_find(struct tkm_httpd *srv, const char *endpoint)
{
    struct httpd_route *r = route_find(srv, endpoint);
    return r ? r->health : NULL;
}

int tkm_httpd_health(struct tkm_httpd *srv, const char *endpoint, struct tkm_err *err)
{
    if (!srv)
        return 0;
    struct httpd_route *r = endpoint ? route_find(srv, endpoint) : NULL;
    if (r && r->health)
        return 0;
    struct httpd_health *hl = calloc(1, sizeof *hl);
    if (!hl || !(hl->endpoint = strdup(endpoint ? endpoint : ""))) {
        free(hl);
        return tkm_err_set(err, -ENOMEM, "http server %s: out of memory", srv->addr);
    }
    hl->tail = &hl->checks;
    int rc = route_add(srv, endpoint, health_all, hl, hl, err);
    if (rc) {
        free(hl->endpoint);
        free(hl);
    }
    return rc;
}

static int check_name_ok(const char *name)
{
    if (!name || !*name || strlen(name) > 63)
        return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '.' || *p == '-'))
            return 0;
    return 1;
}

int tkm_httpd_add_check(struct tkm_httpd *srv, const char *endpoint, const char *name,
                        tkm_health_check_fn fn, void *data, struct tkm_err *err)
{
    char path[256];
    int rc;
    if (!srv)
        return 0;
    if (!check_name_ok(name) || !fn)
        return tkm_err_set(err, -EINVAL,
                           "http server %s: health check \"%s\": want a name of [A-Za-z0-9_.-] "
                           "(at most 63) and a function",
                           srv->addr, name ? name : "(null)");
    if ((rc = tkm_httpd_health(srv, endpoint, err)))
        return rc;
    struct httpd_health *hl = health_find(srv, endpoint);
    int n = snprintf(path, sizeof path, "%s/%s", endpoint, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return tkm_err_set(err, -EINVAL, "http server %s: %s/%s: path too long", srv->addr,
                           endpoint, name);
    for (struct httpd_check *c = hl->checks; c; c = c->next)
        if (strcmp(c->name, name) == 0)
            return tkm_err_set(err, -EEXIST, "http server %s: %s already has a check %s", srv->addr,
                               endpoint, name);
    struct httpd_check *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->name = strdup(name))) {
        free(ck);
        return tkm_err_set(err, -ENOMEM, "http server %s: out of memory", srv->addr);
    }
    ck->fn = fn;
    ck->data = data;
    if ((rc = route_add(srv, path, health_one, ck, NULL, err))) {
        free(ck->name);
        free(ck);
        return rc;
    }
    *hl->tail = ck;
    hl->tail = &ck->next;
    return 0;
}
