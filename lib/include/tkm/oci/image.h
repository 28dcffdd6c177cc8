/*
 * image.h - whole-image transfers between a registry and an OCI layout.
 *
 * Pull: resolve the reference (GET the manifest and hash the bytes: that
 * digest pins everything after), follow an index by digest to the
 * linux/<host arch> manifest (attestations skipped; a single manifest is
 * taken as is), fetch and verify the config and every layer into the layout
 * (blobs already present are verified instead of fetched), then tag the
 * manifest in index.json. A layout that does not exist yet is staged in a
 * sibling directory (.<name>.pull-XXXXXX) and renamed into place at the
 * end, so a failed pull leaves no directory behind.
 *
 * Push: read the tagged manifest from a layout, verify each blob, upload
 * config and layers (skipping those the registry has), then PUT the manifest
 * under the reference's tag (or its digest).
 *
 * Inspect and pull are the jobs of session.h run to completion on a private
 * loop (the same code a daemon runs on its own loop); push is a sequence of
 * synchronous registry calls (registry.h). Strings are borrowed.
 */
#ifndef TKM_OCI_IMAGE_H
#define TKM_OCI_IMAGE_H

#include <tkm/err.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/ref.h>
#include <tkm/oci/registry.h>

struct tkm_oci_pull_result {
    char index_digest[TKM_OCI_DIGEST_LEN + 1]; /* "" unless the reference named an index */
    struct tkm_oci_desc manifest;              /* the image manifest pulled */
    struct tkm_oci_manifest parsed;            /* owned: release with _pull_result_release */
    struct tkm_oci_config config;              /* owned */
    uint64_t bytes_fetched;                    /* layer bytes downloaded (not reused) */
};

/* Pulls ref into layout_dir (created if needed, atomically; an existing
 * layout gets the image added) under tag (NULL: the reference's tag, else
 * "latest"). layers = 0 fetches manifest and config only (inspection).
 * ro->cancel (registry.h), when it becomes nonzero, stops it within about
 * 50 ms: -ECANCELED, with nothing of it left in a new layout's place. */
int tkm_oci_pull(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                 const char *layout_dir, const char *tag, int layers,
                 struct tkm_oci_pull_result *res, struct tkm_err *err);
void tkm_oci_pull_result_release(struct tkm_oci_pull_result *res);

/* Like tkm_oci_pull without a layout: resolves ref and fetches and verifies
 * its manifest and config only (labels, layer descriptors, digest pinning). */
int tkm_oci_inspect(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    struct tkm_oci_pull_result *res, struct tkm_err *err);

/* Pushes the manifest tagged tag (NULL: the only one) in layout_dir to ref.
 * digest (optional) gets the manifest digest; *uploaded (optional) the
 * number of blobs actually uploaded. ro->cancel stops it within about 50 ms,
 * even in a request the registry never answers: -ECANCELED (registry.h). */
int tkm_oci_push(const char *layout_dir, const char *tag, const struct tkm_oci_ref *ref,
                 const struct tkm_oci_registry_opts *ro, char digest[TKM_OCI_DIGEST_LEN + 1],
                 int *uploaded, struct tkm_err *err);

/* Reads and verifies the manifest and config tagged tag in a layout. */
int tkm_oci_layout_load(const char *layout_dir, const char *tag, struct tkm_oci_pull_result *res,
                        struct tkm_err *err);

#endif
