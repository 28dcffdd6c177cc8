/*
 * e2e_faultproxy - a loopback HTTP proxy in front of kube-apiserver that
 * injects faults, for the watch e2e scenarios.
 *
 * Choice of transport: clients speak PLAIN HTTP to the proxy (their
 * kubeconfig has server: http://127.0.0.1:<port> and no credentials); the
 * proxy forwards every request over TLS with libcurl, verifying the
 * apiserver with --cacert and authenticating with the client certificate
 * given (--cert/--key, e.g. the admin one). TLS passthrough would hide the
 * HTTP stream the faults have to cut; terminating TLS here would need a
 * server certificate the client trusts. Responses are re-chunked
 * (Transfer-Encoding: chunked, Connection: close), so a cut stream is
 * visible to the client as a transfer that ended before its last chunk.
 *
 * Usage: e2e_faultproxy --upstream https://127.0.0.1:PORT --cacert CA
 *                       --cert CRT --key KEY --port-file FILE [--log FILE]
 * Listens on 127.0.0.1 (a free port, written to --port-file). One thread per
 * connection, one request per connection. Control (plain GET on the same
 * port, answered "ok"):
 *   /__fault/throttle?count=N&retry_after=S[&watch_only=1]
 *        the next N requests (watches only, with watch_only) get 429 with
 *        Retry-After: S and a Kubernetes Status body
 *   /__fault/cut?count=N&after_bytes=B
 *        the next N watch streams that send data are cut B bytes later
 *        (abortive close, mid-event when B falls inside one)
 *   /__fault/stats   counters as JSON
 * --log gets "<unix-ms> <METHOD> <target> START" when a request is forwarded
 * and "<unix-ms> <METHOD> <target> <status|429|CUT@n>" when it ends.
 * SIGTERM ends it.
 */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>

#include <tkm/util.h>

struct proxy {
    const char *upstream, *cacert, *cert, *key;
    FILE *log;
    pthread_mutex_t mu;
    long throttle_left, retry_after_s;
    int throttle_watch_only;
    long cut_left, cut_after;
    long requests, watches, throttled, cuts;
};

struct conn {
    struct proxy *p;
    int fd;
    int is_watch;
    int head_sent;
    long status;
    char ctype[256];
    long long sent;   /* body bytes sent */
    long long cut_at; /* -1: no cut planned */
    int cut;
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void log_req(struct proxy *p, const char *method, const char *target, const char *what)
{
    pthread_mutex_lock(&p->mu);
    if (p->log) {
        fprintf(p->log, "%lld %s %s %s\n", now_ms(), method, target, what);
        fflush(p->log);
    }
    pthread_mutex_unlock(&p->mu);
}

static long query_long(const char *target, const char *key, long def)
{
    char pat[64];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *s = strstr(target, pat);
    if (!s)
        return def;
    s += strlen(pat);
    char num[32];
    size_t i = 0;
    while (i + 1 < sizeof num && s[i] >= '0' && s[i] <= '9') {
        num[i] = s[i];
        i++;
    }
    num[i] = '\0';
    int64_t v;
    return tkm_parse_i64(num, 0, 1000000000, &v) == 0 ? (long)v : def;
}

static void reply(int fd, int status, const char *reason, const char *extra, const char *ctype,
                  const char *body)
{
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, reason, ctype, strlen(body), extra ? extra : "");
    if (n > 0 && (size_t)n < sizeof head && write_all(fd, head, (size_t)n) == 0)
        write_all(fd, body, strlen(body));
}

static void control(struct proxy *p, int fd, const char *target)
{
    char body[512];
    pthread_mutex_lock(&p->mu);
    if (strncmp(target, "/__fault/throttle", 17) == 0) {
        p->throttle_left = query_long(target, "count", 1);
        p->retry_after_s = query_long(target, "retry_after", 1);
        p->throttle_watch_only = (int)query_long(target, "watch_only", 0);
        snprintf(body, sizeof body, "ok\n");
    } else if (strncmp(target, "/__fault/cut", 12) == 0) {
        p->cut_left = query_long(target, "count", 1);
        p->cut_after = query_long(target, "after_bytes", 0);
        snprintf(body, sizeof body, "ok\n");
    } else {
        snprintf(body, sizeof body,
                 "{\"requests\":%ld,\"watches\":%ld,\"throttled\":%ld,\"cuts\":%ld}\n", p->requests,
                 p->watches, p->throttled, p->cuts);
    }
    pthread_mutex_unlock(&p->mu);
    reply(fd, 200, "OK", NULL, "text/plain", body);
}

static size_t on_header(char *b, size_t size, size_t n, void *data)
{
    struct conn *c = data;
    size_t len = size * n;
    if (len > 5 && strncmp(b, "HTTP/", 5) == 0) {
        const char *sp = memchr(b, ' ', len);
        c->status = sp ? strtol(sp + 1, NULL, 10) : 502;
        c->ctype[0] = '\0';
    } else if (len > 13 && strncasecmp(b, "Content-Type:", 13) == 0) {
        size_t v = 13;
        while (v < len && b[v] == ' ')
            v++;
        size_t e = len;
        while (e > v && (b[e - 1] == '\r' || b[e - 1] == '\n'))
            e--;
        snprintf(c->ctype, sizeof c->ctype, "%.*s", (int)(e - v), b + v);
    }
    return len;
}

static int send_head(struct conn *c)
{
    char head[512];
    if (c->head_sent)
        return 0;
    c->head_sent = 1;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %ld Proxied\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n",
                     c->status ? c->status : 502, c->ctype[0] ? c->ctype : "application/json");
    return write_all(c->fd, head, (size_t)n);
}

static int send_chunk(struct conn *c, const char *b, size_t len)
{
    char hdr[32];
    int n = snprintf(hdr, sizeof hdr, "%zx\r\n", len);
    if (len == 0)
        return 0;
    if (write_all(c->fd, hdr, (size_t)n) < 0 || write_all(c->fd, b, len) < 0 ||
        write_all(c->fd, "\r\n", 2) < 0)
        return -1;
    c->sent += (long long)len;
    return 0;
}

static size_t on_body(char *b, size_t size, size_t n, void *data)
{
    struct conn *c = data;
    size_t len = size * n;
    if (send_head(c) < 0)
        return 0;
    if (c->is_watch && c->status / 100 == 2 && c->cut_at < 0) {
        pthread_mutex_lock(&c->p->mu);
        if (c->p->cut_left > 0) {
            c->p->cut_left--;
            c->cut_at = c->sent + c->p->cut_after;
        }
        pthread_mutex_unlock(&c->p->mu);
    }
    if (c->cut_at >= 0 && c->sent + (long long)len > c->cut_at) {
        size_t part = (size_t)(c->cut_at - c->sent);
        send_chunk(c, b, part);
        c->cut = 1;
        return 0; /* aborts the upstream transfer */
    }
    return send_chunk(c, b, len) < 0 ? 0 : len;
}

/* Aborts an idle upstream watch once the client has gone away. */
static int on_progress(void *data, curl_off_t a, curl_off_t b, curl_off_t x, curl_off_t y)
{
    struct conn *c = data;
    char ch;
    (void)a, (void)b, (void)x, (void)y;
    ssize_t r = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 ? 1 : 0;
}

static void forward(struct conn *c, const char *method, const char *target, const char *accept,
                    const char *ctype, const char *body, size_t body_len)
{
    struct proxy *p = c->p;
    char url[8192], h1[512], h2[512], what[32];
    struct curl_slist *hl = NULL;
    CURL *e = curl_easy_init();
    if (!e)
        return;
    snprintf(url, sizeof url, "%s%s", p->upstream, target);
    snprintf(h1, sizeof h1, "Accept: %s", accept[0] ? accept : "application/json");
    hl = curl_slist_append(hl, h1);
    if (ctype[0]) {
        snprintf(h2, sizeof h2, "Content-Type: %s", ctype);
        hl = curl_slist_append(hl, h2);
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(e, CURLOPT_CAINFO, p->cacert);
    curl_easy_setopt(e, CURLOPT_SSLCERT, p->cert);
    curl_easy_setopt(e, CURLOPT_SSLKEY, p->key);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, c);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (body_len) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)body_len);
    }
    CURLcode rc = curl_easy_perform(e);
    if (c->cut) {
        struct linger lg = {1, 0}; /* RST: an abortive close */
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        snprintf(what, sizeof what, "CUT@%lld", c->sent);
        pthread_mutex_lock(&p->mu);
        p->cuts++;
        pthread_mutex_unlock(&p->mu);
    } else if (rc != CURLE_OK && !c->head_sent) {
        reply(c->fd, 502, "Bad Gateway", NULL, "text/plain", curl_easy_strerror(rc));
        snprintf(what, sizeof what, "502");
    } else {
        if (send_head(c) == 0)
            write_all(c->fd, "0\r\n\r\n", 5);
        snprintf(what, sizeof what, "%ld", c->status);
    }
    log_req(p, method, target, what);
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
}

/* Copies header `name`'s value from the request head into out. */
static void header_value(const char *head, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *l = strstr(head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
        const char *s = l + 2;
        if (strncasecmp(s, name, nl) == 0 && s[nl] == ':') {
            s += nl + 1;
            while (*s == ' ')
                s++;
            const char *e = strstr(s, "\r\n");
            snprintf(out, n, "%.*s", (int)(e ? e - s : (long)strlen(s)), s);
            return;
        }
    }
}

static int throttle(struct proxy *p, int is_watch)
{
    int hit = 0;
    pthread_mutex_lock(&p->mu);
    if (p->throttle_left > 0 && (!p->throttle_watch_only || is_watch)) {
        p->throttle_left--;
        p->throttled++;
        hit = 1;
    }
    pthread_mutex_unlock(&p->mu);
    return hit;
}

static void serve(struct conn *c)
{
    char head[65536], method[16], target[8192], accept[512], ctype[256], clen[32], extra[64];
    char *body = NULL;
    size_t len = 0, blen = 0;
    char *end = NULL;
    while (len < sizeof head - 1 && !(end = strstr(head, "\r\n\r\n"))) {
        ssize_t r = recv(c->fd, head + len, sizeof head - 1 - len, 0);
        if (r <= 0)
            return;
        len += (size_t)r;
        head[len] = '\0';
    }
    if (!end || sscanf(head, "%15s %8191s", method, target) != 2)
        return;
    end[2] = '\0';
    header_value(head, "Accept", accept, sizeof accept);
    header_value(head, "Content-Type", ctype, sizeof ctype);
    header_value(head, "Content-Length", clen, sizeof clen);
    size_t have = len - (size_t)(end + 4 - head);
    uint64_t want = 0;
    if (clen[0] && (tkm_parse_u64(clen, 64u << 20, &want) < 0 || !(body = malloc(want + 1))))
        return;
    if (body) {
        memcpy(body, end + 4, have < want ? have : want);
        blen = have < want ? have : want;
        while (blen < want) {
            ssize_t r = recv(c->fd, body + blen, want - blen, 0);
            if (r <= 0)
                goto out;
            blen += (size_t)r;
        }
    }
    if (strncmp(target, "/__fault/", 9) == 0) {
        control(c->p, c->fd, target);
        goto out;
    }
    c->is_watch = strstr(target, "watch=1") || strstr(target, "watch=true");
    pthread_mutex_lock(&c->p->mu);
    c->p->requests++;
    c->p->watches += c->is_watch;
    pthread_mutex_unlock(&c->p->mu);
    if (throttle(c->p, c->is_watch)) {
        char st[512];
        snprintf(extra, sizeof extra, "Retry-After: %ld\r\n", c->p->retry_after_s);
        snprintf(st, sizeof st,
                 "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                 "\"Failure\",\"message\":\"faultproxy: too many requests, retry after %ld s\","
                 "\"reason\":\"TooManyRequests\",\"details\":{\"retryAfterSeconds\":%ld},"
                 "\"code\":429}",
                 c->p->retry_after_s, c->p->retry_after_s);
        reply(c->fd, 429, "Too Many Requests", extra, "application/json", st);
        log_req(c->p, method, target, "429");
        goto out;
    }
    log_req(c->p, method, target, "START");
    forward(c, method, target, accept, ctype, body ? body : "", blen);
out:
    free(body);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    serve(c);
    close(c->fd);
    free(c);
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"upstream", required_argument, NULL, 'u'},
                                       {"cacert", required_argument, NULL, 'a'},
                                       {"cert", required_argument, NULL, 'c'},
                                       {"key", required_argument, NULL, 'k'},
                                       {"port-file", required_argument, NULL, 'p'},
                                       {"log", required_argument, NULL, 'l'},
                                       {NULL, 0, NULL, 0}};
    struct proxy p = {.cut_left = 0};
    const char *port_file = NULL, *log_file = NULL;
    int opt;
    pthread_mutex_init(&p.mu, NULL);
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'u':
            p.upstream = optarg;
            break;
        case 'a':
            p.cacert = optarg;
            break;
        case 'c':
            p.cert = optarg;
            break;
        case 'k':
            p.key = optarg;
            break;
        case 'p':
            port_file = optarg;
            break;
        case 'l':
            log_file = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!p.upstream || !p.cacert || !p.cert || !p.key || !port_file) {
        fprintf(stderr, "usage: e2e_faultproxy --upstream URL --cacert F --cert F --key F "
                        "--port-file F [--log F]\n");
        return 2;
    }
    if (log_file && !(p.log = fopen(log_file, "a"))) {
        perror(log_file);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 64) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) < 0) {
        perror("e2e_faultproxy: listen on 127.0.0.1");
        return 1;
    }
    FILE *pf = fopen(port_file, "w");
    if (!pf || fprintf(pf, "%d\n", ntohs(a.sin_port)) < 0 || fclose(pf) != 0) {
        perror(port_file);
        return 1;
    }
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            perror("accept");
            return 1;
        }
        struct conn *c = calloc(1, sizeof *c);
        pthread_t t;
        if (!c) {
            close(fd);
            continue;
        }
        c->p = &p;
        c->fd = fd;
        c->cut_at = -1;
        if (pthread_create(&t, NULL, conn_main, c) != 0) {
            close(fd);
            free(c);
            continue;
        }
        pthread_detach(t);
    }
}
