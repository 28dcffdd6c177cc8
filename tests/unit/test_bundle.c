/*
 * test_bundle.c - Sigstore bundle verification with public keys (bundle.h)
 * and the signature policy checks (policy.h).
 *
 * Two bundles are real cosign v3.1.3 output (`cosign sign --key` of an image
 * in a registry: DSSE envelope; `cosign sign-blob --key --bundle` of the same
 * image's manifest: message signature), with the public key that made them.
 * The others are built here with a fresh key, so each rule can be broken
 * alone while the signature stays valid.
 */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <tkm/buf.h>
#include <tkm/trust/bundle.h>
#include <tkm/util.h>

#include "test.h"

#include "cosign3_bundle.h"

#define IMG         COSIGN3_IMG
#define COSIGN_PUB  COSIGN3_PUB
#define DSSE_BUNDLE COSIGN3_BUNDLE
#define IMG_OTHER   "sha256:1111111111111111111111111111111111111111111111111111111111111111"

static const char OTHER_PUB[] = "-----BEGIN PUBLIC KEY-----\n"
                                "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEVLSffGHKwpNflzFmjKEdVCvlTABS\n"
                                "h9lObI5FG9Otw5IuFM5Zg3J5uEoumQvf460aslCsUikbDTcqVqIsP8t3vQ==\n"
                                "-----END PUBLIC KEY-----\n";

/* cosign v3.1.3 sign-blob --key cosign.key --bundle msg.json manifest.json */
static const char MSG_BUNDLE[] =
    "{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\", "
    "\"verificationMaterial\":{\"publicKey\":{\"hint\":\"5j8EsdDcpAl9DFfV/"
    "a+wDwHXxvNNFhRlvBBAjZJSwH4="
    "\"}}, \"messageSignature\":{\"messageDigest\":{\"algorithm\":\"SHA2_256\", "
    "\"digest\":\"ylAo5OAXQwYVRDzQ7HJOSDQOKD4siny/mPg2R604tEA=\"}, "
    "\"signature\":\"MEUCIQCyReV4APmxnGVF6G7mkmFHL0ebTA9L1ej30QPoYvHgLgIgbG/"
    "PVEItcYd9dGyqWcQ0gEqTHmIzvnTtLDoHJ5lvnY8=\"}}";

static int verify_with(const char *bundle, size_t len, const char *pem, const char *img,
                       struct tkm_sig_result *res, struct tkm_err *err)
{
    struct tkm_sig_key k = {pem, strlen(pem)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    return tkm_bundle_verify((const unsigned char *)bundle, len, &pol, img, "t/a", res, err);
}

static int verify_str(const char *bundle, const char *pem, const char *img,
                      struct tkm_sig_result *res, struct tkm_err *err)
{
    return verify_with(bundle, strlen(bundle), pem, img, res, err);
}

TEST(cosign_v3_dsse_bundle_verifies)
{
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    ASSERT_OK(verify_str(DSSE_BUNDLE, COSIGN_PUB, IMG, &r, &err));
    ASSERT_EQ(r.format, TKM_SIG_FMT_BUNDLE_DSSE);
    ASSERT_STREQ(r.bundle_media_type, TKM_BUNDLE_MEDIA_TYPE_V03);
    ASSERT_STREQ(r.key_desc, "ECDSA P-256");
    ASSERT_EQ(strncmp(r.key_id, "sha256:", 7), 0);
    ASSERT_EQ(r.tlog_index, -1);
}

TEST(cosign_v3_message_bundle_verifies)
{
    struct tkm_sig_result r;
    struct tkm_err err = {0};
    ASSERT_OK(verify_str(MSG_BUNDLE, COSIGN_PUB, IMG, &r, &err));
    ASSERT_EQ(r.format, TKM_SIG_FMT_BUNDLE_MESSAGE);
}

TEST(wrong_key_names_the_key)
{
    struct tkm_err err = {0};
    ASSERT_EQ(verify_str(DSSE_BUNDLE, OTHER_PUB, IMG, NULL, &err), -EKEYREJECTED);
    ASSERT_STRCONTAINS(err.msg, "signature does not verify with key sha256:");
    ASSERT_STRCONTAINS(err.msg, "ECDSA P-256");
    tkm_err_clear(&err);
    ASSERT_EQ(verify_str(MSG_BUNDLE, OTHER_PUB, IMG, NULL, &err), -EKEYREJECTED);
}

TEST(any_of_several_keys)
{
    struct tkm_sig_key k[2] = {{OTHER_PUB, strlen(OTHER_PUB)}, {COSIGN_PUB, strlen(COSIGN_PUB)}};
    struct tkm_sig_policy pol = {.keys = k, .nkeys = 2};
    struct tkm_sig_result r, r0;
    struct tkm_err err = {0};
    ASSERT_OK(tkm_bundle_verify((const unsigned char *)DSSE_BUNDLE, strlen(DSSE_BUNDLE), &pol, IMG,
                                NULL, &r, &err));
    ASSERT_OK(verify_str(DSSE_BUNDLE, COSIGN_PUB, IMG, &r0, &err));
    ASSERT_STREQ(r.key_id, r0.key_id); /* the second key is the one reported */
    pol.nkeys = 1;
    ASSERT_EQ(tkm_bundle_verify((const unsigned char *)DSSE_BUNDLE, strlen(DSSE_BUNDLE), &pol, IMG,
                                NULL, &r, &err),
              -EKEYREJECTED);
}

TEST(other_image_refused)
{
    struct tkm_err err = {0};
    ASSERT_EQ(verify_str(DSSE_BUNDLE, COSIGN_PUB, IMG_OTHER, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "signature is for " IMG ", image is " IMG_OTHER);
    tkm_err_clear(&err);
    ASSERT_EQ(verify_str(MSG_BUNDLE, COSIGN_PUB, IMG_OTHER, NULL, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "signature is for " IMG);
}

/* Replaces the first occurrence of from with to in a copy of s. */
static char *subst(const char *s, const char *from, const char *to)
{
    const char *p = strstr(s, from);
    ASSERT_NOT_NULL(p);
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_append(&b, s, (size_t)(p - s)));
    ASSERT_OK(tkm_buf_puts(&b, to));
    ASSERT_OK(tkm_buf_puts(&b, p + strlen(from)));
    return b.data;
}

TEST(tampered_bundles_refused)
{
    struct tkm_err err = {0};
    /* one base64 character of the payload changed: the PAE no longer matches */
    char *t = subst(DSSE_BUNDLE, "eyJfdHlwZSI6", "eyJfdHlwZSI7");
    ASSERT(verify_str(t, COSIGN_PUB, IMG, NULL, &err) < 0);
    free(t);
    /* the payloadType is part of the PAE and must be in-toto */
    tkm_err_clear(&err);
    t = subst(DSSE_BUNDLE, "application/vnd.in-toto+json", "application/json");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EPROTONOSUPPORT);
    ASSERT_STRCONTAINS(err.msg, "payloadType 'application/json'");
    free(t);
    /* the message digest is bound by the signature */
    tkm_err_clear(&err);
    t = subst(MSG_BUNDLE, "ylAo5OAX", "ylAo5OAY");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EKEYREJECTED);
    free(t);
}

TEST(strict_json)
{
    struct tkm_err err = {0};
    char *t = subst(DSSE_BUNDLE, "\"dsseEnvelope\"", "\"dsse_envelope\":{}, \"dsseEnvelope\"");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "unknown member 'dsse_envelope'");
    free(t);
    tkm_err_clear(&err);
    t = subst(DSSE_BUNDLE, "\"dsseEnvelope\"", "\"mediaType\":\"x\", \"dsseEnvelope\"");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not valid JSON");
    free(t);
    tkm_err_clear(&err);
    ASSERT_EQ(verify_with(DSSE_BUNDLE, strlen(DSSE_BUNDLE) - 1, COSIGN_PUB, IMG, NULL, &err),
              -EINVAL);
    tkm_err_clear(&err);
    t = subst(DSSE_BUNDLE, "{\"mediaType\"", "{\"messageSignature\":{}, \"mediaType\"");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "exactly one of dsseEnvelope and messageSignature");
    free(t);
}

TEST(unknown_format_named)
{
    struct tkm_err err = {0};
    char *t = subst(DSSE_BUNDLE, "bundle.v0.3+json", "bundle.v0.9+json");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EPROTONOSUPPORT);
    ASSERT_STRCONTAINS(err.msg, "application/vnd.dev.sigstore.bundle.v0.9+json");
    free(t);
    tkm_err_clear(&err);
    t = subst(MSG_BUNDLE, "SHA2_256", "SHA2_384");
    ASSERT_EQ(verify_str(t, COSIGN_PUB, IMG, NULL, &err), -EPROTONOSUPPORT);
    ASSERT_STRCONTAINS(err.msg, "SHA2_384");
    free(t);
}

/* ---- bundles built here, signed with a fresh key ------------------------- */

static EVP_PKEY *fresh_key(char **pem)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    ASSERT_NOT_NULL(k);
    BIO *b = BIO_new(BIO_s_mem());
    ASSERT_EQ(PEM_write_bio_PUBKEY(b, k), 1);
    char *p;
    long n = BIO_get_mem_data(b, &p);
    *pem = strndup(p, (size_t)n);
    BIO_free(b);
    return k;
}

static void b64(const void *p, size_t n, struct tkm_buf *out)
{
    ASSERT_OK(tkm_buf_grow(out, 4 * ((n + 2) / 3) + 1));
    int w = EVP_EncodeBlock((unsigned char *)out->data + out->len, p, (int)n);
    out->len += (size_t)w;
}

/* A v0.3 DSSE bundle over statement, signed (PAE) with k. */
static char *dsse_bundle(EVP_PKEY *k, const char *statement, const char *ptype)
{
    struct tkm_buf pae = TKM_BUF_INIT(1 << 20), out = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_printf(&pae, "DSSEv1 %zu %s %zu %s", strlen(ptype), ptype, strlen(statement),
                             statement));
    unsigned char sig[256];
    size_t slen = sizeof sig;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    ASSERT_EQ(EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, k), 1);
    ASSERT_EQ(EVP_DigestSign(c, sig, &slen, (const unsigned char *)pae.data, pae.len), 1);
    EVP_MD_CTX_free(c);
    ASSERT_OK(tkm_buf_puts(&out, "{\"mediaType\":\"application/vnd.dev.sigstore.bundle+json;"
                                 "version=0.2\",\"verificationMaterial\":{\"publicKey\":{\"hint\":"
                                 "\"x\"},\"tlogEntries\":[]},\"dsseEnvelope\":{\"payload\":\""));
    b64(statement, strlen(statement), &out);
    ASSERT_OK(tkm_buf_printf(&out, "\",\"payloadType\":\"%s\",\"signatures\":[{\"sig\":\"", ptype));
    b64(sig, slen, &out);
    ASSERT_OK(tkm_buf_puts(&out, "\",\"keyid\":\"\"}]}}"));
    tkm_buf_release(&pae);
    return out.data;
}

static int verify_built(EVP_PKEY *k, const char *pem, const char *statement, struct tkm_err *err)
{
    char *b = dsse_bundle(k, statement, "application/vnd.in-toto+json");
    int rc = verify_str(b, pem, IMG, NULL, err);
    free(b);
    return rc;
}

#define SUBJ "[{\"name\":\"%s\",\"digest\":{\"sha256\":\"%s\"}}]"

TEST(statement_rules)
{
    char *pem, st[1024];
    EVP_PKEY *k = fresh_key(&pem);
    struct tkm_err err = {0};
    /* v0.2 media type, statement v0.1, a second non-matching subject first */
    snprintf(st, sizeof st,
             "{\"_type\":\"https://in-toto.io/Statement/v0.1\",\"subject\":[{\"digest\":{"
             "\"sha256\":\"%s\"}},{\"digest\":{\"sha256\":\"%s\"}}],\"predicateType\":\"%s\","
             "\"predicate\":{}}",
             &IMG_OTHER[7], &IMG[7], TKM_BUNDLE_PREDICATE_SIGN);
    ASSERT_OK(verify_built(k, pem, st, &err));
    /* an attestation is not an image signature */
    snprintf(st, sizeof st,
             "{\"_type\":\"https://in-toto.io/Statement/v1\",\"subject\":" SUBJ
             ",\"predicateType\":\"https://slsa.dev/provenance/v1\",\"predicate\":{}}",
             "", &IMG[7]);
    ASSERT_EQ(verify_built(k, pem, st, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "attestation (predicateType https://slsa.dev/provenance/v1)");
    /* a subject naming another repository */
    tkm_err_clear(&err);
    snprintf(st, sizeof st,
             "{\"_type\":\"https://in-toto.io/Statement/v1\",\"subject\":" SUBJ
             ",\"predicateType\":\"%s\",\"predicate\":{}}",
             "evil/repo", &IMG[7], TKM_BUNDLE_PREDICATE_SIGN);
    ASSERT_EQ(verify_built(k, pem, st, &err), -EBADMSG);
    ASSERT_STRCONTAINS(err.msg, "names the image evil/repo, not t/a");
    /* ... accepted when the policy allows cross-repository copies */
    {
        char *b = dsse_bundle(k, st, "application/vnd.in-toto+json");
        struct tkm_sig_key key = {pem, strlen(pem)};
        struct tkm_sig_policy pol = {.keys = &key, .nkeys = 1, .allow_cross_repository = 1};
        ASSERT_OK(
            tkm_bundle_verify((const unsigned char *)b, strlen(b), &pol, IMG, "t/a", NULL, &err));
        free(b);
    }
    /* keys equal but for case (Go would match them) */
    tkm_err_clear(&err);
    snprintf(st, sizeof st,
             "{\"_type\":\"https://in-toto.io/Statement/v1\",\"subject\":" SUBJ
             ",\"Subject\":[],\"predicateType\":\"%s\",\"predicate\":{}}",
             "", &IMG[7], TKM_BUNDLE_PREDICATE_SIGN);
    ASSERT_EQ(verify_built(k, pem, st, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "equal but for case");
    /* not an in-toto statement */
    tkm_err_clear(&err);
    ASSERT_EQ(verify_built(k, pem, "{\"critical\":{}}", &err), -EPROTONOSUPPORT);
    EVP_PKEY_free(k);
    free(pem);
}

/* A keyless-looking bundle: a certificate with an email SAN and the Fulcio
 * issuer extension (v2 OID, DER UTF8String holding issuer), self-signed. */
static char *keyless_bundle(const char *issuer)
{
    EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    X509 *x = X509_new();
    ASSERT_NOT_NULL(x);
    X509_set_version(x, 2);
    X509_gmtime_adj(X509_getm_notBefore(x), 0);
    X509_gmtime_adj(X509_getm_notAfter(x), 600);
    X509_set_pubkey(x, k);
    X509_EXTENSION *san =
        X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, "email:dev@example.com");
    ASSERT_NOT_NULL(san);
    X509_add_ext(x, san, -1);
    X509_EXTENSION_free(san);
    ASN1_OBJECT *oid = OBJ_txt2obj("1.3.6.1.4.1.57264.1.8", 1);
    ASN1_UTF8STRING *u = ASN1_UTF8STRING_new();
    ASN1_STRING_set(u, issuer, (int)strlen(issuer));
    unsigned char *uder = NULL;
    int ulen = i2d_ASN1_UTF8STRING(u, &uder);
    ASN1_OCTET_STRING *os = ASN1_OCTET_STRING_new();
    ASN1_OCTET_STRING_set(os, uder, ulen);
    X509_EXTENSION *ie = X509_EXTENSION_create_by_OBJ(NULL, oid, 0, os);
    X509_add_ext(x, ie, -1);
    X509_EXTENSION_free(ie);
    ASN1_OCTET_STRING_free(os);
    ASN1_UTF8STRING_free(u);
    OPENSSL_free(uder);
    ASN1_OBJECT_free(oid);
    ASSERT(X509_sign(x, k, EVP_sha256()) > 0);
    unsigned char *der = NULL;
    int n = i2d_X509(x, &der);
    ASSERT(n > 0);
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_puts(&b, "{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\","
                               "\"verificationMaterial\":{\"certificate\":{\"rawBytes\":\""));
    b64(der, (size_t)n, &b);
    ASSERT_OK(tkm_buf_puts(&b, "\"}},\"messageSignature\":{\"messageDigest\":{\"algorithm\":"
                               "\"SHA2_256\",\"digest\":\"\"},\"signature\":\"\"}}"));
    OPENSSL_free(der);
    X509_free(x);
    EVP_PKEY_free(k);
    return b.data;
}

TEST(keyless_bundle_named_and_refused)
{
    struct tkm_err err = {0};
    char *b = keyless_bundle("https://issuer.example.test");
    ASSERT_EQ(verify_str(b, COSIGN_PUB, IMG, NULL, &err), -ENOTSUP);
    ASSERT_STRCONTAINS(err.msg, "keyless signature by dev@example.com");
    ASSERT_STRCONTAINS(err.msg, "issuer https://issuer.example.test)");
    free(b);
    /* an issuer of 128..255 bytes: DER long-form length */
    char longiss[201];
    memset(longiss, 'a', 200);
    memcpy(longiss, "https://", 8);
    longiss[200] = '\0';
    b = keyless_bundle(longiss);
    tkm_err_clear(&err);
    ASSERT_EQ(verify_str(b, COSIGN_PUB, IMG, NULL, &err), -ENOTSUP);
    ASSERT_STRCONTAINS(err.msg, "(issuer https://aaaaaaaaaaaa");
    ASSERT_STRCONTAINS(err.msg, "aaaa), and the policy has no trusted root");
    free(b);
}

TEST(policy_check)
{
    struct tkm_err err = {0};
    struct tkm_sig_key k = {COSIGN_PUB, strlen(COSIGN_PUB)};
    struct tkm_sig_policy p = {.keys = &k, .nkeys = 1};
    ASSERT_OK(tkm_sig_policy_check(&p, &err));
    struct tkm_sig_policy none = {0};
    ASSERT_EQ(tkm_sig_policy_check(&none, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "nothing to verify signatures with");
    none.mode = TKM_SIG_MODE_DISABLED;
    ASSERT_OK(tkm_sig_policy_check(&none, NULL));
    /* keyless with no identity is not a policy */
    tkm_err_clear(&err);
    struct tkm_sig_policy kl = {.trusted_root = "{}", .trusted_root_len = 2};
    ASSERT_EQ(tkm_sig_policy_check(&kl, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "any signer at all is not a policy");
    struct tkm_sig_identity ids[2] = {{"https://issuer", "a@b", NULL},
                                      {"https://issuer", "x", "^x$"}};
    kl.identities = ids;
    kl.nidentities = 1;
    ASSERT_OK(tkm_sig_policy_check(&kl, &err));
    kl.nidentities = 2;
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_sig_policy_check(&kl, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "identities[1] needs exactly one of subject and subjectRegExp");
    ids[1].subject = NULL;
    ids[1].subject_regexp = "([";
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_sig_policy_check(&kl, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not a valid POSIX extended regular expression");
    ids[1].issuer = NULL;
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_sig_policy_check(&kl, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "identities[1].issuer is required");
    /* a junk key is named by its index */
    struct tkm_sig_key bad = {"junk", 4};
    struct tkm_sig_policy pb = {.keys = &bad, .nkeys = 1};
    tkm_err_clear(&err);
    ASSERT_EQ(tkm_sig_policy_check(&pb, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "keys[0]");
    enum tkm_sig_mode m;
    ASSERT_OK(tkm_sig_mode_parse("Audit", &m));
    ASSERT_EQ(m, TKM_SIG_MODE_AUDIT);
    ASSERT_EQ(tkm_sig_mode_parse("audit", &m), -EINVAL);
}
