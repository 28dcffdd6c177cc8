/*
 * test_agent_status.c - agent/status.c: when tkm-agent writes its node status
 * objects, against a scripted apiserver (tsrv): a change is written at once
 * when no write is in flight, the changes that come while one is in flight
 * make exactly one more write, an unchanged body is not written again, a
 * failed write is retried after its backoff, never earlier, and a node status
 * deleted by someone else waits for the Node to be read again. The agent's
 * informers are real k8s informers over empty lists (the writer waits for
 * them to sync); the caches are set by hand, as cache.c would leave them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/util.h>
#include <k8s/config.h>

#include "test.h"
#include "tsrv.h"
#include "agent.h"

#define NS_PATH      "/apis/tkm.io/v1alpha1/namespaces/ml/tritonkernelcachenodestatuses/node-1"
#define NCACHES      8
#define STEP_WAIT_MS 10000

/* The apiserver side: /status applies are counted, can be held (the write
 * stays in flight until the test lets it go) and can fail. */
struct api {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int hold;           /* /status applies wait while set */
    int fail;           /* answer /status applies with 500 while set */
    int writes;         /* /status applies received */
    int waiting;        /* /status applies being held now */
    uint64_t failed_ms; /* tkm_now_ms() just before the last failure was answered */
    uv_async_t wake;    /* wakes the loop when an apply arrives (the test waits on it) */
    int node_gone;      /* GET Node answers 404 while set */
    int node_gets;      /* GET Node requests */
    char body[8][8192]; /* the first bodies received */
};

struct fx {
    uv_loop_t loop;
    struct tsrv s;
    struct api api;
    struct agent a;
    struct agent_cache ac[NCACHES];
    char names[NCACHES][16], keys[NCACHES][24];
};

static int on_status_apply(const struct tsrv_request *rq, struct tsrv_reply *out, char *scratch,
                           size_t scratch_len, void *data)
{
    struct api *api = data;
    pthread_mutex_lock(&api->mu);
    int n = api->writes++;
    if (n < 8)
        snprintf(api->body[n], sizeof api->body[n], "%.*s", (int)rq->body_len, rq->body);
    api->waiting++;
    pthread_cond_broadcast(&api->cv);
    uv_async_send(&api->wake);
    while (api->hold)
        pthread_cond_wait(&api->cv, &api->mu);
    api->waiting--;
    int fail = api->fail;
    if (fail)
        api->failed_ms = tkm_now_ms();
    pthread_mutex_unlock(&api->mu);
    snprintf(scratch, scratch_len,
             "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
             "\"metadata\":{\"name\":\"node-1\",\"namespace\":\"ml\",\"resourceVersion\":\"%d\"}}",
             100 + n);
    out->status = fail ? 500 : 200;
    out->body = fail ? "{\"kind\":\"Status\",\"code\":500,\"message\":\"boom\"}" : scratch;
    return 0;
}

static int on_node_get(const struct tsrv_request *rq, struct tsrv_reply *out, char *scratch,
                       size_t scratch_len, void *data)
{
    struct api *api = data;
    (void)rq;
    (void)scratch;
    (void)scratch_len;
    pthread_mutex_lock(&api->mu);
    api->node_gets++;
    int gone = api->node_gone;
    pthread_mutex_unlock(&api->mu);
    out->status = gone ? 404 : 200;
    out->body = gone ? "{\"kind\":\"Status\",\"code\":404,\"reason\":\"NotFound\"}"
                     : "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":"
                       "\"node-1\",\"uid\":\"node-uid-1\"}}";
    return 0;
}

static int api_writes(struct api *api)
{
    pthread_mutex_lock(&api->mu);
    int n = api->writes;
    pthread_mutex_unlock(&api->mu);
    return n;
}

static void api_set(struct api *api, int *field, int v)
{
    pthread_mutex_lock(&api->mu);
    *field = v;
    pthread_cond_broadcast(&api->cv);
    pthread_mutex_unlock(&api->mu);
}

static void on_synced(void *data)
{
    agent_status_changed(data);
}

static struct k8s_informer *informer(struct fx *f, const struct k8s_resource *res, const char *fsel)
{
    struct k8s_informer_opts io = {0};
    struct k8s_informer *inf = NULL;
    struct tkm_err err = {0};
    io.watch.res = res;
    io.watch.field_selector = fsel;
    io.data = &f->a;
    io.handler.on_synced = on_synced;
    ASSERT_OK(k8s_informer_start(f->a.kc, &io, &inf, &err));
    return inf;
}

/* Runs the loop until cond(f) holds (STEP_WAIT_MS at most: a failure). What
 * is due runs first without blocking: libuv before 1.45 runs timers before
 * it polls, so a UV_RUN_ONCE whose timer made cond true would still block
 * in the poll until the next event. */
static void run_until(struct fx *f, int (*cond)(struct fx *), const char *what)
{
    uint64_t t0 = tkm_now_ms();
    for (;;) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        if (cond(f))
            return;
        if (tkm_now_ms() - t0 > STEP_WAIT_MS)
            tkm_test_fail(__FILE__, __LINE__, "timed out waiting for %s", what);
        uv_run(&f->loop, UV_RUN_ONCE);
        if (cond(f))
            return;
    }
}

static struct agent_nsobj *nsobj(struct fx *f)
{
    for (struct agent_nsobj *o = f->a.nsobjs; o; o = o->next)
        if (!strcmp(o->ns, "ml"))
            return o;
    return NULL;
}

/* The writer has nothing left to do but the heartbeat: no write in flight
 * and no pass due before the next heartbeat. */
static int idle(struct fx *f)
{
    struct agent_nsobj *o = nsobj(f);
    return o && !o->inflight && f->a.flush_pending &&
           f->a.flush_due_ms > tkm_now_ms() + AGENT_HEARTBEAT_MS / 2;
}

static int synced_and_uid(struct fx *f)
{
    return f->a.node_uid[0] && k8s_informer_has_synced(f->a.inf_tkc) &&
           k8s_informer_has_synced(f->a.inf_tkcc) && k8s_informer_has_synced(f->a.inf_ns) &&
           k8s_informer_has_synced(f->a.inf_nsc);
}

static int written_once(struct fx *f)
{
    return api_writes(&f->api) >= 1 && idle(f);
}

/* Adds cache i (namespace ml, pinned) to the agent's list. */
static void cache_add(struct fx *f, int i)
{
    struct agent_cache *ac = &f->ac[i];
    snprintf(f->names[i], sizeof f->names[i], "c-%02d", i);
    snprintf(f->keys[i], sizeof f->keys[i], "ml/c-%02d", i);
    ac->a = &f->a;
    ac->c.meta.name = f->names[i];
    ac->c.meta.ns = (char *)"ml";
    ac->key = f->keys[i];
    snprintf(ac->digest, sizeof ac->digest, "sha256:%064d", i + 1);
    ac->next = f->a.caches;
    f->a.caches = ac;
}

/* An agent whose informers have synced, knowing its Node's uid, and one
 * cache (c-00) in its node status (created and applied on /status once). */
static void fx_start(struct fx *f)
{
    static const char kc_fmt[] = "apiVersion: v1\nkind: Config\nclusters:\n- name: f\n  cluster: "
                                 "{server: \"http://127.0.0.1:%d\"}\nusers:\n- name: u\n  user: "
                                 "{}\ncontexts:\n- name: f\n  context: {cluster: f, user: u}\n"
                                 "current-context: f\n";
    static const struct tsrv_reply watch[] = {{200, NULL, "", .hold = 1}};
    static const struct tsrv_reply list[] = {
        {200, NULL,
         "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"metadata\":{\"resourceVersion\":"
         "\"1\"},\"items\":[]}"}};
    static const struct tsrv_reply created[] = {
        {200, NULL,
         "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
         "\"metadata\":{\"name\":\"node-1\",\"namespace\":\"ml\",\"resourceVersion\":\"2\"}}"}};
    struct k8s_config cfg;
    struct tkm_err err = {0};
    char kc[512], fsel[64];
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->api.mu, NULL);
    pthread_cond_init(&f->api.cv, NULL);
    ASSERT_OK(uv_loop_init(&f->loop));
    ASSERT_OK(uv_async_init(&f->loop, &f->api.wake, NULL));
    tsrv_init(&f->s);
    tsrv_route_fn(&f->s, "GET", "/api/v1/nodes/node-1", TSRV_EXACT, NULL, on_node_get, &f->api);
    tsrv_route(&f->s, "GET", NULL, TSRV_PREFIX, "watch=1", watch, 1);
    tsrv_route(&f->s, "GET", "/apis/", TSRV_PREFIX, NULL, list, 1);
    tsrv_route_fn(&f->s, "PATCH", NS_PATH "/status", TSRV_EXACT, NULL, on_status_apply, &f->api);
    tsrv_route(&f->s, "PATCH", NS_PATH, TSRV_EXACT, NULL, created, 1);
    int port = tsrv_listen(&f->s);
    ASSERT(port > 0);
    snprintf(kc, sizeof kc, kc_fmt, port);
    k8s_config_init(&cfg);
    ASSERT_OK(k8s_config_load_yaml(&cfg, kc, strlen(kc), "/", "test", NULL, &err));
    /* the client retries nothing itself: each failure reaches the agent */
    struct k8s_client_opts co = {.max_retries = -1};
    ASSERT_OK(k8s_client_new(&f->loop, &cfg, &co, &f->a.kc, &err));
    k8s_config_release(&cfg);

    struct agent *a = &f->a;
    a->loop = &f->loop;
    a->o.node_name = "node-1";
    a->o.ns = "tkm-system";
    a->probed = 1; /* no GPUs: entries without groups */
    uv_timer_init(&f->loop, &a->flush_timer);
    uv_timer_init(&f->loop, &a->node_timer);
    a->flush_timer.data = a->node_timer.data = a;
    snprintf(fsel, sizeof fsel, "metadata.name=%s", a->o.node_name);
    a->inf_tkc = informer(f, &tkm_api_res_tkc, NULL);
    a->inf_tkcc = informer(f, &tkm_api_res_tkcc, NULL);
    a->inf_ns = informer(f, &tkm_api_res_tkcns, fsel);
    a->inf_nsc = informer(f, &tkm_api_res_tkcnsc, fsel);
    ASSERT_OK(agent_status_start(a, &err));
    run_until(f, synced_and_uid, "the informers and the Node's uid");

    cache_add(f, 0);
    agent_status_changed(a);
    run_until(f, written_once, "the first node status");
    ASSERT_EQ(api_writes(&f->api), 1);
    ASSERT_STRCONTAINS(f->api.body[0], "\"c-00\":{\"digest\":\"sha256:");
    ASSERT_STRCONTAINS(f->api.body[0], "\"uid\":\"node-uid-1\"");
}

static void on_closed(void *data)
{
    (*(int *)data)++;
}

static void fx_stop(struct fx *f)
{
    int closed = 0;
    api_set(&f->api, &f->api.hold, 0);
    f->a.stopping = 1;
    struct k8s_informer *infs[] = {f->a.inf_tkc, f->a.inf_tkcc, f->a.inf_ns, f->a.inf_nsc};
    for (int i = 0; i < 4; i++)
        k8s_informer_close(infs[i], on_closed, &closed);
    uv_close((uv_handle_t *)&f->a.flush_timer, NULL);
    uv_close((uv_handle_t *)&f->a.node_timer, NULL);
    uv_close((uv_handle_t *)&f->api.wake, NULL);
    while (closed < 4)
        uv_run(&f->loop, UV_RUN_ONCE);
    k8s_client_free(f->a.kc);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&f->loop));
    agent_nsobjs_free(&f->a);
    tsrv_stop(&f->s);
    pthread_cond_destroy(&f->api.cv);
    pthread_mutex_destroy(&f->api.mu);
}

static int two_written(struct fx *f)
{
    return api_writes(&f->api) >= 2 && idle(f);
}

static int held_now(struct fx *f)
{
    pthread_mutex_lock(&f->api.mu);
    int n = f->api.waiting;
    pthread_mutex_unlock(&f->api.mu);
    return n == 1;
}

/* A change with nothing in flight starts its write on the loop's very next
 * turn: no flush window to wait out (the agent once waited 200 ms here). */
TEST(change_is_written_at_once)
{
    struct fx f;
    fx_start(&f);
    struct agent_nsobj *o = nsobj(&f);
    cache_add(&f, 1);
    agent_status_changed(&f.a);
    ASSERT(!o->inflight);
    uv_run(&f.loop, UV_RUN_NOWAIT); /* one turn, without waiting for anything */
    ASSERT(o->inflight);
    run_until(&f, two_written, "the second write");
    ASSERT_EQ(api_writes(&f.api), 2);
    ASSERT_STRCONTAINS(f.api.body[1], "\"c-01\":{\"digest\":\"sha256:");
    /* nothing changed: a pass writes nothing (an unchanged body is not sent) */
    agent_status_changed(&f.a);
    ASSERT(!idle(&f));
    run_until(&f, idle, "the pass after a change that changed nothing");
    ASSERT_EQ(api_writes(&f.api), 2);
    fx_stop(&f);
}

static int three_written(struct fx *f)
{
    return api_writes(&f->api) >= 3 && idle(f);
}

/* The last pass ran and none is due before the heartbeat (a write may be in
 * flight). */
static int pass_done(struct fx *f)
{
    return f->a.flush_pending && f->a.flush_due_ms > tkm_now_ms() + AGENT_HEARTBEAT_MS / 2;
}

/* The write failed: nothing in flight, backing off. */
static int failed(struct fx *f)
{
    struct agent_nsobj *o = nsobj(f);
    return api_writes(&f->api) >= 2 && o && !o->inflight && f->a.write_backoff_ms > 0;
}

/* While a write is in flight, many changes make one more write (with all of
 * them), not one per change, and not none. */
TEST(changes_during_a_write_make_one_more)
{
    struct fx f;
    fx_start(&f);
    api_set(&f.api, &f.api.hold, 1);
    cache_add(&f, 1);
    agent_status_changed(&f.a);
    run_until(&f, held_now, "the write of c-01 to reach the apiserver");
    for (int i = 2; i < NCACHES; i++) { /* one change per loop turn, each a pass of its own */
        cache_add(&f, i);
        agent_status_changed(&f.a);
        uv_run(&f.loop, UV_RUN_NOWAIT);
    }
    /* the passes for those changes ran while the write was in flight (the
     * agent once forgot such changes until the next heartbeat) */
    run_until(&f, pass_done, "the pass for the changes");
    ASSERT_EQ(api_writes(&f.api), 2); /* still the one in flight */
    api_set(&f.api, &f.api.hold, 0);
    run_until(&f, three_written, "the write after the one in flight");
    ASSERT_EQ(api_writes(&f.api), 3);
    ASSERT_STRCONTAINS(f.api.body[1], "\"c-01\":{");
    ASSERT(!strstr(f.api.body[1], "\"c-02\":{"));
    for (int i = 0; i < NCACHES; i++) {
        char k[32];
        snprintf(k, sizeof k, "\"c-%02d\":{\"digest\"", i);
        ASSERT_STRCONTAINS(f.api.body[2], k);
    }
    fx_stop(&f);
}

/* A failed write is retried after its backoff (AGENT_BACKOFF_MIN_MS), and a
 * change during the backoff does not cut it short. */
TEST(failed_write_backs_off)
{
    struct fx f;
    fx_start(&f);
    struct agent_nsobj *o = nsobj(&f);
    api_set(&f.api, &f.api.fail, 1);
    cache_add(&f, 1);
    agent_status_changed(&f.a);
    run_until(&f, failed, "the failing write");
    uint64_t retry_at = f.a.write_retry_ms;
    api_set(&f.api, &f.api.fail, 0);
    ASSERT_UEQ(f.a.write_backoff_ms, AGENT_BACKOFF_MIN_MS);
    ASSERT(retry_at >= f.api.failed_ms + AGENT_BACKOFF_MIN_MS);
    cache_add(&f, 2);
    agent_status_changed(&f.a);
    uv_run(&f.loop, UV_RUN_NOWAIT);
    ASSERT(!o->inflight);
    ASSERT_EQ(api_writes(&f.api), 2);
    run_until(&f, three_written, "the retry");
    struct tsrv_request rq;
    int last = tsrv_nreqs(&f.s) - 1;
    for (; last >= 0; last--)
        if (tsrv_get(&f.s, last, &rq) == 0 && !strcmp(rq.method, "PATCH"))
            break;
    ASSERT(last >= 0);
    /* the retry came no earlier than the backoff allows */
    ASSERT(rq.at_ms >= retry_at);
    ASSERT(rq.at_ms >= f.api.failed_ms + AGENT_BACKOFF_MIN_MS);
    ASSERT_STRCONTAINS(f.api.body[2], "\"c-02\":{\"digest\"");
    ASSERT_EQ(f.a.write_backoff_ms, 0);
    fx_stop(&f);
}

/* The Node's 404 was answered: on_node retries in 5 s. */
static int node_gone_seen(struct fx *f)
{
    pthread_mutex_lock(&f->api.mu);
    int n = f->api.node_gets;
    pthread_mutex_unlock(&f->api.mu);
    return n >= 2 && uv_is_active((uv_handle_t *)&f->a.node_timer) &&
           uv_timer_get_due_in(&f->a.node_timer) > 1000;
}

/* The node status deleted by someone else (the garbage collector, when the
 * Node went away): nothing is recreated before the Node is read again, and
 * nothing while it is gone, though passes now run at once. */
TEST(deleted_status_waits_for_the_node)
{
    struct fx f;
    fx_start(&f);
    struct agent_nsobj *o = nsobj(&f);
    struct k8s_obj gone = {.key = "ml/node-1", .ns = "ml", .name = "node-1"};
    api_set(&f.api, &f.api.node_gone, 1);
    agent_status_own_event(&f.a, &gone, 1);
    ASSERT(!o->exists);
    uv_run(&f.loop, UV_RUN_NOWAIT); /* the pass the event asked for */
    ASSERT(!o->inflight);
    run_until(&f, node_gone_seen, "the Node's 404");
    ASSERT(!o->inflight);
    ASSERT_EQ(api_writes(&f.api), 1);
    fx_stop(&f);
}

/* ---- the compiles summary (compiles.c, issue 25) --------------------------------------------- */

static void scratch_names(struct agent_scratch *s, const char *const *names, size_t n)
{
    memset(s, 0, sizeof *s);
    s->present = 1;
    for (size_t i = 0; i < n; i++)
        snprintf(s->names[s->n_names++], sizeof s->names[0], "%s", names[i]);
}

TEST(compiles_summary_top_eviction_reset)
{
    struct agent_compiles c = {0};
    struct tkm_api_compiles out;
    struct agent_scratch s;
    char name[32];
    const char *const ab[] = {"kb", "ka", "kb"}; /* kb twice in one pod: counted once */
    /* absent counts: nothing */
    memset(&s, 0, sizeof s);
    agent_compiles_add(&c, "sha256:d1", "2026-01-01T00:00:00Z", &s);
    ASSERT_OK(agent_compiles_fill(&c, "sha256:d1", &out));
    ASSERT_EQ(out.present, 0);
    /* a pod that compiled nothing, then one with 2 kernels + 3 inductor entries */
    s.present = 1;
    agent_compiles_add(&c, "sha256:d1", "2026-01-01T00:00:00Z", &s);
    scratch_names(&s, ab, 3);
    s.triton_kernels = 2;
    s.inductor_fxgraph = 2;
    s.inductor_aotautograd = 1;
    s.bytes = UINT64_MAX; /* saturates */
    agent_compiles_add(&c, "sha256:d1", "2026-01-01T00:01:00Z", &s);
    const char *const b[] = {"kb"};
    scratch_names(&s, b, 1);
    s.triton_kernels = 1;
    agent_compiles_add(&c, "sha256:d1", "2026-01-01T00:02:00Z", &s);
    ASSERT_OK(agent_compiles_fill(&c, "sha256:d1", &out));
    ASSERT_EQ(out.present, 1);
    ASSERT_EQ(out.pods_served, 3);
    ASSERT_EQ(out.pods_compiled, 2);
    ASSERT_EQ(out.triton_kernels, 3);
    ASSERT_EQ(out.inductor_entries, 3);
    ASSERT(out.bytes == INT64_MAX);
    ASSERT_STREQ(out.since, "2026-01-01T00:00:00Z");
    ASSERT_EQ(out.n_top, 2);
    ASSERT_STREQ(out.top[0].name, "kb"); /* most pods first */
    ASSERT_EQ(out.top[0].pods, 2);
    ASSERT_STREQ(out.top[1].name, "ka");
    ASSERT_EQ(out.top[1].pods, 1);
    free(out.top);
    /* another digest is not reported; the next pod for it starts again */
    ASSERT_OK(agent_compiles_fill(&c, "sha256:d2", &out));
    ASSERT_EQ(out.present, 0);
    /* 300 distinct names (one per pod): at most 256 kept, the top 10 the most seen */
    for (int i = 0; i < 300; i++) {
        const char *n1[] = {name};
        snprintf(name, sizeof name, "k%03d", i);
        scratch_names(&s, n1, 1);
        s.triton_kernels = 1;
        agent_compiles_add(&c, "sha256:d2", "2026-01-02T00:00:00Z", &s);
        if (i % 30 == 0) /* every 30th name seen by a second pod */
            agent_compiles_add(&c, "sha256:d2", "2026-01-02T00:00:00Z", &s);
    }
    ASSERT(c.n_names <= AGENT_COMPILES_NAMES);
    ASSERT_OK(agent_compiles_fill(&c, "sha256:d2", &out));
    ASSERT_STREQ(out.since, "2026-01-02T00:00:00Z");
    ASSERT_EQ(out.pods_served, 310);
    ASSERT_EQ(out.n_top, AGENT_COMPILES_TOP);
    for (size_t i = 0; i < out.n_top; i++) { /* k000, k030, ... k270: 2 pods each */
        snprintf(name, sizeof name, "k%03zu", i * 30);
        ASSERT_STREQ(out.top[i].name, name);
        ASSERT_EQ(out.top[i].pods, 2);
    }
    free(out.top);
    agent_compiles_release(&c);
}

TEST(compiles_list_drop)
{
    struct agent_cache_compiles *l = NULL;
    ASSERT(!agent_compiles_get(&l, "ns/a", 0));
    struct agent_compiles *a = agent_compiles_get(&l, "ns/a", 1);
    ASSERT(a && agent_compiles_get(&l, "ns/a", 0) == a);
    ASSERT(agent_compiles_get(&l, "b", 1) != a);
    agent_compiles_drop(&l, "ns/a");
    ASSERT(!agent_compiles_get(&l, "ns/a", 0));
    ASSERT(agent_compiles_get(&l, "b", 0));
    agent_compiles_free_all(&l);
    ASSERT(!l);
}
