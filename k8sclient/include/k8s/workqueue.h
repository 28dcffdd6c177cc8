/*
 * k8s/workqueue.h - a rate-limited work queue of keys on a libuv loop
 * (client-go's workqueue, single-threaded).
 *
 * Queue keys ("namespace/name"), never objects: the handler reads the current
 * state from an informer. Guarantees:
 *   - Dedup: a key added several times before it is processed is processed
 *     once (the "dirty" set).
 *   - A key is never processed twice at the same time: a key added while it
 *     is being processed (between the handler call and k8s_workqueue_done())
 *     is processed once more after done (the "processing" set).
 *   - At most `workers` keys are in processing at once (default 1). The
 *     handler may finish synchronously (call done inside the handler) or
 *     later, e.g. from an HTTP callback.
 *   - add_rate_limited() waits max(per-key backoff, token bucket): the
 *     per-key delay is base_delay_ms * 2^failures capped at max_delay_ms
 *     (5 ms .. 1000 s), the bucket refills qps tokens a second up to burst
 *     (10 / 100). done with K8S_WQ_OK (or K8S_WQ_DROP) resets the key's backoff.
 *   - add_after(): delayed adds of one key keep the earliest time.
 *
 * Handlers run from the loop (a uv timer), never inside add*() or done().
 *
 * Lifecycle: k8s_workqueue_new(loop, ...) ... k8s_workqueue_close(q,
 * closed_cb, data): no handler call happens after shutdown; keys still in
 * processing may (and should) still be passed to done(); once no key is in
 * processing the queue closes its uv handles and is freed from the loop,
 * then closed_cb runs (never from inside shutdown() or done()). The loop
 * must run until then. Single-threaded: call everything on the loop's thread.
 *
 * Errors: 0 or -ENOMEM / -EINVAL / -ESHUTDOWN (after shutdown).
 */
#ifndef K8S_WORKQUEUE_H
#define K8S_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/err.h>

struct k8s_workqueue;

/* Processes key (borrowed, valid until k8s_workqueue_done() for it). */
typedef void (*k8s_workqueue_fn)(struct k8s_workqueue *q, const char *key, void *data);

enum k8s_wq_result {
    K8S_WQ_OK = 0, /* success: forget the key's backoff */
    K8S_WQ_RETRY,  /* failure: add_rate_limited() (backoff grows) */
    K8S_WQ_DROP,   /* terminal error: forget, do not retry */
};

struct k8s_workqueue_opts {
    unsigned workers;       /* keys processed concurrently; default 1 */
    uint64_t base_delay_ms; /* default 5 */
    uint64_t max_delay_ms;  /* default 1,000,000 (1000 s) */
    double qps;             /* bucket refill rate; default 10; < 0 disables the bucket */
    unsigned burst;         /* bucket size; default 100 */
    /* How long one dispatch may run handlers back to back (handlers that
     * finish at once, a reconcile that needs no request): past it the queue
     * lets the loop poll its sockets (watch streams, replies) before it goes
     * on, so a backlog of thousands of keys never holds the loop for seconds
     * (an apiserver closes a watch whose reader stalls). Default 10 ms. */
    unsigned dispatch_budget_ms;
};

/* loop is borrowed (must outlive the queue); opts may be NULL. *out is owned:
 * end with k8s_workqueue_close(). */
int k8s_workqueue_new(uv_loop_t *loop, const struct k8s_workqueue_opts *opts, k8s_workqueue_fn fn,
                      void *data, struct k8s_workqueue **out, struct tkm_err *err);
/* key is copied. */
int k8s_workqueue_add(struct k8s_workqueue *q, const char *key);
int k8s_workqueue_add_after(struct k8s_workqueue *q, const char *key, uint64_t delay_ms);
/* delay_ms (optional) gets the delay chosen. */
int k8s_workqueue_add_rate_limited(struct k8s_workqueue *q, const char *key, uint64_t *delay_ms);
unsigned k8s_workqueue_num_requeues(const struct k8s_workqueue *q, const char *key);
/* Ends processing of key (which the handler received). A key not in
 * processing is ignored. K8S_WQ_RETRY re-adds it rate limited. */
void k8s_workqueue_done(struct k8s_workqueue *q, const char *key, enum k8s_wq_result result);
/* Ends processing and re-adds after delay_ms (controller-runtime's
 * RequeueAfter: forget + add_after). */
void k8s_workqueue_done_after(struct k8s_workqueue *q, const char *key, uint64_t delay_ms);

size_t k8s_workqueue_len(const struct k8s_workqueue *q);        /* ready, not processing */
size_t k8s_workqueue_waiting(const struct k8s_workqueue *q);    /* delayed */
size_t k8s_workqueue_processing(const struct k8s_workqueue *q); /* in the handler */

void k8s_workqueue_close(struct k8s_workqueue *q, void (*closed_cb)(void *data), void *data);

#endif
