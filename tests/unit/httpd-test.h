/*
 * httpd-test.h - a canned HTTP/1.1 server on 127.0.0.1 for unit tests of
 * lib/http and libk8sclient (curl's tests/data idea: a canned reply, and the
 * exact request recorded for the test to check).
 *
 * Each connection is served by a thread of its own (keep-alive); request n
 * (in arrival order) is answered with replies[n] (the last reply repeats). Every request (head and
 * body) is recorded. Header-only: include it from one test file.
 */
#ifndef TKM_HTTPD_TEST_H
#define TKM_HTTPD_TEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TSRV_MAX 16

struct tsrv_reply {
    int status;
    const char *headers; /* extra header lines, each ending in \r\n */
    const char *body;
    int delay_ms; /* before answering */
    int hang_ms;  /* send nothing for this long, then close */
    int chunks;   /* >0: send body chunked in this many pieces, 20 ms apart */
};

struct tsrv {
    int fd, port;
    pthread_t th;
    pthread_mutex_t mu;
    struct tsrv_reply replies[TSRV_MAX];
    int nreplies;
    char reqs[TSRV_MAX][16384];
    int nreqs;
    int conns;
    volatile int stop;
    int short_by; /* >0: every reply announces this many more body bytes than it sends, then
                     the connection closes (set after tsrv_start, before the first request) */
};

static inline void tsrv_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline int tsrv_write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads one request; returns its length in buf, 0 on EOF, -1 on error. */
static inline int tsrv_read_req(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    char *eoh = NULL;
    while (!eoh) {
        if (len + 1 >= cap)
            return -1;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            return len ? -1 : 0;
        len += (size_t)n;
        buf[len] = '\0';
        if ((unsigned char)buf[0] == 0x16) /* a TLS ClientHello: answer in plain text */
            return tsrv_write_all(fd, "HTTP/1.1 400 X\r\n\r\n", 17) ? -1 : -1;
        eoh = strstr(buf, "\r\n\r\n");
    }
    size_t head = (size_t)(eoh + 4 - buf), clen = 0;
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    if (cl && cl < eoh)
        clen = strtoul(cl + 17, NULL, 10);
    while (len < head + clen && len + 1 < cap) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0)
            return -1;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return (int)len;
}

static inline void tsrv_answer(int fd, const struct tsrv_reply *r, int short_by)
{
    char head[4096];
    const char *body = r->body ? r->body : "";
    size_t blen = strlen(body);
    if (r->delay_ms)
        tsrv_sleep_ms(r->delay_ms);
    if (r->hang_ms) {
        tsrv_sleep_ms(r->hang_ms);
        return;
    }
    if (r->chunks > 0) {
        snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n%s\r\n",
                 r->status, r->headers ? r->headers : "");
        tsrv_write_all(fd, head, strlen(head));
        size_t per = blen / (size_t)r->chunks + 1;
        for (size_t off = 0; off < blen; off += per) {
            size_t n = blen - off < per ? blen - off : per;
            char sz[32];
            snprintf(sz, sizeof sz, "%zx\r\n", n);
            tsrv_write_all(fd, sz, strlen(sz));
            tsrv_write_all(fd, body + off, n);
            tsrv_write_all(fd, "\r\n", 2);
            tsrv_sleep_ms(20);
        }
        tsrv_write_all(fd, "0\r\n\r\n", 5);
        return;
    }
    snprintf(head, sizeof head, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%s\r\n", r->status,
             blen + (size_t)(short_by > 0 ? short_by : 0), r->headers ? r->headers : "");
    tsrv_write_all(fd, head, strlen(head));
    tsrv_write_all(fd, body, blen);
}

struct tsrv_conn {
    struct tsrv *s;
    int fd;
};

static inline void *tsrv_conn_main(void *arg)
{
    struct tsrv_conn *cn = arg;
    struct tsrv *s = cn->s;
    char *buf = malloc(65536);
    for (;;) {
        int n = buf ? tsrv_read_req(cn->fd, buf, 65536) : -1;
        if (n <= 0)
            break;
        pthread_mutex_lock(&s->mu);
        int i = s->nreqs < TSRV_MAX ? s->nreqs : TSRV_MAX - 1;
        size_t cl = (size_t)n < sizeof s->reqs[i] - 1 ? (size_t)n : sizeof s->reqs[i] - 1;
        memcpy(s->reqs[i], buf, cl);
        s->reqs[i][cl] = '\0';
        s->nreqs++;
        struct tsrv_reply r = s->replies[i < s->nreplies ? i : s->nreplies - 1];
        pthread_mutex_unlock(&s->mu);
        tsrv_answer(cn->fd, &r, s->short_by);
        if (r.hang_ms || s->short_by)
            break;
    }
    free(buf);
    close(cn->fd);
    free(cn);
    return NULL;
}

/* Accepts connections; each is served by a thread of its own (keep-alive). */
static inline void *tsrv_main(void *arg)
{
    struct tsrv *s = arg;
    while (!s->stop) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            continue;
        struct tsrv_conn *cn = malloc(sizeof *cn);
        if (!cn) {
            close(c);
            continue;
        }
        cn->s = s;
        cn->fd = c;
        pthread_mutex_lock(&s->mu);
        s->conns++;
        pthread_mutex_unlock(&s->mu);
        pthread_t th;
        if (pthread_create(&th, NULL, tsrv_conn_main, cn) == 0)
            pthread_detach(th);
        else {
            close(c);
            free(cn);
        }
    }
    return NULL;
}

/* Starts the server with the given replies (copied). Returns the port. */
static inline int tsrv_start(struct tsrv *s, const struct tsrv_reply *replies, int n)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    memcpy(s->replies, replies, (size_t)n * sizeof *replies);
    s->nreplies = n;
    s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(s->fd, (struct sockaddr *)&a, sizeof a) || listen(s->fd, 16) ||
        getsockname(s->fd, (struct sockaddr *)&a, &al))
        return -1;
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, tsrv_main, s);
    return s->port;
}

/* A copy of request i (or "" when absent), for assertions. */
static inline const char *tsrv_req(struct tsrv *s, int i)
{
    static char copy[16384];
    pthread_mutex_lock(&s->mu);
    snprintf(copy, sizeof copy, "%s", i < s->nreqs && i < TSRV_MAX ? s->reqs[i] : "");
    pthread_mutex_unlock(&s->mu);
    return copy;
}

static inline int tsrv_nreqs(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->nreqs;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static inline int tsrv_conns(struct tsrv *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->conns;
    pthread_mutex_unlock(&s->mu);
    return n;
}

#endif
