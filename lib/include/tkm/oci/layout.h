/*
 * layout.h - OCI image-layout directories (image-spec image-layout.md).
 *
 *   DIR/oci-layout        {"imageLayoutVersion":"1.0.0"}
 *   DIR/index.json        an image index naming the manifests, each with the
 *                         annotation org.opencontainers.image.ref.name = tag
 *   DIR/blobs/sha256/HEX  every blob: manifests, configs, layers
 *
 * Writers are atomic per file (temporary file, fsync, rename), so an
 * interrupted write leaves either the old or the new content. Readers verify
 * the digest and size of every blob they return. Strings are borrowed.
 */
#ifndef TKM_OCI_LAYOUT_H
#define TKM_OCI_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/oci/manifest.h>

/* Creates dir (and parents' last level), blobs/sha256 and oci-layout; an
 * existing layout is reused. */
int tkm_oci_layout_init(const char *dir, struct tkm_err *err);

/* The path of a blob into out; -ENOSPC when it does not fit. */
int tkm_oci_layout_blob_path(const char *dir, const char *digest, char *out, size_t n);

/* Writes n bytes as a blob; digest (out) gets its digest. */
int tkm_oci_layout_put_blob(const char *dir, const void *p, size_t n,
                            char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err);

/* Moves the file at src (same filesystem) into the layout as blob digest
 * (the caller computed it). */
int tkm_oci_layout_take_blob(const char *dir, const char *src, const char *digest,
                             struct tkm_err *err);

/* Reads a small blob into out (its max caps it) and checks size and digest. */
int tkm_oci_layout_read_blob(const char *dir, const struct tkm_oci_desc *d, struct tkm_buf *out,
                             struct tkm_err *err);

/* Checks a (large) blob file's size and digest by streaming it. */
int tkm_oci_layout_verify_blob(const char *dir, const struct tkm_oci_desc *d, struct tkm_err *err);

/* Adds (or replaces, by ref name) the manifest d in index.json under tag. */
int tkm_oci_layout_add_manifest(const char *dir, const struct tkm_oci_desc *d, const char *tag,
                                struct tkm_err *err);

/* Finds the manifest named tag in index.json (NULL: the only one). A tag
 * that is a digest (sha256:<hex>) names a manifest blob of the layout
 * instead (an image index's entry): its descriptor comes from the verified
 * blob. */
int tkm_oci_layout_find(const char *dir, const char *tag, struct tkm_oci_desc *out,
                        struct tkm_err *err);

/* 1 when dir looks like an image layout (has oci-layout). */
int tkm_oci_layout_is(const char *dir);

#endif
