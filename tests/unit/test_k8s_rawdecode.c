/* Unit tests for raw_only decoding (k8sclient/framer.c, lib/jscan.c): the
 * tree-free decoders must accept, refuse and read exactly what the jansson
 * decoders do; and for the informer's managedFields stripping (store.c). */
#include <tkm/jscan.h>
#include <tkm/util.h>

#include "informer-int.h"
#include "test.h"
#include "watch-int.h"

/* Both decoders on one event: same verdict, and on success the same fields. */
static int same_event(const char *s, size_t n)
{
    struct k8s_watch_event a, b;
    json_t *ra = NULL, *rb = NULL;
    struct tkm_err ea = {0}, eb = {0};
    struct k8s__rawdec d;
    k8s__rawdec_init(&d);
    int rca = k8s__event_decode(s, n, &a, &ra, &ea);
    int rcb = k8s__event_decode_raw(&d, s, n, &b, &rb, &eb);
    int ok = rca == rcb;
    if (ok && rca == 0) {
        ok = a.type == b.type && a.raw == b.raw && a.raw_len == b.raw_len &&
             strcmp(a.ns, b.ns) == 0 && strcmp(a.name, b.name) == 0 &&
             strcmp(a.resource_version, b.resource_version) == 0 && strcmp(a.uid, b.uid) == 0 &&
             a.code == b.code;
        if (a.type == K8S_WATCH_ERROR || a.type == K8S_WATCH_BOOKMARK)
            ok = ok && b.object && strcmp(a.reason ? a.reason : "", b.reason ? b.reason : "") == 0;
        else
            ok = ok && !b.object && !rb;
    }
    if (ok && rca < 0)
        ok = ea.msg[0] && eb.msg[0] && !rb;
    if (!ok)
        fprintf(stderr, "decoders disagree (%d vs %d: %s | %s) on: %.*s\n", rca, rcb, ea.msg,
                eb.msg, (int)n, s);
    json_decref(ra);
    json_decref(rb);
    k8s__rawdec_release(&d);
    return ok;
}

static int same_item(const char *s, size_t n)
{
    struct k8s_watch_event a, b;
    json_t *ra = NULL;
    struct tkm_err ea = {0}, eb = {0};
    struct k8s__rawdec d;
    k8s__rawdec_init(&d);
    int rca = k8s__item_decode(s, n, &a, &ra, &ea);
    int rcb = k8s__item_decode_raw(&d, s, n, &b, &eb);
    int ok = rca == rcb;
    if (ok && rca == 0)
        ok = b.object == NULL && a.raw == b.raw && a.raw_len == b.raw_len &&
             strcmp(a.ns, b.ns) == 0 && strcmp(a.name, b.name) == 0 &&
             strcmp(a.resource_version, b.resource_version) == 0 && strcmp(a.uid, b.uid) == 0;
    if (!ok)
        fprintf(stderr, "item decoders disagree (%d vs %d: %s | %s) on: %.*s\n", rca, rcb, ea.msg,
                eb.msg, (int)n, s);
    json_decref(ra);
    k8s__rawdec_release(&d);
    return ok;
}

/* jansson's verdict on a whole text vs tkm_jscan's. */
static int same_verdict(const char *s, size_t n)
{
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    struct tkm_err err = {0};
    int rc = tkm_jscan_validate(NULL, s, n, "t", &err);
    int ok = (j != NULL) == (rc == 0);
    if (!ok)
        fprintf(stderr, "verdicts differ: jansson %s (%s), jscan %d (%s) on: %.*s\n",
                j ? "ok" : "refuses", j ? "" : je.text, rc, err.msg, (int)n, s);
    json_decref(j);
    return ok;
}

#define EV_ESC                                                                                     \
    "{ \"type\" : \"MODIFIED\", \"object\":{\"kind\":\"TritonKernelCache\",\"metadata\":{"         \
    "\"name\":\"caf\\u00e9-\\ud83d\\ude00\\/x\\n\\t\\\"q\\\\\",\"namespace\":\"n\\u0073\","        \
    "\"resourceVersion\":\"1\\u0032\",\"uid\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"},"          \
    "\"spec\":{\"v\":[1,-0,2.5e-3,true,false,null,{}],\"s\":\"}{][\"}}}"

TEST(raw_event_reads_escaped_metadata_like_jansson)
{
    struct k8s_watch_event ev;
    json_t *root = NULL;
    struct tkm_err err = {0};
    struct k8s__rawdec d;
    k8s__rawdec_init(&d);
    ASSERT_OK(k8s__event_decode_raw(&d, EV_ESC, strlen(EV_ESC), &ev, &root, &err));
    ASSERT_NULL(root);
    ASSERT_NULL(ev.object);
    ASSERT_EQ(ev.type, K8S_WATCH_MODIFIED);
    ASSERT_STREQ(ev.name, "caf\xc3\xa9-\xf0\x9f\x98\x80/x\n\t\"q\\");
    ASSERT_STREQ(ev.ns, "ns");
    ASSERT_STREQ(ev.resource_version, "12");
    ASSERT_STREQ(ev.uid, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    ASSERT(ev.raw == strstr(EV_ESC, "{\"kind\""));
    ASSERT_EQ(ev.raw[ev.raw_len - 1], '}');
    ASSERT(same_event(EV_ESC, strlen(EV_ESC)));
    k8s__rawdec_release(&d);
}

TEST(raw_error_and_bookmark_events_keep_their_object)
{
    const char *s = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"message\":\"too old\","
                    "\"reason\":\"Expired\",\"code\":410}}";
    struct k8s_watch_event ev;
    json_t *root = NULL;
    struct tkm_err err = {0};
    struct k8s__rawdec d;
    k8s__rawdec_init(&d);
    ASSERT_OK(k8s__event_decode_raw(&d, s, strlen(s), &ev, &root, &err));
    ASSERT_EQ(ev.type, K8S_WATCH_ERROR);
    ASSERT_EQ(ev.code, 410);
    ASSERT_STREQ(ev.reason, "Expired");
    ASSERT_STREQ(ev.message, "too old");
    ASSERT_NOT_NULL(root);
    json_decref(root);
    s = "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\","
        "\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}";
    ASSERT_OK(k8s__event_decode_raw(&d, s, strlen(s), &ev, &root, &err));
    ASSERT_EQ(ev.type, K8S_WATCH_BOOKMARK);
    ASSERT_STREQ(ev.resource_version, "7");
    ASSERT_NOT_NULL(ev.object);
    json_decref(root);
    k8s__rawdec_release(&d);
}

TEST(raw_and_tree_decoders_agree_on_bad_and_odd_events)
{
    static const char *const cases[] = {
        /* fine */
        "{\"type\":\"ADDED\",\"object\":{}}",
        "{\"type\":\"DELETED\",\"object\":{\"metadata\":{}}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":[]}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":5,\"uid\":null}}}",
        "{\"object\":{\"metadata\":{\"name\":\"a\"}},\"type\":\"ADDED\",\"x\":[]}",
        "\n {\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\"}}} \r\n",
        "{\"type\":\"ADDED\",\"object\":{\"n\":-9223372036854775808,\"m\":9223372036854775807}}",
        "{\"type\":\"ADDED\",\"object\":{\"r\":1e308,\"u\":1e-999}}",
        /* duplicate keys, also spelled differently */
        "{\"type\":\"ADDED\",\"object\":{\"a\":1,\"a\":2}}",
        "{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}",
        "{\"type\":\"ADDED\",\"object\":{},\"object\":{}}",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"n\\u0061me\":\"b\"}}}",
        "{\"type\":\"ADDED\",\"object\":{\"x\":{\"a\":{\"b\":1},\"b\":{\"b\":2,\"b\":3}}}}",
        /* nested objects may reuse a parent's names */
        "{\"type\":\"ADDED\",\"object\":{\"a\":{\"a\":{\"a\":1}},\"b\":1}}",
        /* type */
        "{\"type\":\"EXPLODED\",\"object\":{}}",
        "{\"type\":\"ADD\\u0045D\",\"object\":{}}",
        "{\"type\":7,\"object\":{}}",
        "{\"object\":{}}",
        /* object */
        "{\"type\":\"ADDED\",\"object\":[]}",
        "{\"type\":\"ADDED\",\"object\":\"{}\"}",
        "{\"type\":\"ADDED\"}",
        "[1,2]",
        "\"x\"",
        "",
        /* syntax */
        "{\"type\":\"ADDED\",\"object\":{]}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":01}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":1.}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":.5}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":1e}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":-}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":9223372036854775808}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":-9223372036854775809}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":1e309}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":tru}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":truex}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":nul}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":1,}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\" 1}}",
        "{\"type\":\"ADDED\",\"object\":{a:1}}",
        "{\"type\":\"ADDED\",\"object\":{}}x",
        "{\"type\":\"ADDED\",\"object\":{}}{}",
        /* strings */
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\ud800\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\udc00\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\ud800\\u0041\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\u0000\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\u00g0\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\\x\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\x01\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\xc0\xaf\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\xed\xa0\x80\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\xf4\x90\x80\x80\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\xe2\x82\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"\xff\"}}",
        "{\"type\":\"ADDED\",\"object\":{\"a\":\"x}}",
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(cases); i++) {
        ASSERT(same_event(cases[i], strlen(cases[i])));
        ASSERT(same_verdict(cases[i], strlen(cases[i])));
    }
    /* "object" as a list item */
    for (size_t i = 0; i < TKM_ARRAY_SIZE(cases); i++)
        ASSERT(same_item(cases[i], strlen(cases[i])));
}

TEST(raw_decoder_refuses_every_truncation)
{
    size_t n = strlen(EV_ESC);
    for (size_t k = 0; k < n; k++) {
        ASSERT(same_event(EV_ESC, k));
        ASSERT(same_item(EV_ESC, k));
    }
}

/* Depth: jansson counts every value, scalars included, up to 2048. */
TEST(nesting_limit_is_janssons)
{
    static char s[2 * 2100 + 8];
    for (size_t depth = 2046; depth <= 2050; depth++) {
        size_t n = 0;
        for (size_t k = 0; k < depth; k++)
            s[n++] = '[';
        s[n++] = '1';
        for (size_t k = 0; k < depth; k++)
            s[n++] = ']';
        ASSERT(same_verdict(s, n));
    }
    struct tkm_err err = {0};
    memset(s, '[', 2048);
    memset(s + 2048, ']', 2048);
    ASSERT_OK(tkm_jscan_validate(NULL, s, 4096, "t", &err));
    memset(s, '[', 2048);
    s[2048] = '1';
    memset(s + 2049, ']', 2048);
    ASSERT_EQ(tkm_jscan_validate(NULL, s, 4097, "t", &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "depth");
}

/* Every one-byte change of a real event: the validator agrees with jansson. */
TEST_TIMEOUT(one_byte_mutations_agree_with_jansson, 120)
{
    static const char subst[] = "\"\\{}[],:0-e.Eu+ a1\x01\x7f\x80\xc3\xff\xed";
    const char *seed = EV_ESC;
    size_t n = strlen(seed);
    char *m = malloc(n + 2);
    ASSERT_NOT_NULL(m);
    size_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof subst - 1; k++) {
            memcpy(m, seed, n);
            m[i] = subst[k];
            ASSERT(same_verdict(m, n));
            ASSERT(same_event(m, n));
            /* inserted before i */
            memcpy(m, seed, i);
            m[i] = subst[k];
            memcpy(m + i + 1, seed + i, n - i);
            ASSERT(same_verdict(m, n + 1));
            checked += 2;
        }
        /* deleted */
        memcpy(m, seed, i);
        memcpy(m + i, seed + i + 1, n - i - 1);
        ASSERT(same_verdict(m, n - 1));
        ASSERT(same_event(m, n - 1));
    }
    ASSERT(checked > 10000);
    free(m);
}

/* A NUL byte anywhere (jansson alone skips one outside strings): both event
 * decoders refuse it, the tree decoder saying so. */
TEST(nul_byte_anywhere_refused_by_both)
{
    const char *seed = EV_ESC;
    size_t n = strlen(seed);
    char *m = malloc(n);
    ASSERT_NOT_NULL(m);
    for (size_t i = 0; i < n; i++) {
        memcpy(m, seed, n);
        m[i] = 0;
        ASSERT(same_event(m, n));
        struct k8s_watch_event ev;
        json_t *root = NULL;
        struct tkm_err err = {0};
        ASSERT_EQ(k8s__event_decode(m, n, &ev, &root, &err), -EPROTO);
        ASSERT_NULL(root);
        ASSERT_STRCONTAINS(err.msg, "a NUL byte");
    }
    free(m);
}

/* Objects past the linear duplicate check: sorted at close. */
TEST(many_keys_duplicates_found_by_sorting)
{
    struct tkm_buf b;
    tkm_buf_init(&b, 1u << 20);
    for (int dup = 0; dup < 3; dup++) {
        tkm_buf_reset(&b);
        ASSERT_OK(tkm_buf_puts(&b, "{\"type\":\"ADDED\",\"object\":{\"data\":{"));
        for (int i = 0; i < 5000; i++)
            ASSERT_OK(tkm_buf_printf(&b, "%s\"k%d\":%d", i ? "," : "", i, i));
        if (dup == 1)
            ASSERT_OK(tkm_buf_puts(&b, ",\"k4321\":0"));
        if (dup == 2)
            ASSERT_OK(tkm_buf_puts(&b, ",\"k\\u0031\":0")); /* "k1", escaped */
        ASSERT_OK(tkm_buf_puts(&b, "}}}"));
        ASSERT(same_verdict(b.data, b.len));
        ASSERT(same_event(b.data, b.len));
        struct tkm_err err = {0};
        ASSERT_EQ(tkm_jscan_validate(NULL, b.data, b.len, "t", &err), dup ? -EPROTO : 0);
        if (dup)
            ASSERT_STRCONTAINS(err.msg, "duplicate object key");
    }
    tkm_buf_release(&b);
}

TEST(jscan_readers)
{
    const char *s = "{\"a\\u0062\":[1,\"x\"],\"c\":{\"d\":\"\\u00e9\"}, \"e\" : true }";
    size_t n = strlen(s), pos = 0;
    struct tkm_jscan_member m;
    struct tkm_buf b;
    ASSERT_OK(tkm_jscan_validate(NULL, s, n, "t", NULL));
    ASSERT(tkm_jscan_member(s, n, 0, "ab", &m));
    ASSERT_MEMEQ(s + m.val, "[1,\"x\"]", m.val_len);
    ASSERT(!tkm_jscan_member(s, n, 0, "a", &m));
    ASSERT(!tkm_jscan_member(s, n, 1, "ab", &m)); /* not an object there */
    ASSERT(tkm_jscan_member(s, n, 0, "c", &m));
    size_t c = m.val;
    ASSERT(tkm_jscan_member(s, n, c, "d", &m));
    tkm_buf_init(&b, 16);
    ASSERT_OK(tkm_jscan_str(s, m.val, m.val_len, &b));
    ASSERT_STREQ(b.data, "\xc3\xa9");
    ASSERT_EQ(tkm_jscan_str(s, c, 3, &b), -EINVAL);
    tkm_buf_release(&b);
    /* elements of the array */
    ASSERT(tkm_jscan_member(s, n, 0, "ab", &m));
    pos = m.val;
    int count = 0;
    while (tkm_jscan_next(s, n, &pos, &m))
        count++;
    ASSERT_EQ(count, 2);
    pos = 0;
    count = 0;
    while (tkm_jscan_next(s, n, &pos, &m))
        count++;
    ASSERT_EQ(count, 3);
}

/* ---- managedFields stripping ---------------------------------------------------------- */

static void check_strip(const char *obj, int expect_cut)
{
    struct k8s_watch_event ev;
    struct k8s__rawdec d;
    struct k8s_obj *o = NULL;
    struct tkm_err err = {0};
    json_error_t je;
    k8s__rawdec_init(&d);
    ASSERT_OK(k8s__item_decode_raw(&d, obj, strlen(obj), &ev, &err));
    ASSERT_OK(k8s__obj_new(&ev, 1, &o));
    ASSERT_STREQ(o->name, "a");
    ASSERT_EQ(o->json_len, strlen(o->json));
    ASSERT_EQ(o->json_len < strlen(obj), expect_cut);
    json_t *want = json_loads(obj, JSON_REJECT_DUPLICATES, &je), *got = NULL;
    ASSERT_NOT_NULL(want);
    json_object_del(json_object_get(want, "metadata"), "managedFields");
    ASSERT_OK(k8s_obj_parse(o, &got, &err));
    ASSERT(json_equal(want, got));
    json_decref(want);
    json_decref(got);
    k8s_obj_free(o);
    k8s__rawdec_release(&d);
}

#define MF "[{\"manager\":\"kubectl\",\"fieldsV1\":{\"f:spec\":{\"f:x\":{}}}}]"

TEST(strip_managed_fields_anywhere_in_metadata)
{
    check_strip("{\"metadata\":{\"name\":\"a\",\"managedFields\":" MF ",\"uid\":\"u\"},\"s\":1}",
                1);
    check_strip("{\"metadata\":{\"managedFields\":" MF " , \"name\":\"a\"}}", 1);
    check_strip("{\"metadata\":{\"name\":\"a\" ,\n \"managedFields\" : " MF "\n}}", 1);
    check_strip("{\"kind\":\"X\",\"metadata\":{\"name\":\"a\",\"managed\\u0046ields\":" MF "}}", 1);
    /* only in metadata: the same name elsewhere stays */
    check_strip("{\"spec\":{\"managedFields\":1},\"metadata\":{\"name\":\"a\"}}", 0);
    check_strip("{\"metadata\":{\"name\":\"a\"}}", 0);
    /* keeping them: the bytes are stored as sent */
    const char *s = "{\"metadata\":{\"name\":\"a\",\"managedFields\":" MF "}}";
    struct k8s_watch_event ev;
    struct k8s__rawdec d;
    struct k8s_obj *o = NULL;
    k8s__rawdec_init(&d);
    ASSERT_OK(k8s__item_decode_raw(&d, s, strlen(s), &ev, NULL));
    ASSERT_OK(k8s__obj_new(&ev, 0, &o));
    ASSERT_STREQ(o->json, s);
    k8s_obj_free(o);
    /* a span outside the bytes is refused */
    ASSERT_EQ(k8s__obj_make_cut("", "a", "", "", s, 4, 3, 2, &o), -EINVAL);
    ASSERT_NULL(o);
    k8s__rawdec_release(&d);
}
