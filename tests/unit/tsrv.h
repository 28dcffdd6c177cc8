/*
 * tsrv.h - the route-table fake HTTP/1.1 server for unit tests (127.0.0.1
 * only; plain or TLS). Compiled into every unit binary (tests/unit/tsrv.c).
 *
 *   struct tsrv s;
 *   tsrv_init(&s);
 *   static const struct tsrv_reply ok[] = {{429, "Retry-After: 1\r\n", "{}"}, {200, NULL, "{}"}};
 *   tsrv_route(&s, "PATCH", "/api/v1/namespaces/ns1/configmaps/a", TSRV_EXACT, NULL, ok, 2);
 *   int port = tsrv_listen(&s);          // > 0, or -errno
 *   ... the code under test talks to http://127.0.0.1:<port> ...
 *   struct tsrv_request rq;
 *   tsrv_get(&s, 0, &rq);                // rq.method, rq.path, rq.head, rq.body, rq.at_ms
 *   tsrv_stop(&s);                       // joins every thread, frees everything
 *
 * Routes are matched in the order they were added: method (NULL: any), then
 * the path (NULL: any) against the request's path without its query, exactly
 * (TSRV_EXACT) or as a prefix (TSRV_PREFIX); a route path that holds a '?'
 * is compared with the whole request target instead. TSRV_TARGET compares
 * the whole request target (path and query, as sent) exactly, so "/a" does
 * not match "/a?x". query (NULL: any) must occur as a substring of the query
 * string. A route answers its n-th request with replies[n]; the last reply
 * repeats. A route may instead have a handler that fills the reply (it runs
 * on the connection's thread, under no lock).
 * No route: 404 "no route" (add a last catch-all route for another answer).
 *
 * A HEAD request gets the reply's head, Content-Length included (that of the
 * body, plus short_by), and never its body bytes, as HTTP says: the
 * connection stays usable for the next request.
 *
 * Every request is recorded (head, body, arrival time, connection number).
 * The recorded copies never change and stay valid until tsrv_stop(): they are
 * safe to hold across further requests. All functions are thread-safe.
 * Connections are keep-alive, each served by a thread of its own; a request
 * with "Expect: 100-continue" gets its 100 first. tsrv_nreplies() counts the
 * replies whose bytes have been written (for a test that must act only once
 * a transfer is flowing).
 *
 * tsrv_start(&s, replies, n) is the short form for canned replies: one
 * catch-all route (request n in arrival order gets replies[n]), listening at
 * once; tsrv_req(&s, i) is request i's head and body, tsrv_nreqs() the count.
 *
 * Porting a table of {method, exact path (query included), status, headers,
 * body, body_len} routes: one tsrv_route(&s, method, path, TSRV_TARGET, NULL,
 * &reply, 1) per entry (.body_len for binary bodies; a redirect is a 30x with
 * a "Location: ...\r\n" header). Per-request logic (a 401 unless the request
 * carries Authorization) is a tsrv_route_fn() handler; "the last request" is
 * tsrv_req(&s, tsrv_nreqs(&s) - 1) (tsrv_get()'s .head for the head alone);
 * "any request carried header H" is tsrv_header(&s, i, H, ...) >= 0 for
 * some i < tsrv_nreqs(&s). A server that sends part of a body and stalls is a
 * reply with .short_by and .hold; one cut midway is .short_by alone.
 *
 * Ownership: route, reply and header strings are borrowed and must outlive
 * the server (use static or test-scope storage); tsrv_get() results are
 * borrowed until tsrv_stop().
 */
#ifndef TKM_TSRV_H
#define TKM_TSRV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Replies are written positionally in tests ({200, NULL, "body"}); the fields
 * left out are zero, as C says, so GCC's -Wmissing-field-initializers is off
 * for the files that include this header. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

struct tsrv_reply {
    int status;
    const char *headers; /* extra header lines, each ending in \r\n */
    const char *body;    /* NUL-terminated unless body_len is set */
    int delay_ms;        /* wait this long before answering */
    int hang_ms;         /* send nothing for this long, then close; < 0: until tsrv_stop() */
    int chunks;          /* > 0: Transfer-Encoding: chunked, this many pieces 20 ms apart */
    size_t body_len;     /* 0: strlen(body) */
    int short_by;        /* > 0: announce this many more bytes than sent, then close (with
                            hold: then hold instead) */
    int hold;            /* send head and body, then hold the connection open until the
                            client closes it or tsrv_stop(): a stream that stalls. The head
                            has "Connection: close" and no Content-Length, unless short_by
                            is set: then Content-Length is body_len + short_by (a transfer
                            that stops midway) */
    int close;           /* "Connection: close" and close after this reply */
};

enum tsrv_match { TSRV_PREFIX = 0, TSRV_EXACT = 1, TSRV_TARGET = 2 };

/* One recorded request. Strings are NUL-terminated and borrowed until
 * tsrv_stop(). */
struct tsrv_request {
    const char *method;
    const char *target; /* path and query, as sent */
    const char *path;   /* without the query */
    const char *query;  /* after '?', "" when none */
    const char *head;   /* request line and headers, ending in \r\n\r\n */
    const char *body;
    size_t body_len;
    uint64_t at_ms; /* tkm_now_ms() when the head was complete */
    int conn;       /* 0-based connection number */
};

/* A route handler: fill *out (strings must stay valid until tsrv_stop(); put
 * generated text in scratch, which the server keeps). Return 0. */
typedef int (*tsrv_handler_fn)(const struct tsrv_request *req, struct tsrv_reply *out,
                               char *scratch, size_t scratch_len, void *data);

struct tsrv_route_int;
struct tsrv_rec;
struct tsrv_conn;

struct tsrv {
    /* Private: use the functions below. */
    int fd, port, started, stop;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tsrv_route_int *routes;
    int nroutes;
    struct tsrv_rec **reqs;
    int nreqs, cap_reqs;
    int conns, live;
    int nreplies;
    int *fds;
    int nfds, cap_fds;
    void *tls; /* SSL_CTX *, or NULL */
    void *old_tls[8];
    int nold_tls;
};

void tsrv_init(struct tsrv *s);
/* Adds a route (see above). replies (n >= 1) is borrowed. Returns 0 or -ENOMEM. */
int tsrv_route(struct tsrv *s, const char *method, const char *path, enum tsrv_match m,
               const char *query, const struct tsrv_reply *replies, int n);
/* Adds a route answered by fn. */
int tsrv_route_fn(struct tsrv *s, const char *method, const char *path, enum tsrv_match m,
                  const char *query, tsrv_handler_fn fn, void *data);
/* Serves TLS with this certificate chain and key (PEM files), for the
 * connections accepted from now on (may be called again while running to
 * switch certificates). Returns 0 or -EINVAL. */
int tsrv_tls(struct tsrv *s, const char *cert_file, const char *key_file);
/* Starts listening on 127.0.0.1 (an ephemeral port). Returns the port or -errno. */
int tsrv_listen(struct tsrv *s);
/* tsrv_init + one catch-all route + tsrv_listen. Returns the port or -errno. */
int tsrv_start(struct tsrv *s, const struct tsrv_reply *replies, int n);
/* Shuts down the connections open now (keep-alive ones included); the
 * server goes on accepting. For tests that need the client to reconnect. */
void tsrv_drop_conns(struct tsrv *s);
/* Closes every connection, joins every thread, frees everything. */
void tsrv_stop(struct tsrv *s);

int tsrv_nreqs(struct tsrv *s);
int tsrv_conns(struct tsrv *s);
/* Replies written so far: the head and every body byte the reply sends (a
 * short_by or hold reply counts once its partial body is out, before it
 * closes or holds; a hang_ms reply never counts). */
int tsrv_nreplies(struct tsrv *s);
/* Request i (arrival order): 0, or -ENOENT when there is none (yet). */
int tsrv_get(struct tsrv *s, int i, struct tsrv_request *out);
/* The head and body of request i ("" when absent). Borrowed until tsrv_stop(). */
const char *tsrv_req(struct tsrv *s, int i);
/* Waits up to timeout_ms for at least n requests; returns the count seen. */
int tsrv_wait(struct tsrv *s, int n, int timeout_ms);
/* The value of header name (case-insensitive) of request i into out; returns
 * its length, or -ENOENT. */
int tsrv_header(struct tsrv *s, int i, const char *name, char *out, size_t n);

/* Test PKI with the openssl CLI: in dir, <name>-ca.crt (a self-signed CA),
 * <name>.crt (a server certificate for 127.0.0.1 and localhost signed by that
 * CA) and <name>.key. Returns 0 or -EIO. */
int tsrv_make_pki(const char *dir, const char *name);

#endif
