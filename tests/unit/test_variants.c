/* test_variants.c - variant indexes (triton/variants.h): parsing, refusals, the pick. */
#include <jansson.h>

#include <tkm/oci/digest.h>
#include <tkm/triton/parts.h>
#include <tkm/triton/variants.h>

#include "test.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define D4 "sha256:4444444444444444444444444444444444444444444444444444444444444444"

/* One variant entry: digest, arch (platform), backend, target arch, warp (text), parts. */
static json_t *entry(const char *digest, const char *cpu, const char *backend, const char *arch,
                     const char *warp, const char *parts)
{
    json_t *a = json_object();
    if (backend)
        json_object_set_new(a, TKM_VARIANT_ANN_BACKEND, json_string(backend));
    if (arch)
        json_object_set_new(a, TKM_VARIANT_ANN_ARCH, json_string(arch));
    if (warp)
        json_object_set_new(a, TKM_VARIANT_ANN_WARP, json_string(warp));
    if (parts)
        json_object_set_new(a, TKM_VARIANT_ANN_PARTS, json_string(parts));
    json_t *e = json_pack("{s:s, s:s, s:i, s:o}", "mediaType", TKM_OCI_MT_MANIFEST, "digest",
                          digest, "size", 321, "annotations", a);
    if (cpu)
        json_object_set_new(e, "platform",
                            json_pack("{s:s, s:s}", "os", "linux", "architecture", cpu));
    return e;
}

static json_t *index_of(json_t *entries)
{
    return json_pack("{s:i, s:s, s:o}", "schemaVersion", 2, "mediaType", TKM_OCI_MT_INDEX,
                     "manifests", entries);
}

/* Parses the JSON (taken) as a variant index. */
static int parse_json(json_t *idx, struct tkm_variant_set *s, struct tkm_err *e)
{
    char *raw = json_dumps(idx, JSON_COMPACT);
    ASSERT_NOT_NULL(raw);
    json_decref(idx);
    int rc = tkm_variants_parse(raw, strlen(raw), NULL, "index test", s, e);
    free(raw);
    return rc;
}

static json_t *two_variants(void)
{
    json_t *m = json_array();
    /* an attestation and an unrelated artifact are ignored */
    json_array_append_new(m, json_pack("{s:s, s:s, s:i, s:{s:s, s:s}, s:{s:s}}", "mediaType",
                                       TKM_OCI_MT_MANIFEST, "digest", D4, "size", 10, "platform",
                                       "os", "unknown", "architecture", "unknown", "annotations",
                                       "vnd.docker.reference.type", "attestation-manifest"));
    json_array_append_new(m, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    json_array_append_new(m, entry(D2, "amd64", "cuda", "80", "32", "inductor,triton"));
    json_array_append_new(m, entry(D3, "arm64", "cuda", "90a", "32", "triton"));
    return index_of(m);
}

static struct tkm_gpu gpu(const char *backend, const char *arch, int warp, const char *type)
{
    struct tkm_gpu g;
    memset(&g, 0, sizeof g);
    g.index = 1;
    snprintf(g.backend, sizeof g.backend, "%s", backend);
    snprintf(g.arch, sizeof g.arch, "%s", arch);
    snprintf(g.gpu_type, sizeof g.gpu_type, "%s", type);
    g.warp_size = warp;
    g.usable = 1;
    return g;
}

TEST(parse_good_index)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    json_t *idx = two_variants();
    json_object_set_new(
        json_object_get(json_array_get(json_object_get(idx, "manifests"), 1), "annotations"),
        TKM_VARIANT_ANN_TRITON, json_string("3.6.0+git1"));
    char *raw = json_dumps(idx, JSON_COMPACT);
    char want[TKM_OCI_DIGEST_LEN + 1];
    json_decref(idx);
    ASSERT(tkm_variants_is_index(raw, strlen(raw)));
    ASSERT_OK(tkm_oci_digest_bytes(raw, strlen(raw), want));
    ASSERT_OK(tkm_variants_parse(raw, strlen(raw), want, "index test", &s, &e));
    ASSERT_EQ(s.from_index, 1);
    ASSERT_STREQ(s.digest, want);
    ASSERT_EQ(s.n, 3);
    ASSERT_STREQ(s.v[0].digest, D1);
    ASSERT_UEQ(s.v[0].size, 321);
    ASSERT_UEQ(s.v[0].entry, 1);
    ASSERT_STREQ(s.v[0].os, "linux");
    ASSERT_STREQ(s.v[0].architecture, "amd64");
    ASSERT_STREQ(s.v[0].backend, "cuda");
    ASSERT_STREQ(s.v[0].arch, "90");
    ASSERT_EQ(s.v[0].warp_size, 32);
    ASSERT_STREQ(s.v[0].triton_version, "3.6.0+git1");
    ASSERT_STREQ(s.v[0].parts, "triton");
    ASSERT_STREQ(s.v[1].parts, "inductor,triton");
    ASSERT_STREQ(s.v[1].triton_version, "");
    ASSERT_STREQ(s.v[2].architecture, "arm64");
    char d[160];
    tkm_variant_describe(&s.v[0], d, sizeof d);
    ASSERT_STREQ(d, "linux/amd64 cuda sm90 warp 32");
    tkm_variant_set_release(&s);
    ASSERT_NULL(s.v);
    /* the pinned digest must be the bytes' */
    ASSERT_EQ(tkm_variants_parse(raw, strlen(raw), D1, "index test", &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "digest mismatch");
    free(raw);
}

TEST(plain_index_and_manifest_are_not_variant_indexes)
{
    const char *plain = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" TKM_OCI_MT_MANIFEST
                        "\",\"digest\":\"" D1 "\",\"size\":3,\"platform\":{\"os\":\"linux\","
                        "\"architecture\":\"amd64\"}}]}";
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_variants_is_index(plain, strlen(plain)), 0);
    ASSERT_EQ(tkm_variants_is_index("not json", 8), 0);
    ASSERT_EQ(tkm_variants_parse(plain, strlen(plain), NULL, "idx", &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "not a variant index");
    ASSERT_NULL(s.v);
}

TEST(two_variants_one_target_refused)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    json_t *m = json_array();
    json_array_append_new(m, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    json_array_append_new(m, entry(D2, "arm64", "cuda", "90", "32", "triton"));
    json_array_append_new(m, entry(D3, "amd64", "cuda", "90", "32", "inductor,triton"));
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg,
                       "manifests[0] and manifests[2] both claim linux/amd64 cuda sm90 warp 32");
    ASSERT_NULL(s.v);
    ASSERT_EQ(s.n, 0);
}

TEST(ten_thousand_entries_refused)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    json_t *m = json_array();
    for (int i = 0; i < 10000; i++) {
        char a[16];
        snprintf(a, sizeof a, "%d", i);
        json_array_append_new(m, entry(D1, "amd64", "cuda", a, "32", "triton"));
    }
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "more than 4096 manifests");
    ASSERT_NULL(s.v);
    /* under the manifest parser's cap, tkm's own limit */
    m = json_array();
    for (int i = 0; i < TKM_VARIANTS_MAX + 1; i++) {
        char a[16];
        snprintf(a, sizeof a, "%d", i);
        json_array_append_new(m, entry(D1, "amd64", "cuda", a, "32", "triton"));
    }
    memset(&e, 0, sizeof e);
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "more than 64 variants");
    /* exactly the limit is fine */
    m = json_array();
    for (int i = 0; i < TKM_VARIANTS_MAX; i++) {
        char a[16];
        snprintf(a, sizeof a, "%d", i);
        json_array_append_new(m, entry(D1, "amd64", "cuda", a, "32", "triton"));
    }
    ASSERT_OK(parse_json(index_of(m), &s, &e));
    ASSERT_EQ(s.n, TKM_VARIANTS_MAX);
    tkm_variant_set_release(&s);
}

TEST(control_characters_refused_never_echoed)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    json_t *m = json_array();
    json_array_append_new(m, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    json_array_append_new(m, entry(D2, "amd64", "cuda", "80\n\x1b[31mOK", "32", "triton"));
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "manifests[1] annotation " TKM_VARIANT_ANN_ARCH " is not");
    ASSERT_STRCONTAINS(e.msg, "80\\n\\x1b");
    ASSERT(!strchr(e.msg, '\n') && !strchr(e.msg, '\x1b'));
    /* the optional Triton version too, and a platform */
    m = json_array();
    json_t *en = entry(D1, "amd64", "cuda", "90", "32", "triton");
    json_object_set_new(json_object_get(en, "annotations"), TKM_VARIANT_ANN_TRITON,
                        json_string("3.6\t0"));
    json_array_append_new(m, en);
    memset(&e, 0, sizeof e);
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, TKM_VARIANT_ANN_TRITON);
    ASSERT(!strchr(e.msg, '\t'));
    m = json_array();
    json_array_append_new(m, entry(D1, "amd\r64", "cuda", "90", "32", "triton"));
    memset(&e, 0, sizeof e);
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "amd\\r64");
    ASSERT(!strchr(e.msg, '\r'));
}

TEST(bad_grammar_refused)
{
    static const struct {
        const char *backend, *arch, *warp, *parts, *want;
    } c[] = {
        {"CUDA", "90", "32", "triton", TKM_VARIANT_ANN_BACKEND " is not [a-z0-9]{1,15}"},
        {"cuda", "", "32", "triton", TKM_VARIANT_ANN_ARCH " is not"},
        {"cuda", "sm_90", "32", "triton", TKM_VARIANT_ANN_ARCH " is not"},
        {"cuda", "90", "032", "triton", TKM_VARIANT_ANN_WARP " is not a decimal number 1..1024"},
        {"cuda", "90", "0", "triton", TKM_VARIANT_ANN_WARP},
        {"cuda", "90", "1025", "triton", TKM_VARIANT_ANN_WARP},
        {"cuda", "90", "32", "triton,inductor", TKM_VARIANT_ANN_PARTS " is not a sorted"},
        {"cuda", "90", "32", "triton,triton", TKM_VARIANT_ANN_PARTS},
        {"cuda", "90", "32", "triton,", TKM_VARIANT_ANN_PARTS},
        {"cuda", "90", "32", "", TKM_VARIANT_ANN_PARTS},
        {"cuda", "90", "32", "kernels", TKM_VARIANT_ANN_PARTS},
        {"cuda", NULL, "32", "triton", "has no annotation " TKM_VARIANT_ANN_ARCH},
        {"cuda", "90", NULL, "triton", "has no annotation " TKM_VARIANT_ANN_WARP},
        {"cuda", "90", "32", NULL, "has no annotation " TKM_VARIANT_ANN_PARTS},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct tkm_variant_set s;
        struct tkm_err e = {0};
        json_t *m = json_array();
        json_array_append_new(m,
                              entry(D1, "amd64", c[i].backend, c[i].arch, c[i].warp, c[i].parts));
        ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
        ASSERT_STRCONTAINS(e.msg, "manifests[0]");
        ASSERT_STRCONTAINS(e.msg, c[i].want);
    }
    /* a non-string annotation, a nested index, annotations that are not an object */
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    json_t *m = json_array(), *en = entry(D1, "amd64", "cuda", "90", "32", "triton");
    json_object_set_new(json_object_get(en, "annotations"), TKM_VARIANT_ANN_WARP, json_integer(32));
    json_array_append_new(m, en);
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, TKM_VARIANT_ANN_WARP " is not a string");
    m = json_array();
    en = entry(D1, "amd64", "cuda", "90", "32", "triton");
    json_object_set_new(en, "mediaType", json_string(TKM_OCI_MT_INDEX));
    json_array_append_new(m, en);
    memset(&e, 0, sizeof e);
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "manifests[0] is not an image manifest");
    m = json_array();
    json_array_append_new(m, json_pack("{s:s, s:s, s:i, s:s}", "mediaType", TKM_OCI_MT_MANIFEST,
                                       "digest", D1, "size", 1, "annotations", "x"));
    memset(&e, 0, sizeof e);
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "annotations is not an object");
    /* not JSON, an image manifest, a duplicate key */
    memset(&e, 0, sizeof e);
    ASSERT_EQ(tkm_variants_parse("{", 1, NULL, "idx", &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "not a JSON object");
    const char *man = "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" TKM_OCI_MT_CONFIG
                      "\",\"digest\":\"" D1 "\",\"size\":1},\"layers\":[]}";
    memset(&e, 0, sizeof e);
    ASSERT_EQ(tkm_variants_parse(man, strlen(man), NULL, "idx", &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "not a variant index");
}

TEST(missing_platform_refused)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    json_t *m = json_array();
    json_array_append_new(m, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    json_array_append_new(m, entry(D2, NULL, "cuda", "80", "32", "triton"));
    ASSERT_EQ(parse_json(index_of(m), &s, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "manifests[1] has no platform");
}

TEST(pick_exact_then_arch_a)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    size_t idx = 99;
    const char *reason = NULL;
    char msg[1024];
    ASSERT_OK(parse_json(two_variants(), &s, &e));
    struct tkm_gpu h200 = gpu("cuda", "90", 32, "nvidia-h200");
    struct tkm_gpu a100 = gpu("cuda", "80", 32, "nvidia-a100");
    ASSERT_OK(tkm_variant_pick(&s, &h200, "amd64", &idx, &reason, msg, sizeof msg));
    ASSERT_EQ(idx, 0);
    ASSERT_OK(tkm_variant_pick(&s, &a100, "amd64", &idx, &reason, msg, sizeof msg));
    ASSERT_EQ(idx, 1);
    /* on arm64 only the sm90a build exists: taken for sm90 */
    ASSERT_OK(tkm_variant_pick(&s, &h200, "arm64", &idx, &reason, msg, sizeof msg));
    ASSERT_EQ(idx, 2);
    tkm_variant_set_release(&s);
    /* exact wins over "a" whatever the order */
    json_t *m = json_array();
    json_array_append_new(m, entry(D3, "amd64", "cuda", "90a", "32", "triton"));
    json_array_append_new(m, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    ASSERT_OK(parse_json(index_of(m), &s, &e));
    ASSERT_OK(tkm_variant_pick(&s, &h200, "amd64", &idx, &reason, msg, sizeof msg));
    ASSERT_EQ(idx, 1);
    /* "a" is a CUDA rule only, and never the other way round */
    struct tkm_gpu sm9 = gpu("cuda", "9", 32, "odd");
    ASSERT_EQ(tkm_variant_pick(&s, &sm9, "amd64", &idx, &reason, msg, sizeof msg), -ENOENT);
    tkm_variant_set_release(&s);
}

TEST(pick_reasons)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    size_t idx = 99;
    const char *reason = NULL;
    char msg[1024];
    ASSERT_OK(parse_json(two_variants(), &s, &e));
    struct tkm_gpu a100 = gpu("cuda", "80", 32, "nvidia-a100");
    struct tkm_gpu mi300 = gpu("hip", "gfx942", 64, "amd-mi300x");
    /* sm80 exists only for amd64 */
    ASSERT_EQ(tkm_variant_pick(&s, &a100, "arm64", &idx, &reason, msg, sizeof msg), -ENOENT);
    ASSERT_STREQ(reason, "HostArchMismatch");
    ASSERT_STRCONTAINS(msg, "GPU 1 (nvidia-a100, cuda sm80 warp 32) on linux/arm64");
    ASSERT_STRCONTAINS(msg, "linux/amd64 cuda sm80 warp 32");
    ASSERT_EQ(idx, 99);
    ASSERT_EQ(tkm_variant_pick(&s, &mi300, "amd64", &idx, &reason, msg, sizeof msg), -ENOENT);
    ASSERT_STREQ(reason, "NoVariant");
    ASSERT_STRCONTAINS(msg, "amd-mi300x, hip gfx942 warp 64");
    ASSERT_STRCONTAINS(msg, "variants: linux/amd64 cuda sm90 warp 32, linux/amd64 cuda sm80 warp "
                            "32, linux/arm64 cuda sm90a warp 32");
    /* a GPU whose target is unknown (driver not loaded) gets none */
    struct tkm_gpu dead = gpu("", "", 0, "nvidia-h100");
    ASSERT_EQ(tkm_variant_pick(&s, &dead, "amd64", &idx, &reason, msg, sizeof msg), -ENOENT);
    ASSERT_STREQ(reason, "NoVariant");
    ASSERT_STRCONTAINS(msg, "target unknown");
    /* the warp size is part of the target */
    struct tkm_gpu w64 = gpu("cuda", "90", 64, "odd");
    ASSERT_EQ(tkm_variant_pick(&s, &w64, "amd64", &idx, NULL, NULL, 0), -ENOENT);
    tkm_variant_set_release(&s);
}

TEST(set_of_one_from_image)
{
    struct tkm_oci_config cfg;
    struct tkm_triton_summary sum;
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    size_t idx = 99;
    const char *reason = NULL;
    char msg[1024];
    const char *c =
        "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Labels\":{"
        "\"cache.triton.image/summary\":\"x\",\"cache.inductor.image/summary\":\"y\"}}}";
    ASSERT_OK(tkm_oci_config_parse(&cfg, c, strlen(c), "cfg", &e));
    ASSERT_OK(tkm_triton_summary_parse(
        &sum,
        "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"80\",\"warp_size\":32}],"
        "\"triton_versions\":[\"3.6.0\"]}",
        &e));
    ASSERT_OK(tkm_variants_from_image(D1, 900, TKM_OCI_MT_MANIFEST, &cfg, &sum, NULL, &s, &e));
    ASSERT_EQ(s.from_index, 0);
    ASSERT_STREQ(s.digest, D1);
    ASSERT_EQ(s.n, 1);
    ASSERT_STREQ(s.v[0].parts, "inductor,triton");
    ASSERT_STREQ(s.v[0].triton_version, "3.6.0");
    ASSERT_STREQ(s.v[0].arch, "80");
    ASSERT_UEQ(s.v[0].size, 900);
    /* the set of one yields its image for any GPU on its platform: the compat
     * judge decides the target, as before */
    struct tkm_gpu h200 = gpu("cuda", "90", 32, "nvidia-h200");
    ASSERT_OK(tkm_variant_pick(&s, &h200, "amd64", &idx, &reason, msg, sizeof msg));
    ASSERT_EQ(idx, 0);
    ASSERT_EQ(tkm_variant_pick(&s, &h200, "arm64", &idx, &reason, msg, sizeof msg), -ENOENT);
    ASSERT_STREQ(reason, "HostArchMismatch");
    /* the image's own facts agree with themselves; a variant claiming another target does not */
    ASSERT_OK(tkm_variant_check_image(&s.v[0], &cfg, &sum, msg, sizeof msg));
    snprintf(s.v[0].arch, sizeof s.v[0].arch, "90");
    ASSERT_EQ(tkm_variant_check_image(&s.v[0], &cfg, &sum, msg, sizeof msg), -EPROTO);
    ASSERT_STRCONTAINS(msg, "its summary's target is cuda 80 warp 32");
    snprintf(s.v[0].arch, sizeof s.v[0].arch, "80");
    snprintf(s.v[0].parts, sizeof s.v[0].parts, "triton");
    ASSERT_EQ(tkm_variant_check_image(&s.v[0], &cfg, &sum, msg, sizeof msg), -EPROTO);
    ASSERT_STRCONTAINS(msg, "parts inductor,triton");
    snprintf(s.v[0].parts, sizeof s.v[0].parts, "inductor,triton");
    snprintf(s.v[0].architecture, sizeof s.v[0].architecture, "arm64");
    ASSERT_EQ(tkm_variant_check_image(&s.v[0], &cfg, &sum, msg, sizeof msg), -EPROTO);
    ASSERT_STRCONTAINS(msg, "platform linux/amd64");
    tkm_variant_set_release(&s);
    /* a config without platform: taken on any host */
    tkm_oci_config_release(&cfg);
    ASSERT_OK(tkm_oci_config_parse(&cfg, "{}", 2, "cfg", &e));
    ASSERT_OK(tkm_variants_from_image(D1, 900, NULL, &cfg, NULL, NULL, &s, &e));
    ASSERT_STREQ(s.v[0].parts, "triton");
    ASSERT_OK(tkm_variant_pick(&s, &h200, "arm64", &idx, &reason, msg, sizeof msg));
    tkm_variant_set_release(&s);
    tkm_oci_config_release(&cfg);
    tkm_triton_summary_release(&sum);
    ASSERT_EQ(tkm_variants_from_image("sha256:x", 1, NULL, NULL, NULL, NULL, &s, &e), -EINVAL);
}

TEST(parts_strings)
{
    char p[64];
    tkm_variant_parts_str(TKM_PART_TRITON | TKM_PART_VLLM | TKM_PART_INDUCTOR, p, sizeof p);
    ASSERT_STREQ(p, "inductor,triton,vllm");
    tkm_variant_parts_str(0, p, sizeof p);
    ASSERT_STREQ(p, "");
}
