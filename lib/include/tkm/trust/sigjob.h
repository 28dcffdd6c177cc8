/*
 * sigjob.h - the signature search of an image as a job on a registry
 * session (see oci/session.h): every registry request on the caller's loop,
 * the same handle, cancel and callback as tkm_oci_job_resolve and the other
 * image jobs. tkm_sig_verify_registry (bundle.h) is this job run on the
 * synchronous client's private loop.
 *
 * The search, in order: the referrers API (GET /v2/<repo>/referrers/<digest>,
 * every page, see tkm__oci_get_referrers in lib/oci/session-int.h; entries whose artifactType
 * is a Sigstore bundle, at most TKM_OCI_REFERRERS_MAX tried, and the message
 * says when that cap was hit), or, when the registry has no referrers API,
 * the index tagged "sha256-<hex>"; then the classic "sha256-<hex>.sig". The
 * first signature that satisfies the policy wins. When nothing is found
 * anywhere, a HEAD of the image manifest tells an unsigned image
 * (-ENOENT) from one the registry does not have (TKM_SIG_ENOIMAGE).
 *
 * What runs where: requests, token fetches and retry waits on the loop (the
 * session's calls); the signature checks themselves on the loop too, one
 * bundle per callback (about 0.5 ms per keyed signature, 1.6 ms for a
 * keyless bundle: docs/internals.md has the numbers).
 */
#ifndef TKM_TRUST_SIGJOB_H
#define TKM_TRUST_SIGJOB_H

#include <errno.h>

#include <tkm/err.h>
#include <tkm/oci/session.h>
#include <tkm/trust/policy.h>

/* The search's own codes besides the errno values tkm_sig_reason() lists:
 * the policy is not one (tkm_sig_policy_check refused it), and the image
 * manifest itself is not in the registry. */
#define TKM_SIG_EPOLICY  (-ENOKEY)
#define TKM_SIG_ENOIMAGE (-ENXIO)

/*
 * Starts the search for repo@image_digest ("sha256:<64 hex>") on ses.
 * repo, image_digest and the policy (keys, trusted root, identities) are
 * copied: the caller's may go away once this returns. *out (optional) is
 * borrowed until cb returns, for tkm_oci_job_cancel().
 *
 * Start failures (cb never called): -EINVAL (no session, repository or
 * callback, a digest that is not one), TKM_SIG_EPOLICY (err names the
 * policy field), -ESHUTDOWN (the session is closing), -ENOMEM.
 *
 * Then cb runs exactly once from the loop (never from inside this function
 * or tkm_oci_job_cancel), as session.h says: rc 0 and res->detail a
 * struct tkm_sig_result (borrowed until cb returns: copy it to keep it)
 * saying which signature verified and where; or rc < 0 and err one sentence
 * naming the places looked at or the signature that came closest:
 *   -ENOENT            no signature anywhere (the places looked at named);
 *   TKM_SIG_ENOIMAGE   nothing found, and the image manifest is not there;
 *   -EKEYREJECTED, -EBADMSG, -ENOTSUP, -EPROTONOSUPPORT, -EINVAL
 *                      the most telling failure of the signatures found
 *                      (see tkm_bundle_verify, tkm_cosign_verify), with how
 *                      many there were;
 *   a registry error   from lib/oci (-EACCES 401, -EPERM 403, -EIO 5xx,
 *                      -ECONNREFUSED, -ETIMEDOUT, ...) that stopped the
 *                      search (a referrer that cannot be fetched is counted
 *                      as a failed signature and the search goes on);
 *   -ECANCELED         after tkm_oci_job_cancel() or tkm_oci_session_close(, NULL, NULL).
 * tkm_sig_reason(rc) names each for Kubernetes conditions.
 */
int tkm_sig_job_verify(struct tkm_oci_session *ses, const char *repo, const char *image_digest,
                       const struct tkm_sig_policy *pol, tkm_oci_job_cb cb, void *data,
                       struct tkm_oci_job **out, struct tkm_err *err);

/*
 * A stable CamelCase reason for a result code of tkm_sig_job_verify or
 * tkm_sig_verify_registry (a static string): "Verified" (0), "NoSignature",
 * "ImageNotFound", "KeyMismatch", "SignatureForOtherImage",
 * "UnsupportedSignature", "MalformedSignature", "RegistryUnauthorized",
 * "RegistryUnreachable", "RegistryNotAllowed", "PullDeadlineExceeded" (a signature blob's
 * download deadline), "InvalidPolicy", "Cancelled", "InternalError"
 * (anything else). The table is in docs/security.md.
 */
const char *tkm_sig_reason(int rc);

#endif
