/*
 * fuzz_bundle.c - lib/trust/bundle on hostile bytes:
 *   1. the input as a Sigstore bundle (tkm_bundle_verify with a key policy);
 *   2. the input as the in-toto statement of a DSSE bundle that is validly
 *      signed (with a key made once per process), so the statement parser
 *      behind the signature check is reached too;
 *   3. the input as a bundle under a keyless policy (a real test trusted
 *      root), and as the trusted root for a real keyless bundle, so the
 *      certificate, tlog entry, proof, checkpoint, SCT and trusted-root
 *      parsers are reached.
 */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/trust/bundle.h>

#include "fuzz_bundle_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define IMG "sha256:ca5028e4e017430615443cd0ec724e48340e283e2c8a7cbf98f83647ad38b440"
#define PT  "application/vnd.in-toto+json"

static EVP_PKEY *key;
static char *pem;

static void setup(void)
{
    if (key)
        return;
    key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    BIO *b = BIO_new(BIO_s_mem());
    if (!key || !b || PEM_write_bio_PUBKEY(b, key) != 1)
        abort();
    char *p;
    long n = BIO_get_mem_data(b, &p);
    pem = strndup(p, (size_t)n);
    BIO_free(b);
}

static void b64(struct tkm_buf *out, const void *p, size_t n)
{
    if (tkm_buf_grow(out, 4 * ((n + 2) / 3) + 1) != 0)
        abort();
    out->len += (size_t)EVP_EncodeBlock((unsigned char *)out->data + out->len, p, (int)n);
}

/* A v0.3 bundle whose DSSE envelope carries data as its payload, signed. */
static void signed_bundle(const uint8_t *data, size_t size, struct tkm_buf *out)
{
    struct tkm_buf pae = TKM_BUF_INIT(1 << 20);
    unsigned char sig[256];
    size_t slen = sizeof sig;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (tkm_buf_printf(&pae, "DSSEv1 %zu %s %zu ", strlen(PT), PT, size) != 0 ||
        tkm_buf_append(&pae, data, size) != 0 || !c ||
        EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(c, sig, &slen, (const unsigned char *)pae.data, pae.len) != 1)
        abort();
    EVP_MD_CTX_free(c);
    tkm_buf_puts(out, "{\"mediaType\":\"" TKM_BUNDLE_MEDIA_TYPE_V03 "\",\"verificationMaterial\":"
                      "{\"publicKey\":{\"hint\":\"\"}},\"dsseEnvelope\":{\"payload\":\"");
    b64(out, data, size);
    tkm_buf_puts(out, "\",\"payloadType\":\"" PT "\",\"signatures\":[{\"sig\":\"");
    b64(out, sig, slen);
    tkm_buf_puts(out, "\"}]}}");
    tkm_buf_release(&pae);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    struct tkm_err err = {0};
    struct tkm_sig_key k = {pem, strlen(pem)};
    struct tkm_sig_policy pol = {.keys = &k, .nkeys = 1};
    struct tkm_sig_result res;
    tkm_bundle_verify(data, size, &pol, IMG, "t/a", &res, &err);
    struct tkm_sig_identity id = {"https://issuer.example.test", NULL, ".*"};
    struct tkm_sig_policy kl = {.trusted_root = KL_ROOT,
                                .trusted_root_len = sizeof KL_ROOT - 1,
                                .identities = &id,
                                .nidentities = 1};
    tkm_err_clear(&err);
    tkm_bundle_verify(data, size, &kl, IMG, "t/a", &res, &err);
    kl.trusted_root = (const char *)data;
    kl.trusted_root_len = size;
    tkm_err_clear(&err);
    tkm_bundle_verify((const unsigned char *)KL_BUNDLE, sizeof KL_BUNDLE - 1, &kl, IMG, "t/a", &res,
                      &err);
    if (size > 64 * 1024)
        return 0;
    struct tkm_buf b = TKM_BUF_INIT(1 << 20);
    signed_bundle(data, size, &b);
    tkm_err_clear(&err);
    tkm_bundle_verify((const unsigned char *)b.data, b.len, &pol, IMG, "t/a", &res, &err);
    tkm_buf_release(&b);
    return 0;
}
