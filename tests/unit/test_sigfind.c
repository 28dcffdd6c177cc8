/*
 * test_sigfind.c - finding an image's signatures as cosign v3 does
 * (the referrers call, sup_oci_get_referrers, and tkm_sig_verify_registry, the
 * synchronous form of tkm_sig_job_verify: test_sigjob.c) against a canned registry that
 * records each request. The bundle is real cosign v3.1.3 output.
 */

#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>
#include <tkm/oci/digest.h>
#include <tkm/trust/bundle.h>
#include <tkm/trust/keys.h>
#include <tkm/util.h>

#include "sup_oci.h"
#include "test.h"
#include "tsrv.h"

#include "cosign3_bundle.h"

#define IMG    COSIGN3_IMG
#define HEX    COSIGN3_HEX
#define PUB    COSIGN3_PUB
#define BUNDLE COSIGN3_BUNDLE

#define OCTET "Content-Type: application/octet-stream\r\n"
#define INDEX "Content-Type: application/vnd.oci.image.index.v1+json\r\n"
#define MANIF "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n"

/* "sha256:<hex>" of the string p (the test fails if hashing does). */
static void digest_of(const char *p, char out[72])
{
    ASSERT_EQ(tkm_oci_digest_bytes(p, strlen(p), out), 0);
}

/* The referrer manifest for BUNDLE and an index listing it. */
struct art {
    char bdig[72], mdig[72];
    struct tkm_buf man, idx;
};

static void art_init(struct art *a, const char *index_artifact_type)
{
    digest_of(BUNDLE, a->bdig);
    tkm_buf_init(&a->man, 1 << 16);
    tkm_buf_init(&a->idx, 1 << 16);
    ASSERT_OK(tkm_buf_printf(
        &a->man,
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"artifactType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"config\":{\"mediaType\":"
        "\"application/vnd.oci.empty.v1+json\",\"size\":2,\"digest\":\"sha256:"
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\"},\"layers\":[{"
        "\"mediaType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"size\":%zu,\"digest\":\"%s\"}],"
        "\"annotations\":{\"dev.sigstore.bundle.predicateType\":\"" TKM_BUNDLE_PREDICATE_SIGN
        "\"},\"subject\":{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"size\":1,\"digest\":\"" IMG "\"}}",
        strlen(BUNDLE), a->bdig));
    digest_of(a->man.data, a->mdig);
    ASSERT_OK(tkm_buf_printf(&a->idx,
                             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index."
                             "v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image."
                             "manifest.v1+json\",\"size\":%zu,\"digest\":\"%s\","
                             "\"artifactType\":\"%s\"}]}",
                             a->man.len, a->mdig, index_artifact_type));
}

static void art_release(struct art *a)
{
    tkm_buf_release(&a->man);
    tkm_buf_release(&a->idx);
}

static struct tkm_oci_registry *reg_for(int port)
{
    struct tkm_err err = {0};
    char host[64];
    struct tkm_oci_registry *reg = NULL;
    ASSERT_OK(tkm_http_global_init(&err));
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    struct tkm_oci_registry_opts ro = {.anonymous = 1, .timeout_ms = 5000};
    ASSERT_OK(tkm_oci_registry_new(host, &ro, &reg, &err));
    return reg;
}

TEST(referrers_api_bundle)
{
    struct art a;
    art_init(&a, "application/vnd.oci.empty.v1+json"); /* as ggcr's registry lists it */
    struct tsrv_reply replies[] = {{200, INDEX, a.idx.data, 0, 0, 0},
                                   {200, MANIF, a.man.data, 0, 0, 0},
                                   {200, OCTET, BUNDLE, 0, 0, 0}};
    struct tsrv srv;
    int port = tsrv_start(&srv, replies, 3);
    ASSERT(port > 0);
    struct tkm_oci_registry *reg = reg_for(port);
    struct tkm_sig_key k = {PUB, strlen(PUB)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    int rc = tkm_sig_verify_registry(reg, "t/a", IMG, &pol, &r, &err);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_EQ(r.source, TKM_SIG_SRC_REFERRERS);
    ASSERT_EQ(r.format, TKM_SIG_FMT_BUNDLE_DSSE);
    ASSERT_EQ(r.found, 1);
    ASSERT_STRCONTAINS(r.location, a.mdig);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 0), "GET /v2/t/a/referrers/" IMG " HTTP/1.1");
    ASSERT_STRCONTAINS(tsrv_req(&srv, 0), "application/vnd.oci.image.index.v1+json");
    char want[128];
    snprintf(want, sizeof want, "GET /v2/t/a/manifests/%s", a.mdig);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 1), want);
    snprintf(want, sizeof want, "GET /v2/t/a/blobs/%s", a.bdig);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 2), want);
    tkm_oci_registry_free(reg);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(referrers_artifact_type_filter_encoded)
{
    struct tsrv_reply replies[] = {{200, INDEX, "{\"schemaVersion\":2,\"manifests\":[]}", 0, 0, 0},
                                   {404, "", "{\"errors\":[]}", 0, 0, 0},
                                   {200, "Content-Type: text/html\r\n", "<html>", 0, 0, 0}};
    struct tsrv srv;
    int port = tsrv_start(&srv, replies, 3);
    ASSERT(port > 0);
    struct tkm_oci_registry *reg = reg_for(port);
    struct tkm_buf body = TKM_BUF_INIT(1 << 20);
    struct tkm_err err = {0};
    ASSERT_OK(sup_oci_get_referrers(reg, "t/a", IMG, TKM_BUNDLE_MEDIA_TYPE_V03, &body, &err));
    ASSERT_STRCONTAINS(body.data, "\"manifests\":[]");
    ASSERT_STRCONTAINS(tsrv_req(&srv, 0), "GET /v2/t/a/referrers/" IMG
                                          "?artifactType=application%2Fvnd.dev.sigstore.bundle."
                                          "v0.3%2Bjson HTTP/1.1");
    /* no referrers API: 404, or an answer that is not an index */
    ASSERT_EQ(sup_oci_get_referrers(reg, "t/a", IMG, NULL, &body, &err), -ENOTSUP);
    tkm_err_clear(&err);
    ASSERT_EQ(sup_oci_get_referrers(reg, "t/a", IMG, NULL, &body, &err), -ENOTSUP);
    ASSERT_STRCONTAINS(err.msg, "not an OCI index");
    tkm_err_clear(&err);
    ASSERT_EQ(sup_oci_get_referrers(reg, "t/a", "sha256:12", NULL, &body, &err), -EINVAL);
    tkm_buf_release(&body);
    tkm_oci_registry_free(reg);
    tsrv_stop(&srv);
}

TEST(tag_schema_fallback_and_unsigned)
{
    struct art a;
    art_init(&a, TKM_BUNDLE_MEDIA_TYPE_V03);
    struct tsrv_reply replies[] = {
        {404, "", "{\"errors\":[{\"code\":\"NOT_FOUND\"}]}", 0, 0, 0}, /* referrers */
        {200, INDEX, a.idx.data, 0, 0, 0},                             /* sha256-<hex> */
        {200, MANIF, a.man.data, 0, 0, 0},
        {200, OCTET, BUNDLE, 0, 0, 0},
        {404, "", "{\"errors\":[{\"code\":\"NOT_FOUND\"}]}", 0, 0, 0}, /* referrers */
        {404, "", "{\"errors\":[{\"code\":\"NOT_FOUND\"}]}", 0, 0, 0}, /* sha256-<hex> */
        {404, "", "{\"errors\":[{\"code\":\"NOT_FOUND\"}]}", 0, 0, 0}, /* .sig */
        {200, MANIF, "{}", 0, 0, 0}, /* HEAD of the image manifest: it is there */
    };
    struct tsrv srv;
    int port = tsrv_start(&srv, replies, 8);
    ASSERT(port > 0);
    struct tkm_oci_registry *reg = reg_for(port);
    struct tkm_sig_key k = {PUB, strlen(PUB)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    int rc = tkm_sig_verify_registry(reg, "t/a", IMG, &pol, &r, &err);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_EQ(r.source, TKM_SIG_SRC_TAG_SCHEMA);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 1), "GET /v2/t/a/manifests/sha256-" HEX " HTTP/1.1");
    /* now nothing anywhere: referrers 404, tag 404, .sig 404 */
    ASSERT_EQ(tkm_sig_verify_registry(reg, "t/a", IMG, &pol, &r, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "t/a@" IMG " is not signed: no signature found; looked at the "
                                "referrers API (none on this registry), the tag t/a:sha256-" HEX
                                " (not found) and the tag t/a:sha256-" HEX ".sig (not found)");
    ASSERT_STRCONTAINS(tsrv_req(&srv, 7), "HEAD /v2/t/a/manifests/" IMG " HTTP/1.1");
    tkm_oci_registry_free(reg);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(classic_signature_needs_a_key)
{
    static const char payload[] = "{\"critical\":{}}";
    char pd[72];
    digest_of(payload, pd);
    struct tkm_buf man = TKM_BUF_INIT(1 << 16);
    ASSERT_OK(tkm_buf_printf(&man,
                             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image."
                             "manifest.v1+json\",\"config\":{\"mediaType\":\"application/"
                             "vnd.oci.image.config.v1+json\",\"size\":2,\"digest\":\"sha256:"
                             "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\"},"
                             "\"layers\":[{\"mediaType\":\"application/vnd.dev.cosign."
                             "simplesigning.v1+json\",\"size\":%zu,\"digest\":\"%s\","
                             "\"annotations\":{\"dev.cosignproject.cosign/signature\":\"AAAA\"}}]}",
                             strlen(payload), pd));
    struct tsrv_reply replies[] = {
        {404, "", "{\"errors\":[]}", 0, 0, 0}, /* referrers */
        {404, "", "{\"errors\":[]}", 0, 0, 0}, /* sha256-<hex> */
        {200, MANIF, man.data, 0, 0, 0},       /* sha256-<hex>.sig */
        {200, OCTET, payload, 0, 0, 0},
    };
    struct tsrv srv;
    int port = tsrv_start(&srv, replies, 4);
    ASSERT(port > 0);
    struct tkm_oci_registry *reg = reg_for(port);
    char *p = NULL;
    size_t n = 0;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_trust_read_file(TKM_SOURCE_DIR "/tests/unit/data/sigstore/trusted_root.json",
                                  1 << 20, &p, &n, &err));
    struct tkm_sig_identity id = {"https://issuer.example.test", "a@example.test", NULL};
    struct tkm_sig_policy pol = {
        .trusted_root = p, .trusted_root_len = n, .identities = &id, .nidentities = 1};
    struct tkm_sig_result r;
    ASSERT_EQ(tkm_sig_verify_registry(reg, "t/a", IMG, &pol, &r, &err), -ENOTSUP);
    ASSERT_STRCONTAINS(err.msg, "t/a:sha256-" HEX ".sig (.sig tag): 1 classic signature: verifying "
                                "them needs a public key");
    ASSERT_STRCONTAINS(tsrv_req(&srv, 2), "GET /v2/t/a/manifests/sha256-" HEX ".sig");
    free(p);
    tkm_buf_release(&man);
    tkm_oci_registry_free(reg);
    tsrv_stop(&srv);
}

TEST(referrers_bundle_only_on_page_two)
{
    struct art a;
    art_init(&a, TKM_BUNDLE_MEDIA_TYPE_V03);
    /* page 1 lists an attestation only, and links page 2 (which has the bundle) */
    static const char page1[] =
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
        "\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":1,"
        "\"digest\":\"sha256:0000000000000000000000000000000000000000000000000000000000000000\","
        "\"artifactType\":\"application/vnd.example.sbom+json\"}]}";
    char bpath[128], mpath[128];
    snprintf(mpath, sizeof mpath, "/v2/t/a/manifests/%s", a.mdig);
    snprintf(bpath, sizeof bpath, "/v2/t/a/blobs/%s", a.bdig);
    struct tsrv_reply r1 = {200, INDEX "Link: </v2/t/a/referrers/" IMG "?last=0>; rel=\"next\"\r\n",
                            page1};
    struct tsrv_reply r2 = {200, INDEX, a.idx.data}, rm = {200, MANIF, a.man.data},
                      rb = {200, OCTET, BUNDLE};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/a/referrers/" IMG, TSRV_TARGET, NULL, &r1, 1));
    ASSERT_OK(
        tsrv_route(&srv, "GET", "/v2/t/a/referrers/" IMG "?last=0", TSRV_TARGET, NULL, &r2, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", mpath, TSRV_TARGET, NULL, &rm, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", bpath, TSRV_TARGET, NULL, &rb, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct tkm_oci_registry *reg = reg_for(port);
    struct tkm_sig_key k = {PUB, strlen(PUB)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    int rc = tkm_sig_verify_registry(reg, "t/a", IMG, &pol, &r, &err);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_EQ(r.source, TKM_SIG_SRC_REFERRERS);
    ASSERT_EQ(r.found, 1);
    ASSERT_STRCONTAINS(r.location, a.mdig);
    ASSERT_EQ(tsrv_nreqs(&srv), 4);
    ASSERT_STRCONTAINS(tsrv_req(&srv, 1), "GET /v2/t/a/referrers/" IMG "?last=0 HTTP/1.1");
    tkm_oci_registry_free(reg);
    art_release(&a);
    tsrv_stop(&srv);
}

TEST(referrers_bundle_cap_said)
{
    /* one page listing 513 bundle referrers, none of which exists: 512 are tried */
    struct tkm_buf idx = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_puts(&idx, "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image."
                                 "index.v1+json\",\"manifests\":["));
    for (int i = 0; i <= TKM_OCI_REFERRERS_MAX; i++)
        ASSERT_OK(tkm_buf_printf(&idx,
                                 "%s{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                                 "\"size\":1,\"digest\":\"sha256:%064x\",\"artifactType\":\"%s\"}",
                                 i ? "," : "", i, TKM_BUNDLE_MEDIA_TYPE_V03));
    ASSERT_OK(tkm_buf_puts(&idx, "]}"));
    struct tsrv_reply ri = {200, INDEX, idx.data}, nf = {404, NULL, ""};
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/a/referrers/" IMG, TSRV_TARGET, NULL, &ri, 1));
    ASSERT_OK(tsrv_route(&srv, NULL, NULL, TSRV_PREFIX, NULL, &nf, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct tkm_oci_registry *reg = reg_for(port);
    struct tkm_sig_key k = {PUB, strlen(PUB)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    ASSERT_NE(tkm_sig_verify_registry(reg, "t/a", IMG, &pol, &r, &err), 0);
    ASSERT_STRCONTAINS(err.msg,
                       "none of the 512 signatures tried (more than 512 signature bundles: "
                       "the cap was hit)");
    int manifests = 0;
    for (int i = 0; i < tsrv_nreqs(&srv); i++)
        manifests += strstr(tsrv_req(&srv, i), "GET /v2/t/a/manifests/sha256:") != NULL;
    ASSERT_EQ(manifests, TKM_OCI_REFERRERS_MAX);
    tkm_oci_registry_free(reg);
    tkm_buf_release(&idx);
    tsrv_stop(&srv);
}
