/* tsrv.c - the route-table fake HTTP/1.1 server for unit tests (see tsrv.h). */
#include "tsrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <tkm/util.h>

#define TSRV_HEAD_MAX (64 * 1024)
#define TSRV_BODY_MAX (16 * 1024 * 1024)

struct tsrv_route_int {
    char *method, *path, *query;
    enum tsrv_match m;
    const struct tsrv_reply *replies;
    int n, next;
    tsrv_handler_fn fn;
    void *data;
};

struct tsrv_rec {
    struct tsrv_request r;
    char *mem;     /* method, target, path, query, head (one allocation) */
    char *body;    /* NUL-terminated */
    char *scratch; /* a handler's generated text */
    char *joined;  /* head + body, made by tsrv_req() */
};

struct tsrv_conn {
    struct tsrv *s;
    int fd, id;
    SSL *ssl;
    char *buf;
    size_t len;
};

void tsrv_init(struct tsrv *s)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static char *dup_or_null(const char *p)
{
    return p ? strdup(p) : NULL;
}

static int add_route(struct tsrv *s, struct tsrv_route_int *r)
{
    pthread_mutex_lock(&s->mu);
    struct tsrv_route_int *n = realloc(s->routes, (size_t)(s->nroutes + 1) * sizeof *n);
    if (n) {
        s->routes = n;
        s->routes[s->nroutes++] = *r;
    }
    pthread_mutex_unlock(&s->mu);
    return n ? 0 : -ENOMEM;
}

int tsrv_route(struct tsrv *s, const char *method, const char *path, enum tsrv_match m,
               const char *query, const struct tsrv_reply *replies, int n)
{
    if (!replies || n < 1)
        return -EINVAL;
    struct tsrv_route_int r = {
        dup_or_null(method), dup_or_null(path), dup_or_null(query), m, replies, n, 0, NULL, NULL};
    return add_route(s, &r);
}

int tsrv_route_fn(struct tsrv *s, const char *method, const char *path, enum tsrv_match m,
                  const char *query, tsrv_handler_fn fn, void *data)
{
    struct tsrv_route_int r = {
        dup_or_null(method), dup_or_null(path), dup_or_null(query), m, NULL, 0, 0, fn, data};
    return add_route(s, &r);
}

int tsrv_tls(struct tsrv *s, const char *cert_file, const char *key_file)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return -ENOMEM;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        SSL_CTX_free(ctx);
        return -EINVAL;
    }
    pthread_mutex_lock(&s->mu);
    /* Connections still running keep their SSL objects (which hold a
     * reference of their own); the old context is freed at tsrv_stop(). */
    if (s->tls && s->nold_tls < (int)(sizeof s->old_tls / sizeof s->old_tls[0]))
        s->old_tls[s->nold_tls++] = s->tls;
    else if (s->tls)
        SSL_CTX_free(s->tls);
    s->tls = ctx;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int stopping(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    int st = s->stop;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Sleeps ms (< 0: forever), waking early when the server stops. Returns 1
 * when stopped. */
static int nap(struct tsrv *s, int ms)
{
    uint64_t end = ms < 0 ? UINT64_MAX : tkm_now_ms() + (uint64_t)ms;
    pthread_mutex_lock(&s->mu);
    while (!s->stop && tkm_now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    int st = s->stop;
    pthread_mutex_unlock(&s->mu);
    return st;
}

static int conn_write(struct tsrv_conn *c, const char *p, size_t n)
{
    while (n) {
        ssize_t w;
        if (c->ssl) {
            int k = SSL_write(c->ssl, p, (int)(n > 65536 ? 65536 : n));
            w = k > 0 ? k : -1;
        } else {
            w = send(c->fd, p, n, MSG_NOSIGNAL);
        }
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads more bytes into c->buf; 0 on EOF/error/stop, else the count. */
static ssize_t conn_read(struct tsrv_conn *c, size_t cap)
{
    for (;;) {
        if (c->ssl && SSL_pending(c->ssl) == 0) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (poll(&p, 1, 50) == 0) {
                if (stopping(c->s))
                    return 0;
                continue;
            }
        } else if (!c->ssl) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (poll(&p, 1, 50) == 0) {
                if (stopping(c->s))
                    return 0;
                continue;
            }
        }
        ssize_t n;
        if (c->ssl) {
            int k = SSL_read(c->ssl, c->buf + c->len, (int)(cap - c->len));
            n = k > 0 ? k : 0;
        } else {
            n = recv(c->fd, c->buf + c->len, cap - c->len, 0);
        }
        if (n <= 0)
            return 0;
        c->len += (size_t)n;
        c->buf[c->len] = '\0';
        return n;
    }
}

/* Copies head + body into a record and parses the request line. */
static struct tsrv_rec *record(struct tsrv_conn *c, size_t head_len, size_t body_len)
{
    struct tsrv_rec *rec = calloc(1, sizeof *rec);
    size_t sz = 3 * head_len + 8;
    if (!rec || !(rec->mem = malloc(sz)) || !(rec->body = malloc(body_len + 1))) {
        if (rec)
            free(rec->mem);
        free(rec);
        return NULL;
    }
    char *m = rec->mem;
    memcpy(m, c->buf, head_len);
    m[head_len] = '\0';
    rec->r.head = m;
    memcpy(rec->body, c->buf + head_len, body_len);
    rec->body[body_len] = '\0';
    rec->r.body = rec->body;
    rec->r.body_len = body_len;
    char *line = m + head_len + 1;
    const char *eol = strstr(m, "\r\n");
    size_t ll = eol ? (size_t)(eol - m) : 0;
    memcpy(line, m, ll);
    line[ll] = '\0';
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (sp1)
        *sp1 = '\0';
    if (sp2)
        *sp2 = '\0';
    rec->r.method = line;
    rec->r.target = sp1 ? sp1 + 1 : "";
    char *pq = line + ll + 1;
    snprintf(pq, head_len + 1, "%s", rec->r.target);
    char *q = strchr(pq, '?');
    if (q)
        *q = '\0';
    rec->r.path = pq;
    rec->r.query = q ? q + 1 : "";
    rec->r.at_ms = tkm_now_ms();
    rec->r.conn = c->id;
    return rec;
}

static int route_matches(const struct tsrv_route_int *rt, const struct tsrv_request *r)
{
    if (rt->method && strcmp(rt->method, r->method) != 0)
        return 0;
    if (rt->path) {
        const char *subject = rt->m == TSRV_TARGET || strchr(rt->path, '?') ? r->target : r->path;
        if (rt->m == TSRV_PREFIX ? strncmp(subject, rt->path, strlen(rt->path)) != 0
                                 : strcmp(subject, rt->path) != 0)
            return 0;
    }
    return !rt->query || strstr(r->query, rt->query) != NULL;
}

/* Records the request and picks its reply. */
static void dispatch(struct tsrv_conn *c, struct tsrv_rec *rec, struct tsrv_reply *out)
{
    static const struct tsrv_reply none = {404, NULL, "no route", 0, 0, 0, 0, 0, 0, 0};
    struct tsrv *s = c->s;
    tsrv_handler_fn fn = NULL;
    void *fn_data = NULL;
    *out = none;
    pthread_mutex_lock(&s->mu);
    if (s->nreqs == s->cap_reqs) {
        int cap = s->cap_reqs ? s->cap_reqs * 2 : 16;
        struct tsrv_rec **n = realloc(s->reqs, (size_t)cap * sizeof *n);
        if (n) {
            s->reqs = n;
            s->cap_reqs = cap;
        }
    }
    if (s->nreqs < s->cap_reqs)
        s->reqs[s->nreqs++] = rec;
    for (int i = 0; i < s->nroutes; i++) {
        struct tsrv_route_int *rt = &s->routes[i];
        if (!route_matches(rt, &rec->r))
            continue;
        if (rt->fn) {
            fn = rt->fn;
            fn_data = rt->data;
        } else {
            *out = rt->replies[rt->next < rt->n ? rt->next : rt->n - 1];
            rt->next++;
        }
        break;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (fn && (rec->scratch = calloc(1, 65536)) != NULL)
        fn(&rec->r, out, rec->scratch, 65536, fn_data);
}

/* Counts a reply whose bytes are out (tsrv_nreplies()). */
static void replied(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    s->nreplies++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Holds the connection open, reading and dropping whatever the client sends,
 * until the client closes it or the server stops. */
static void hold_open(struct tsrv_conn *c)
{
    char junk[4096];
    while (!stopping(c->s)) {
        if (!c->ssl || SSL_pending(c->ssl) == 0) {
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (poll(&p, 1, 50) <= 0)
                continue;
        }
        if ((c->ssl ? SSL_read(c->ssl, junk, sizeof junk) : recv(c->fd, junk, sizeof junk, 0)) <= 0)
            return;
    }
}

/* Sends a chunked reply (no chunks at all for HEAD); returns 1 when the
 * connection must close afterwards. */
static int answer_chunked(struct tsrv_conn *c, const struct tsrv_reply *r, const char *body,
                          size_t blen, int head_only)
{
    char head[8192];
    snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n%s%s\r\n",
             r->status, r->close ? "Connection: close\r\n" : "", r->headers ? r->headers : "");
    if (conn_write(c, head, strlen(head)))
        return 1;
    size_t per = blen / (size_t)r->chunks + 1;
    for (size_t off = 0; !head_only && off < blen; off += per) {
        size_t n = blen - off < per ? blen - off : per;
        char sz[32];
        snprintf(sz, sizeof sz, "%zx\r\n", n);
        if (conn_write(c, sz, strlen(sz)) || conn_write(c, body + off, n) ||
            conn_write(c, "\r\n", 2) || nap(c->s, 20))
            return 1;
    }
    if (!head_only && conn_write(c, "0\r\n\r\n", 5))
        return 1;
    replied(c->s);
    return r->close;
}

/* Sends one reply to a request made with method; returns 1 when the
 * connection must close afterwards. A HEAD reply never has body bytes. */
static int answer(struct tsrv_conn *c, const struct tsrv_reply *r, const char *method)
{
    char head[8192];
    const char *body = r->body ? r->body : "";
    size_t blen = r->body_len ? r->body_len : strlen(body);
    size_t announce = blen + (size_t)(r->short_by > 0 ? r->short_by : 0);
    const char *extra = r->headers ? r->headers : "";
    int head_only = strcmp(method, "HEAD") == 0;
    if (r->delay_ms && nap(c->s, r->delay_ms))
        return 1;
    if (r->hang_ms) {
        nap(c->s, r->hang_ms);
        return 1;
    }
    if (r->hold) {
        char cl[64] = "";
        if (r->short_by > 0)
            snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", announce);
        snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nConnection: close\r\n%s%s\r\n", r->status, cl,
                 extra);
        if (conn_write(c, head, strlen(head)) == 0 &&
            (head_only || conn_write(c, body, blen) == 0)) {
            replied(c->s);
            hold_open(c);
        }
        return 1;
    }
    if (r->chunks > 0)
        return answer_chunked(c, r, body, blen, head_only);
    snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s%s\r\n", r->status,
             announce, r->close ? "Connection: close\r\n" : "", extra);
    if (conn_write(c, head, strlen(head)) || (!head_only && conn_write(c, body, blen)))
        return 1;
    replied(c->s);
    return r->short_by > 0 || r->close;
}

/* Reads one request into c->buf: returns head + body length, 0 at the end. */
static size_t read_request(struct tsrv_conn *c, size_t *head_len, size_t *body_len)
{
    char *eoh;
    while (!(eoh = strstr(c->buf, "\r\n\r\n"))) {
        if (c->len >= TSRV_HEAD_MAX || conn_read(c, TSRV_HEAD_MAX) == 0)
            return 0;
        if (!c->ssl && (unsigned char)c->buf[0] == 0x16) {
            /* A TLS ClientHello to a plain server: answer in plain text. */
            conn_write(c, "HTTP/1.1 400 X\r\n\r\n", 17);
            return 0;
        }
    }
    *head_len = (size_t)(eoh + 4 - c->buf);
    *body_len = 0;
    for (const char *h = strstr(c->buf, "\r\n"); h && h < eoh; h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "content-length:", 15) == 0)
            *body_len = strtoul(h + 17, NULL, 10);
        if (strncasecmp(h + 2, "expect: 100-continue", 20) == 0 &&
            c->len == *head_len) /* body not sent yet */
            conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    }
    if (*body_len > TSRV_BODY_MAX)
        return 0;
    size_t need = *head_len + *body_len;
    if (need + 1 > TSRV_HEAD_MAX) {
        char *nb = realloc(c->buf, need + 1);
        if (!nb)
            return 0;
        c->buf = nb;
    }
    while (c->len < need)
        if (conn_read(c, need) == 0)
            return 0;
    return need;
}

static void *conn_main(void *arg)
{
    struct tsrv_conn *c = arg;
    struct tsrv *s = c->s;
    sigset_t pipe;
    /* A peer that went away makes writes fail with EPIPE instead of killing
     * the test (OpenSSL writes with write(2), not send(MSG_NOSIGNAL)). */
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, NULL);
    c->buf = malloc(TSRV_HEAD_MAX + 1);
    if (c->buf)
        c->buf[0] = '\0';
    if (c->ssl && SSL_accept(c->ssl) != 1)
        goto out;
    while (c->buf) {
        size_t hl = 0, bl = 0, used = read_request(c, &hl, &bl);
        if (used == 0)
            break;
        struct tsrv_rec *rec = record(c, hl, bl);
        if (!rec)
            break;
        struct tsrv_reply r;
        dispatch(c, rec, &r);
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        c->buf[c->len] = '\0';
        if (answer(c, &r, rec->r.method))
            break;
    }
out:
    if (c->ssl) {
        SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    free(c->buf);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nfds; i++)
        if (s->fds[i] == c->fd) {
            s->fds[i] = s->fds[--s->nfds];
            break;
        }
    close(c->fd);
    s->live--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(c);
    return NULL;
}

static void start_conn(struct tsrv *s, int fd)
{
    struct tsrv_conn *c = calloc(1, sizeof *c);
    pthread_t th;
    pthread_mutex_lock(&s->mu);
    if (c && s->nfds == s->cap_fds) {
        int cap = s->cap_fds ? s->cap_fds * 2 : 16;
        int *n = realloc(s->fds, (size_t)cap * sizeof *n);
        if (n) {
            s->fds = n;
            s->cap_fds = cap;
        }
    }
    if (!c || s->nfds == s->cap_fds || (s->tls && !(c->ssl = SSL_new(s->tls)))) {
        pthread_mutex_unlock(&s->mu);
        free(c);
        close(fd);
        return;
    }
    c->s = s;
    c->fd = fd;
    c->id = s->conns++;
    if (c->ssl)
        SSL_set_fd(c->ssl, fd);
    s->fds[s->nfds++] = fd;
    s->live++;
    pthread_mutex_unlock(&s->mu);
    if (pthread_create(&th, NULL, conn_main, c) == 0) {
        pthread_detach(th);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->live--;
    pthread_mutex_unlock(&s->mu);
    if (c->ssl)
        SSL_free(c->ssl);
    free(c);
}

static void *accept_main(void *arg)
{
    struct tsrv *s = arg;
    while (!stopping(s)) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            start_conn(s, fd);
    }
    return NULL;
}

int tsrv_listen(struct tsrv *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int one = 1;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->fd < 0)
        return -errno;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) || listen(s->fd, 64) ||
        getsockname(s->fd, (struct sockaddr *)&a, &al))
        return -errno;
    s->port = ntohs(a.sin_port);
    if (pthread_create(&s->th, NULL, accept_main, s))
        return -EAGAIN;
    s->started = 1;
    return s->port;
}

int tsrv_start(struct tsrv *s, const struct tsrv_reply *replies, int n)
{
    tsrv_init(s);
    int rc = tsrv_route(s, NULL, NULL, TSRV_PREFIX, NULL, replies, n);
    return rc ? rc : tsrv_listen(s);
}

void tsrv_drop_conns(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nfds; i++)
        shutdown(s->fds[i], SHUT_RDWR);
    pthread_mutex_unlock(&s->mu);
}

void tsrv_stop(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    for (int i = 0; i < s->nfds; i++)
        shutdown(s->fds[i], SHUT_RDWR);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started)
        pthread_join(s->th, NULL);
    pthread_mutex_lock(&s->mu);
    while (s->live > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->fd >= 0)
        close(s->fd);
    for (int i = 0; i < s->nroutes; i++) {
        free(s->routes[i].method);
        free(s->routes[i].path);
        free(s->routes[i].query);
    }
    for (int i = 0; i < s->nreqs; i++) {
        free(s->reqs[i]->mem);
        free(s->reqs[i]->body);
        free(s->reqs[i]->scratch);
        free(s->reqs[i]->joined);
        free(s->reqs[i]);
    }
    for (int i = 0; i < s->nold_tls; i++)
        SSL_CTX_free(s->old_tls[i]);
    SSL_CTX_free(s->tls);
    free(s->routes);
    free(s->reqs);
    free(s->fds);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

int tsrv_nreqs(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->nreqs;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int tsrv_conns(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int tsrv_nreplies(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->nreplies;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int tsrv_get(struct tsrv *s, int i, struct tsrv_request *out)
{
    int rc = -ENOENT;
    pthread_mutex_lock(&s->mu);
    if (i >= 0 && i < s->nreqs) {
        *out = s->reqs[i]->r;
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

const char *tsrv_req(struct tsrv *s, int i)
{
    /* Head and body are stored apart; the joined copy is made once and kept. */
    struct tsrv_request r;
    if (tsrv_get(s, i, &r))
        return "";
    pthread_mutex_lock(&s->mu);
    struct tsrv_rec *rec = s->reqs[i];
    if (!rec->joined) {
        size_t hl = strlen(r.head);
        rec->joined = malloc(hl + r.body_len + 1);
        if (rec->joined) {
            memcpy(rec->joined, r.head, hl);
            memcpy(rec->joined + hl, r.body, r.body_len);
            rec->joined[hl + r.body_len] = '\0';
        }
    }
    const char *p = rec->joined ? rec->joined : r.head;
    pthread_mutex_unlock(&s->mu);
    return p;
}

int tsrv_wait(struct tsrv *s, int n, int timeout_ms)
{
    uint64_t end = tkm_now_ms() + (uint64_t)timeout_ms;
    int got;
    while ((got = tsrv_nreqs(s)) < n && tkm_now_ms() < end)
        nap(s, 10);
    return got;
}

int tsrv_header(struct tsrv *s, int i, const char *name, char *out, size_t n)
{
    struct tsrv_request r;
    size_t nl = strlen(name);
    if (tsrv_get(s, i, &r))
        return -ENOENT;
    for (const char *h = strstr(r.head, "\r\n"); h && h[2] != '\r'; h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, name, nl) != 0 || h[2 + nl] != ':')
            continue;
        const char *v = h + 3 + nl;
        while (*v == ' ')
            v++;
        const char *e = strstr(v, "\r\n");
        size_t len = e ? (size_t)(e - v) : strlen(v);
        snprintf(out, n, "%.*s", (int)len, v);
        return (int)len;
    }
    return -ENOENT;
}

int tsrv_make_pki(const char *dir, const char *name)
{
    char cmd[4096];
    int n =
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                 "-keyout %s-ca.key -out %s-ca.crt -days 2 -subj /CN=%s-ca >/dev/null 2>&1 && "
                 "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout %s.key "
                 "-out %s.csr -subj /CN=127.0.0.1 >/dev/null 2>&1 && "
                 "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > %s.ext && "
                 "openssl x509 -req -in %s.csr -CA %s-ca.crt -CAkey %s-ca.key -CAcreateserial "
                 "-out %s.crt -days 2 -extfile %s.ext >/dev/null 2>&1",
                 dir, name, name, name, name, name, name, name, name, name, name, name);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -E2BIG;
    return system(cmd) == 0 ? 0 : -EIO;
}
