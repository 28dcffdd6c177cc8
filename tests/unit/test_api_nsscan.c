/* Unit tests for tkm_api_nodestatus_scan() (api/nodestatus_scan.c): on
 * real node status objects, generated ones and garbage it must agree with
 * tkm_api_nodestatus_decode() on accept/reject, on the error message, and on
 * every field it reports. */
#include <tkm/api/v1alpha1.h>
#include <tkm/util.h>

#include "test.h"

#define NS_MAX 600

struct seen {
    struct tkm_api_nsscan_head h;
    size_t n;
    char *name[NS_MAX], *digest[NS_MAX], *error[NS_MAX], *reason[NS_MAX], *message[NS_MAX];
    int prefetch[NS_MAX];
    char *fallback[NS_MAX], *lists[NS_MAX]; /* lists: variants and groups, as lists_of() */
    char *compiles[NS_MAX];                 /* as compiles_of() */
    int verified[NS_MAX], extracted[NS_MAX];
    size_t ncomp[NS_MAX], nincomp[NS_MAX], npods[NS_MAX];
    size_t stop_after; /* 0: never */
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* One line for an entry's variants and incompatible groups (NULL strings as "-"). */
static char *lists_of(size_t nv, const char *const *vs, const size_t *nids, size_t ng,
                      const char *const *gs, const size_t *gids)
{
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    for (size_t i = 0; i < nv; i++)
        tkm_buf_printf(&b, "%s|%zu;", vs[i] ? vs[i] : "-", nids[i]);
    for (size_t i = 0; i < ng; i++)
        tkm_buf_printf(&b, "G%s|%s|%zu;", gs[i * 2] ? gs[i * 2] : "-",
                       gs[i * 2 + 1] ? gs[i * 2 + 1] : "-", gids[i]);
    char *r = strdup(b.len ? b.data : "");
    tkm_buf_release(&b);
    return r;
}

/* One line for an entry's compiles ("-" when absent). */
static char *compiles_of(const struct tkm_api_compiles *c)
{
    struct tkm_buf b = TKM_BUF_INIT(1 << 16);
    if (!c->present)
        tkm_buf_puts(&b, "-");
    else
        tkm_buf_printf(&b, "%lld/%lld %lld %lld %lld %lld %s;", (long long)c->pods_served,
                       (long long)c->pods_compiled, (long long)c->triton_kernels,
                       (long long)c->inductor_entries, (long long)c->vllm_entries,
                       (long long)c->bytes, c->since ? c->since : "-");
    for (size_t i = 0; c->present && i < c->n_top; i++)
        tkm_buf_printf(&b, "%s=%lld,", c->top[i].name, (long long)c->top[i].pods);
    char *r = strdup(b.data);
    tkm_buf_release(&b);
    return r;
}

static char *lists_scanned(const struct tkm_api_nsscan_entry *e)
{
    const char *vs[64], *gs[64 * 2];
    size_t nids[64], gids[64];
    for (size_t i = 0; i < e->n_variants; i++) {
        vs[i] = e->variants[i].digest;
        nids[i] = e->variants[i].n_gpu_ids;
    }
    for (size_t i = 0; i < e->n_incompatible; i++) {
        gs[i * 2] = e->incompatible[i].gpu_type;
        gs[i * 2 + 1] = e->incompatible[i].reason;
        gids[i] = e->incompatible[i].n_ids;
    }
    return lists_of(e->n_variants, vs, nids, e->n_incompatible, gs, gids);
}

static char *lists_decoded(const struct tkm_api_node_cache *c)
{
    const char *vs[64], *gs[64 * 2];
    size_t nids[64], gids[64];
    for (size_t i = 0; i < c->n_variants; i++) {
        vs[i] = c->variants[i].digest;
        nids[i] = c->variants[i].n_gpu_ids;
    }
    for (size_t i = 0; i < c->n_incompatible; i++) {
        gs[i * 2] = c->incompatible[i].gpu_type;
        gs[i * 2 + 1] = c->incompatible[i].reason;
        gids[i] = c->incompatible[i].n_ids;
    }
    return lists_of(c->n_variants, vs, nids, c->n_incompatible, gs, gids);
}

static int on_entry(const struct tkm_api_nsscan_head *h, const struct tkm_api_nsscan_entry *e,
                    void *data)
{
    struct seen *s = data;
    if (s->n >= NS_MAX)
        return -99;
    s->h = *h;
    size_t i = s->n++;
    s->name[i] = strdup(e->name);
    s->digest[i] = dup_or_null(e->digest);
    s->error[i] = dup_or_null(e->error);
    s->reason[i] = dup_or_null(e->incompatible_reason);
    s->message[i] = dup_or_null(e->incompatible_message);
    s->fallback[i] = dup_or_null(e->fallback);
    s->prefetch[i] = (int)e->prefetch;
    s->lists[i] = lists_scanned(e);
    s->compiles[i] = compiles_of(&e->compiles);
    s->verified[i] = e->verified;
    s->extracted[i] = e->extracted;
    s->ncomp[i] = e->n_compatible;
    s->nincomp[i] = e->n_incompatible;
    s->npods[i] = e->n_pods;
    return s->stop_after && s->n == s->stop_after ? 42 : 0;
}

static void seen_release(struct seen *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->name[i]);
        free(s->digest[i]);
        free(s->error[i]);
        free(s->reason[i]);
        free(s->message[i]);
        free(s->fallback[i]);
        free(s->lists[i]);
        free(s->compiles[i]);
    }
    s->n = 0;
}

static int streq_null(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* The fields of one decoded cache against what the scan reported. */
static int same_cache(const struct tkm_api_node_cache *c, const struct seen *s, size_t i)
{
    const char *r = c->n_incompatible ? c->incompatible[0].reason : NULL;
    const char *m = c->n_incompatible ? c->incompatible[0].message : NULL;
    char *l = lists_decoded(c);
    char *cc = compiles_of(&c->compiles);
    int same_lists = l && s->lists[i] && strcmp(l, s->lists[i]) == 0 && cc && s->compiles[i] &&
                     strcmp(cc, s->compiles[i]) == 0;
    free(l);
    free(cc);
    return same_lists && streq_null(c->fallback, s->fallback[i]) &&
           (int)c->prefetch == s->prefetch[i] && strcmp(c->name, s->name[i]) == 0 &&
           streq_null(c->digest, s->digest[i]) && streq_null(c->error, s->error[i]) &&
           streq_null(r, s->reason[i]) && streq_null(m, s->message[i]) &&
           c->verified == s->verified[i] && c->extracted == s->extracted[i] &&
           c->n_compatible == s->ncomp[i] && c->n_incompatible == s->nincomp[i] &&
           c->n_pods == s->npods[i];
}

/* Runs both; returns 1 when they agree. *accepted gets the verdict. */
static int agree(const char *json, size_t len, int *accepted)
{
    struct tkm_api_nodestatus d;
    struct tkm_api_nsscan sc;
    struct tkm_api_nsscan_head h;
    struct tkm_err ed = {0}, es = {0};
    struct seen *s = calloc(1, sizeof *s);
    int ok = 1;
    if (!s)
        return 0;
    tkm_api_nsscan_init(&sc);
    int rd = tkm_api_nodestatus_decode(json, len, &d, &ed);
    int rs = tkm_api_nodestatus_scan(&sc, json, len, &h, on_entry, s, &es);
    *accepted = rd == 0;
    if (rd != rs) {
        ok = 0;
    } else if (rd < 0) {
        /* the same sentence, except for syntax (jansson's wording differs) */
        ok = s->n == 0 && es.msg[0] && (strstr(ed.msg, "not JSON") || strcmp(ed.msg, es.msg) == 0);
    } else {
        ok = h.cluster == d.cluster && streq_null(h.name, d.meta.name) &&
             streq_null(h.ns, d.meta.ns) && streq_null(h.uid, d.meta.uid) &&
             streq_null(h.resource_version, d.meta.resource_version) &&
             streq_null(h.node_name, d.status.node_name) && h.n_caches == d.status.n_caches &&
             s->n == d.status.n_caches;
        for (size_t i = 0; ok && i < s->n; i++) {
            const struct tkm_api_node_cache *c = NULL;
            for (size_t k = 0; k < d.status.n_caches && !c; k++)
                if (strcmp(d.status.caches[k].name, s->name[i]) == 0)
                    c = &d.status.caches[k];
            ok = c && same_cache(c, s, i);
        }
    }
    if (!ok)
        fprintf(stderr, "decode %d (%s) vs scan %d (%s), %zu entries, on: %.*s\n", rd, ed.msg, rs,
                es.msg, s->n, len > 2000 ? 2000 : (int)len, json);
    tkm_api_nodestatus_release(&d);
    tkm_api_nsscan_release(&sc);
    seen_release(s);
    free(s);
    return ok;
}

static int agree_str(const char *json, int want_accept)
{
    int acc = -1;
    int ok = agree(json, strlen(json), &acc);
    if (ok && acc != want_accept)
        fprintf(stderr, "expected %s: %s\n", want_accept ? "accepted" : "refused", json);
    return ok && acc == want_accept;
}

TEST(real_node_statuses_agree_field_by_field)
{
    const char *files[] = {"sim-00000.json", "sim-00001.json"};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(files); i++) {
        char path[4096];
        size_t len = 0;
        int acc = 0;
        snprintf(path, sizeof path, "%s/nodestatus/%s", tkm_test_fixtures(), files[i]);
        char *j = tkm_test_slurp(path, &len);
        ASSERT_NOT_NULL(j);
        ASSERT(len > 40000);
        ASSERT(agree(j, len, &acc));
        ASSERT_EQ(acc, 1);
        free(j);
    }
}

/* A node status as an agent writes it (tkm_api_node_status_apply, as
 * bench/simagents.c), with metadata as the apiserver adds it. */
static char *build(size_t n_caches, int variant, int cluster)
{
    int32_t ids[2] = {0, 1};
    struct tkm_api_gpu gpu = {.id = 0,
                              .gpu_type = "nvidia-h200",
                              .warp_size = 32,
                              .memory_bytes = 150754820096LL,
                              .uuid = "GPU-0"};
    struct tkm_api_pod_ref pods[2] = {{"ns", "p0", "u0", "v0"}, {"ns", "p1", "u1", "v1"}};
    struct tkm_api_gpu_group comp = {.ids = ids, .n_ids = 2, .gpu_type = "nvidia-h200"};
    struct tkm_api_gpu_group inc[2] = {
        {.ids = ids,
         .n_ids = 1,
         .gpu_type = "amd",
         .reason = "ArchMismatch",
         .message = "m\"1\u00e9"},
        {.ids = ids + 1, .n_ids = 1, .gpu_type = "amd", .reason = "Other"}};
    struct tkm_api_kernel_count top[2] = {{"_attn_fwd_inner.x-1", 3}, {"triton_poi_fused_0", 1}};
    struct tkm_api_compiles cc = {1, 7,   3, 40, 2, 0, 123456, top, 2, "2026-11-28T01:02:03Z",
                                  0, NULL};
    struct tkm_api_variant_use vu[2] = {{"sha256:aa", ids, 2}, {"sha256:bb", NULL, 0}};
    struct tkm_api_node_cache *c = calloc(n_caches ? n_caches : 1, sizeof *c);
    char(*names)[64] = calloc(n_caches ? n_caches : 1, 64);
    struct tkm_api_node_status st = {.node_name = "node-a",
                                     .gpus = &gpu,
                                     .n_gpus = 1,
                                     .caches = c,
                                     .n_caches = n_caches,
                                     .last_updated = "2026-11-23T00:00:00Z"};
    struct tkm_buf out;
    json_t *body = NULL;
    char *r = NULL;
    tkm_buf_init(&out, 64u << 20);
    for (size_t i = 0; c && names && i < n_caches; i++) {
        int k = (int)((i + (size_t)variant) % 5);
        snprintf(names[i], 64, "cache-%03zu%s", i, k == 4 ? "-\xc3\xa9\"q" : "");
        c[i].name = names[i];
        c[i].digest = k == 3 ? NULL : "sha256:6de8f51e27f23070662a8c705c7e1cedb046df562505d23c1d80";
        c[i].verified = k != 1;
        c[i].extracted = k == 0 || k == 2;
        c[i].error = k == 3 ? "pull failed: 404" : NULL;
        if (k == 0 || k == 2) {
            c[i].compatible = &comp;
            c[i].n_compatible = 1;
        }
        if (k == 1 || k == 2) {
            c[i].incompatible = inc;
            c[i].n_incompatible = k == 1 ? 2 : 1;
        }
        if (k == 0) {
            c[i].pods = pods;
            c[i].n_pods = 2;
        }
        if (k == 0 || k == 2) {
            c[i].variants = vu;
            c[i].n_variants = k == 0 ? 2 : 1;
        }
        if (k == 1)
            c[i].fallback = "Empty";
        if (k == 0 || k == 2)
            c[i].prefetch = k == 0 ? TKM_API_PREFETCH_WAITING : TKM_API_PREFETCH_PULLING;
        if (k == 0 || k == 1) {
            c[i].compiles = cc;
            c[i].compiles.n_top = k == 0 ? 2 : 0;
        }
    }
    if (c && names &&
        tkm_api_node_status_apply(&st, cluster ? NULL : "tkm-system", "uid-node", &body, NULL) ==
            0) {
        json_t *md = json_object_get(body, "metadata");
        json_object_set_new(md, "uid", json_string("1d4c-uid"));
        json_object_set_new(md, "resourceVersion", json_string("12345"));
        json_object_set_new(md, "generation", json_integer(3));
        if (tkm_api_dump(body, &out) == 0)
            r = tkm_buf_detach(&out, NULL);
    }
    json_decref(body);
    tkm_buf_release(&out);
    free(names);
    free(c);
    return r;
}

TEST(generated_node_statuses_agree)
{
    size_t counts[] = {0, 1, 5, 100, 512};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(counts); i++) {
        for (int cluster = 0; cluster < 2; cluster++) {
            char *j = build(counts[i], (int)i, cluster);
            ASSERT_NOT_NULL(j);
            ASSERT(agree_str(j, 1));
            free(j);
        }
    }
    char *j = build(513, 0, 0);
    ASSERT_NOT_NULL(j);
    ASSERT(agree_str(j, 0));
    free(j);
}

#define HEAD  "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCacheNodeStatus\","
#define MD    "\"metadata\":{\"name\":\"n1\",\"namespace\":\"ns\"}"
#define ST(x) HEAD MD ",\"status\":{" x "}}"
#define C(x)  ST("\"caches\":{\"a\":{" x "}}")

TEST(garbage_is_refused_by_both_with_the_same_message)
{
    static const char *const bad[] = {
        /* tests/e2e/ctrl_faults.sh's */
        ST("\"nodeName\":\"n1\",\"gpus\":[{\"id\":99999999999}],\"caches\":{\"ok\":{\"digest\":"
           "\"sha256:aa\",\"compatibleGPUs\":[{\"ids\":[99999999999]}]}}"),
        C("\"compatibleGPUs\":[{\"ids\":[99999999999]}]"),
        C("\"compatibleGPUs\":[{\"ids\":[-1]}]"),
        C("\"compatibleGPUs\":[{\"ids\":[2147483648]}]"),
        C("\"compatibleGPUs\":[{\"ids\":[1.0]}]"),
        C("\"compatibleGPUs\":[{\"ids\":[\"1\"]}]"),
        C("\"compatibleGPUs\":[{\"ids\":[null]}]"),
        C("\"compatibleGPUs\":[{\"ids\":{}}]"),
        C("\"compatibleGPUs\":[1]"),
        C("\"compatibleGPUs\":{}"),
        C("\"incompatibleGPUs\":[{\"reason\":1}]"),
        C("\"incompatibleGPUs\":[{\"message\":false}]"),
        C("\"incompatibleGPUs\":[{\"gpuType\":[]}]"),
        C("\"digest\":1"),
        C("\"variants\":[{\"gpuIds\":[1.5]}]"),
        C("\"variants\":[{\"digest\":[]}]"),
        C("\"variants\":[{\"gpuIds\":[-1]}]"),
        C("\"variants\":\"x\""),
        C("\"fallback\":\"Fail\""),
        C("\"prefetch\":\"waiting\""),
        C("\"prefetch\":\"Done\""),
        C("\"prefetch\":1"),
        C("\"compiles\":[]"),
        C("\"compiles\":{\"podsServed\":-1}"),
        C("\"compiles\":{\"podsCompiled\":1.5}"),
        C("\"compiles\":{\"bytes\":\"1\"}"),
        C("\"compiles\":{\"vllmEntries\":-3}"),
        C("\"compiles\":{\"since\":\"yesterday\"}"),
        C("\"compiles\":{\"since\":\"2026-11-28T01:02:03\"}"),
        C("\"compiles\":{\"since\":\"2026-13-28T01:02:03Z\"}"),
        C("\"compiles\":{\"since\":1}"),
        C("\"compiles\":{\"topKernels\":{}}"),
        C("\"compiles\":{\"topKernels\":[1]}"),
        C("\"compiles\":{\"topKernels\":[{\"pods\":1}]}"),
        C("\"compiles\":{\"topKernels\":[{\"name\":\"\"}]}"),
        C("\"compiles\":{\"topKernels\":[{\"name\":\"a b\"}]}"),
        C("\"compiles\":{\"topKernels\":[{\"name\":\"../x\"}]}"),
        C("\"compiles\":{\"topKernels\":[{\"name\":\"\\u001b[31m\"}]}"),
        C("\"compiles\":{\"topKernels\":[{\"name\":\"k\",\"pods\":-1}]}"),
        C("\"compiles\":{\"topKernels\":[{},{},{},{},{},{},{},{},{},{},{}]}"),
        C("\"verified\":\"true\""),
        C("\"extracted\":1"),
        C("\"error\":{}"),
        C("\"lastUpdated\":2"),
        C("\"pods\":[{\"name\":1}]"),
        C("\"pods\":[\"p\"]"),
        C("\"pods\":{}"),
        ST("\"caches\":{\"a\":[]}"),
        ST("\"caches\":{\"a\":null}"),
        ST("\"caches\":[]"),
        ST("\"nodeName\":1"),
        ST("\"lastUpdated\":1"),
        ST("\"gpus\":{}"),
        ST("\"gpus\":[{}]"),
        ST("\"gpus\":[1]"),
        ST("\"gpus\":[{\"id\":0,\"warpSize\":\"32\"}]"),
        ST("\"gpus\":[{\"id\":0,\"memoryBytes\":-1}]"),
        ST("\"gpus\":[{\"id\":0,\"migMode\":0}]"),
        ST("\"gpus\":[{\"id\":0,\"uuid\":0}]"),
        ST("\"gpus\":[{\"id\":2147483648}]"),
        HEAD MD ",\"status\":[]}",
        HEAD MD ",\"status\":\"x\"}",
        HEAD "\"metadata\":{\"namespace\":\"ns\"}}",
        HEAD "\"metadata\":{\"name\":1}}",
        HEAD "\"metadata\":{\"name\":\"a\",\"uid\":1}}",
        HEAD "\"metadata\":{\"name\":\"a\",\"generation\":-1}}",
        HEAD "\"metadata\":{\"name\":\"a\",\"generation\":1.5}}",
        HEAD "\"metadata\":[]}",
        HEAD "\"x\":1}",
        "{\"apiVersion\":\"tkm.io/v2\",\"kind\":\"TritonKernelCacheNodeStatus\"," MD "}",
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"Pod\"," MD "}",
        "{\"apiVersion\":1," MD "}",
        "{\"kind\":[]," MD "}",
        /* syntax, duplicates */
        ST("\"caches\":{\"a\":{},\"a\":{}}"),
        ST("\"caches\":{\"a\":{},\"\\u0061\":{}}"),
        C("\"digest\":\"x\",\"digest\":\"y\""),
        "[]",
        "{",
        "",
        "{\"apiVersion\":\"tkm.io/v1alpha1\"}}",
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        int acc = -1;
        ASSERT(agree(bad[i], strlen(bad[i]), &acc));
        ASSERT_EQ(acc, 0);
    }
    /* accepted oddities: nulls count as absent, "id": null counts as there */
    ASSERT(agree_str(ST("\"gpus\":[{\"id\":null}],\"caches\":null,\"nodeName\":null"), 1));
    ASSERT(agree_str(C("\"digest\":null,\"pods\":null,\"compatibleGPUs\":[{\"ids\":null}]"), 1));
    ASSERT(agree_str(HEAD "\"metadata\":{\"name\":\"a\"}}", 1));
    ASSERT(agree_str("{\"metadata\":{\"name\":\"a\"},\"status\":{\"caches\":{\"x\":{}}}}", 1));
    ASSERT(agree_str(C("\"incompatibleGPUs\":[{\"ids\":[0]},{\"reason\":\"R\"}]"), 1));
}

/* A NUL byte anywhere (jansson alone skips one outside strings): both
 * decoders refuse it, the tree decoder naming it. */
TEST(nul_byte_anywhere_refused_by_both)
{
    char *seed = build(3, 0, 0);
    ASSERT_NOT_NULL(seed);
    size_t n = strlen(seed);
    for (size_t i = 0; i < n; i++) {
        char c = seed[i];
        int acc = 1;
        seed[i] = 0;
        ASSERT(agree(seed, n, &acc));
        ASSERT_EQ(acc, 0);
        seed[i] = c;
    }
    struct tkm_api_nodestatus d;
    struct tkm_err err = {0};
    char *tail = malloc(n + 1);
    ASSERT_NOT_NULL(tail);
    memcpy(tail, seed, n);
    tail[n] = 0; /* after the object: only jansson would have skipped it */
    int acc = 1;
    ASSERT(agree(tail, n + 1, &acc));
    ASSERT_EQ(acc, 0);
    ASSERT_EQ(tkm_api_nodestatus_decode(tail, n + 1, &d, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "a NUL byte");
    free(tail);
    free(seed);
}

/* One-byte changes of a small real-shaped object: same verdicts. */
TEST_TIMEOUT(one_byte_mutations_agree, 120)
{
    static const char subst[] = "\"\\{}[],:0-1.e tfn\x01\xc3";
    char *seed = build(3, 0, 0);
    ASSERT_NOT_NULL(seed);
    size_t n = strlen(seed), accepted = 0, refused = 0;
    char *m = malloc(n + 1);
    ASSERT_NOT_NULL(m);
    /* every byte; under valgrind (about 50x slower) every 5th, which still
     * lands in every key, value and separator kind of the seed */
    size_t stride = tkm_test_timeout_scale() > 1 ? 5 : 1;
    for (size_t i = 0; i < n; i += stride) {
        for (size_t k = 0; k < sizeof subst - 1; k++) {
            int acc = 0;
            memcpy(m, seed, n);
            m[i] = subst[k];
            ASSERT(agree(m, n, &acc));
            acc ? accepted++ : refused++;
        }
    }
    ASSERT(accepted > 100);
    ASSERT(refused > 1000);
    free(m);
    free(seed);
}

TEST(callback_never_runs_on_failure_and_can_stop)
{
    struct tkm_api_nsscan sc;
    struct tkm_api_nsscan_head h;
    struct tkm_err err = {0};
    struct seen *s = calloc(1, sizeof *s);
    ASSERT_NOT_NULL(s);
    tkm_api_nsscan_init(&sc);
    /* the bad entry comes last: nothing before it is reported */
    const char *j = ST("\"caches\":{\"a\":{},\"b\":{},\"c\":{\"verified\":1}}");
    ASSERT_EQ(tkm_api_nodestatus_scan(&sc, j, strlen(j), &h, on_entry, s, &err), -EPROTO);
    ASSERT_EQ(s->n, 0);
    ASSERT_STRCONTAINS(err.msg, "TritonKernelCacheNodeStatus n1: status.caches[\"c\"].verified: "
                                "expected a boolean, got an integer");
    j = ST("\"caches\":{\"a\":{},\"b\":{},\"c\":{}}");
    s->stop_after = 2;
    ASSERT_EQ(tkm_api_nodestatus_scan(&sc, j, strlen(j), &h, on_entry, s, &err), 42);
    ASSERT_EQ(s->n, 2);
    ASSERT_STREQ(s->name[1], "b");
    ASSERT_STREQ(h.name, "n1");
    ASSERT_STREQ(h.ns, "ns");
    ASSERT_EQ(h.n_caches, 3);
    seen_release(s);
    /* the same scratch again, no callback */
    ASSERT_OK(tkm_api_nodestatus_scan(&sc, j, strlen(j), NULL, NULL, NULL, &err));
    tkm_api_nsscan_release(&sc);
    free(s);
}

/* compiles: the bounds are the CRD's, and the messages name the field. */
TEST(compiles_bounds_and_messages)
{
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {C("\"compiles\":{\"podsServed\":-1}"),
         "status.caches[\"a\"].compiles.podsServed: -1 is out of range"},
        {C("\"compiles\":{\"since\":\"2026-11-28 01:02:03Z\"}"),
         "status.caches[\"a\"].compiles.since: \"2026-11-28 01:02:03Z\" is not an RFC 3339 time"},
        {C("\"compiles\":{\"topKernels\":[{\"name\":\"k\"},{\"name\":\"a;b\"}]}"),
         "status.caches[\"a\"].compiles.topKernels[1].name: expected [A-Za-z0-9_.-]{1,128}"},
        {C("\"compiles\":{\"topKernels\":[{},{},{},{},{},{},{},{},{},{},{}]}"),
         "status.caches[\"a\"].compiles.topKernels: 11 entries, more than the 10 allowed"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        struct tkm_api_nodestatus d;
        struct tkm_err err = {0};
        ASSERT_EQ(tkm_api_nodestatus_decode(bad[i].json, strlen(bad[i].json), &d, &err), -EPROTO);
        ASSERT_STRCONTAINS(err.msg, bad[i].msg);
    }
    /* a 128-byte name, 10 entries, an offset and a fraction: accepted and read back */
    char name[129], json[4096];
    memset(name, 'k', 128);
    name[128] = '\0';
    snprintf(json, sizeof json,
             C("\"compiles\":{\"podsServed\":9,\"podsCompiled\":2,\"tritonKernels\":5,"
               "\"since\":\"2026-11-28T01:02:03.5+01:00\",\"topKernels\":[{\"name\":\"%s\","
               "\"pods\":2},{\"name\":\"b\"},{\"name\":\"c\"},{\"name\":\"d\"},{\"name\":\"e\"},"
               "{\"name\":\"f\"},{\"name\":\"g\"},{\"name\":\"h\"},{\"name\":\"i\"},"
               "{\"name\":\"j\"}]}"),
             name);
    struct tkm_api_nodestatus d;
    ASSERT_OK(tkm_api_nodestatus_decode(json, strlen(json), &d, NULL));
    const struct tkm_api_compiles *c = &d.status.caches[0].compiles;
    ASSERT_EQ(c->present, 1);
    ASSERT_EQ(c->pods_served, 9);
    ASSERT_EQ(c->pods_compiled, 2);
    ASSERT_EQ(c->triton_kernels, 5);
    ASSERT_EQ(c->inductor_entries, 0);
    ASSERT_EQ(c->n_top, 10);
    ASSERT_STREQ(c->top[0].name, name);
    ASSERT_EQ(c->top[0].pods, 2);
    ASSERT_STREQ(c->top[9].name, "j");
    ASSERT_STREQ(c->since, "2026-11-28T01:02:03.5+01:00");
    tkm_api_nodestatus_release(&d);
    ASSERT(agree_str(json, 1));
    /* absent: present 0 */
    ASSERT_OK(
        tkm_api_nodestatus_decode(C("\"digest\":\"x\""), strlen(C("\"digest\":\"x\"")), &d, NULL));
    ASSERT_EQ(d.status.caches[0].compiles.present, 0);
    tkm_api_nodestatus_release(&d);
}
