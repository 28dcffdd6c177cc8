/*
 * cosign.h - key-based verification of cosign's classic signature format.
 *
 * A signed image D has, in the same repository, a manifest tagged
 * "sha256-<hex of D>.sig" (tkm_cosign_sig_tag). Each of its layers with
 * mediaType application/vnd.dev.cosign.simplesigning.v1+json is one
 * signature: the layer blob is the payload (a small JSON document) and the
 * annotation dev.cosignproject.cosign/signature holds the base64 signature of
 * the payload bytes.
 *
 * tkm_cosign_verify() is a pure function over bytes (no network): the .sig
 * manifest, the payload blobs the caller fetched (tkm_cosign_sig_layers says
 * which), a PEM public key, and the image digest. Per layer, in this order:
 *   1. mediaType, digest syntax, size <= 64 KiB (checked before any fetch);
 *   2. payload bytes: exact size and sha256 == the layer digest;
 *   3. signature: base64 decode, EVP_DigestVerify over the raw payload bytes
 *      (ECDSA P-256/SHA-256, P-384/SHA-384, P-521/SHA-512, DER signatures;
 *      RSA PKCS#1 v1.5/SHA-256; Ed25519), success only when it returns 1;
 *   4. only then the payload is parsed (jansson, JSON_REJECT_DUPLICATES, and
 *      keys that differ only in case are rejected, because Go's decoder
 *      matches them case-insensitively): critical.type must be
 *      "cosign container image signature" and
 *      critical.image.docker-manifest-digest must equal D exactly.
 * The image is verified when any layer passes. docker-reference is reported,
 * not checked (the cosign spec ignores it).
 */
#ifndef TKM_TRUST_COSIGN_H
#define TKM_TRUST_COSIGN_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>

#define TKM_COSIGN_MEDIA_TYPE     "application/vnd.dev.cosign.simplesigning.v1+json"
#define TKM_COSIGN_SIG_ANNOTATION "dev.cosignproject.cosign/signature"
#define TKM_COSIGN_CLAIM_TYPE     "cosign container image signature"
#define TKM_COSIGN_MAX_PAYLOAD    (64 * 1024)
#define TKM_COSIGN_MAX_LAYERS     64
#define TKM_COSIGN_MAX_MANIFEST   (1024 * 1024)

/* out gets "sha256-<hex>.sig" for "sha256:<hex>"; -EINVAL for a bad digest. */
int tkm_cosign_sig_tag(const char *image_digest, char out[80]);

struct tkm_cosign_layer {
    char digest[72]; /* "sha256:<hex>" of the payload blob */
    uint64_t size;
};

/* Lists the signature layers of a .sig manifest (borrowed bytes), after the
 * step-1 checks: *layers is owned (free()), *n entries. -EINVAL when the
 * manifest is malformed or has more than TKM_COSIGN_MAX_LAYERS layers,
 * -E2BIG for a payload over 64 KiB, -ENOENT when no layer is a signature. */
int tkm_cosign_sig_layers(const char *manifest, size_t len, struct tkm_cosign_layer **layers,
                          size_t *n, struct tkm_err *err);

/* A fetched payload: all borrowed. */
struct tkm_cosign_blob {
    const char *digest;
    const unsigned char *data;
    size_t len;
};

struct tkm_cosign_result {
    size_t layer;               /* index of the layer that verified */
    char key_id[40];            /* "sha256:<first 16 hex of the SPKI hash>" */
    char docker_reference[512]; /* critical.identity.docker-reference, "" if none */
};

/*
 * Returns 0 when a signature layer verifies with the key and claims
 * image_digest. Otherwise a negative code and err says why, naming the
 * key/digests, e.g. "signature does not verify with key sha256:ab12.. (ECDSA
 * P-256)" or "signature is for sha256:X, image is sha256:Y". Codes: -EINVAL
 * malformed input or key, -ENOENT no signature layers, -EKEYREJECTED a
 * signature that does not verify, -EBADMSG a verified payload whose claims do
 * not match (or a payload whose digest/size is wrong).
 */
int tkm_cosign_verify(const char *manifest, size_t manifest_len,
                      const struct tkm_cosign_blob *blobs, size_t nblobs, const char *pubkey_pem,
                      size_t pem_len, const char *image_digest, struct tkm_cosign_result *res,
                      struct tkm_err *err);

#endif
