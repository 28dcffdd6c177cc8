/*
 * keys.c - OpenSSL key helpers for lib/trust (see keys.h).
 */
#include <tkm/trust/keys.h>

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/util.h>

static const char *ossl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "no PEM key found";
}

/* One PEM key (priv: a private key) from memory into *out (owned). */
static int load_key(const char *pem, size_t len, int priv, EVP_PKEY **out, struct tkm_err *err)
{
    *out = NULL;
    if (len > INT32_MAX)
        return tkm_err_set(err, -EINVAL, "%s key: too large", priv ? "private" : "public");
    BIO *b = BIO_new_mem_buf(pem, (int)len);
    if (!b)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    ERR_clear_error();
    /* an empty passphrase callback: encrypted keys fail instead of prompting */
    *out = priv ? PEM_read_bio_PrivateKey(b, NULL, NULL, (void *)"")
                : PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
    BIO_free(b);
    if (!*out && !priv && memmem(pem, len, "PRIVATE KEY-----", 16)) {
        ERR_clear_error();
        return tkm_err_set(err, -EINVAL,
                           "this is a private key; give the public key (-----BEGIN "
                           "PUBLIC KEY-----)");
    }
    if (!*out) {
        int rc = tkm_err_set(err, -EINVAL, "%s: %s",
                             priv ? "not an unencrypted PEM private key"
                                  : "not a PEM public key (-----BEGIN PUBLIC KEY-----)",
                             ossl_reason());
        ERR_clear_error();
        return rc;
    }
    return 0;
}

int tkm_trust_load_pubkey(const char *pem, size_t len, EVP_PKEY **out, struct tkm_err *err)
{
    return load_key(pem, len, 0, out, err);
}

int tkm_trust_load_privkey(const char *pem, size_t len, EVP_PKEY **out, struct tkm_err *err)
{
    return load_key(pem, len, 1, out, err);
}

int tkm_trust_read_file(const char *path, size_t max, char **data, size_t *len, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(max);
    *data = NULL;
    *len = 0;
    int rc = tkm_read_file(path, max, &b, "key", err);
    if (rc == 0 && !(*data = tkm_buf_detach(&b, len)))
        rc = tkm_err_set(err, -ENOMEM, "out of memory reading %s", path);
    tkm_buf_release(&b);
    return rc;
}

void tkm_trust_key_id(EVP_PKEY *k, char out[40])
{
    unsigned char *der = NULL, md[32];
    char hex[65];
    int n = i2d_PUBKEY(k, &der);
    unsigned int mdlen = 0;
    if (n <= 0 || EVP_Digest(der, (size_t)n, md, &mdlen, EVP_sha256(), NULL) != 1) {
        snprintf(out, 40, "(unknown key)");
    } else {
        tkm_hex(md, 8, hex);
        snprintf(out, 40, "sha256:%.16s", hex);
    }
    OPENSSL_free(der);
}

static const char *curve_name(EVP_PKEY *k, char *buf, size_t n)
{
    size_t got = 0;
    if (EVP_PKEY_get_utf8_string_param(k, OSSL_PKEY_PARAM_GROUP_NAME, buf, n, &got) != 1)
        return "unknown curve";
    return buf;
}

void tkm_trust_key_desc(EVP_PKEY *k, char *out, size_t n)
{
    char cv[64];
    switch (EVP_PKEY_get_base_id(k)) {
    case EVP_PKEY_EC: {
        const char *c = curve_name(k, cv, sizeof cv);
        const char *nice = strcmp(c, "prime256v1") == 0  ? "P-256"
                           : strcmp(c, "secp384r1") == 0 ? "P-384"
                           : strcmp(c, "secp521r1") == 0 ? "P-521"
                                                         : c;
        snprintf(out, n, "ECDSA %s", nice);
        break;
    }
    case EVP_PKEY_RSA:
        snprintf(out, n, "RSA %d", EVP_PKEY_get_bits(k));
        break;
    case EVP_PKEY_ED25519:
        snprintf(out, n, "Ed25519");
        break;
    default:
        snprintf(out, n, "%s", EVP_PKEY_get0_type_name(k) ? EVP_PKEY_get0_type_name(k) : "?");
    }
}

int tkm_trust_cosign_md(EVP_PKEY *k, const EVP_MD **md, struct tkm_err *err)
{
    char cv[64], desc[80];
    switch (EVP_PKEY_get_base_id(k)) {
    case EVP_PKEY_EC: {
        const char *c = curve_name(k, cv, sizeof cv);
        if (strcmp(c, "prime256v1") == 0)
            *md = EVP_sha256();
        else if (strcmp(c, "secp384r1") == 0)
            *md = EVP_sha384();
        else if (strcmp(c, "secp521r1") == 0)
            *md = EVP_sha512();
        else
            return tkm_err_set(err, -EINVAL,
                               "ECDSA key on curve %s is not supported (P-256, P-384, P-521 are)",
                               c);
        return 0;
    }
    case EVP_PKEY_RSA:
        if (EVP_PKEY_get_bits(k) < 2048)
            return tkm_err_set(err, -EINVAL, "RSA key of %d bits is too short (2048 minimum)",
                               EVP_PKEY_get_bits(k));
        *md = EVP_sha256();
        return 0;
    case EVP_PKEY_ED25519:
        *md = NULL;
        return 0;
    default:
        tkm_trust_key_desc(k, desc, sizeof desc);
        return tkm_err_set(err, -EINVAL, "%s keys are not supported", desc);
    }
}
