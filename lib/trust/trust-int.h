/*
 * trust-int.h - helpers shared inside lib/trust (not installed).
 */
#ifndef TKM_TRUST_INT_H
#define TKM_TRUST_INT_H

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdint.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/trust/cosign.h>
#include <tkm/trust/policy.h>

struct tkm_buf;

/* Which failure to report when no signature verified: the higher, the more
 * specific (a claim for another image, then a key mismatch, then an
 * unsupported or malformed signature, then anything else). */
int tkm__trust_rank(int code);

/* The first key (borrowed from v) of an object anywhere in v that has two
 * keys equal but for case (Go's encoding/json matches them
 * case-insensitively), or NULL when there is none. */
const char *tkm__trust_case_dup(json_t *v);

/* 1 when sig verifies over p[0..n) with k and md (NULL for Ed25519), else 0. */
int tkm__trust_sig_ok(EVP_PKEY *k, const EVP_MD *md, const unsigned char *sig, size_t siglen,
                      const unsigned char *p, size_t n);

/* A message signature over a precomputed sha256 digest: 1 when it verifies. */
int tkm__trust_prehash_ok(EVP_PKEY *k, const unsigned char *sig, size_t siglen,
                          const unsigned char *dg, size_t dlen);
/* The certificate's SAN (email or URI) and Fulcio OIDC issuer extension
 * (1.3.6.1.4.1.57264.1.8, else the legacy .1.1), "(no ...)" when absent. */
void tkm__trust_cert_identity(X509 *x, char *san, size_t san_n, char *iss, size_t iss_n);

/* Decodes base64 s into out (reset, with max as its limit); -EINVAL when s is
 * NULL or not base64, -ENOMEM. */
int tkm__trust_b64(const char *s, size_t max, struct tkm_buf *out);

/* ---- trusted_root.json (troot.c) ---- */
struct tkm__tlog {
    EVP_PKEY *key;
    unsigned char id[32]; /* sha256 of the public key DER */
    int64_t start, end;   /* validFor, unix seconds */
};
struct tkm__ca {
    STACK_OF(X509) * chain; /* leaf-most first, the root last */
    int64_t start, end;
};
struct tkm__troot {
    struct tkm__ca *ca;
    size_t nca;
    struct tkm__tlog *tlog, *ctlog;
    size_t ntlog, nctlog;
};
/* Parses trusted_root.json bytes (borrowed) into t (release with
 * tkm__troot_release, also after a failure). */
int tkm__troot_load(const char *data, size_t len, struct tkm__troot *t, struct tkm_err *err);
void tkm__troot_release(struct tkm__troot *t);
const struct tkm__tlog *tkm__troot_log(const struct tkm__tlog *logs, size_t n,
                                       const unsigned char id[32]);

/* ---- keyless verification (sigstore.c) ---- */
struct tkm__signed {
    const unsigned char *sig; /* the signature (the first of a DSSE envelope) */
    size_t sig_len;
    const unsigned char *msg; /* the DSSE PAE, or the 32-byte message digest */
    size_t msg_len;
    int prehashed;                /* msg is a digest (message signature) */
    const unsigned char *payload; /* the DSSE payload, NULL for a message signature */
    size_t payload_len;
};
/* Verifies a keyless bundle's verification material (borrowed JSON): the
 * certificate chain against the trusted root at the log's integrated time,
 * the transparency log entry (SET and/or inclusion proof with its signed
 * checkpoint, and that its body records this signature), the signature with
 * the certificate's key, and the identity policy. On success res gets the
 * identity, issuer and log index. */
int tkm__keyless_verify(json_t *material, const struct tkm__signed *s,
                        const struct tkm_sig_policy *pol, struct tkm_sig_result *res,
                        struct tkm_err *err);

#endif
