/*
 * Unit tests for lib/trust/cosign: signatures made here with OpenSSL in
 * cosign's format (the e2e test trust_cosign.sh uses the real cosign), and
 * reliability.md checklist 16-20.
 */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <uv.h>

#include <tkm/buf.h>
#include <tkm/http.h>
#include <tkm/oci/registry.h>
#include <tkm/oci/session.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/sigjob.h>
#include <tkm/util.h>

#include "test.h"
#include "tsrv.h"

#define IMG_HEX  "1111111111111111111111111111111111111111111111111111111111111111"
#define IMG2_HEX "2222222222222222222222222222222222222222222222222222222222222222"
#define IMG      "sha256:" IMG_HEX
#define IMG2     "sha256:" IMG2_HEX

struct fx {
    EVP_PKEY *key;
    char *pem;
    struct tkm_buf manifest;
    struct tkm_buf payload[4];
    char digest[4][72];
    struct tkm_cosign_blob blobs[4];
    size_t n;
};

static EVP_PKEY *keygen(const char *type, const char *param)
{
    EVP_PKEY *k;
    if (strcmp(type, "RSA") == 0)
        k = tkm_test_rsa_key("rsa2048-a");
    else if (strcmp(type, "ED25519") == 0)
        k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    else
        k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", param);
    ASSERT_NOT_NULL(k);
    return k;
}

static char *pub_pem(EVP_PKEY *k)
{
    BIO *b = BIO_new(BIO_s_mem());
    ASSERT_EQ(PEM_write_bio_PUBKEY(b, k), 1);
    char *p;
    long n = BIO_get_mem_data(b, &p);
    char *out = strndup(p, (size_t)n);
    BIO_free(b);
    return out;
}

static void payload_for(struct tkm_buf *b, const char *digest)
{
    ASSERT_OK(tkm_buf_printf(b,
                             "{\"critical\":{\"identity\":{\"docker-reference\":\"127.0.0.1:5000/"
                             "t/img\"},\"image\":{\"docker-manifest-digest\":\"%s\"},\"type\":"
                             "\"cosign container image signature\"},\"optional\":null}",
                             digest));
}

static void sign_b64(EVP_PKEY *k, const void *p, size_t n, char *out, size_t outn)
{
    const EVP_MD *md = EVP_PKEY_get_base_id(k) == EVP_PKEY_ED25519 ? NULL
                       : EVP_PKEY_get_bits(k) == 384               ? EVP_sha384()
                       : EVP_PKEY_get_bits(k) == 521               ? EVP_sha512()
                                                                   : EVP_sha256();
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char sig[1024];
    size_t slen = sizeof sig;
    ASSERT_EQ(EVP_DigestSignInit(c, NULL, md, NULL, k), 1);
    ASSERT_EQ(EVP_DigestSign(c, sig, &slen, p, n), 1);
    EVP_MD_CTX_free(c);
    ASSERT((size_t)(4 * ((slen + 2) / 3) + 1) <= outn);
    EVP_EncodeBlock((unsigned char *)out, sig, (int)slen);
}

static void digest_of(const void *p, size_t n, char out[72])
{
    unsigned char md[32];
    unsigned int l;
    ASSERT_EQ(EVP_Digest(p, n, md, &l, EVP_sha256(), NULL), 1);
    memcpy(out, "sha256:", 7);
    tkm_hex(md, 32, out + 7);
}

/* Adds a layer: payload bytes, signed by signer (or the given b64 when sig64). */
static void add_layer(struct fx *f, EVP_PKEY *signer, const char *sig64)
{
    size_t i = f->n++;
    char s[2048];
    if (sig64)
        snprintf(s, sizeof s, "%s", sig64);
    else
        sign_b64(signer, f->payload[i].data, f->payload[i].len, s, sizeof s);
    digest_of(f->payload[i].data, f->payload[i].len, f->digest[i]);
    f->blobs[i] = (struct tkm_cosign_blob){f->digest[i], (unsigned char *)f->payload[i].data,
                                           f->payload[i].len};
    ASSERT_OK(tkm_buf_printf(
        &f->manifest,
        "%s{\"mediaType\":\"" TKM_COSIGN_MEDIA_TYPE
        "\",\"size\":%zu,\"digest\":\"%s\",\"annotations\":{\"" TKM_COSIGN_SIG_ANNOTATION
        "\":\"%s\"}}",
        i ? "," : "", f->payload[i].len, f->digest[i], s));
}

static void fx_init(struct fx *f, const char *type, const char *param)
{
    memset(f, 0, sizeof *f);
    f->key = keygen(type, param);
    f->pem = pub_pem(f->key);
    tkm_buf_init(&f->manifest, 1 << 20);
    for (int i = 0; i < 4; i++)
        tkm_buf_init(&f->payload[i], 1 << 20);
    ASSERT_OK(tkm_buf_puts(&f->manifest,
                           "{\"schemaVersion\":2,\"mediaType\":\"application/"
                           "vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":"
                           "\"application/vnd.oci.image.config.v1+json\",\"size\":233,"
                           "\"digest\":\"" IMG2 "\"},\"layers\":["));
}

static int fx_verify(struct fx *f, const char *pem, const char *img, struct tkm_cosign_result *r,
                     struct tkm_err *err)
{
    struct tkm_buf m = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_printf(&m, "%s]}", f->manifest.data));
    int rc = tkm_cosign_verify(m.data, m.len, f->blobs, f->n, pem ? pem : f->pem,
                               strlen(pem ? pem : f->pem), img, r, err);
    tkm_buf_release(&m);
    return rc;
}

static void fx_release(struct fx *f)
{
    EVP_PKEY_free(f->key);
    free(f->pem);
    tkm_buf_release(&f->manifest);
    for (int i = 0; i < 4; i++)
        tkm_buf_release(&f->payload[i]);
}

static void valid_with(const char *type, const char *param)
{
    struct fx f;
    fx_init(&f, type, param);
    payload_for(&f.payload[0], IMG);
    add_layer(&f, f.key, NULL);
    struct tkm_cosign_result r;
    struct tkm_err err = {0};
    int rc = fx_verify(&f, NULL, IMG, &r, &err);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "%s %s: %s", type, param ? param : "", err.msg);
    ASSERT_EQ(r.layer, 0);
    ASSERT_STREQ(r.docker_reference, "127.0.0.1:5000/t/img");
    ASSERT_STRCONTAINS(r.key_id, "sha256:");
    /* the same signature does not vouch for another image */
    ASSERT_EQ(fx_verify(&f, NULL, IMG2, &r, &err), -EBADMSG);
    fx_release(&f);
}

TEST(valid_p256)
{
    valid_with("EC", "P-256");
}

TEST(valid_p384_p521_rsa_ed25519)
{
    valid_with("EC", "P-384");
    valid_with("EC", "P-521");
    valid_with("RSA", NULL);
    valid_with("ED25519", NULL);
}

TEST(sig_tag)
{
    char t[80];
    ASSERT_OK(tkm_cosign_sig_tag(IMG, t));
    ASSERT_STREQ(t, "sha256-1111111111111111111111111111111111111111111111111111111111111111.sig");
    ASSERT_EQ(tkm_cosign_sig_tag("sha256:abc", t), -EINVAL);
}

TEST(wrong_key_rejected)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, f.key, NULL);
    EVP_PKEY *other = keygen("EC", "P-256");
    char *pem = pub_pem(other);
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, pem, IMG, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "signature does not verify with key sha256:");
    ASSERT_STRCONTAINS(err.msg, "(ECDSA P-256)");
    free(pem);
    EVP_PKEY_free(other);
    fx_release(&f);
}

/* checklist 17 */
TEST(signature_for_other_digest_rejected)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG2);
    add_layer(&f, f.key, NULL);
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "signature is for " IMG2 ", image is " IMG);
    fx_release(&f);
}

TEST(tampered_payload_rejected)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, f.key, NULL);
    /* bytes changed after signing: the descriptor digest no longer matches */
    f.payload[0].data[10] ^= 1;
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "payload does not match its descriptor");
    /* and with the descriptor updated too, the signature fails */
    fx_release(&f);
    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG);
    char s[2048];
    sign_b64(f.key, f.payload[0].data, f.payload[0].len, s, sizeof s);
    f.payload[0].data[f.payload[0].len - 2] = ' '; /* "null}" -> "nul }": still signed? no */
    add_layer(&f, NULL, s);
    tkm_err_clear(&err);
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "signature does not verify");
    fx_release(&f);
}

TEST(verify_before_parse)
{
    /* garbage payload with a bad signature: the signature error is reported,
     * the payload is never parsed */
    struct fx f;
    fx_init(&f, "EC", "P-256");
    ASSERT_OK(tkm_buf_puts(&f.payload[0], "{\"critical\": not json"));
    add_layer(&f, NULL,
              "MEUCIQDhZmFrZWZha2VmYWtlZmFrZWZha2VmYWtlZmFrZWZha2VmYWtlAiAAAAAAAAAA"
              "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==");
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "does not verify");
    fx_release(&f);
}

/* checklist 18 */
TEST(duplicate_and_case_variant_keys_rejected)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    ASSERT_OK(tkm_buf_printf(&f.payload[0],
                             "{\"critical\":{\"image\":{\"docker-manifest-digest\":\"%s\","
                             "\"Docker-manifest-digest\":\"%s\"},\"type\":\"" TKM_COSIGN_CLAIM_TYPE
                             "\"}}",
                             IMG2, IMG));
    add_layer(&f, f.key, NULL);
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "keys that differ only in case");
    fx_release(&f);

    fx_init(&f, "EC", "P-256");
    ASSERT_OK(tkm_buf_printf(&f.payload[0],
                             "{\"critical\":{\"image\":{\"docker-manifest-digest\":\"%s\","
                             "\"docker-manifest-digest\":\"%s\"},\"type\":\"" TKM_COSIGN_CLAIM_TYPE
                             "\"}}",
                             IMG2, IMG));
    add_layer(&f, f.key, NULL);
    tkm_err_clear(&err);
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "duplicate");
    fx_release(&f);
}

TEST(spec_example_capitalised_key_accepted)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    ASSERT_OK(tkm_buf_printf(&f.payload[0],
                             "{\"critical\":{\"identity\":{\"docker-reference\":\"r\"},\"image\":{"
                             "\"Docker-manifest-digest\":\"%s\"},\"type\":\"" TKM_COSIGN_CLAIM_TYPE
                             "\"},\"optional\":{\"a\":\"b\"}}",
                             IMG));
    add_layer(&f, f.key, NULL);
    struct tkm_err err = {0};
    ASSERT_OK(fx_verify(&f, NULL, IMG, NULL, &err));
    fx_release(&f);
}

TEST(wrong_type_rejected)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    ASSERT_OK(tkm_buf_printf(&f.payload[0],
                             "{\"critical\":{\"image\":{\"docker-manifest-digest\":\"%s\"},"
                             "\"type\":\"something else\"}}",
                             IMG));
    add_layer(&f, f.key, NULL);
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "critical.type is \"something else\"");
    fx_release(&f);
}

/* checklist 19 */
TEST(bad_der_bad_base64_wrong_curve)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, NULL, "AAAA");
    struct tkm_err err = {0};
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EKEYREJECTED);
    fx_release(&f);

    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, NULL, "not*base64!");
    tkm_err_clear(&err);
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not valid base64");
    fx_release(&f);

    fx_init(&f, "EC", "secp256k1");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, f.key, NULL);
    tkm_err_clear(&err);
    ASSERT_EQ(fx_verify(&f, NULL, IMG, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "curve secp256k1 is not supported");
    fx_release(&f);

    tkm_err_clear(&err);
    ASSERT_EQ(tkm_cosign_verify("{}", 2, NULL, 0, "junk", 4, IMG, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not a PEM public key");
}

/* checklist 20 */
TEST(too_many_layers_and_huge_payload_rejected_fast)
{
    struct tkm_buf m = TKM_BUF_INIT(8 << 20);
    ASSERT_OK(tkm_buf_puts(&m, "{\"layers\":["));
    for (int i = 0; i < 10000; i++)
        ASSERT_OK(tkm_buf_printf(&m, "%s{\"size\":1}", i ? "," : ""));
    ASSERT_OK(tkm_buf_puts(&m, "]}"));
    struct tkm_cosign_layer *l = NULL;
    size_t n = 0;
    struct tkm_err err = {0};
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(tkm_cosign_sig_layers(m.data, m.len, &l, &n, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "10000 layers, more than the cap of 64");
    ASSERT(tkm_now_ms() - t0 < 2000 * tkm_test_timeout_scale());
    /* a manifest over 1 MiB is refused before parsing */
    tkm_buf_reset(&m);
    ASSERT_OK(tkm_buf_puts(&m, "{\"layers\":[], \"pad\":\""));
    for (int i = 0; i < (1 << 20); i++)
        ASSERT_OK(tkm_buf_putc(&m, 'x'));
    ASSERT_OK(tkm_buf_puts(&m, "\"}"));
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_cosign_sig_layers(m.data, m.len, &l, &n, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "more than 1048576");
    tkm_buf_reset(&m);
    ASSERT_OK(tkm_buf_puts(&m, "{\"layers\":[{\"mediaType\":\"" TKM_COSIGN_MEDIA_TYPE
                               "\",\"size\":1073741824,\"digest\":\"" IMG "\"}]}"));
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_cosign_sig_layers(m.data, m.len, &l, &n, &err), -E2BIG);
    ASSERT_STRCONTAINS(err.msg, "payload of 1073741824 bytes exceeds 65536 bytes");
    ASSERT_NULL(l);
    tkm_buf_release(&m);
}

TEST(sig_layers_lists_only_signatures)
{
    const char *m = "{\"layers\":[{\"mediaType\":\"application/octet-stream\",\"size\":3,"
                    "\"digest\":\"" IMG "\"},{\"mediaType\":\"" TKM_COSIGN_MEDIA_TYPE
                    "\",\"size\":250,\"digest\":\"" IMG2 "\"}]}";
    struct tkm_cosign_layer *l = NULL;
    size_t n = 0;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_cosign_sig_layers(m, strlen(m), &l, &n, &err));
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(l[0].digest, IMG2);
    ASSERT_EQ(l[0].size, 250);
    free(l);
    const char *none = "{\"layers\":[]}";
    ASSERT_EQ(tkm_cosign_sig_layers(none, strlen(none), &l, &n, &err), -ENOENT);
    ASSERT_EQ(tkm_cosign_verify(none, strlen(none), NULL, 0, "x", 1, IMG, NULL, &err), -EINVAL);
}

TEST(second_layer_verifies)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    EVP_PKEY *other = keygen("EC", "P-256");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, other, NULL); /* someone else's signature */
    payload_for(&f.payload[1], IMG);
    ASSERT_OK(tkm_buf_puts(&f.payload[1], " "));
    add_layer(&f, f.key, NULL);
    struct tkm_cosign_result r;
    struct tkm_err err = {0};
    ASSERT_OK(fx_verify(&f, NULL, IMG, &r, &err));
    ASSERT_EQ(r.layer, 1);
    /* and a missing payload blob is reported when nothing else verifies */
    f.n = 1;
    ASSERT_EQ(fx_verify(&f, NULL, IMG, &r, &err), -EKEYREJECTED);
    EVP_PKEY_free(other);
    fx_release(&f);
}

/* ---- a real signature: made by cosign v2.6.5 (generate-key-pair; sign --key
 * --tlog-upload=false) on an image in a local registry; the .sig manifest,
 * payload blob and public key were saved in tests/unit/data/cosign/. */

static char *read_data(const char *name, size_t *len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/tests/unit/data/cosign/%s", TKM_SOURCE_DIR, name);
    FILE *f = fopen(p, "rb");
    ASSERT_NOT_NULL(f);
    char *buf = calloc(1, 65536);
    ASSERT_NOT_NULL(buf);
    *len = fread(buf, 1, 65535, f);
    fclose(f);
    return buf;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = '\0';
}

TEST(real_cosign_signature)
{
    size_t ml, pl, kl, dl, pdl;
    char *man = read_data("sig.json", &ml), *pay = read_data("payload.json", &pl);
    char *pub = read_data("cosign.pub", &kl), *img = read_data("image-digest", &dl);
    char *pdg = read_data("payload-digest", &pdl);
    trim(img);
    trim(pdg);
    struct tkm_cosign_blob b = {pdg, (unsigned char *)pay, pl};
    struct tkm_cosign_result r;
    struct tkm_err err = {0};
    int rc = tkm_cosign_verify(man, ml, &b, 1, pub, kl, img, &r, &err);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "real cosign signature: %s", err.msg);
    ASSERT_STRCONTAINS(r.docker_reference, "/t/img");
    /* the same signature for another digest */
    ASSERT_EQ(tkm_cosign_verify(man, ml, &b, 1, pub, kl, IMG, &r, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "signature is for sha256:ca5028e4");
    /* one payload byte changed: it no longer matches its descriptor */
    tkm_err_clear(&err);
    char *p2 = strstr(pay, "\"optional\":null");
    ASSERT_NOT_NULL(p2);
    memcpy(p2 + 12, "nul ", 4);
    ASSERT_EQ(tkm_cosign_verify(man, ml, &b, 1, pub, kl, img, &r, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "payload does not match its descriptor");
    free(man);
    free(pay);
    free(pub);
    free(img);
    free(pdg);
}

/* ---- the search the daemons run (tkm_sig_job_verify) finds the .sig tag ---- */

struct vout {
    int calls, rc;
    char location[512];
    char msg[1024];
};

static void on_job(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                   const struct tkm_err *err, void *data)
{
    struct vout *o = data;
    (void)job;
    o->calls++;
    o->rc = rc;
    if (rc == 0)
        snprintf(o->location, sizeof o->location, "%s",
                 ((const struct tkm_sig_result *)res->detail)->location);
    snprintf(o->msg, sizeof o->msg, "%s", rc ? err->msg : "");
}

/* Runs the search for t/img@img to its end on ses's loop. */
static void sig_search(uv_loop_t *loop, struct tkm_oci_session *ses, const char *img,
                       const struct tkm_sig_policy *pol, struct vout *o)
{
    struct tkm_err err = {0};
    memset(o, 0, sizeof *o);
    ASSERT_OK(tkm_sig_job_verify(ses, "t/img", img, pol, on_job, o, NULL, &err));
    ASSERT_EQ(o->calls, 0);
    while (o->calls == 0)
        uv_run(loop, UV_RUN_ONCE);
    ASSERT_EQ(o->calls, 1);
}

TEST(sig_job_fetches_sig_and_payload)
{
    struct fx f;
    fx_init(&f, "EC", "P-256");
    payload_for(&f.payload[0], IMG);
    add_layer(&f, f.key, NULL);
    struct tkm_buf man = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_printf(&man, "%s]}", f.manifest.data));
    /* no referrers API, no tag-schema index: the classic .sig tag of either
     * image serves the signature made for IMG */
    static const struct tsrv_reply noapi = {404, NULL, "404 page not found"},
                                   nf = {404, NULL,
                                         "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}"};
    struct tsrv_reply sig = {200, "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                             man.data},
                      pay = {200, "Content-Type: application/octet-stream\r\n", f.payload[0].data};
    char blob[128];
    snprintf(blob, sizeof blob, "/v2/t/img/blobs/%s", f.digest[0]);
    struct tsrv srv;
    tsrv_init(&srv);
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/referrers/", TSRV_PREFIX, NULL, &noapi, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/manifests/sha256-" IMG_HEX ".sig", TSRV_TARGET,
                         NULL, &sig, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/manifests/sha256-" IMG2_HEX ".sig", TSRV_TARGET,
                         NULL, &sig, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", "/v2/t/img/manifests/", TSRV_PREFIX, NULL, &nf, 1));
    ASSERT_OK(tsrv_route(&srv, "GET", blob, TSRV_TARGET, NULL, &pay, 1));
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    struct tkm_err err = {0};
    ASSERT_OK(tkm_http_global_init(&err));
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    struct tkm_oci_registry_opts ro = {.anonymous = 1, .timeout_ms = 5000};
    uv_loop_t loop;
    struct tkm_http *http = NULL;
    struct tkm_oci_session *ses = NULL;
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(tkm_http_new(&loop, NULL, &http, &err));
    ASSERT_OK(tkm_oci_session_new(http, host, &ro, &ses, &err));
    struct tkm_sig_key k = {.pem = f.pem, .len = strlen(f.pem)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    struct vout out;
    sig_search(&loop, ses, IMG, &pol, &out);
    if (out.rc)
        tkm_test_fail(__FILE__, __LINE__, "%s", out.msg);
    ASSERT_STRCONTAINS(out.location, "t/img:sha256-" IMG_HEX ".sig layer 0");
    int saw_sig = 0, saw_blob = 0;
    char want[160];
    snprintf(want, sizeof want, "GET %s", blob);
    for (int i = 0; i < tsrv_nreqs(&srv); i++) {
        saw_sig |=
            strstr(tsrv_req(&srv, i), "GET /v2/t/img/manifests/sha256-" IMG_HEX ".sig") != NULL;
        saw_blob |= strstr(tsrv_req(&srv, i), want) != NULL;
    }
    ASSERT(saw_sig && saw_blob);
    /* a registry serving the same signature for another image's tag: rejected */
    sig_search(&loop, ses, IMG2, &pol, &out);
    ASSERT(out.rc < 0);
    ASSERT_STRCONTAINS(out.msg, "signature is for " IMG ", image is " IMG2);
    tkm_oci_session_close(ses, NULL, NULL);
    tkm_http_close(http, NULL, NULL);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_OK(uv_loop_close(&loop));
    tsrv_stop(&srv);
    tkm_buf_release(&man);
    fx_release(&f);
}
