/* Unit tests for the watch framer, the event decoder and the backoff
 * (k8sclient/framer.c). */
#include <tkm/util.h>

#include "test.h"
#include "watch-int.h"

struct collected {
    size_t n;
    char *obj[64];
    size_t len[64];
};

static int collect_cb(const char *p, size_t n, void *data)
{
    struct collected *c = data;
    if (c->n >= 64)
        return 99;
    c->obj[c->n] = strndup(p, n);
    c->len[c->n] = n;
    c->n++;
    return 0;
}

static void collected_free(struct collected *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->obj[i]);
    c->n = 0;
}

#define EV1                                                                                        \
    "{\"type\":\"ADDED\",\"object\":{\"kind\":\"TritonKernelCache\",\"metadata\":{\"name\":"       \
    "\"a\",\"namespace\":\"ns\",\"resourceVersion\":\"11\",\"uid\":\"u-1\"},\"spec\":{"            \
    "\"cacheImage\":\"r/x:{not}a\\\"brace\"}}}"

TEST(event_split_over_three_chunks_decodes_once)
{
    const char *ev = EV1 "\n";
    size_t n = strlen(ev);
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
    /* Cut inside a key, inside the escaped quote of a string, and before the end. */
    size_t a = 10, b = (size_t)(strstr(ev, "\\\"") - ev) + 1;
    ASSERT_OK(k8s__framer_feed(&f, ev, a, collect_cb, &c, &err));
    ASSERT_EQ(c.n, 0);
    ASSERT_OK(k8s__framer_feed(&f, ev + a, b - a, collect_cb, &c, &err));
    ASSERT_EQ(c.n, 0);
    ASSERT_OK(k8s__framer_feed(&f, ev + b, n - b, collect_cb, &c, &err));
    ASSERT_EQ(c.n, 1);
    ASSERT_EQ(c.len[0], n - 1);
    ASSERT_MEMEQ(c.obj[0], ev, n - 1);
    ASSERT_OK(k8s__framer_finish(&f, &err));
    collected_free(&c);
    k8s__framer_release(&f);
}

TEST(five_events_in_one_chunk_decode_once_each)
{
    struct tkm_buf s = TKM_BUF_INIT(1 << 20);
    for (int i = 0; i < 5; i++)
        ASSERT_OK(tkm_buf_printf(&s,
                                 "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":"
                                 "\"o%d\",\"resourceVersion\":\"%d\"}}}\n",
                                 i, 100 + i));
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
    ASSERT_OK(k8s__framer_feed(&f, s.data, s.len, collect_cb, &c, &err));
    ASSERT_EQ(c.n, 5);
    for (size_t i = 0; i < 5; i++) {
        struct k8s_watch_event ev;
        json_t *root = NULL;
        char want[16];
        ASSERT_OK(k8s__event_decode(c.obj[i], c.len[i], &ev, &root, &err));
        ASSERT_EQ(ev.type, K8S_WATCH_MODIFIED);
        snprintf(want, sizeof want, "o%zu", i);
        ASSERT_STREQ(ev.name, want);
        snprintf(want, sizeof want, "%zu", 100 + i);
        ASSERT_STREQ(ev.resource_version, want);
        json_decref(root);
    }
    ASSERT_OK(k8s__framer_finish(&f, &err));
    collected_free(&c);
    k8s__framer_release(&f);
    tkm_buf_release(&s);
}

/* Every possible split of a two-event stream yields the same two events. */
TEST(every_split_point_gives_same_events)
{
    const char *s = EV1 "\r\n" EV1;
    size_t n = strlen(s);
    for (size_t cut = 0; cut <= n; cut++) {
        struct k8s__framer f;
        struct collected c = {0};
        struct tkm_err err = {0};
        k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
        ASSERT_OK(k8s__framer_feed(&f, s, cut, collect_cb, &c, &err));
        ASSERT_OK(k8s__framer_feed(&f, s + cut, n - cut, collect_cb, &c, &err));
        ASSERT_EQ(c.n, 2);
        ASSERT_STREQ(c.obj[0], c.obj[1]);
        ASSERT_EQ(c.len[0], strlen(EV1));
        ASSERT_OK(k8s__framer_finish(&f, &err));
        collected_free(&c);
        k8s__framer_release(&f);
    }
}

TEST(byte_by_byte_feed)
{
    const char *s = EV1 EV1 "  " EV1;
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
    for (size_t i = 0; s[i]; i++)
        ASSERT_OK(k8s__framer_feed(&f, s + i, 1, collect_cb, &c, &err));
    ASSERT_EQ(c.n, 3);
    ASSERT_EQ(f.emitted, 3);
    collected_free(&c);
    k8s__framer_release(&f);
}

TEST(oversized_event_rejected)
{
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    k8s__framer_init(&f, K8S__FRAME_STREAM, 64);
    /* A complete event of 100 bytes in one chunk. */
    char big[101];
    memset(big, ' ', sizeof big);
    memcpy(big, "{\"type\":\"ADDED\",\"object\":{\"x\":\"", 31);
    memcpy(big + 96, "\"}}\n", 4);
    big[100] = 0;
    ASSERT_EQ(k8s__framer_feed(&f, big, 100, collect_cb, &c, &err), -E2BIG);
    ASSERT_STRCONTAINS(err.msg, "over the limit of 64");
    ASSERT_EQ(c.n, 0);
    k8s__framer_release(&f);

    /* An event that never ends is cut off once it passes the cap, without
     * buffering much more than the cap. */
    tkm_err_clear(&err);
    k8s__framer_init(&f, K8S__FRAME_STREAM, 1000);
    ASSERT_OK(
        k8s__framer_feed(&f, "{\"type\":\"ADDED\",\"object\":{\"x\":\"", 31, collect_cb, &c, &err));
    char chunk[512];
    memset(chunk, 'a', sizeof chunk);
    int rc = 0;
    int i;
    for (i = 0; i < 100 && rc == 0; i++)
        rc = k8s__framer_feed(&f, chunk, sizeof chunk, collect_cb, &c, &err);
    ASSERT_EQ(rc, -E2BIG);
    ASSERT(i <= 3);
    ASSERT_STRCONTAINS(err.msg, "exceeds the limit of 1000 bytes");
    k8s__framer_release(&f);
}

TEST(truncated_event_rejected_at_finish)
{
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    const char *s = EV1 "\n{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{";
    k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
    ASSERT_OK(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err));
    ASSERT_EQ(c.n, 1);
    ASSERT_EQ(k8s__framer_finish(&f, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "truncated object");
    collected_free(&c);
    k8s__framer_release(&f);
}

TEST(garbage_between_events_rejected)
{
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    const char *s = EV1 "\nHTTP/1.1 500 oops\n" EV1;
    k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
    ASSERT_EQ(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err), -EPROTO);
    ASSERT_EQ(c.n, 1);
    ASSERT_STRCONTAINS(err.msg, "expected '{'");
    collected_free(&c);
    k8s__framer_release(&f);
}

TEST(deep_nesting_rejected)
{
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    char deep[3000];
    memset(deep, '[', sizeof deep);
    deep[0] = '{';
    k8s__framer_init(&f, K8S__FRAME_STREAM, 1 << 20);
    ASSERT_EQ(k8s__framer_feed(&f, deep, sizeof deep, collect_cb, &c, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "nesting");
    k8s__framer_release(&f);
}

TEST(list_mode_emits_items_and_keeps_metadata)
{
    const char *s = "{\"apiVersion\":\"tkm.io/v1alpha1\",\"items\":[{\"metadata\":{\"name\":"
                    "\"a\",\"resourceVersion\":\"5\"}} , {\"metadata\":{\"name\":\"b]\","
                    "\"resourceVersion\":\"6\"},\"x\":[1,{\"y\":\"}\"}]}],\"kind\":\"List\","
                    "\"metadata\":{\"resourceVersion\":\"77\",\"items\":[1]}}\n";
    size_t n = strlen(s);
    for (size_t cut = 0; cut <= n; cut += 7) {
        struct k8s__framer f;
        struct collected c = {0};
        struct tkm_err err = {0};
        k8s__framer_init(&f, K8S__FRAME_LIST, 4096);
        ASSERT_OK(k8s__framer_feed(&f, s, cut, collect_cb, &c, &err));
        ASSERT_OK(k8s__framer_feed(&f, s + cut, n - cut, collect_cb, &c, &err));
        ASSERT_OK(k8s__framer_finish(&f, &err));
        ASSERT_EQ(c.n, 2);
        struct k8s_watch_event ev;
        json_t *root;
        ASSERT_OK(k8s__item_decode(c.obj[1], c.len[1], &ev, &root, &err));
        ASSERT_STREQ(ev.name, "b]");
        ASSERT_STREQ(ev.resource_version, "6");
        json_decref(root);
        json_error_t je;
        json_t *rest = json_loadb(f.rest.data, f.rest.len, JSON_REJECT_DUPLICATES, &je);
        ASSERT_NOT_NULL(rest);
        ASSERT_EQ(json_array_size(json_object_get(rest, "items")), 0);
        ASSERT_STREQ(json_string_value(
                         json_object_get(json_object_get(rest, "metadata"), "resourceVersion")),
                     "77");
        json_decref(rest);
        collected_free(&c);
        k8s__framer_release(&f);
    }
}

TEST(list_mode_truncated_and_bad_items)
{
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    const char *s = "{\"items\":[{\"metadata\":{}},{\"meta";
    k8s__framer_init(&f, K8S__FRAME_LIST, 4096);
    ASSERT_OK(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err));
    ASSERT_EQ(c.n, 1);
    ASSERT_EQ(k8s__framer_finish(&f, &err), -EPROTO);
    collected_free(&c);
    k8s__framer_release(&f);

    tkm_err_clear(&err);
    k8s__framer_init(&f, K8S__FRAME_LIST, 4096);
    s = "{\"items\":[{},\"str\"]}";
    ASSERT_EQ(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "not an object");
    collected_free(&c);
    k8s__framer_release(&f);

    tkm_err_clear(&err);
    k8s__framer_init(&f, K8S__FRAME_LIST, 4096);
    s = "{\"items\":[]} {}";
    ASSERT_EQ(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "after the end of the list");
    k8s__framer_release(&f);
}

TEST(decode_event_types_raw_span_and_errors)
{
    struct k8s_watch_event ev;
    json_t *root = NULL;
    struct tkm_err err = {0};
    const char *s = EV1;
    ASSERT_OK(k8s__event_decode(s, strlen(s), &ev, &root, &err));
    ASSERT_EQ(ev.type, K8S_WATCH_ADDED);
    ASSERT_STREQ(ev.ns, "ns");
    ASSERT_STREQ(ev.name, "a");
    ASSERT_STREQ(ev.uid, "u-1");
    ASSERT_STREQ(ev.resource_version, "11");
    /* raw is exactly the "object" value. */
    const char *obj = strstr(s, "{\"kind\"");
    ASSERT_EQ(ev.raw_len, strlen(obj) - 1);
    ASSERT(ev.raw == obj);
    json_decref(root);

    s = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
        "\"Failure\",\"message\":\"too old resource version: 1 (200)\",\"reason\":\"Expired\","
        "\"code\":410}}";
    ASSERT_OK(k8s__event_decode(s, strlen(s), &ev, &root, &err));
    ASSERT_EQ(ev.type, K8S_WATCH_ERROR);
    ASSERT_EQ(ev.code, 410);
    ASSERT_STREQ(ev.reason, "Expired");
    ASSERT_STRCONTAINS(ev.message, "too old");
    json_decref(root);

    s = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"TritonKernelCache\",\"metadata\":{"
        "\"resourceVersion\":\"999\"}}}";
    ASSERT_OK(k8s__event_decode(s, strlen(s), &ev, &root, &err));
    ASSERT_EQ(ev.type, K8S_WATCH_BOOKMARK);
    ASSERT_STREQ(ev.resource_version, "999");
    ASSERT_STREQ(ev.name, "");
    json_decref(root);

    const char *bad[] = {
        "{\"type\":\"ADDED\",\"object\":{\"a\":1,\"a\":2}}", /* duplicate key */
        "{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}",
        "{\"type\":\"EXPLODED\",\"object\":{}}",
        "{\"type\":\"ADDED\",\"object\":[]}",
        "{\"object\":{}}",
        "{\"type\":\"ADDED\",\"object\":{]}",
        "[1,2]",
    };
    for (size_t i = 0; i < (size_t)TKM_ARRAY_SIZE(bad); i++) {
        tkm_err_clear(&err);
        ASSERT_EQ(k8s__event_decode(bad[i], strlen(bad[i]), &ev, &root, &err), -EPROTO);
        ASSERT_NULL(root);
        ASSERT(err.msg[0] != '\0');
    }
}

TEST(member_span)
{
    size_t off, len;
    const char *s = " { \"a\" : \"x\\\"}\" , \"b\":[1,{\"c\":\"]\"}], \"object\" :{\"k\":2} }";
    ASSERT_OK(k8s__json_member_span(s, strlen(s), "object", &off, &len));
    ASSERT_EQ(len, 7);
    ASSERT_MEMEQ(s + off, "{\"k\":2}", 7);
    ASSERT_OK(k8s__json_member_span(s, strlen(s), "b", &off, &len));
    ASSERT_MEMEQ(s + off, "[1,{\"c\":\"]\"}]", len);
    ASSERT_EQ(k8s__json_member_span(s, strlen(s), "zz", &off, &len), -ENOENT);
}

TEST(mismatched_brackets_rejected)
{
    struct k8s__framer f;
    struct collected c = {0};
    struct tkm_err err = {0};
    const char *s = "{\"type\":\"ADDED\",\"object\":{\"a\":[1}]}\n";
    k8s__framer_init(&f, K8S__FRAME_STREAM, 4096);
    ASSERT_EQ(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "mismatched bracket");
    ASSERT_EQ(c.n, 0);
    k8s__framer_release(&f);

    /* A list item closed by ']' instead of '}'. */
    tkm_err_clear(&err);
    k8s__framer_init(&f, K8S__FRAME_LIST, 4096);
    s = "{\"items\":[{\"metadata\":{\"name\":\"a\":{\"nx\"}},{\"x\":1}]]}";
    ASSERT_EQ(k8s__framer_feed(&f, s, strlen(s), collect_cb, &c, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "mismatched bracket");
    ASSERT_EQ(c.n, 0);
    k8s__framer_release(&f);
}

/* ---- the watch state machine against a scripted HTTP server ----------------
 * tsrv (tsrv.h) answers request i with step i of a script, each reply
 * closing its connection (one request per connection); once the script is
 * exhausted it holds requests without answering. A step with .hold sends its
 * body without Content-Length and holds the connection open (a stream that
 * stalls). The watch runs on a uv loop in the test's thread and is stopped
 * when the server has seen `stop_after` requests. */
#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/informer.h>

#include "tsrv.h"

struct fake {
    struct tsrv s;
    struct tsrv_reply r[16];
    char hdrs[16][256];
    int port;
    /* Filled by fake_stop(): the request heads and arrival times. */
    size_t nreq;
    char req[16][512];
    uint64_t at[16];
};

static void fake_start(struct fake *f, const struct tsrv_reply *steps, size_t n)
{
    memset(f, 0, sizeof *f);
    ASSERT(n < 16);
    for (size_t i = 0; i < n; i++) {
        f->r[i] = steps[i];
        snprintf(f->hdrs[i], sizeof f->hdrs[i], "Content-Type: application/json\r\n%s",
                 steps[i].headers ? steps[i].headers : "");
        f->r[i].headers = f->hdrs[i];
        f->r[i].close = 1;
    }
    f->r[n].hang_ms = -1; /* the script is over: hold every further request */
    tsrv_init(&f->s);
    ASSERT_OK(tsrv_route(&f->s, NULL, NULL, TSRV_PREFIX, NULL, f->r, (int)n + 1));
    f->port = tsrv_listen(&f->s);
    ASSERT(f->port > 0);
}

static void fake_stop(struct fake *f)
{
    struct tsrv_request rq;
    for (f->nreq = 0; f->nreq < 16 && tsrv_get(&f->s, (int)f->nreq, &rq) == 0; f->nreq++) {
        const char *eol = strstr(rq.head, "\r\n");
        snprintf(f->req[f->nreq], sizeof f->req[f->nreq], "%.*s", (int)(eol ? eol - rq.head : 0),
                 rq.head);
        f->at[f->nreq] = rq.at_ms;
    }
    tsrv_stop(&f->s);
}

struct wrun {
    struct fake *f;
    struct k8s_client *c;
    struct k8s_watch *w;
    size_t stop_after;
    int list_begins, items, list_ends, aborts, events;
    char last_list_rv[32];
    struct k8s_watch_stats st;
    char rv[32];
    const char *start_rv; /* watch only, from this RV */
    size_t max_event;     /* max_event_bytes (0: default) */
    int use_informer;     /* run an informer instead of a bare watch */
    struct k8s_informer *inf;
    int adds, updates, deletes, unknown, synced;
    size_t count_at_stop;
    char b_rv[32]; /* resourceVersion of t/b in the store at stop */
};

static void h_begin(void *d)
{
    ((struct wrun *)d)->list_begins++;
}

static int h_item(const struct k8s_watch_event *ev, void *d)
{
    (void)ev;
    ((struct wrun *)d)->items++;
    return 0;
}

static int h_end(const char *rv, void *d)
{
    struct wrun *r = d;
    r->list_ends++;
    snprintf(r->last_list_rv, sizeof r->last_list_rv, "%s", rv);
    return 0;
}

static void h_abort(void *d)
{
    ((struct wrun *)d)->aborts++;
}

static int h_event(const struct k8s_watch_event *ev, void *d)
{
    (void)ev;
    ((struct wrun *)d)->events++;
    return 0;
}

static void poll_cb(uv_timer_t *t)
{
    struct wrun *r = t->data;
    size_t n = (size_t)tsrv_nreqs(&r->f->s);
    if (n < r->stop_after)
        return;
    if (r->inf) {
        const struct k8s_obj *b = k8s_informer_get_key(r->inf, "t/b");
        r->st = *k8s_watch_get_stats(k8s_informer_watch(r->inf));
        r->count_at_stop = k8s_informer_count(r->inf);
        snprintf(r->b_rv, sizeof r->b_rv, "%s", b ? b->resource_version : "");
        k8s_informer_close(r->inf, NULL, NULL);
    } else {
        r->st = *k8s_watch_get_stats(r->w);
        snprintf(r->rv, sizeof r->rv, "%s", k8s_watch_resource_version(r->w));
        k8s_watch_close(r->w, NULL, NULL);
    }
    k8s_client_close(r->c, NULL, NULL);
    uv_close((uv_handle_t *)t, NULL);
}

static void i_add(const struct k8s_obj *o, void *d)
{
    (void)o;
    ((struct wrun *)d)->adds++;
}

static void i_update(const struct k8s_obj *old, const struct k8s_obj *cur, void *d)
{
    struct wrun *r = d;
    (void)old;
    (void)cur;
    r->updates++;
}

static void i_delete(const struct k8s_obj *o, int unknown, void *d)
{
    struct wrun *r = d;
    (void)o;
    r->deletes++;
    r->unknown += unknown;
}

static void i_synced(void *d)
{
    ((struct wrun *)d)->synced++;
}

static void run_watch(struct fake *f, struct wrun *r, size_t stop_after)
{
    char kc[512];
    uv_loop_t loop;
    uv_timer_t t;
    struct k8s_config cfg;
    struct tkm_err err = {0};
    static const struct k8s_watch_handler h = {h_begin, h_item, h_end, h_abort, h_event, NULL};
    struct k8s_watch_opts o = {.res = &k8s_res_configmaps,
                               .ns = "t",
                               .backoff_initial_ms = 200,
                               .backoff_max_ms = 1000,
                               .start_resource_version = r->start_rv,
                               .max_event_bytes = r->max_event};
    snprintf(kc, sizeof kc,
             "apiVersion: v1\nkind: Config\nclusters:\n- name: f\n  cluster: {server: "
             "\"http://127.0.0.1:%d\"}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: f\n"
             "  context: {cluster: f, user: u}\ncurrent-context: f\n",
             f->port);
    ASSERT_OK(uv_loop_init(&loop));
    k8s_config_init(&cfg);
    ASSERT_OK(k8s_config_load_yaml(&cfg, kc, strlen(kc), "/", "test", NULL, &err));
    ASSERT_OK(k8s_client_new(&loop, &cfg, NULL, &r->c, &err));
    k8s_config_release(&cfg);
    r->f = f;
    r->stop_after = stop_after;
    if (r->use_informer) {
        struct k8s_informer_opts io = {
            .watch = o, .handler = {i_add, i_update, i_delete, i_synced, NULL}, .data = r};
        ASSERT_OK(k8s_informer_start(r->c, &io, &r->inf, &err));
    } else {
        ASSERT_OK(k8s_watch_start(r->c, &o, &h, r, &r->w, &err));
    }
    uv_timer_init(&loop, &t);
    t.data = r;
    uv_timer_start(&t, poll_cb, 20, 20);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_OK(uv_loop_close(&loop));
}

#define LIST_10                                                                                    \
    "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"         \
    "\"10\"},\"items\":[{\"metadata\":{\"name\":\"a\",\"namespace\":\"t\",\"resourceVersion\":"    \
    "\"5\"}}]}"

static long query_timeout(const char *req)
{
    const char *s = strstr(req, "timeoutSeconds=");
    return s ? strtol(s + 15, NULL, 10) : -1;
}

TEST(watch_resumes_from_bookmark_without_list)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL, LIST_10},
        {200, NULL,
         "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\","
         "\"metadata\":{\"resourceVersion\":\"20\"}}}\n"},
    };
    struct fake f;
    struct wrun r = {0};
    fake_start(&f, steps, 2);
    run_watch(&f, &r, 3);
    fake_stop(&f);
    ASSERT_STRCONTAINS(f.req[0], "GET /api/v1/namespaces/t/configmaps?resourceVersion=0 ");
    ASSERT_STRCONTAINS(f.req[1], "?watch=1&resourceVersion=10&allowWatchBookmarks=true");
    long t1 = query_timeout(f.req[1]), t2 = query_timeout(f.req[2]);
    ASSERT(t1 >= 300 && t1 <= 600);
    ASSERT(t2 >= 300 && t2 <= 600);
    /* The normal end of the watch: at once, from the bookmark's RV, no list. */
    ASSERT_STRCONTAINS(f.req[2], "?watch=1&resourceVersion=20&");
    ASSERT(f.at[2] - f.at[1] < 200);
    ASSERT_EQ(r.list_ends, 1);
    ASSERT_EQ(r.items, 1);
    ASSERT_STREQ(r.last_list_rv, "10");
    ASSERT_EQ(r.st.bookmarks, 1);
    ASSERT_EQ(r.st.lists, 1);
    ASSERT_STREQ(r.rv, "20");
}

TEST(watch_410_relists_at_last_rv_then_quorum)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL, LIST_10},
        {200, NULL,
         "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\",\"namespace\":\"t\","
         "\"resourceVersion\":\"11\"}}}\n{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
         "\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"too old resource version\","
         "\"reason\":\"Expired\",\"code\":410}}\n"},
        {410, NULL,
         "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"too "
         "old\",\"reason\":\"Expired\",\"code\":410}"},
        {200, NULL,
         "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
         "\"30\"},\"items\":[{\"metadata\":{\"name\":\"b\",\"namespace\":\"t\","
         "\"resourceVersion\":\"11\"}},{\"metadata\":{\"name\":\"c\",\"namespace\":\"t\","
         "\"resourceVersion\":\"29\"}}]}"},
    };
    struct fake f;
    struct wrun r = {0};
    fake_start(&f, steps, 4);
    run_watch(&f, &r, 5);
    fake_stop(&f);
    ASSERT_STRCONTAINS(f.req[2], "?resourceVersion=11&resourceVersionMatch=NotOlderThan ");
    ASSERT_STRCONTAINS(f.req[3], "GET /api/v1/namespaces/t/configmaps HTTP");
    ASSERT_STRCONTAINS(f.req[4], "?watch=1&resourceVersion=30&");
    ASSERT_EQ(r.events, 1);
    ASSERT_EQ(r.list_ends, 2);
    ASSERT_EQ(r.items, 3);
    ASSERT_EQ(r.st.relists_410, 1);
    ASSERT_EQ(r.st.lists, 2);
    ASSERT_EQ(r.st.list_failures, 1);
}

TEST(very_short_watch_backs_off_and_429_waits_retry_after)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL, LIST_10},
        {200, NULL, ""}, /* closes at once with no event */
        {429, "Retry-After: 1\r\n",
         "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"slow "
         "down\",\"reason\":\"TooManyRequests\",\"code\":429}"},
        {500, NULL, "not json"},
    };
    struct fake f;
    struct wrun r = {0};
    fake_start(&f, steps, 4);
    run_watch(&f, &r, 5);
    fake_stop(&f);
    for (int i = 1; i <= 4; i++)
        ASSERT_STRCONTAINS(f.req[i], "?watch=1&resourceVersion=10&");
    ASSERT(f.at[2] - f.at[1] >= 200);  /* backoff after the very short watch */
    ASSERT(f.at[3] - f.at[2] >= 1000); /* Retry-After: 1 */
    ASSERT(f.at[4] - f.at[3] >= 200);  /* 500: backoff, re-watch, no list */
    ASSERT_EQ(r.st.lists, 1);
    ASSERT_EQ(r.st.throttled, 1);
    ASSERT_EQ(r.st.last_retry_after_ms, 1000);
    ASSERT_EQ(r.st.watch_failures, 3);
}

TEST(truncated_list_is_aborted_and_retried)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL, "{\"kind\":\"ConfigMapList\",\"items\":[{\"metadata\":{\"name\":\"a\"}},{"},
        {200, NULL, LIST_10},
    };
    struct fake f;
    struct wrun r = {0};
    fake_start(&f, steps, 2);
    run_watch(&f, &r, 3);
    fake_stop(&f);
    ASSERT_EQ(r.list_begins, 2);
    ASSERT_EQ(r.aborts, 1);
    ASSERT_EQ(r.list_ends, 1);
    ASSERT(f.at[1] - f.at[0] >= 200);
    ASSERT_STRCONTAINS(f.req[2], "?watch=1&resourceVersion=10&");
}

/* Checklist 4: a watch from "0" keeps resourceVersion=0 through the
 * synthetic ADDEDs (they are not in RV order) and moves on at the first
 * MODIFIED. */
TEST(watch_from_rv0_holds_rv_through_synthetic_adds)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL,
         "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"namespace\":\"t\","
         "\"resourceVersion\":\"8\"}}}\n{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":"
         "\"b\",\"namespace\":\"t\",\"resourceVersion\":\"3\"}}}\n"},
        {200, NULL,
         "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"namespace\":\"t\","
         "\"resourceVersion\":\"8\"}}}\n{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{"
         "\"name\":\"a\",\"namespace\":\"t\",\"resourceVersion\":\"12\"}}}\n"},
    };
    struct fake f;
    struct wrun r = {.start_rv = "0"};
    fake_start(&f, steps, 2);
    run_watch(&f, &r, 3);
    fake_stop(&f);
    ASSERT_STRCONTAINS(f.req[0], "?watch=1&resourceVersion=0&");
    ASSERT_STRCONTAINS(f.req[1], "?watch=1&resourceVersion=0&"); /* held */
    ASSERT_STRCONTAINS(f.req[2], "?watch=1&resourceVersion=12&");
    ASSERT_EQ(r.list_begins, 0);
    ASSERT_EQ(r.events, 4);
    ASSERT_STREQ(r.rv, "12");
}

/* The informer on the scripted server: list of a, b; watch: b modified,
 * a deleted, c added, then 410; the relist (a vanished meanwhile came back,
 * c vanished) replaces the store with delete synthesis. */
TEST(informer_events_and_relist)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL,
         "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
         "\"10\"},\"items\":[{\"metadata\":{\"name\":\"a\",\"namespace\":\"t\","
         "\"resourceVersion\":\"5\"}},{\"metadata\":{\"name\":\"b\",\"namespace\":\"t\","
         "\"resourceVersion\":\"6\"}}]}"},
        {200, NULL,
         "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\",\"namespace\":"
         "\"t\",\"resourceVersion\":\"11\"}}}\n{\"type\":\"DELETED\",\"object\":{\"metadata\":"
         "{\"name\":\"a\",\"namespace\":\"t\",\"resourceVersion\":\"12\"}}}\n{\"type\":"
         "\"ADDED\",\"object\":{\"metadata\":{\"name\":\"c\",\"namespace\":\"t\","
         "\"resourceVersion\":\"13\"}}}\n{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
         "\"code\":410,\"reason\":\"Expired\",\"message\":\"too old\"}}\n"},
        {200, NULL,
         "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
         "\"20\"},\"items\":[{\"metadata\":{\"name\":\"b\",\"namespace\":\"t\","
         "\"resourceVersion\":\"11\"}},{\"metadata\":{\"name\":\"d\",\"namespace\":\"t\","
         "\"resourceVersion\":\"19\"}}]}"},
    };
    struct fake f;
    struct wrun r = {.use_informer = 1};
    fake_start(&f, steps, 3);
    run_watch(&f, &r, 4);
    fake_stop(&f);
    ASSERT_STRCONTAINS(f.req[2], "?resourceVersion=13&resourceVersionMatch=NotOlderThan ");
    ASSERT_EQ(r.synced, 1);
    /* adds: a, b (list), c (watch), d (relist) */
    ASSERT_EQ(r.adds, 4);
    /* updates: b 6 -> 11 (watch); the relist sees b unchanged: no update */
    ASSERT_EQ(r.updates, 1);
    /* deletes: a (watch, known state), c (relist, final state unknown) */
    ASSERT_EQ(r.deletes, 2);
    ASSERT_EQ(r.unknown, 1);
    ASSERT_EQ(r.count_at_stop, 2);
    ASSERT_STREQ(r.b_rv, "11");
    ASSERT_EQ(f.nreq, 4);
}

#define EV_ADDED(name, rv)                                                                         \
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"t\","     \
    "\"resourceVersion\":\"" rv "\"}}}\n"
/* reliability.md section 1: an event over max_event_bytes ends that watch and
 * the next one starts from the last event delivered (11), not from the
 * list's RV, with no relist; the events after the big one arrive then. */
#define BIG_PAD                                                                                    \
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" \
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
TEST(oversized_event_rewatches_from_last_good_rv)
{
    static const struct tsrv_reply steps[] = {
        {200, NULL, LIST_10},
        {200, NULL,
         EV_ADDED("b", "11") "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"big\","
                             "\"namespace\":\"t\",\"resourceVersion\":\"12\"},\"data\":{\"p\":"
                             "\"" BIG_PAD "\"}}}\n" EV_ADDED("c", "13"),
         .chunks = 6},
        {200, NULL, EV_ADDED("c", "13") EV_ADDED("d", "14")},
    };
    struct fake f;
    struct wrun r = {.max_event = 160};
    fake_start(&f, steps, 3);
    run_watch(&f, &r, 4);
    fake_stop(&f);
    ASSERT_STRCONTAINS(f.req[1], "?watch=1&resourceVersion=10&");
    ASSERT_STRCONTAINS(f.req[2], "?watch=1&resourceVersion=11&");
    ASSERT_STRCONTAINS(f.req[3], "?watch=1&resourceVersion=14&");
    ASSERT_EQ(r.st.lists, 1);
    ASSERT_EQ(r.list_begins, 1);
    ASSERT_EQ(r.events, 3); /* b, c, d: the big one was never delivered */
    ASSERT_EQ(r.st.oversized_events, 1);
    ASSERT_EQ(r.st.watch_failures, 1);
    ASSERT_STREQ(r.rv, "14");
}
