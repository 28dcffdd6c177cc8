/*
 * policy.h - what an image's signature must satisfy, and which signature did.
 *
 * A struct tkm_sig_policy mirrors the CRDs' signaturePolicy and the
 * ConfigMap tkm-config (docs/security.md). All its pointers are borrowed: they
 * must stay valid for the call they are passed to (the async jobs copy them).
 *
 *   mode                   Enforce (refuse unsigned/unverified images), Audit
 *                          (verify and report, never refuse), Disabled.
 *   keys                   cosign public keys (PEM "PUBLIC KEY"); a signature
 *                          by any one of them is accepted.
 *   trusted_root           keyless: Sigstore trusted_root.json bytes.
 *   identities             keyless: [{issuer, subject | subject_regexp}].
 *   allow_cross_repository the classic payload's docker-reference may name
 *                          another repository (the image was copied on purpose).
 *
 * mode is for the caller (the verify functions always verify; a caller in
 * Audit reports a failure and goes on; in Disabled it does not call them).
 *
 * tkm_sig_policy_check() refuses a policy that is not one: nothing to trust,
 * keyless with no identity ("any signer at all is not a policy"), an identity
 * without an issuer or without exactly one of subject / subject_regexp, a
 * regexp that does not compile.
 */
#ifndef TKM_TRUST_POLICY_H
#define TKM_TRUST_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>

enum tkm_sig_mode { TKM_SIG_MODE_ENFORCE = 0, TKM_SIG_MODE_AUDIT, TKM_SIG_MODE_DISABLED };

struct tkm_sig_key {
    const char *pem; /* borrowed */
    size_t len;
};

struct tkm_sig_identity {
    const char *issuer;         /* exact OIDC issuer URL (required) */
    const char *subject;        /* exact SAN (email or URI), or NULL */
    const char *subject_regexp; /* POSIX extended regexp, anchored, or NULL */
};

struct tkm_sig_policy {
    enum tkm_sig_mode mode;
    const struct tkm_sig_key *keys; /* borrowed array of nkeys */
    size_t nkeys;
    const char *trusted_root; /* borrowed trusted_root.json bytes, or NULL */
    size_t trusted_root_len;
    const struct tkm_sig_identity *identities; /* borrowed array */
    size_t nidentities;
    int allow_cross_repository;
};

/* 0, or -EINVAL with err naming the field (keys[i], identities[i].issuer...). */
int tkm_sig_policy_check(const struct tkm_sig_policy *p, struct tkm_err *err);
/* "Enforce", "Audit", "Disabled" -> mode; -EINVAL for anything else. */
int tkm_sig_mode_parse(const char *s, enum tkm_sig_mode *out);

/* Where a signature was found. */
enum tkm_sig_source {
    TKM_SIG_SRC_REFERRERS = 0, /* GET /v2/<repo>/referrers/<digest> */
    TKM_SIG_SRC_TAG_SCHEMA,    /* the index tagged "sha256-<hex>" (referrers fallback) */
    TKM_SIG_SRC_SIG_TAG,       /* the classic manifest tagged "sha256-<hex>.sig" */
    TKM_SIG_SRC_BYTES,         /* handed in by the caller */
};

enum tkm_sig_format {
    TKM_SIG_FMT_SIMPLESIGNING = 0, /* cosign classic payload + signature annotation */
    TKM_SIG_FMT_BUNDLE_DSSE,       /* Sigstore bundle, DSSE envelope (in-toto statement) */
    TKM_SIG_FMT_BUNDLE_MESSAGE,    /* Sigstore bundle, message signature over the digest */
};

/* Which signature satisfied the policy. Plain arrays, no pointers. */
struct tkm_sig_result {
    enum tkm_sig_source source;
    enum tkm_sig_format format;
    char location[640];         /* "repo@sha256:.. layer 0", "repo:sha256-<hex>.sig layer 1" */
    char bundle_media_type[96]; /* "" for simplesigning */
    char key_id[40];            /* "sha256:<16 hex>" of the key that verified, "" keyless */
    char key_desc[80];          /* "ECDSA P-256" */
    char identity[512];         /* keyless: the certificate's SAN */
    char issuer[512];           /* keyless: the certificate's OIDC issuer */
    int64_t tlog_index;         /* -1 when no transparency log entry was checked */
    char docker_reference[512]; /* classic payloads: critical.identity.docker-reference */
    size_t found;               /* signatures found on the image (all sources) */
};

/* Static names: "referrers", "tag schema", ".sig tag", "bytes"; "cosign
 * simplesigning", "Sigstore bundle (DSSE)", "Sigstore bundle (message signature)". */
const char *tkm_sig_source_name(enum tkm_sig_source s);
const char *tkm_sig_format_name(enum tkm_sig_format f);

#endif
