/* test_oci_manifest.c - manifest/index/config parsing, media types, platform selection. */
#include <tkm/oci/digest.h>
#include <tkm/oci/manifest.h>

#include "test.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define D4 "sha256:4444444444444444444444444444444444444444444444444444444444444444"

static const char oci_manifest[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
    "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"" D1
    "\",\"size\":123},"
    "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"" D2
    "\",\"size\":4567}]}";

static const char docker_manifest[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\","
    "\"config\":{\"mediaType\":\"application/vnd.docker.container.image.v1+json\",\"digest\":\"" D1
    "\",\"size\":10},"
    "\"layers\":[{\"mediaType\":\"application/vnd.docker.image.rootfs.diff.tar.gzip\",\"digest\":"
    "\"" D2 "\",\"size\":20}]}";

/* A buildx-style index: amd64, arm64 and an attestation for amd64. */
static const char index_json[] =
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
    "\"manifests\":["
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" D3 "\","
    "\"size\":500,\"platform\":{\"os\":\"unknown\",\"architecture\":\"unknown\"},"
    "\"annotations\":{\"vnd.docker.reference.type\":\"attestation-manifest\"}},"
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" D2 "\","
    "\"size\":400,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
    "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"" D1 "\","
    "\"size\":300,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";

TEST(oci_manifest_parses_and_digests_raw_bytes)
{
    struct tkm_oci_manifest m;
    struct tkm_err e = {0};
    char want[TKM_OCI_DIGEST_LEN + 1];
    ASSERT_OK(tkm_oci_manifest_parse(&m, TKM_OCI_MT_MANIFEST "; charset=utf-8", oci_manifest,
                                     strlen(oci_manifest), "test", &e));
    ASSERT_EQ(m.kind, TKM_OCI_KIND_MANIFEST);
    ASSERT_STREQ(m.config.digest, D1);
    ASSERT_UEQ(m.config.size, 123);
    ASSERT_EQ(m.n_descs, 1);
    ASSERT_STREQ(m.descs[0].media_type, TKM_OCI_MT_LAYER_GZIP);
    ASSERT_UEQ(m.descs[0].size, 4567);
    ASSERT_OK(tkm_oci_digest_bytes(oci_manifest, strlen(oci_manifest), want));
    ASSERT_STREQ(m.digest, want);
    ASSERT_UEQ(m.size, strlen(oci_manifest));
    tkm_oci_manifest_release(&m);
}

TEST(docker_manifest_parses)
{
    struct tkm_oci_manifest m;
    ASSERT_OK(tkm_oci_manifest_parse(&m, TKM_DOCKER_MT_MANIFEST, docker_manifest,
                                     strlen(docker_manifest), "test", NULL));
    ASSERT_EQ(m.kind, TKM_OCI_KIND_MANIFEST);
    const char *comp = NULL;
    ASSERT_EQ(tkm_oci_layer_supported(m.descs[0].media_type, &comp), 1);
    ASSERT_STREQ(comp, "gzip");
    tkm_oci_manifest_release(&m);
}

TEST(media_type_must_match_content_type)
{
    struct tkm_oci_manifest m;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_oci_manifest_parse(&m, TKM_OCI_MT_INDEX, oci_manifest, strlen(oci_manifest),
                                     "https://r.io/v2/a/manifests/v1", &e),
              -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "https://r.io/v2/a/manifests/v1: mediaType "
                              "'application/vnd.oci.image.manifest.v1+json' does not match the "
                              "Content-Type 'application/vnd.oci.image.index.v1+json'");
    ASSERT_NULL(m.descs);
    /* An OCI manifest with no mediaType takes the Content-Type. */
    const char *nomt = "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"" D1
                       "\",\"size\":1},\"layers\":[]}";
    ASSERT_OK(tkm_oci_manifest_parse(&m, TKM_OCI_MT_MANIFEST, nomt, strlen(nomt), "t", NULL));
    ASSERT_EQ(m.kind, TKM_OCI_KIND_MANIFEST);
    ASSERT_EQ(m.n_descs, 0);
    tkm_oci_manifest_release(&m);
    /* ...but an index served as a manifest with layers+manifests is ambiguous. */
    const char *amb = "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"" D1
                      "\",\"size\":1},\"layers\":[],\"manifests\":[]}";
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_oci_manifest_parse(&m, TKM_OCI_MT_MANIFEST, amb, strlen(amb), "t", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "ambiguous");
}

TEST(bad_manifests_rejected_with_reason)
{
    struct tkm_oci_manifest m;
    struct {
        const char *ct, *body, *why;
    } cases[] = {
        {NULL, "[]", "not a JSON object"},
        {NULL, "{\"a\":1,\"a\":2}", "not a JSON object"},
        {"application/vnd.docker.distribution.manifest.v1+prettyjws", "{\"schemaVersion\":1}",
         "schema 1"},
        {"text/html", "{\"schemaVersion\":2}", "not an image manifest or index"},
        /* a Content-Type or mediaType tkm does not know is never quoted (issue 23) */
        {"INTERNAL-SECRET/x", "{\"schemaVersion\":2}", "type (a type tkm does not know) is not"},
        {"INTERNAL-SECRET/x", "{\"schemaVersion\":2,\"mediaType\":\"" TKM_OCI_MT_MANIFEST "\"}",
         "the Content-Type (a type tkm does not know)"},
        {TKM_OCI_MT_MANIFEST, "{\"schemaVersion\":3,\"layers\":[]}", "schemaVersion is not 2"},
        {TKM_OCI_MT_MANIFEST, "{\"schemaVersion\":2,\"layers\":[]}", "config[0] is not an object"},
        {TKM_OCI_MT_MANIFEST,
         "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"sha256:12\","
         "\"size\":1},\"layers\":[]}",
         "config[0] digest is not sha256:<64 hex>"},
        {TKM_OCI_MT_MANIFEST,
         "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"" D1
         "\",\"size\":-1},\"layers\":[]}",
         "has no valid size"},
        {TKM_OCI_MT_INDEX, "{\"schemaVersion\":2}", "'manifests' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tkm_err e = {0};
        int rc = tkm_oci_manifest_parse(&m, cases[i].ct, cases[i].body, strlen(cases[i].body),
                                        "test", &e);
        ASSERT(rc < 0);
        ASSERT_STRCONTAINS(e.msg, cases[i].why);
        ASSERT_NULL(strcasestr(e.msg, "SECRET"));
    }
}

TEST(size_cap)
{
    struct tkm_oci_manifest m;
    struct tkm_err e = {0};
    size_t n = TKM_OCI_MANIFEST_MAX + 1;
    char *big = malloc(n);
    ASSERT_NOT_NULL(big);
    memset(big, ' ', n);
    ASSERT_EQ(tkm_oci_manifest_parse(&m, NULL, big, n, "big", &e), -E2BIG);
    ASSERT_STRCONTAINS(e.msg, "exceeds the 4194304 byte limit");
    free(big);
}

TEST(index_selects_linux_amd64_skipping_attestations)
{
    struct tkm_oci_manifest idx;
    const struct tkm_oci_desc *d = NULL;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_oci_manifest_parse(&idx, TKM_OCI_MT_INDEX, index_json, strlen(index_json), "idx",
                                     NULL));
    ASSERT_EQ(idx.kind, TKM_OCI_KIND_INDEX);
    ASSERT_EQ(idx.n_descs, 3);
    ASSERT_EQ(idx.descs[0].attestation, 1);
    ASSERT_OK(tkm_oci_index_select(&idx, "linux", "amd64", NULL, &d, NULL));
    ASSERT_STREQ(d->digest, D1);
    ASSERT_OK(tkm_oci_index_select(&idx, "linux", "arm64", "v8", &d, NULL));
    ASSERT_STREQ(d->digest, D2);
    ASSERT_EQ(tkm_oci_index_select(&idx, "linux", "s390x", NULL, &d, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "no manifest for linux/s390x (platforms: linux/arm64/v8, "
                              "linux/amd64)");
    tkm_oci_manifest_release(&idx);
}

TEST(index_single_manifest_without_platform)
{
    const char *j = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" TKM_DOCKER_MT_MANIFEST
                    "\",\"digest\":\"" D4 "\",\"size\":9}]}";
    struct tkm_oci_manifest idx;
    const struct tkm_oci_desc *d = NULL;
    ASSERT_OK(tkm_oci_manifest_parse(&idx, NULL, j, strlen(j), "layout", NULL));
    ASSERT_EQ(idx.kind, TKM_OCI_KIND_INDEX);
    ASSERT_OK(tkm_oci_index_select(&idx, "linux", "amd64", NULL, &d, NULL));
    ASSERT_STREQ(d->digest, D4);
    tkm_oci_manifest_release(&idx);
}

TEST(config_labels_and_diff_ids)
{
    /* The exact MCV config shape (reference §2). */
    const char *cfg =
        "{\"created\":\"2025-09-11T16:46:55.039224895Z\",\"architecture\":\"amd64\",\"os\":"
        "\"linux\",\"config\":{\"WorkingDir\":\"/\",\"Labels\":{\"cache.triton.image/"
        "cache-size-bytes\":\"80415\",\"cache.triton.image/entry-count\":\"1\",\"cache.triton."
        "image/"
        "summary\":\"{\\\"targets\\\":[{\\\"backend\\\":\\\"hip\\\",\\\"arch\\\":\\\"gfx90a\\\""
        ",\\\"warp_size\\\":64}]}\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D3 "\"]}}";
    struct tkm_oci_config c;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_oci_config_parse(&c, cfg, strlen(cfg), "cfg", &e));
    ASSERT_STREQ(c.os, "linux");
    ASSERT_STREQ(c.arch, "amd64");
    ASSERT_EQ(c.n_diff_ids, 1);
    ASSERT_STREQ(c.diff_ids[0], D3);
    ASSERT_STREQ(tkm_oci_config_label(&c, "cache.triton.image/entry-count"), "1");
    ASSERT_STREQ(tkm_oci_config_label(&c, "cache.triton.image/summary"),
                 "{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx90a\",\"warp_size\":64}]}");
    ASSERT_NULL(tkm_oci_config_label(&c, "nope"));
    tkm_oci_config_release(&c);
    const char *bad = "{\"rootfs\":{\"diff_ids\":[\"sha256:xyz\"]}}";
    ASSERT_EQ(tkm_oci_config_parse(&c, bad, strlen(bad), "cfg", &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "cfg: rootfs.diff_ids[0] is not sha256");
}

TEST(hasher_streams_like_one_shot)
{
    struct tkm_oci_hasher h;
    char a[TKM_OCI_DIGEST_LEN + 1], b[TKM_OCI_DIGEST_LEN + 1];
    ASSERT_OK(tkm_oci_hasher_init(&h));
    ASSERT_OK(tkm_oci_hasher_update(&h, "hello ", 6));
    ASSERT_OK(tkm_oci_hasher_update(&h, "world", 5));
    ASSERT_OK(tkm_oci_hasher_final(&h, a));
    tkm_oci_hasher_release(&h);
    ASSERT_OK(tkm_oci_digest_bytes("hello world", 11, b));
    ASSERT_STREQ(a, b);
    ASSERT_STREQ(a, "sha256:b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
    /* the empty JSON object, the OCI empty descriptor's digest */
    ASSERT_OK(tkm_oci_digest_bytes("{}", 2, b));
    ASSERT_STREQ(b, "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
}
