/*
 * sup_oci.h - synchronous registry calls that only tests make: each runs
 * one operation of lib/oci's asynchronous core (session-int.h) on the
 * private loop of a synchronous client (registry.h) until it reports. The
 * products run the same operations inside their jobs.
 *
 * Ownership: r and every argument are borrowed for the call; out/body are
 * caller-owned buffers (their max caps what is accepted).
 */
#ifndef TKM_TEST_SUP_OCI_H
#define TKM_TEST_SUP_OCI_H

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/registry.h>

/* "https" or "http" (borrowed): the scheme r's session picked. */
const char *sup_oci_scheme(struct tkm_oci_registry *r);

/* Resolves a reference to the manifest's digest: GET and hash the bytes
 * (a Docker-Content-Digest header is never trusted). */
int sup_oci_resolve(struct tkm_oci_registry *r, const char *repo, const char *reference,
                    char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err);

/* Downloads blob d into path (created with O_EXCL, 0644), verifying size and
 * digest while streaming. On failure path does not exist. */
int sup_oci_fetch_blob(struct tkm_oci_registry *r, const char *repo, const struct tkm_oci_desc *d,
                       const char *path, struct tkm_err *err);

/* Downloads a small blob into out, verified. */
int sup_oci_fetch_blob_mem(struct tkm_oci_registry *r, const char *repo,
                           const struct tkm_oci_desc *d, struct tkm_buf *out, struct tkm_err *err);

/* tkm__oci_get_referrers (session-int.h): the merged referrers index into body. */
int sup_oci_get_referrers(struct tkm_oci_registry *r, const char *repo, const char *digest,
                          const char *artifact_type, struct tkm_buf *body, struct tkm_err *err);

#endif
