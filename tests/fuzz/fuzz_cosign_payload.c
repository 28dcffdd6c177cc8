/*
 * fuzz_cosign_payload.c - lib/trust/cosign on hostile bytes:
 *   1. the input as a .sig manifest (tkm_cosign_sig_layers, tkm_cosign_verify);
 *   2. the input as a signature payload that is validly signed (with a key
 *      made once per process), so the claim parser behind the signature check
 *      is reached too.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/trust/cosign.h>
#include <tkm/util.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define IMG "sha256:1111111111111111111111111111111111111111111111111111111111111111"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    struct tkm_err err = {0};
    struct tkm_cosign_layer *layers = NULL;
    size_t n = 0;
    if (tkm_cosign_sig_layers((const char *)data, size, &layers, &n, &err) == 0)
        free(layers);
    struct tkm_cosign_blob none = {IMG, data, size};
    tkm_cosign_verify((const char *)data, size, &none, 1, pem, strlen(pem), IMG, NULL, &err);

    if (size > TKM_COSIGN_MAX_PAYLOAD)
        return 0;
    unsigned char md[32], sig[256], b64[400];
    unsigned int ml = 0;
    size_t sl = sizeof sig;
    char digest[72], manifest[1024];
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestSignInit(c, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(c, sig, &sl, data, size) != 1 ||
        EVP_Digest(data, size, md, &ml, EVP_sha256(), NULL) != 1)
        abort();
    EVP_MD_CTX_free(c);
    EVP_EncodeBlock(b64, sig, (int)sl);
    memcpy(digest, "sha256:", 7);
    tkm_hex(md, 32, digest + 7);
    int mlen =
        snprintf(manifest, sizeof manifest,
                 "{\"layers\":[{\"mediaType\":\"" TKM_COSIGN_MEDIA_TYPE
                 "\",\"size\":%zu,\"digest\":\"%s\",\"annotations\":{\"" TKM_COSIGN_SIG_ANNOTATION
                 "\":\"%s\"}}]}",
                 size, digest, b64);
    struct tkm_cosign_blob blob = {digest, data, size};
    struct tkm_cosign_result res;
    tkm_err_clear(&err);
    int rc = tkm_cosign_verify(manifest, (size_t)mlen, &blob, 1, pem, strlen(pem), IMG, &res, &err);
    if (rc == -EKEYREJECTED) /* we signed it: the signature must verify */
        abort();
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    return 0;
}
