/*
 * manifest.h - OCI and Docker v2 manifests, indexes and image configs.
 *
 * Parsing is strict where it guards integrity and tolerant elsewhere:
 *   - the manifest's "mediaType" (when present) must equal the Content-Type it
 *     was served with (CVE-2021-41190); when absent, the Content-Type decides;
 *     an index carrying "layers" or a manifest carrying "manifests" is rejected;
 *   - Docker schema 1 is rejected with a message that says so;
 *   - manifests and configs are capped at TKM_OCI_MANIFEST_MAX bytes, JSON with
 *     duplicate keys is rejected, descriptors need a valid sha256 digest and a
 *     size, unknown fields are ignored.
 * The digest of a manifest is the sha256 of its raw bytes, computed here.
 *
 * Structs are caller-owned (embed them), filled by _parse and emptied by
 * _release (safe on a zeroed or released struct). Strings inside are fixed
 * arrays, so descriptors can be copied by value.
 */
#ifndef TKM_OCI_MANIFEST_H
#define TKM_OCI_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>
#include <tkm/oci/ref.h>

#define TKM_OCI_MANIFEST_MAX (4u << 20) /* 4 MiB, as containerd */
#define TKM_OCI_DESCS_MAX    4096

#define TKM_OCI_MT_MANIFEST      "application/vnd.oci.image.manifest.v1+json"
#define TKM_OCI_MT_INDEX         "application/vnd.oci.image.index.v1+json"
#define TKM_OCI_MT_CONFIG        "application/vnd.oci.image.config.v1+json"
#define TKM_OCI_MT_LAYER_TAR     "application/vnd.oci.image.layer.v1.tar"
#define TKM_OCI_MT_LAYER_GZIP    "application/vnd.oci.image.layer.v1.tar+gzip"
#define TKM_OCI_MT_LAYER_ZSTD    "application/vnd.oci.image.layer.v1.tar+zstd"
#define TKM_DOCKER_MT_MANIFEST   "application/vnd.docker.distribution.manifest.v2+json"
#define TKM_DOCKER_MT_LIST       "application/vnd.docker.distribution.manifest.list.v2+json"
#define TKM_DOCKER_MT_CONFIG     "application/vnd.docker.container.image.v1+json"
#define TKM_DOCKER_MT_LAYER_GZIP "application/vnd.docker.image.rootfs.diff.tar.gzip"
/* The Accept header value for manifest requests. */
#define TKM_OCI_MANIFEST_ACCEPT                                                                    \
    TKM_OCI_MT_INDEX ", " TKM_OCI_MT_MANIFEST ", " TKM_DOCKER_MT_LIST ", " TKM_DOCKER_MT_MANIFEST

enum tkm_oci_kind { TKM_OCI_KIND_NONE = 0, TKM_OCI_KIND_MANIFEST, TKM_OCI_KIND_INDEX };

struct tkm_oci_desc {
    char media_type[128];
    char digest[TKM_OCI_DIGEST_LEN + 1];
    uint64_t size;
    int has_platform;
    char os[32], arch[32], variant[32];
    int attestation; /* annotation vnd.docker.reference.type = attestation-manifest */
    char ref_name[TKM_OCI_TAG_MAX + 1]; /* org.opencontainers.image.ref.name, or "" */
};

struct tkm_oci_manifest {
    enum tkm_oci_kind kind;
    char media_type[128];
    char digest[TKM_OCI_DIGEST_LEN + 1]; /* sha256 of the raw bytes */
    uint64_t size;                       /* of the raw bytes */
    struct tkm_oci_desc config;          /* manifests only */
    struct tkm_oci_desc *descs;          /* layers (manifest) or manifests (index); owned */
    size_t n_descs;
};

/* Parses n bytes at p (borrowed) served with content_type (borrowed, may be
 * NULL when unknown, e.g. from a layout: then "mediaType" or the structure
 * decides). what names the source in errors (a URL or "layout DIR"). */
int tkm_oci_manifest_parse(struct tkm_oci_manifest *m, const char *content_type, const void *p,
                           size_t n, const char *what, struct tkm_err *err);
void tkm_oci_manifest_release(struct tkm_oci_manifest *m);

/* Picks from an index the manifest for os/arch (variant optional; NULL/"" =
 * any), skipping attestation and unknown/unknown entries. An index with a
 * single image manifest (and no platform) yields that one. *out is borrowed
 * from idx. -ENOENT with err listing the platforms seen. */
int tkm_oci_index_select(const struct tkm_oci_manifest *idx, const char *os, const char *arch,
                         const char *variant, const struct tkm_oci_desc **out, struct tkm_err *err);

/* The OCI architecture of this machine ("amd64", "arm64", ...). */
const char *tkm_oci_host_arch(void);

/* 1 when a layer media type is an OCI or Docker tar layer (gzip, zstd or
 * plain). *compression (optional) gets "gzip", "zstd" or "". Cache-specific
 * media types are the caller's business. */
int tkm_oci_layer_supported(const char *media_type, const char **compression);

struct tkm_oci_config {
    char os[32], arch[32];
    void *root;                               /* json_t *, owned: the whole config */
    char (*diff_ids)[TKM_OCI_DIGEST_LEN + 1]; /* owned */
    size_t n_diff_ids;
};

int tkm_oci_config_parse(struct tkm_oci_config *c, const void *p, size_t n, const char *what,
                         struct tkm_err *err);
/* The value of .config.Labels[key], borrowed from c, or NULL. */
const char *tkm_oci_config_label(const struct tkm_oci_config *c, const char *key);
void tkm_oci_config_release(struct tkm_oci_config *c);

#endif
