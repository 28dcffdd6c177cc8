/*
 * keys.h - OpenSSL key helpers shared by lib/trust (cosign and TCE).
 *
 * Keys are EVP_PKEY, owned by the caller (EVP_PKEY_free). PEM bytes are
 * borrowed. Messages name the key by its id: "sha256:" + the first 16 hex
 * digits of the sha256 of its SubjectPublicKeyInfo DER, and its algorithm.
 */
#ifndef TKM_TRUST_KEYS_H
#define TKM_TRUST_KEYS_H

#include <openssl/evp.h>
#include <stddef.h>

#include <tkm/err.h>

/* A public key from PEM ("PUBLIC KEY", SubjectPublicKeyInfo); -EINVAL if none. */
int tkm_trust_load_pubkey(const char *pem, size_t len, EVP_PKEY **out, struct tkm_err *err);
/* A private key from PEM (PKCS#8 or traditional, unencrypted). */
int tkm_trust_load_privkey(const char *pem, size_t len, EVP_PKEY **out, struct tkm_err *err);
/* Reads a whole small file (at most max bytes) into a NUL-terminated owned buffer. */
int tkm_trust_read_file(const char *path, size_t max, char **data, size_t *len,
                        struct tkm_err *err);
/* "sha256:<16 hex>" */
void tkm_trust_key_id(EVP_PKEY *k, char out[40]);
/* "ECDSA P-256", "RSA 2048", "Ed25519", ... */
void tkm_trust_key_desc(EVP_PKEY *k, char *out, size_t n);
/* The digest cosign uses with this key (NULL for Ed25519); -EINVAL for a key
 * type or curve that is not supported (err names it). */
int tkm_trust_cosign_md(EVP_PKEY *k, const EVP_MD **md, struct tkm_err *err);

#endif
