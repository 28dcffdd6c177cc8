/* Unit tests for the watch framer, the event decoder and the backoff
 * (k8sclient/framer.c). */
#include "test.h"

#include "util.h"
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

TEST(backoff_grows_caps_jitters_and_resets)
{
    struct k8s__backoff b;
    k8s__backoff_init(&b, 800, 30000, 120000, 42);
    uint64_t now = 1000, expect = 800;
    for (int i = 0; i < 12; i++) {
        uint64_t d = k8s__backoff_next(&b, now);
        if (expect * 2 <= 30000) {
            ASSERT(d >= expect && d <= expect * 2);
        } else {
            ASSERT(d >= 15000 && d <= 30000);
        }
        expect = expect * 2 > 30000 ? 30000 : expect * 2;
        now += d;
    }
    /* After 2 min without a backoff the delay starts over. */
    uint64_t d = k8s__backoff_next(&b, now + 120001);
    ASSERT(d >= 800 && d <= 1600);
}

TEST(rand_range_stays_in_bounds)
{
    uint64_t s = 7;
    int seen_lo = 0, seen_hi = 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t v = k8s__rand_range(&s, 300, 600);
        ASSERT(v >= 300 && v <= 600);
        seen_lo |= v < 330;
        seen_hi |= v > 570;
    }
    ASSERT(seen_lo && seen_hi);
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
