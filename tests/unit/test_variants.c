/* test_variants.c - variant indexes (triton/variants.h): parsing, refusals, the pick. */
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/oci/digest.h>
#include <tkm/triton/parts.h>
#include <tkm/triton/variants.h>

#include "test.h"
#include "tsrv.h"

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

/* ---- writing indexes, building variants ---------------------------------------------------- */

static struct tkm_variant variant_of(const char *digest, const char *cpu, const char *arch)
{
    struct tkm_variant v;
    memset(&v, 0, sizeof v);
    snprintf(v.digest, sizeof v.digest, "%s", digest);
    snprintf(v.media_type, sizeof v.media_type, "%s", TKM_OCI_MT_MANIFEST);
    v.size = 77;
    snprintf(v.os, sizeof v.os, "linux");
    snprintf(v.architecture, sizeof v.architecture, "%s", cpu);
    snprintf(v.backend, sizeof v.backend, "cuda");
    snprintf(v.arch, sizeof v.arch, "%s", arch);
    v.warp_size = 32;
    snprintf(v.triton_version, sizeof v.triton_version, "3.6.0");
    snprintf(v.parts, sizeof v.parts, "triton");
    return v;
}

TEST(index_put_adds_replaces_and_keeps_other_entries)
{
    struct tkm_variant a = variant_of(D1, "amd64", "90"), b = variant_of(D2, "amd64", "80");
    struct tkm_variant b2 = variant_of(D3, "amd64", "80");
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    char *t1 = NULL, *t2 = NULL, *t3 = NULL, rep[TKM_OCI_DIGEST_LEN + 1];
    size_t n1, n2, n3;
    ASSERT_OK(tkm_variants_index_put(NULL, 0, &a, &t1, &n1, rep, &e));
    ASSERT_STREQ(rep, "");
    ASSERT_OK(tkm_variants_index_put(t1, n1, &b, &t2, &n2, rep, &e));
    ASSERT_STREQ(rep, "");
    ASSERT_OK(tkm_variants_index_put(t2, n2, &b2, &t3, &n3, rep, &e));
    ASSERT_STREQ(rep, D2);
    ASSERT_OK(tkm_variants_parse(t3, n3, NULL, "idx", &s, &e));
    ASSERT_EQ(s.n, 2);
    ASSERT_STREQ(s.v[0].digest, D1);
    ASSERT_STREQ(s.v[1].digest, D3);
    ASSERT_STREQ(s.v[1].triton_version, "3.6.0");
    tkm_variant_set_release(&s);
    free(t1);
    free(t2);
    free(t3);
    /* a plain index (an attestation, an image) keeps its entries */
    const char *plain =
        "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_INDEX
        "\",\"annotations\":{\"x\":\"y\"},\"manifests\":[{\"mediaType\":\"" TKM_OCI_MT_MANIFEST
        "\",\"digest\":\"" D4 "\",\"size\":3}]}";
    ASSERT_OK(tkm_variants_index_put(plain, strlen(plain), &a, &t1, &n1, NULL, &e));
    ASSERT_STRCONTAINS(t1, D4);
    ASSERT_STRCONTAINS(t1, "\"annotations\":{\"x\":\"y\"}");
    ASSERT_OK(tkm_variants_parse(t1, n1, NULL, "idx", &s, &e));
    ASSERT_EQ(s.n, 1);
    ASSERT_UEQ(s.v[0].entry, 1);
    tkm_variant_set_release(&s);
    free(t1);
    /* an image manifest is not an index; a broken variant index is not added to */
    const char *man = "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST
                      "\",\"config\":{\"mediaType\":\"" TKM_OCI_MT_CONFIG "\",\"digest\":\"" D1
                      "\",\"size\":1},\"layers\":[]}";
    ASSERT_EQ(tkm_variants_index_put(man, strlen(man), &a, &t1, &n1, NULL, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "not an image index");
    ASSERT_NULL(t1);
    json_t *m = json_array();
    json_array_append_new(m, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    json_array_append_new(m, entry(D2, "amd64", "cuda", "90", "32", "triton"));
    json_t *dj = index_of(m);
    char *dup = json_dumps(dj, JSON_COMPACT);
    json_decref(dj);
    memset(&e, 0, sizeof e);
    ASSERT_EQ(tkm_variants_index_put(dup, strlen(dup), &b, &t1, &n1, NULL, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "both claim");
    free(dup);
    /* the 65th variant is refused */
    char *cur = NULL, *next = NULL;
    size_t cn = 0;
    for (int i = 0; i <= TKM_VARIANTS_MAX; i++) {
        struct tkm_variant v = variant_of(D1, "amd64", "90");
        snprintf(v.arch, sizeof v.arch, "%d", i);
        memset(&e, 0, sizeof e);
        int rc = tkm_variants_index_put(cur, cn, &v, &next, &cn, NULL, &e);
        if (i < TKM_VARIANTS_MAX) {
            ASSERT_OK(rc);
            free(cur);
            cur = next;
        } else {
            ASSERT_EQ(rc, -EPROTO);
            ASSERT_STRCONTAINS(e.msg, "more than 64 variants");
        }
    }
    free(cur);
}

/* ---- tkmctl: layouts ------------------------------------------------------------------------- */

/* <build>/cli/tkmctl, found from this test binary (<build>/tests/unit_variants). */
static void tkmctl_path(char *out, size_t size)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT(n > 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(out, size, "%s/cli/tkmctl", self);
    ASSERT_OK(access(out, X_OK));
}

/* Runs a shell command in the test's directory: its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[8192], full[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "cd '%s' && %s", tkm_test_tmpdir(), cmd);
    int st = system(full);
    ASSERT(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static json_t *load_json(const char *name)
{
    char p[1200];
    json_error_t je;
    snprintf(p, sizeof p, "%s/%s", tkm_test_tmpdir(), name);
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", name, je.text);
    return j;
}

/* The sm90 fixture as tcache/, an sm80 copy (target.arch edited, as
 * tests/e2e/cache_retarget.py does) as sm80/, both as one cache in two/. */
static void caches(void)
{
    ASSERT_EQ(sh("tar xzf '%s/triton-cache/triton-3.6.0-cuda-sm90.tar.gz' && cp -r tcache sm80 && "
                 "sed -i 's/\"arch\": 90,/\"arch\": 80,/' sm80/*/*.json && cp -r tcache two && "
                 "for d in sm80/*; do cp -r $d two/x$(basename $d); done",
                 tkm_test_fixtures()),
              0);
}

TEST_TIMEOUT(tkmctl_variants_in_a_layout, 120)
{
    char ctl[1024], nvml[1200];
    tkmctl_path(ctl, sizeof ctl);
    caches();
    ASSERT_EQ(sh("'%s' build tcache --output lay --tag v1 --add-variant -o json > b90.json", ctl),
              0);
    ASSERT_EQ(sh("'%s' build sm80 --output lay --tag v1 --add-variant -o json > b80.json", ctl), 0);
    /* the same target again: replaced, not added */
    ASSERT_EQ(
        sh("'%s' build sm80 --output lay --tag v1 --add-variant --title again > again.txt", ctl),
        0);
    ASSERT_EQ(sh("grep -q '^variant linux/%s cuda sm80 warp 32 (replacing sha256:' again.txt",
                 tkm_oci_host_arch()),
              0);
    ASSERT_EQ(sh("'%s' build sm80 --output lay --tag v1 --add-variant --platform linux/arm64 -o "
                 "json > b80arm.json",
                 ctl),
              0);
    /* a cache of two targets is not a variant */
    ASSERT_EQ(sh("'%s' build two --output lay --tag v1 --add-variant 2> two.err", ctl), 1);
    ASSERT_EQ(sh("grep -q 'holds kernels for 2 targets; a variant is built for exactly one' "
                 "two.err"),
              0);
    ASSERT_EQ(sh("'%s' build tcache --output lay --tag v1 --platform linux 2>/dev/null", ctl), 2);
    json_t *b90 = load_json("b90.json"), *b80 = load_json("b80.json");
    json_t *arm = load_json("b80arm.json");
    const char *d90 = json_string_value(json_object_get(json_object_get(b90, "variant"), "digest"));
    const char *d80 = json_string_value(json_object_get(json_object_get(b80, "variant"), "digest"));
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(arm, "variant"), "platform")),
                 "linux/arm64");
    /* the variant's own manifest carries the annotations; its config the platform */
    ASSERT_EQ(sh("grep -q '\"cache.triton.image/arch\":\"90\"' lay/blobs/sha256/%s", d90 + 7), 0);
    /* inspect lists them */
    ASSERT_EQ(sh("'%s' inspect lay --tag v1 -o json > inspect.json", ctl), 0);
    json_t *in = load_json("inspect.json");
    json_t *vs = json_object_get(in, "variants");
    ASSERT_EQ(json_array_size(vs), 3);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(vs, 0), "digest")), d90);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(vs, 0), "arch")), "90");
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(vs, 0), "warpSize")), 32);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(vs, 0), "tritonVersion")),
                 "3.6.0");
    ASSERT_STREQ(
        json_string_value(json_array_get(json_object_get(json_array_get(vs, 0), "parts"), 0)),
        "triton");
    ASSERT(strcmp(json_string_value(json_object_get(json_array_get(vs, 1), "digest")), d80) != 0);
    ASSERT_STREQ(json_string_value(json_object_get(in, "indexDigest")),
                 json_string_value(json_object_get(arm, "layoutIndex")));
    ASSERT_EQ(sh("'%s' inspect --image-layout lay --tag v1 | grep -q 'Variants:     3'", ctl), 0);
    /* a single image is a set of one */
    ASSERT_EQ(sh("'%s' build tcache --output one >/dev/null && '%s' inspect one -o json > one.json",
                 ctl, ctl),
              0);
    json_t *one = load_json("one.json");
    ASSERT_EQ(json_array_size(json_object_get(one, "variants")), 1);
    char plat[64];
    snprintf(plat, sizeof plat, "linux/%s", tkm_oci_host_arch());
    ASSERT_STREQ(json_string_value(json_object_get(
                     json_array_get(json_object_get(one, "variants"), 0), "platform")),
                 plat);
    /* extract: --target picks, the variant is read by its digest */
    ASSERT_EQ(sh("'%s' extract lay --tag v1 --target cuda/90 --output x90 -o json > x90.json", ctl),
              0);
    json_t *x = load_json("x90.json");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(x, "variant"), "digest")), d90);
    ASSERT_EQ(sh("grep -q '\"arch\": 90,' x90/*/add_kernel.json"), 0);
    ASSERT_EQ(sh("'%s' extract lay --tag v1 --target hip/gfx942 --output xh 2> xh.err", ctl), 1);
    ASSERT_EQ(sh("grep -q 'no variant of the cache fits; variants: linux/%s cuda sm90 warp 32' "
                 "xh.err && test ! -e xh",
                 tkm_oci_host_arch()),
              0);
    /* check: each GPU its own variant (the fake NVML: an H200 and an A100) */
    ASSERT_EQ(
        sh("mkdir -p sys proc && printf 'driver=580.159.04\\ncuda=13000\\n[gpu]\\nname=NVIDIA "
           "H200\\ncc=9.0\\nbusid=00000000:00:06.0\\npcidevid=0x233510de\\n[gpu]\\nname=NVIDIA "
           "A100-SXM4-80GB\\ncc=8.0\\nbusid=00000000:00:07.0\\npcidevid=0x20b210de\\n' > "
           "nvml.conf"),
        0);
    snprintf(nvml, sizeof nvml,
             "--sysfs-root sys --procfs-root proc --nvml-lib '%s/libnvidia-ml.so.1'",
             TKM_FAKE_NVML_DIR);
    ASSERT_EQ(
        sh("TKM_FAKE_NVML=nvml.conf '%s' check lay --tag v1 %s -o json > check.json", ctl, nvml),
        0);
    json_t *c = load_json("check.json");
    json_t *res = json_object_get(c, "results");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(c, "cache"), "source")),
                 "variantIndex");
    ASSERT_EQ(json_array_size(res), 2);
    if (strcmp(tkm_oci_host_arch(), "amd64") == 0) {
        ASSERT_STREQ(json_string_value(json_object_get(json_array_get(res, 0), "variant")), d90);
        ASSERT_STREQ(json_string_value(json_object_get(json_array_get(res, 1), "variant")),
                     json_string_value(json_object_get(
                         json_array_get(json_object_get(in, "variants"), 1), "digest")));
        ASSERT(json_is_true(json_object_get(json_array_get(res, 1), "compatible")));
    }
    /* --target: every GPU against that one: the H200 refused by the compat judge */
    ASSERT_EQ(sh("TKM_FAKE_NVML=nvml.conf '%s' check lay --tag v1 %s --target cuda/80 > t80.txt",
                 ctl, nvml),
              0);
    ASSERT_EQ(sh("grep -q 'INCOMPATIBLE arch mismatch' t80.txt && grep -q '1 of 2 GPUs' t80.txt"),
              0);
    /* no variant for an MI300X-only machine: the reason and the list */
    ASSERT_EQ(sh("TKM_FAKE_NVML=nvml.conf '%s' check lay --tag v1 %s --target hip/gfx942 2> h.err",
                 ctl, nvml),
              1);
    ASSERT_EQ(sh("grep -q 'NoVariant' h.err"), 0);
    json_decref(b90);
    json_decref(b80);
    json_decref(arm);
    json_decref(in);
    json_decref(one);
    json_decref(x);
    json_decref(c);
}

/* ---- tkmctl: a registry ------------------------------------------------------------------------
 */

/* A small in-memory registry on tsrv (the distribution API's manifest and
 * blob verbs, monolithic uploads), enough for tkmctl build --push, inspect
 * and extract. Objects are never freed before the test ends (tsrv borrows
 * the bodies); a later one of the same key wins. */
struct mobj {
    char repo[64], key[160], ct[128];
    char *body;
    size_t len;
};

struct mreg {
    pthread_mutex_t mu;
    struct mobj o[256];
    int n, port, uploads;
};

static struct mreg reg = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Adds (or overrides) repo/key with body (copied): test setup and PUTs. */
static void mreg_put(const char *repo, const char *key, const char *ct, const void *body,
                     size_t len)
{
    pthread_mutex_lock(&reg.mu);
    if (reg.n < 256) {
        struct mobj *o = &reg.o[reg.n++];
        snprintf(o->repo, sizeof o->repo, "%s", repo);
        snprintf(o->key, sizeof o->key, "%s", key);
        snprintf(o->ct, sizeof o->ct, "%s", ct);
        o->body = malloc(len + 1);
        memcpy(o->body, body, len);
        o->body[len] = '\0';
        o->len = len;
    }
    pthread_mutex_unlock(&reg.mu);
}

static const struct mobj *mreg_get(const char *repo, const char *key)
{
    const struct mobj *r = NULL;
    pthread_mutex_lock(&reg.mu);
    for (int i = 0; i < reg.n; i++)
        if (!strcmp(reg.o[i].repo, repo) && !strcmp(reg.o[i].key, key))
            r = &reg.o[i];
    pthread_mutex_unlock(&reg.mu);
    return r;
}

static int mreg_fn(const struct tsrv_request *q, struct tsrv_reply *out, char *scratch,
                   size_t scratch_len, void *data)
{
    char repo[64] = "", rest[200] = "", dg[TKM_OCI_DIGEST_LEN + 1];
    const char *m = strstr(q->path, "/manifests/"), *b = strstr(q->path, "/blobs/");
    const char *sep = m ? m : b;
    (void)data;
    *out = (struct tsrv_reply){404, "Content-Type: application/json\r\n",
                               "{\"errors\":[{\"code\":\"NAME_UNKNOWN\"}]}"};
    if (!strcmp(q->path, "/v2/")) {
        *out = (struct tsrv_reply){200, NULL, "{}"};
        return 0;
    }
    if (!sep || strncmp(q->path, "/v2/", 4) != 0)
        return 0;
    snprintf(repo, sizeof repo, "%.*s", (int)(sep - q->path - 4), q->path + 4);
    if (m) {
        snprintf(rest, sizeof rest, "%s", m + 11);
        if (!strcmp(q->method, "PUT")) {
            const char *ct = strcasestr(q->head, "\r\nContent-Type: ");
            char t[128] = "";
            if (ct)
                snprintf(t, sizeof t, "%.*s", (int)strcspn(ct + 16, "\r"), ct + 16);
            tkm_oci_digest_bytes(q->body, q->body_len, dg);
            mreg_put(repo, dg, t, q->body, q->body_len);
            if (strncmp(rest, "sha256:", 7) != 0)
                mreg_put(repo, rest, t, q->body, q->body_len);
            *out = (struct tsrv_reply){201, NULL, ""};
            return 0;
        }
        const struct mobj *o = mreg_get(repo, rest);
        if (!o) {
            out->body = "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}";
            return 0;
        }
        snprintf(scratch, scratch_len, "Content-Type: %s\r\n", o->ct);
        *out = (struct tsrv_reply){200, scratch, strcmp(q->method, "HEAD") ? o->body : ""};
        out->body_len = strcmp(q->method, "HEAD") ? o->len : 0;
        return 0;
    }
    snprintf(rest, sizeof rest, "%s", b + 7);
    if (!strcmp(q->method, "POST") && !strcmp(rest, "uploads/")) {
        pthread_mutex_lock(&reg.mu);
        int id = ++reg.uploads;
        pthread_mutex_unlock(&reg.mu);
        snprintf(scratch, scratch_len, "Location: http://127.0.0.1:%d/v2/%s/blobs/uploads/u%d\r\n",
                 reg.port, repo, id);
        *out = (struct tsrv_reply){202, scratch, ""};
        return 0;
    }
    if (!strcmp(q->method, "PUT") && !strncmp(rest, "uploads/", 8)) {
        const char *want = strstr(q->query, "digest=");
        tkm_oci_digest_bytes(q->body, q->body_len, dg);
        if (!want || strncmp(want + 7, "sha256%3A", 9) == 0
                ? strcmp(want ? want + 16 : "", dg + 7) != 0
                : strcmp(want + 7, dg) != 0) {
            *out = (struct tsrv_reply){400, NULL, "{\"errors\":[{\"code\":\"DIGEST_INVALID\"}]}"};
            return 0;
        }
        mreg_put(repo, dg, "application/octet-stream", q->body, q->body_len);
        *out = (struct tsrv_reply){201, NULL, ""};
        return 0;
    }
    const struct mobj *o = mreg_get(repo, rest);
    if (!o) {
        out->body = "{\"errors\":[{\"code\":\"BLOB_UNKNOWN\"}]}";
        return 0;
    }
    *out = (struct tsrv_reply){200, "Content-Type: application/octet-stream\r\n",
                               strcmp(q->method, "HEAD") ? o->body : ""};
    out->body_len = strcmp(q->method, "HEAD") ? o->len : 0;
    if (!out->body_len && strcmp(q->method, "HEAD") == 0)
        snprintf(scratch, scratch_len, "Content-Length: %zu\r\n", o->len);
    return 0;
}

static int mreg_start(struct tsrv *srv)
{
    tsrv_init(srv);
    ASSERT_OK(tsrv_route_fn(srv, NULL, "/v2/", TSRV_PREFIX, NULL, mreg_fn, NULL));
    reg.port = tsrv_listen(srv);
    ASSERT(reg.port > 0);
    return reg.port;
}

/* Requests to paths holding part since request from. */
static int count_from(struct tsrv *s, int from, const char *part)
{
    struct tsrv_request rq;
    int n = 0;
    for (int i = from; i < tsrv_nreqs(s); i++)
        if (tsrv_get(s, i, &rq) == 0 && strstr(rq.path, part))
            n++;
    return n;
}

TEST_TIMEOUT(tkmctl_variants_in_a_registry_and_attacks, 180)
{
    char ctl[1024], r[128];
    struct tsrv srv;
    tkmctl_path(ctl, sizeof ctl);
    caches();
    int port = mreg_start(&srv);
    snprintf(r, sizeof r, "127.0.0.1:%d/tkm/cache", port);
    ASSERT_EQ(sh("'%s' build tcache --push %s:v1 --add-variant -o json > p90.json", ctl, r), 0);
    ASSERT_EQ(sh("'%s' build sm80 --push %s:v1 --add-variant -o json > p80.json", ctl, r), 0);
    ASSERT_EQ(sh("'%s' build sm80 --push %s:v1 --add-variant --title again > again.txt", ctl, r),
              0);
    ASSERT_EQ(sh("grep -q 'replacing sha256:' again.txt && grep -q '^pushed variant index "
                 "127.0.0.1:%d/tkm/cache:v1@sha256:' again.txt",
                 port),
              0);
    ASSERT_EQ(sh("'%s' build tcache --push %s@sha256:%064d --add-variant 2>/dev/null", ctl, r, 0),
              2);
    ASSERT_EQ(sh("'%s' inspect %s:v1 -o json > inspect.json", ctl, r), 0);
    json_t *in = load_json("inspect.json"), *p90 = load_json("p90.json");
    json_t *vs = json_object_get(in, "variants");
    ASSERT_EQ(json_array_size(vs), 2);
    const char *d90 = json_string_value(json_object_get(json_object_get(p90, "variant"), "digest"));
    const char *idx = json_string_value(json_object_get(in, "indexDigest"));
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(vs, 0), "digest")), d90);
    const char *d80 = json_string_value(json_object_get(json_array_get(vs, 1), "digest"));
    /* extract by the pinned index digest: the variant by the digest the index names */
    int from = tsrv_nreqs(&srv);
    ASSERT_EQ(
        sh("'%s' extract %s@%s --target cuda/80 --output x80 -o json > x80.json", ctl, r, idx), 0);
    json_t *x = load_json("x80.json");
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(x, "variant"), "digest")), d80);
    ASSERT(count_from(&srv, from, d80) >= 1);
    ASSERT_EQ(count_from(&srv, from, d90), 0); /* only the variant used crosses the wire */

    /* attack 1: the variant's bytes swapped after the index was pinned (the registry
     * now answers the sm90 variant's digest with the sm80 manifest) */
    const struct mobj *m80 = mreg_get("tkm/cache", d80);
    ASSERT_NOT_NULL(m80);
    mreg_put("tkm/cache", d90, TKM_OCI_MT_MANIFEST, m80->body, m80->len);
    ASSERT_EQ(sh("'%s' extract %s@%s --target cuda/90 --output xs 2> xs.err", ctl, r, idx), 1);
    ASSERT_EQ(sh("grep -q 'digest mismatch: expected %s' xs.err && test ! -e xs", d90), 0);
    ASSERT_EQ(
        sh("'%s' check %s@%s --target cuda/90 --no-nvml --sysfs-root . 2> cs.err", ctl, r, idx), 1);
    ASSERT_EQ(sh("grep -q 'digest mismatch' cs.err"), 0);

    /* attack 2: an index naming a variant that exists only in another repository */
    ASSERT_EQ(sh("'%s' build tcache --title foreign --push 127.0.0.1:%d/other/cache:x "
                 "--add-variant -o json > "
                 "o.json",
                 ctl, port),
              0);
    json_t *o = load_json("o.json");
    const char *oidx = json_string_value(json_object_get(o, "pushedIndex"));
    const struct mobj *oi = mreg_get("other/cache", oidx);
    ASSERT_NOT_NULL(oi);
    mreg_put("tkm/cache", "foreign", TKM_OCI_MT_INDEX, oi->body, oi->len);
    from = tsrv_nreqs(&srv);
    ASSERT_EQ(sh("'%s' extract %s:foreign --target cuda/90 --output xf 2> xf.err", ctl, r), 1);
    ASSERT_EQ(sh("grep -q 'variant linux/%s cuda sm90 warp 32 (sha256:.*) of the index, in "
                 "tkm/cache: .*404' xf.err && test ! -e xf",
                 tkm_oci_host_arch()),
              0);
    ASSERT_EQ(count_from(&srv, from, "/v2/other/"), 0);

    /* attack 3: two variants claiming one target, 10,000 entries, control characters */
    json_t *mm = json_array();
    json_array_append_new(mm, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    json_array_append_new(mm, entry(D2, "amd64", "cuda", "90", "32", "triton"));
    json_t *j = index_of(mm);
    char *t = json_dumps(j, JSON_COMPACT);
    mreg_put("tkm/cache", "dup", TKM_OCI_MT_INDEX, t, strlen(t));
    free(t);
    json_decref(j);
    ASSERT_EQ(sh("'%s' inspect %s:dup 2> dup.err", ctl, r), 1);
    ASSERT_EQ(sh("grep -q 'manifests\\[0\\] and manifests\\[1\\] both claim linux/amd64 cuda sm90 "
                 "warp 32' dup.err"),
              0);
    ASSERT_EQ(sh("'%s' extract %s:dup --target cuda/90 --output xd 2>/dev/null", ctl, r), 1);
    mm = json_array();
    for (int i = 0; i < 10000; i++)
        json_array_append_new(mm, entry(D1, "amd64", "cuda", "90", "32", "triton"));
    j = index_of(mm);
    t = json_dumps(j, JSON_COMPACT);
    mreg_put("tkm/cache", "big", TKM_OCI_MT_INDEX, t, strlen(t));
    free(t);
    json_decref(j);
    ASSERT_EQ(sh("'%s' inspect %s:big 2> big.err", ctl, r), 1);
    ASSERT_EQ(sh("grep -q 'more than 4096 manifests' big.err"), 0);
    mm = json_array();
    json_array_append_new(mm, entry(D1, "amd64", "cuda", "90\x1b]0;pwned\x07", "32", "triton"));
    j = index_of(mm);
    t = json_dumps(j, JSON_COMPACT);
    mreg_put("tkm/cache", "ctl", TKM_OCI_MT_INDEX, t, strlen(t));
    free(t);
    json_decref(j);
    ASSERT_EQ(sh("'%s' inspect %s:ctl 2> ctl.err", ctl, r), 1);
    ASSERT_EQ(sh("grep -q 'annotation cache.triton.image/arch is not' ctl.err && "
                 "! grep -q \"$(printf '\\033')\" ctl.err"),
              0);
    json_decref(in);
    json_decref(p90);
    json_decref(x);
    json_decref(o);
    tsrv_stop(&srv);
}
