/*
 * bundle.h - Sigstore bundles (cosign v3's default signature format) and the
 * discovery of an image's signatures the way cosign v3 finds them.
 *
 * Bundle media types read: "application/vnd.dev.sigstore.bundle+json;
 * version=0.1", "...;version=0.2", "...;version=0.3" and
 * "application/vnd.dev.sigstore.bundle.v0.3+json". Content: a DSSE envelope
 * (payloadType application/vnd.in-toto+json, an in-toto Statement v1 or v0.1
 * whose predicateType is https://sigstore.dev/cosign/sign/v1 and one of whose
 * subjects has digest sha256 == the image digest; the signature is over the
 * DSSE PAE "DSSEv1 <len> <type> <len> <payload>"), or a message signature
 * (messageDigest SHA2_256 == the image digest, the signature over that
 * digest). Verification follows verify-before-parse: the envelope's
 * signature is checked before its payload is read.
 *
 * With public keys: the signature must verify with one of the policy's keys
 * (as cosign verify --key K --insecure-ignore-tlog: tlog entries are not
 * required). Bundles whose verification material is a certificate (keyless)
 * are recognised and refused with -ENOTSUP naming the certificate's identity:
 * keyless verification against a trusted root is not implemented yet.
 *
 * The JSON is read strictly (JSON_REJECT_DUPLICATES; unknown members in the
 * bundle, verificationMaterial, dsseEnvelope and messageSignature objects
 * are errors, as protojson's; in the statement, keys equal but for case are
 * refused). Limits: TKM_BUNDLE_MAX bytes, 16 DSSE signatures, 8 subjects.
 */
#ifndef TKM_TRUST_BUNDLE_H
#define TKM_TRUST_BUNDLE_H

#include <stddef.h>

#include <tkm/err.h>
#include <tkm/trust/policy.h>

#define TKM_BUNDLE_MAX            (256 * 1024)
#define TKM_BUNDLE_MEDIA_TYPE_V03 "application/vnd.dev.sigstore.bundle.v0.3+json"
#define TKM_BUNDLE_MEDIA_PREFIX   "application/vnd.dev.sigstore.bundle"
#define TKM_BUNDLE_PREDICATE_SIGN "https://sigstore.dev/cosign/sign/v1"

/*
 * Verifies one bundle (borrowed bytes) against the policy for the image
 * image_digest ("sha256:<hex>"). repository ("host/repo", borrowed, may be
 * NULL) is used only when the statement's subject names an image. On success
 * res (may be NULL) says which key verified and the format; res->source is
 * left TKM_SIG_SRC_BYTES. Errors (err says which, naming the key by id):
 *   -EINVAL          malformed bundle / statement;
 *   -EPROTONOSUPPORT a media type, version or content tkm does not read;
 *   -ENOTSUP         a keyless bundle (certificate) while keyless is not available;
 *   -EKEYREJECTED    the signature does not verify with any policy key;
 *   -EBADMSG         verified, but for another image or not an image signature.
 */
int tkm_bundle_verify(const unsigned char *bundle, size_t len, const struct tkm_sig_policy *pol,
                      const char *image_digest, const char *repository, struct tkm_sig_result *res,
                      struct tkm_err *err);

/*
 * The signature search of sigjob.h (tkm_sig_job_verify: the same order,
 * limits, messages and codes), run to the end on r's private loop; never
 * call it on a daemon's loop thread. On success res (may be NULL) says which
 * signature satisfied pol and where. r, strings and pol borrowed.
 */
struct tkm_oci_registry;
int tkm_sig_verify_registry(struct tkm_oci_registry *r, const char *repo, const char *image_digest,
                            const struct tkm_sig_policy *pol, struct tkm_sig_result *res,
                            struct tkm_err *err);

#endif
