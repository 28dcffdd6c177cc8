/*
 * digest.h - sha256 content digests ("sha256:<64 hex>") for OCI content.
 *
 * A struct tkm_oci_hasher hashes a stream (a blob as it downloads, a tar as it
 * is written). It is caller-owned (embed it): _init, _update..., _final, and
 * _release in every case (also after _final, also on error paths).
 */
#ifndef TKM_OCI_DIGEST_H
#define TKM_OCI_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>
#include <tkm/oci/ref.h>

struct tkm_oci_hasher {
    void *ctx;      /* EVP_MD_CTX, owned */
    uint64_t bytes; /* bytes hashed so far */
};

int tkm_oci_hasher_init(struct tkm_oci_hasher *h);
int tkm_oci_hasher_update(struct tkm_oci_hasher *h, const void *p, size_t n);
/* Writes "sha256:<hex>" into out (TKM_OCI_DIGEST_LEN + 1 bytes). */
int tkm_oci_hasher_final(struct tkm_oci_hasher *h, char out[TKM_OCI_DIGEST_LEN + 1]);
void tkm_oci_hasher_release(struct tkm_oci_hasher *h);

/* The digest of n bytes at p. */
int tkm_oci_digest_bytes(const void *p, size_t n, char out[TKM_OCI_DIGEST_LEN + 1]);

/* The digest and size of a file (streamed). err names the path. */
int tkm_oci_digest_file(const char *path, char out[TKM_OCI_DIGEST_LEN + 1], uint64_t *size,
                        struct tkm_err *err);

/* The hex part of a valid digest (borrowed from d). */
const char *tkm_oci_digest_hex(const char *d);

#endif
