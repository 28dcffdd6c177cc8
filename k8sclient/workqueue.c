/*
 * workqueue.c - see k8s/workqueue.h.
 *
 * Each key known to the queue has one struct item (key inside), found through
 * a strmap. An item lives while it is dirty (queued), processing, waiting
 * (in the delay heap) or has a backoff count; otherwise it is freed. Ready
 * items form a FIFO list; delayed ones a binary min-heap on ready time with
 * the heap index kept in the item, so an earlier add_after moves it up.
 * Two uv timers: `kick` (0 ms) dispatches ready keys from the loop, `delay`
 * fires at the earliest delayed item.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <k8s/workqueue.h>
#include <tkm/bug.h>
#include <tkm/util.h>

#include <tkm/backoff.h>
#include <tkm/strmap.h>

#define NOT_WAITING SIZE_MAX

struct item {
    struct item *next; /* FIFO link */
    int dirty, processing;
    size_t heap_idx;
    uint64_t ready_ms;
    struct tkm_backoff bo; /* add_rate_limited's delays; bo.steps = failures */
    char key[];
};

struct k8s_workqueue {
    uv_loop_t *loop;
    uv_timer_t kick, delay;
    struct k8s_workqueue_opts o;
    k8s_workqueue_fn fn;
    void *data;
    struct tkm_strmap items;
    struct item *head, *tail;
    size_t queued, active;
    struct item **heap;
    size_t heap_len, heap_cap;
    double tokens;
    uint64_t tokens_ms;
    int closing, handles_open, handles_closing, dispatching;
    void (*closed_cb)(void *data);
    void *closed_data;
};

static uint64_t now_ms(const struct k8s_workqueue *q)
{
    (void)q;
    return tkm_now_ms();
}

static void maybe_free_item(struct k8s_workqueue *q, struct item *it)
{
    if (it->dirty || it->processing || it->heap_idx != NOT_WAITING || it->bo.steps)
        return;
    tkm_strmap_del(&q->items, it->key);
    free(it);
}

static struct item *get_item(struct k8s_workqueue *q, const char *key, int create)
{
    struct item *it = tkm_strmap_get(&q->items, key);
    if (it || !create)
        return it;
    size_t n = strlen(key);
    it = calloc(1, sizeof *it + n + 1);
    if (!it)
        return NULL;
    memcpy(it->key, key, n + 1);
    it->heap_idx = NOT_WAITING;
    it->bo = (struct tkm_backoff){.initial_ms = q->o.base_delay_ms, .max_ms = q->o.max_delay_ms};
    if (tkm_strmap_put(&q->items, it->key, it, NULL) < 0) {
        free(it);
        return NULL;
    }
    return it;
}

/* ---- delay heap ---------------------------------------------------------- */

static void heap_swap(struct k8s_workqueue *q, size_t a, size_t b)
{
    struct item *t = q->heap[a];
    q->heap[a] = q->heap[b];
    q->heap[b] = t;
    q->heap[a]->heap_idx = a;
    q->heap[b]->heap_idx = b;
}

static void heap_up(struct k8s_workqueue *q, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (q->heap[p]->ready_ms <= q->heap[i]->ready_ms)
            break;
        heap_swap(q, p, i);
        i = p;
    }
}

static void heap_down(struct k8s_workqueue *q, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->heap_len && q->heap[l]->ready_ms < q->heap[m]->ready_ms)
            m = l;
        if (r < q->heap_len && q->heap[r]->ready_ms < q->heap[m]->ready_ms)
            m = r;
        if (m == i)
            return;
        heap_swap(q, i, m);
        i = m;
    }
}

static int heap_push(struct k8s_workqueue *q, struct item *it)
{
    if (q->heap_len == q->heap_cap) {
        size_t ncap = q->heap_cap ? q->heap_cap * 2 : 16;
        struct item **nh = reallocarray(NULL, ncap, sizeof *nh);
        if (!nh)
            return -ENOMEM;
        if (q->heap_len)
            memcpy(nh, q->heap, q->heap_len * sizeof *nh);
        free(q->heap);
        q->heap = nh;
        q->heap_cap = ncap;
    }
    it->heap_idx = q->heap_len;
    q->heap[q->heap_len++] = it;
    heap_up(q, it->heap_idx);
    return 0;
}

static struct item *heap_pop(struct k8s_workqueue *q)
{
    struct item *top = q->heap[0];
    q->heap_len--;
    if (q->heap_len) {
        q->heap[0] = q->heap[q->heap_len];
        q->heap[0]->heap_idx = 0;
        heap_down(q, 0);
    }
    top->heap_idx = NOT_WAITING;
    return top;
}

/* ---- dispatch ------------------------------------------------------------ */

static void on_kick(uv_timer_t *t);
static void on_delay(uv_timer_t *t);

/* Dispatch happens from the loop, never inside add() or done(). */
static void kick(struct k8s_workqueue *q)
{
    if (!q->closing && !q->dispatching && q->head && q->active < q->o.workers)
        uv_timer_start(&q->kick, on_kick, 0, 0);
}

static void arm_delay(struct k8s_workqueue *q)
{
    if (q->closing)
        return;
    if (!q->heap_len) {
        uv_timer_stop(&q->delay);
        return;
    }
    /* At least 1 ms: a key due already (its delay ran out while handlers
     * ran) must wait for the next loop iteration. A 0 ms timer started from
     * a timer callback runs in the same pass (libuv 1.44), before the loop
     * polls or updates its clock: on_delay -> on_kick -> handlers that requeue
     * themselves after a few ms computed from uv_now() -> due again -> ...
     * spun forever with uv_now() frozen (tkm-controller, 600 caches). */
    uint64_t now = now_ms(q), at = q->heap[0]->ready_ms;
    uv_timer_start(&q->delay, on_delay, at > now + 1 ? at - now : 1, 0);
}

static void enqueue(struct k8s_workqueue *q, struct item *it)
{
    it->next = NULL;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->queued++;
}

static void add_item(struct k8s_workqueue *q, struct item *it)
{
    if (it->dirty)
        return;
    it->dirty = 1;
    if (it->processing)
        return;
    enqueue(q, it);
    kick(q);
}

static void on_delay(uv_timer_t *t)
{
    struct k8s_workqueue *q = t->data;
    uint64_t now = now_ms(q);
    while (q->heap_len && q->heap[0]->ready_ms <= now) {
        struct item *it = heap_pop(q);
        add_item(q, it);
    }
    arm_delay(q);
}

static void on_kick(uv_timer_t *t)
{
    struct k8s_workqueue *q = t->data;
    uint64_t t0 = uv_hrtime(), budget = (uint64_t)q->o.dispatch_budget_ms * 1000000u;
    q->dispatching = 1;
    while (!q->closing && q->head && q->active < q->o.workers) {
        if (uv_hrtime() - t0 >= budget) {
            /* Yield: 1 ms, not 0, since libuv (1.44) runs a 0 ms timer
             * started from a timer callback in the same pass, before any
             * socket is polled. */
            uv_timer_start(&q->kick, on_kick, 1, 0);
            break;
        }
        struct item *it = q->head;
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        q->queued--;
        it->dirty = 0;
        it->processing = 1;
        q->active++;
        q->fn(q, it->key, q->data);
    }
    q->dispatching = 0;
}

/* ---- public -------------------------------------------------------------- */

int k8s_workqueue_new(uv_loop_t *loop, const struct k8s_workqueue_opts *opts, k8s_workqueue_fn fn,
                      void *data, struct k8s_workqueue **out, struct tkm_err *err)
{
    *out = NULL;
    if (!loop || !fn)
        return tkm_err_set(err, -EINVAL, "workqueue: loop and handler are required");
    struct k8s_workqueue *q = calloc(1, sizeof *q);
    if (!q)
        return tkm_err_set(err, -ENOMEM, "workqueue: out of memory");
    if (opts)
        q->o = *opts;
    if (!q->o.workers)
        q->o.workers = 1;
    if (!q->o.base_delay_ms)
        q->o.base_delay_ms = 5;
    if (!q->o.max_delay_ms)
        q->o.max_delay_ms = 1000u * 1000u;
    if (q->o.qps == 0)
        q->o.qps = 10;
    if (!q->o.burst)
        q->o.burst = 100;
    if (!q->o.dispatch_budget_ms)
        q->o.dispatch_budget_ms = 10;
    q->loop = loop;
    q->fn = fn;
    q->data = data;
    q->tokens = q->o.burst;
    q->tokens_ms = tkm_now_ms();
    uv_timer_init(loop, &q->kick);
    uv_timer_init(loop, &q->delay);
    q->kick.data = q;
    q->delay.data = q;
    q->handles_open = 2;
    *out = q;
    return 0;
}

/* The key's item, made when new: 0, -ESHUTDOWN after shutdown, -EINVAL, -ENOMEM. */
static int item_for(struct k8s_workqueue *q, const char *key, struct item **out)
{
    if (q->closing)
        return -ESHUTDOWN;
    if (!key)
        return -EINVAL;
    return (*out = get_item(q, key, 1)) ? 0 : -ENOMEM;
}

int k8s_workqueue_add(struct k8s_workqueue *q, const char *key)
{
    struct item *it;
    int rc = item_for(q, key, &it);
    if (rc < 0)
        return rc;
    add_item(q, it);
    return 0;
}

int k8s_workqueue_add_after(struct k8s_workqueue *q, const char *key, uint64_t delay_ms)
{
    struct item *it;
    int rc;
    if (delay_ms == 0)
        return k8s_workqueue_add(q, key);
    if ((rc = item_for(q, key, &it)) < 0)
        return rc;
    uint64_t at = now_ms(q) + delay_ms;
    if (it->heap_idx != NOT_WAITING) {
        if (at < it->ready_ms) {
            it->ready_ms = at;
            heap_up(q, it->heap_idx);
            arm_delay(q);
        }
        return 0;
    }
    it->ready_ms = at;
    rc = heap_push(q, it);
    if (rc < 0) {
        maybe_free_item(q, it);
        return rc;
    }
    arm_delay(q);
    return 0;
}

static uint64_t bucket_delay(struct k8s_workqueue *q)
{
    if (q->o.qps < 0)
        return 0;
    uint64_t now = tkm_now_ms();
    q->tokens += (double)(now - q->tokens_ms) * q->o.qps / 1000.0;
    if (q->tokens > q->o.burst)
        q->tokens = q->o.burst;
    q->tokens_ms = now;
    q->tokens -= 1;
    if (q->tokens >= 0)
        return 0;
    return (uint64_t)ceil(-q->tokens * 1000.0 / q->o.qps);
}

int k8s_workqueue_add_rate_limited(struct k8s_workqueue *q, const char *key, uint64_t *delay_ms)
{
    struct item *it;
    int rc = item_for(q, key, &it);
    if (rc < 0)
        return rc;
    uint64_t d = tkm_backoff_next(&it->bo, 0);
    uint64_t b = bucket_delay(q);
    if (b > d)
        d = b;
    if (delay_ms)
        *delay_ms = d;
    return k8s_workqueue_add_after(q, key, d);
}

unsigned k8s_workqueue_num_requeues(const struct k8s_workqueue *q, const char *key)
{
    const struct item *it = tkm_strmap_get(&q->items, key);
    return it ? it->bo.steps : 0;
}

static void maybe_finish_close(struct k8s_workqueue *q);

static struct item *end_processing(struct k8s_workqueue *q, const char *key)
{
    struct item *it = get_item(q, key, 0);
    if (!it || !it->processing)
        return NULL;
    it->processing = 0;
    q->active--;
    if (it->dirty && !q->closing)
        enqueue(q, it);
    return it;
}

/* end_processing, and the item when the queue goes on (NULL after shutdown). */
static struct item *end_open(struct k8s_workqueue *q, const char *key)
{
    struct item *it = end_processing(q, key);
    if (it && q->closing) {
        maybe_finish_close(q);
        return NULL;
    }
    return it;
}

void k8s_workqueue_done(struct k8s_workqueue *q, const char *key, enum k8s_wq_result result)
{
    struct item *it = end_open(q, key);
    if (!it)
        return;
    if (result == K8S_WQ_RETRY) {
        k8s_workqueue_add_rate_limited(q, key, NULL);
    } else {
        tkm_backoff_reset(&it->bo);
        maybe_free_item(q, it);
    }
    kick(q);
}

void k8s_workqueue_done_after(struct k8s_workqueue *q, const char *key, uint64_t delay_ms)
{
    struct item *it = end_open(q, key);
    if (!it)
        return;
    tkm_backoff_reset(&it->bo);
    if (k8s_workqueue_add_after(q, key, delay_ms) < 0)
        maybe_free_item(q, it);
    kick(q);
}

size_t k8s_workqueue_len(const struct k8s_workqueue *q)
{
    return q->queued;
}

size_t k8s_workqueue_waiting(const struct k8s_workqueue *q)
{
    return q->heap_len;
}

size_t k8s_workqueue_processing(const struct k8s_workqueue *q)
{
    return q->active;
}

static void free_queue(struct k8s_workqueue *q)
{
    size_t pos = 0;
    void *v;
    while (tkm_strmap_next(&q->items, &pos, NULL, &v))
        free(v);
    tkm_strmap_release(&q->items);
    free(q->heap);
    void (*cb)(void *) = q->closed_cb;
    void *d = q->closed_data;
    free(q);
    if (cb)
        cb(d);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct k8s_workqueue *q = h->data;
    if (--q->handles_open == 0)
        free_queue(q);
}

/* Closes the uv handles once nothing is in processing; the memory is freed
 * (and closed_cb called) from the last close callback, i.e. from the loop. */
static void maybe_finish_close(struct k8s_workqueue *q)
{
    if (!q->closing || q->active > 0 || q->handles_closing)
        return;
    q->handles_closing = 1;
    uv_close((uv_handle_t *)&q->kick, on_handle_closed);
    uv_close((uv_handle_t *)&q->delay, on_handle_closed);
}

void k8s_workqueue_close(struct k8s_workqueue *q, void (*closed_cb)(void *data), void *data)
{
    if (!q || TKM_BUG(q->closing)) /* a second shutdown would wait forever */
        return;
    q->closing = 1;
    q->closed_cb = closed_cb;
    q->closed_data = data;
    uv_timer_stop(&q->kick);
    uv_timer_stop(&q->delay);
    maybe_finish_close(q);
}
