/*
 * httpd.h - a small HTTP/1.1 server on the caller's libuv loop, for /metrics,
 * /healthz and /readyz (libmicrohttpd, driven by the loop: no MHD threads).
 *
 * One struct tkm_httpd serves one bind address. A daemon with
 * --metrics-bind-address and --health-probe-bind-address creates two (or one
 * when both strings are equal: then it registers every route on it).
 *
 * Bind address syntax (controller-runtime's):
 *   "host:port"    an IPv4 literal, "[IPv6]" literal or "localhost" (127.0.0.1).
 *                  Other host names are refused: resolving would block the loop.
 *   ":port"        all interfaces (IPv6 dual stack "[::]", else 0.0.0.0)
 *   "0"            disabled: tkm_httpd_new() returns 0 with *out = NULL, and
 *                  every function here accepts that NULL server as a no-op.
 *   port 0         an ephemeral port; tkm_httpd_addr() says which.
 *
 * How it runs: MHD in external epoll mode. Its one epoll fd is watched with a
 * uv_poll_t, its timeouts run on a uv_timer_t (MHD_get_timeout), and MHD_run()
 * is called from their callbacks. Handlers therefore run on the loop thread
 * and may read daemon state without locks; they must not block.
 *
 * Requests: routes match the path exactly (no query string, no prefix
 * matching). Only GET and HEAD are served (HEAD: the GET response without
 * its body); any other method gets 405 with "Allow: GET, HEAD", an unknown
 * path 404. Limits against slow or hostile clients (struct tkm_httpd_opts):
 * a connection's memory (request line + headers, 431/413 beyond), the number
 * of connections (in total and per client address; the surplus is closed at
 * once), and an inactivity timeout after which a connection is closed (a
 * client that sends half a request and stalls holds one slot until then, and
 * never blocks other clients: every socket is non-blocking).
 *
 * Lifecycle:
 *   tkm_httpd_new(loop, addr, opts, &srv, err)   bind + listen; serving starts
 *   tkm_httpd_handle(srv, path, fn, data, err)   add routes (any time)
 *   tkm_httpd_close(srv, closed_cb, data)        stops listening, closes every
 *                                                connection, closes the uv handles;
 *                                                memory is freed from the last uv
 *                                                close callback, then closed_cb runs
 * The loop must keep running until closed_cb has run. close may be called from
 * inside a handler (the teardown waits until MHD_run() has returned).
 *
 * Single-threaded: every function runs on the loop's thread.
 */
#ifndef TKM_HTTPD_H
#define TKM_HTTPD_H

#include <stddef.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/err.h>

struct tkm_httpd;

/* Server-wide limits; all optional (zero = default). */
struct tkm_httpd_opts {
    unsigned max_connections;        /* default 64 */
    unsigned max_connections_per_ip; /* default 32 (half the default total) */
    unsigned timeout_s;              /* inactivity timeout, default 10 s */
    size_t conn_memory;              /* per-connection request memory, default 32 KiB */
    size_t max_body;                 /* cap of a response body, default 16 MiB */
};

/* One request, borrowed for the duration of the handler call. */
struct tkm_httpd_req {
    const char *method; /* "GET" or "HEAD" */
    const char *path;   /* the route's path */
    void *conn;         /* private (the MHD connection) */
};

/* The response a handler fills. Before the call: status 200, content_type
 * "text/plain; charset=utf-8", body empty (max = opts.max_body). The body is
 * owned by the server (the handler only appends to it). */
struct tkm_httpd_resp {
    int status;
    char content_type[128];
    struct tkm_buf body;
};

/* Fills resp. Returns 0, or < 0 to answer 500 (the body is replaced by a
 * short message and the code is logged). */
typedef int (*tkm_httpd_handler)(struct tkm_httpd *srv, const struct tkm_httpd_req *req,
                                 struct tkm_httpd_resp *resp, void *data);

/* Parses a bind address (syntax above) without binding. Returns 1 for a
 * listen address (host, at most hostlen bytes with the NUL, gets the host
 * without brackets, "" for all interfaces; *port the port), 0 for "0"
 * (disabled), -EINVAL with err naming the address otherwise. */
int tkm_httpd_parse_addr(const char *addr, char *host, size_t hostlen, unsigned *port,
                         struct tkm_err *err);

/* Binds addr and starts serving on loop (borrowed; must outlive the server).
 * opts may be NULL. *out is owned: end it with tkm_httpd_close(); it is NULL
 * (and 0 returned) when addr is "0". Errors: -EINVAL (bad address),
 * -EADDRINUSE (err: "... address already in use"), -EACCES, other socket
 * errors, -ENOMEM; err names the address. */
int tkm_httpd_new(uv_loop_t *loop, const char *addr, const struct tkm_httpd_opts *opts,
                  struct tkm_httpd **out, struct tkm_err *err);

/* Routes GET/HEAD of path (exact, starting with '/'; copied) to fn with data
 * (borrowed; must stay valid until closed_cb). -EEXIST if path already has a
 * route, -EINVAL for a path without a leading '/'. srv NULL: returns 0. */
int tkm_httpd_handle(struct tkm_httpd *srv, const char *path, tkm_httpd_handler fn, void *data,
                     struct tkm_err *err);

/* The bound address as "host:port" ("[::]:8080"), borrowed from srv; "0"
 * for a NULL server. */
const char *tkm_httpd_addr(const struct tkm_httpd *srv);

/* Open client connections right now (tests, metrics). */
unsigned tkm_httpd_connections(const struct tkm_httpd *srv);

/* Stops the server (see the lifecycle above). srv NULL: no-op, closed_cb is
 * not called. */
void tkm_httpd_close(struct tkm_httpd *srv, void (*closed_cb)(void *data), void *data);

/* Looks up key in the request's query string. Returns 1 if present (*value,
 * optional, gets the decoded value, borrowed for the handler call, or NULL
 * for a bare "?key"), 0 if absent. */
int tkm_httpd_req_query(const struct tkm_httpd_req *req, const char *key, const char **value);

/*
 * Health checks, controller-runtime's healthz style. An endpoint ("/healthz",
 * "/readyz") runs its checks in the order they were added:
 *   all pass -> 200, body "ok" (with ?verbose: "[+]name ok" per check, then
 *               "<endpoint> check passed")
 *   any fail -> 503, body "[+]name ok" / "[-]name failed: <reason>" per check,
 *               then "<endpoint> check failed"; the failures are logged.
 * An endpoint without checks answers 200 "ok". Each check is also served
 * alone at "<endpoint>/<name>" (200 "ok", or 503 "<reason>").
 */

/* 0 = healthy; non-zero = failing, with a one-line reason written into
 * reason (n bytes, NUL-terminated; "" becomes "not ready"). */
typedef int (*tkm_health_check_fn)(void *data, char *reason, size_t n);

/* Registers endpoint (e.g. "/readyz") with no checks yet. -EEXIST if the path
 * is routed to something else; a second call for the same endpoint is 0. */
int tkm_httpd_health(struct tkm_httpd *srv, const char *endpoint, struct tkm_err *err);

/* Adds check name ([A-Za-z0-9_.-]+, unique per endpoint, copied) to endpoint,
 * registering the endpoint first if needed. data is borrowed until closed_cb. */
int tkm_httpd_add_check(struct tkm_httpd *srv, const char *endpoint, const char *name,
                        tkm_health_check_fn fn, void *data, struct tkm_err *err);

#endif
