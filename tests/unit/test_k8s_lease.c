/* Unit tests for k8sclient/lease.c that need no apiserver: option checks,
 * and an elector facing an address where nothing listens (it must keep
 * trying at its retry period, never lead, and stop cleanly). The behaviour
 * against a real apiserver is tested by tests/e2e/k8s_lease.sh. */
#include <uv.h>

#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/lease.h>
#include <tkm/util.h>

#include "test.h"

static const char kubeconfig[] = "apiVersion: v1\n"
                                 "kind: Config\n"
                                 "clusters:\n"
                                 "- name: none\n"
                                 "  cluster: {server: \"http://127.0.0.1:1\"}\n"
                                 "users:\n"
                                 "- name: nobody\n"
                                 "  user: {}\n"
                                 "contexts:\n"
                                 "- name: none\n"
                                 "  context: {cluster: none, user: nobody, namespace: ns1}\n"
                                 "current-context: none\n";

static struct k8s_client *client(uv_loop_t *loop)
{
    struct k8s_config cfg;
    struct k8s_client *c = NULL;
    struct tkm_err err = {0};
    k8s_config_init(&cfg);
    ASSERT_OK(k8s_config_load_yaml(&cfg, kubeconfig, strlen(kubeconfig), "/", "test", NULL, &err));
    ASSERT_OK(k8s_client_new(loop, &cfg, NULL, &c, &err));
    k8s_config_release(&cfg);
    return c;
}

struct counts {
    int started, stopped, closed;
};

static void started(void *d)
{
    ((struct counts *)d)->started++;
}

static void stopped(void *d)
{
    ((struct counts *)d)->stopped++;
}

static void closed(void *d)
{
    ((struct counts *)d)->closed++;
}

TEST(lease_options_checked)
{
    uv_loop_t loop;
    struct k8s_lease *l = NULL;
    struct tkm_err err = {0};
    ASSERT_OK(uv_loop_init(&loop));
    struct k8s_client *c = client(&loop);
    struct k8s_lease_opts o = {.name = "x"};
    ASSERT_EQ(k8s_lease_start(c, &o, &l, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "name and identity are required");
    ASSERT_NULL(l);
    tkm_err_clear(&err);
    o = (struct k8s_lease_opts){
        .name = "x", .identity = "me", .lease_duration_ms = 10000, .renew_deadline_ms = 10000};
    ASSERT_EQ(k8s_lease_start(c, &o, &l, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "must exceed the renew deadline");
    tkm_err_clear(&err);
    o = (struct k8s_lease_opts){.name = "x",
                                .identity = "me",
                                .lease_duration_ms = 15000,
                                .renew_deadline_ms = 2400,
                                .retry_period_ms = 2000};
    ASSERT_EQ(k8s_lease_start(c, &o, &l, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "1.2 x the retry period");
    ASSERT_NULL(l);
    k8s_client_free(c);
    ASSERT_OK(uv_loop_close(&loop));
}

struct run {
    struct k8s_lease *l;
    struct k8s_client *c;
    struct counts n;
    int was_leader;
};

static void stop_timer_cb(uv_timer_t *t)
{
    struct run *r = t->data;
    r->was_leader |= k8s_lease_is_leader(r->l);
    k8s_lease_close(r->l, closed, &r->n);
    k8s_client_close(r->c, NULL, NULL);
    uv_close((uv_handle_t *)t, NULL);
}

TEST(lease_unreachable_server_never_leads)
{
    uv_loop_t loop;
    uv_timer_t t;
    struct run r = {0};
    struct tkm_err err = {0};
    ASSERT_OK(uv_loop_init(&loop));
    r.c = client(&loop);
    struct k8s_lease_opts o = {.name = "leader",
                               .identity = "me",
                               .lease_duration_ms = 1500,
                               .renew_deadline_ms = 1000,
                               .retry_period_ms = 100,
                               .release_on_stop = 1,
                               .on_started_leading = started,
                               .on_stopped_leading = stopped,
                               .data = &r.n};
    ASSERT_OK(k8s_lease_start(r.c, &o, &r.l, &err));
    ASSERT_EQ(k8s_lease_is_leader(r.l), 0);
    uv_timer_init(&loop, &t);
    t.data = &r;
    uint64_t t0 = tkm_now_ms();
    uv_update_time(&loop);
    uv_timer_start(&t, stop_timer_cb, 1200, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT(tkm_now_ms() - t0 >= 1190);
    ASSERT_EQ(r.was_leader, 0);
    ASSERT_EQ(r.n.started, 0);
    ASSERT_EQ(r.n.stopped, 0);
    ASSERT_EQ(r.n.closed, 1);
    ASSERT_OK(uv_loop_close(&loop));
}

/* The retry test samples the stats every 10 ms until the fourth attempt.
 * Attempts start a retry period (100..120 ms) after the last one ended, so
 * at any instant there can be at most elapsed/100 + 1 of them; under load
 * there are fewer, and the test waits for them rather than counting what a
 * fixed second held (the runner's scaled per-test alarm fails an elector
 * that stops trying). */
struct retry_run {
    struct run r;
    uint64_t t0, fourth_ms;
    uv_timer_t *stop;
};

static void sample_cb(uv_timer_t *t)
{
    struct retry_run *rr = t->data;
    const struct k8s_lease_stats *s = k8s_lease_get_stats(rr->r.l);
    uint64_t el = tkm_now_ms() - rr->t0;
    ASSERT(s->attempts <= el / 100 + 1);    /* never faster than the retry period */
    ASSERT(s->failures + 1 >= s->attempts); /* all failed; one may be in flight */
    ASSERT_EQ(s->renewals, 0);
    ASSERT_EQ(s->acquired, 0);
    if (s->attempts < 4)
        return;
    rr->fourth_ms = el;
    ASSERT(s->failures >= 3);
    uv_close((uv_handle_t *)t, NULL); /* stops it */
    uv_timer_start(rr->stop, stop_timer_cb, 0, 0);
}

TEST(lease_retries_at_retry_period)
{
    uv_loop_t loop;
    uv_timer_t stop, sample;
    struct retry_run rr = {.stop = &stop};
    struct tkm_err err = {0};
    ASSERT_OK(uv_loop_init(&loop));
    rr.r.c = client(&loop);
    struct k8s_lease_opts o = {.name = "leader",
                               .identity = "me",
                               .lease_duration_ms = 1500,
                               .renew_deadline_ms = 1000,
                               .retry_period_ms = 100};
    rr.t0 = tkm_now_ms();
    ASSERT_OK(k8s_lease_start(rr.r.c, &o, &rr.r.l, &err));
    uv_timer_init(&loop, &sample);
    uv_timer_init(&loop, &stop);
    sample.data = &rr;
    stop.data = &rr.r;
    uv_timer_start(&sample, sample_cb, 10, 10);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(rr.r.n.closed, 1);
    ASSERT_EQ(rr.r.was_leader, 0);
    ASSERT(rr.fourth_ms >= 300); /* three waits of at least a retry period */
    ASSERT_OK(uv_loop_close(&loop));
}
