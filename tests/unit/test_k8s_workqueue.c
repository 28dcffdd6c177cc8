/* Unit tests for k8sclient/workqueue.c on a real libuv loop. */
#include <uv.h>

#include <k8s/workqueue.h>
#include <tkm/util.h>

#include "test.h"

struct rec {
    struct k8s_workqueue *q;
    int calls;
    char keys[64][32];
    uint64_t at[64];
    int in_flight; /* keys handed out and not done */
    int max_in_flight;
    int hold; /* 1: do not call done in the handler */
    char held[64][32];
    int nheld;
    enum k8s_wq_result result;
    int retry_until; /* RETRY while calls < retry_until */
    int concurrent_same_key;
};

static void handler(struct k8s_workqueue *q, const char *key, void *data)
{
    struct rec *r = data;
    for (int i = 0; i < r->nheld; i++)
        if (strcmp(r->held[i], key) == 0)
            r->concurrent_same_key++;
    if (r->calls < 64) {
        snprintf(r->keys[r->calls], sizeof r->keys[0], "%s", key);
        r->at[r->calls] = tkm_now_ms();
    }
    r->calls++;
    r->in_flight++;
    if (r->in_flight > r->max_in_flight)
        r->max_in_flight = r->in_flight;
    if (r->hold) {
        snprintf(r->held[r->nheld++], sizeof r->held[0], "%s", key);
        return;
    }
    r->in_flight--;
    k8s_workqueue_done(q, key, r->calls < r->retry_until ? K8S_WQ_RETRY : r->result);
}

static void release_held(struct rec *r)
{
    int n = r->nheld;
    r->nheld = 0;
    for (int i = 0; i < n; i++) {
        r->in_flight--;
        k8s_workqueue_done(r->q, r->held[i], K8S_WQ_OK);
    }
}

/* For tests that count the handlers one uv_run(NOWAIT) dispatched: a budget no
 * starved run (valgrind in CI's background phases) uses up, so every ready key
 * is handed out in that one pass; dispatch_budget_yields_to_io tests the budget. */
#define WHOLE_PASS_MS 600000

static int closed;
static void on_closed(void *d)
{
    (void)d;
    closed++;
}

static void finish(uv_loop_t *loop, struct k8s_workqueue *q)
{
    closed = 0;
    k8s_workqueue_close(q, on_closed, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    ASSERT_EQ(closed, 1);
    ASSERT_OK(uv_loop_close(loop));
}

TEST(dedup_before_processing)
{
    uv_loop_t loop;
    struct rec r = {0};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.dispatch_budget_ms = WHOLE_PASS_MS};
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, handler, &r, &q, NULL));
    r.q = q;
    for (int i = 0; i < 3; i++)
        ASSERT_OK(k8s_workqueue_add(q, "ns/a"));
    ASSERT_OK(k8s_workqueue_add(q, "ns/b"));
    ASSERT_EQ(r.calls, 0); /* never inside add() */
    ASSERT_EQ(k8s_workqueue_len(q), 2);
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 2);
    ASSERT_STREQ(r.keys[0], "ns/a");
    ASSERT_STREQ(r.keys[1], "ns/b");
    ASSERT_EQ(k8s_workqueue_len(q), 0);
    finish(&loop, q);
}

TEST(key_never_processed_concurrently)
{
    uv_loop_t loop;
    struct rec r = {.hold = 1};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.workers = 4, .dispatch_budget_ms = WHOLE_PASS_MS};
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, handler, &r, &q, NULL));
    r.q = q;
    ASSERT_OK(k8s_workqueue_add(q, "k"));
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 1);
    ASSERT_EQ(k8s_workqueue_processing(q), 1);
    /* 10,000 adds while "k" is processing: none dispatched now, one later. */
    for (int i = 0; i < 10000; i++)
        ASSERT_OK(k8s_workqueue_add(q, "k"));
    ASSERT_OK(k8s_workqueue_add(q, "other"));
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 2); /* only "other" */
    ASSERT_STREQ(r.keys[1], "other");
    ASSERT_EQ(r.concurrent_same_key, 0);
    r.hold = 0;
    release_held(&r);
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 3);
    ASSERT_STREQ(r.keys[2], "k");
    ASSERT_EQ(r.concurrent_same_key, 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 3);
    finish(&loop, q);
}

TEST(workers_limit_concurrency)
{
    uv_loop_t loop;
    struct rec r = {.hold = 1};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.workers = 2, .dispatch_budget_ms = WHOLE_PASS_MS};
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, handler, &r, &q, NULL));
    r.q = q;
    for (int i = 0; i < 5; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        ASSERT_OK(k8s_workqueue_add(q, k));
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 2);
    ASSERT_EQ(k8s_workqueue_len(q), 3);
    r.hold = 0;
    release_held(&r);
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 5);
    ASSERT_EQ(r.max_in_flight, 2);
    finish(&loop, q);
}

TEST(backoff_grows_and_success_resets)
{
    uv_loop_t loop;
    struct rec r = {0};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.base_delay_ms = 5, .max_delay_ms = 100, .qps = -1};
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, handler, &r, &q, NULL));
    r.q = q;
    uint64_t want[] = {5, 10, 20, 40, 80, 100, 100};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(want); i++) {
        uint64_t d = 0;
        ASSERT_OK(k8s_workqueue_add_rate_limited(q, "x", &d));
        ASSERT_UEQ(d, want[i]);
        ASSERT_EQ(k8s_workqueue_num_requeues(q, "x"), (long long)i + 1);
    }
    /* The key comes due and the handler ends it with K8S_WQ_OK: its backoff
     * is forgotten. */
    while (r.calls == 0)
        uv_run(&loop, UV_RUN_ONCE);
    ASSERT_EQ(r.calls, 1);
    ASSERT_EQ(k8s_workqueue_num_requeues(q, "x"), 0);
    uint64_t d = 0;
    ASSERT_OK(k8s_workqueue_add_rate_limited(q, "x", &d));
    ASSERT_UEQ(d, 5);
    finish(&loop, q);
}

/* The handler fails 3 times: the key is retried after 5, 10 and 20 ms. */
TEST(retry_waits_backoff)
{
    uv_loop_t loop;
    struct rec r = {.retry_until = 4, .result = K8S_WQ_OK};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.base_delay_ms = 5, .qps = -1};
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, handler, &r, &q, NULL));
    r.q = q;
    ASSERT_OK(k8s_workqueue_add(q, "x"));
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 4);
    ASSERT(r.at[1] - r.at[0] >= 5);
    ASSERT(r.at[2] - r.at[1] >= 10);
    ASSERT(r.at[3] - r.at[2] >= 20);
    ASSERT_EQ(k8s_workqueue_num_requeues(q, "x"), 0); /* success forgot it */
    finish(&loop, q);
}

TEST(token_bucket_limits_rate)
{
    uv_loop_t loop;
    struct rec r = {0};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.base_delay_ms = 1, .qps = 10, .burst = 2};
    /* before the loop's clock starts: each delay counts from the loop's time at
     * its add, which is never earlier than this (on a loaded machine or under
     * valgrind, much may pass between the adds and the run) */
    uint64_t t0 = tkm_now_ms();
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, handler, &r, &q, NULL));
    r.q = q;
    uint64_t d[5], took[5];
    for (int i = 0; i < 5; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%d", i);
        ASSERT_OK(k8s_workqueue_add_rate_limited(q, k, &d[i]));
        took[i] = tkm_now_ms() - t0; /* time the bucket may have refilled by */
    }
    ASSERT_UEQ(d[0], 1); /* per-item 1 ms, bucket has tokens */
    ASSERT_UEQ(d[1], 1);
    /* Then 10/s: key i waits (i - 1) * 100 ms, less 1 ms for each ms that passed
     * since the bucket was full (the refill), never more: on a quiet machine the
     * adds take well under a ms; a starved one (valgrind in CI's background
     * phases) may take tens, and the bound follows. */
    for (int i = 2; i < 5; i++) {
        uint64_t full = (uint64_t)(i - 1) * 100;
        ASSERT(d[i] <= full);
        ASSERT(d[i] + took[i] + 1 >= full);
        ASSERT(d[i] > d[i - 1] || took[i] > 50);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 5);
    ASSERT(r.at[4] - t0 >= d[4] - 1); /* ms rounding of the two clocks */
    finish(&loop, q);
}

TEST(add_after_keeps_earliest_and_dedups)
{
    uv_loop_t loop;
    struct rec r = {0};
    struct k8s_workqueue *q;
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, NULL, handler, &r, &q, NULL));
    r.q = q;
    uint64_t t0 = tkm_now_ms();
    /* "b" first: each delay counts from its own add, so "b" is due before "a"
     * however long a starved run (valgrind) spends between the adds */
    ASSERT_OK(k8s_workqueue_add_after(q, "b", 20));
    ASSERT_OK(k8s_workqueue_add_after(q, "a", 300));
    ASSERT_OK(k8s_workqueue_add_after(q, "a", 40));
    ASSERT_OK(k8s_workqueue_add_after(q, "a", 200));
    ASSERT_EQ(k8s_workqueue_waiting(q), 2);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 2);
    ASSERT_STREQ(r.keys[0], "b");
    ASSERT_STREQ(r.keys[1], "a");
    ASSERT(r.at[1] - t0 >= 40 && r.at[1] - t0 < 200u * tkm_test_timeout_scale());
    finish(&loop, q);
}

TEST(done_after_shutdown_frees_later)
{
    uv_loop_t loop;
    struct rec r = {.hold = 1};
    struct k8s_workqueue *q;
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, NULL, handler, &r, &q, NULL));
    r.q = q;
    ASSERT_OK(k8s_workqueue_add(q, "a"));
    ASSERT_OK(k8s_workqueue_add(q, "b"));
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(r.calls, 1);
    closed = 0;
    k8s_workqueue_close(q, on_closed, NULL);
    ASSERT_EQ(k8s_workqueue_add(q, "c"), -ESHUTDOWN);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(closed, 0); /* "a" still processing */
    ASSERT_EQ(r.calls, 1);
    release_held(&r);
    ASSERT_EQ(closed, 0); /* never from inside done() */
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(closed, 1);
    ASSERT_OK(uv_loop_close(&loop));
}

/* A backlog of keys whose handlers finish at once must not hold the loop:
 * each dispatch runs handlers for at most dispatch_budget_ms, then the loop
 * polls (a uv_check handle runs once per poll). */
struct busy {
    uv_loop_t *loop;
    int calls, iterations;
};

static void busy_handler(struct k8s_workqueue *q, const char *key, void *data)
{
    struct busy *b = data;
    uint64_t t0 = uv_hrtime();
    while (uv_hrtime() - t0 < 1000000u) /* 1 ms of work, as a reconcile that parses a cache */
        ;
    b->calls++;
    k8s_workqueue_done(q, key, K8S_WQ_OK);
    if (b->calls == 300)
        uv_stop(b->loop);
}

static void count_iteration(uv_check_t *c)
{
    struct busy *b = c->data;
    b->iterations++;
}

TEST(dispatch_budget_yields_to_io)
{
    uv_loop_t loop;
    uv_check_t check;
    struct busy b = {.loop = &loop};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.workers = 64, .dispatch_budget_ms = 10};
    char key[16];
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, busy_handler, &b, &q, NULL));
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        ASSERT_OK(k8s_workqueue_add(q, key));
    }
    ASSERT_OK(uv_check_init(&loop, &check));
    check.data = &b;
    ASSERT_OK(uv_check_start(&check, count_iteration));
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(b.calls, 300);
    /* 300 ms of handlers in 10 ms slices: about 30 polls; all at once would be 1 */
    ASSERT(b.iterations >= 10);
    uv_close((uv_handle_t *)&check, NULL);
    finish(&loop, q);
}

/* Handlers that take longer than the delays they ask for (a reconcile of
 * 2 ms that requeues itself after 1 ms) must not keep the loop in one timer
 * pass: the loop's clock (uv_now) has to advance between rounds, or delays
 * computed from it never run out. */
struct requeue {
    uv_loop_t *loop;
    int calls, per_key[20], iterations;
    uint64_t first_now, last_now;
};

static void requeue_handler(struct k8s_workqueue *q, const char *key, void *data)
{
    struct requeue *r = data;
    int64_t k = 0;
    if (tkm_parse_i64(key + 1, 0, 19, &k) < 0)
        return;
    uint64_t t0 = uv_hrtime();
    while (uv_hrtime() - t0 < 2000000u)
        ;
    if (!r->calls++)
        r->first_now = uv_now(r->loop);
    r->last_now = uv_now(r->loop);
    if (++r->per_key[k] < 10) {
        k8s_workqueue_done_after(q, key, 1);
    } else {
        k8s_workqueue_done(q, key, K8S_WQ_OK);
        if (r->calls == 200)
            uv_stop(r->loop);
    }
}

static void count_requeue_iteration(uv_check_t *c)
{
    struct requeue *r = c->data;
    r->iterations++;
}

TEST(short_requeues_let_the_loop_clock_advance)
{
    uv_loop_t loop;
    uv_check_t check;
    struct requeue r = {.loop = &loop};
    struct k8s_workqueue *q;
    struct k8s_workqueue_opts o = {.workers = 64, .dispatch_budget_ms = 10};
    char key[16];
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(k8s_workqueue_new(&loop, &o, requeue_handler, &r, &q, NULL));
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ASSERT_OK(k8s_workqueue_add(q, key));
    }
    ASSERT_OK(uv_check_init(&loop, &check));
    check.data = &r;
    ASSERT_OK(uv_check_start(&check, count_requeue_iteration));
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(r.calls, 200);
    /* 400 ms of handlers: the loop polled between rounds and its clock moved */
    ASSERT(r.iterations >= 10);
    ASSERT(r.last_now - r.first_now >= 200);
    uv_close((uv_handle_t *)&check, NULL);
    finish(&loop, q);
}
