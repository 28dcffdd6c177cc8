/*
 * daemon.h - signals and the stop, the same for the three daemons.
 *
 * A daemon's main() owns one struct tkm_daemon (static or on its stack) and
 * its loop. tkm_daemon_init() installs SIGTERM and SIGINT (and SIGHUP when
 * opts.on_hup is set) on the loop and ignores SIGPIPE. The first SIGTERM or
 * SIGINT, or the daemon's own tkm_daemon_stop() (--once done, leadership
 * lost, a start that failed), calls opts.on_stop once; later signals are
 * logged and otherwise ignored.
 *
 * The stop is a set of closes, each reported by a callback, never a timer:
 * on_stop starts every component's close (`x_close(obj, tkm_daemon_closed,
 * tkm_daemon_closing(d))`), and a close callback may start more (a chain:
 * drain the queue, then release the lease, then close the client). When the
 * last close started reports, the signal handles are closed: the loop ends
 * once nothing else is open and tkm_daemon_run() returns the exit status
 * (0 after a signal; tkm_daemon_stop's code otherwise). A component that
 * never reports keeps the daemon running (kubelet's grace period ends it):
 * there is no exit() behind the caller's back.
 *
 * Single-threaded: everything runs on the loop's thread.
 */
#ifndef TKM_DAEMON_H
#define TKM_DAEMON_H

#include <uv.h>

#include <tkm/err.h>

/* A set of closes that reports once, when the last of them has finished:
 *   tkm_closer_init(&g, all_closed, data);          (holds the set open)
 *   x_close(x, tkm_closer_done, tkm_closer_add(&g)); ... for each
 *   tkm_closer_done(&g);                            (the hold: all_closed may run now)
 * A close that reports at once, inside x_close, is fine: the hold keeps the
 * set from finishing before the others have started. g is the caller's until
 * done runs (done may free it). */
struct tkm_closer {
    unsigned pending;
    void (*done)(void *data);
    void *data;
};
void tkm_closer_init(struct tkm_closer *g, void (*done)(void *data), void *data);
void *tkm_closer_add(struct tkm_closer *g); /* returns g, the data for tkm_closer_done */
void tkm_closer_done(void *g);

struct tkm_daemon;

struct tkm_daemon_opts {
    /* Starts the closes (the first stop only). signum: SIGTERM or SIGINT, 0 for
     * tkm_daemon_stop(). */
    void (*on_stop)(struct tkm_daemon *d, int signum, void *data);
    void (*on_hup)(struct tkm_daemon *d, void *data); /* NULL: SIGHUP keeps its default */
    void *data;
};

struct tkm_daemon {
    uv_loop_t *loop;
    struct tkm_daemon_opts o;
    uv_signal_t sig_term, sig_int, sig_hup;
    struct tkm_closer closes; /* the stop's closes (from the first stop on) */
    int stopping;
    int exit_code;
};

/* 0, or a negative libuv code with err (the signal handlers). */
int tkm_daemon_init(struct tkm_daemon *d, uv_loop_t *loop, const struct tkm_daemon_opts *o,
                    struct tkm_err *err);
/* Stops with exit status code (the first stop's code wins). From the loop. */
void tkm_daemon_stop(struct tkm_daemon *d, int code);
/* One more close in flight (from on_stop, or a close callback after it):
 * returns d, the data for tkm_daemon_closed. */
void *tkm_daemon_closing(struct tkm_daemon *d);
/* A close callback (data: from tkm_daemon_closing): that close has finished. */
void tkm_daemon_closed(void *data);
/* Starts obj's close, counted, when obj is not NULL (every close function of
 * tkm and k8sclient is a no-op without a callback on NULL):
 *   TKM_DAEMON_CLOSE(d, k8s_client_close, app->client);
 * is close_fn(obj, tkm_daemon_closed, tkm_daemon_closing(d)). */
#define TKM_DAEMON_CLOSE(d, close_fn, obj)                                                         \
    do {                                                                                           \
        if (obj)                                                                                   \
            close_fn((obj), tkm_daemon_closed, tkm_daemon_closing(d));                             \
    } while (0)
/* Runs the loop until it ends; returns the exit status. */
int tkm_daemon_run(struct tkm_daemon *d);

#endif
