/*
 * ref.h - OCI image references: parse, normalize, format.
 *
 * Grammar (the distribution/reference rules, with Docker Hub defaults):
 *   [host[:port]/]repo[:tag][@sha256:<64 lower-case hex>]
 *   - The first path component is a host when it contains '.' or ':', is
 *     "localhost", or is an IPv6 literal in brackets ("[::1]:5000").
 *     Otherwise the host is Docker Hub: "docker.io" is normalized to the API
 *     host "registry-1.docker.io", and a single-component repository gets the
 *     "library/" prefix ("busybox" -> "registry-1.docker.io/library/busybox").
 *   - Repository components are lower-case: [a-z0-9]+ joined by '.', '_',
 *     '__' or runs of '-'. host + '/' + repo is at most 255 characters.
 *   - A tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
 *   - With neither tag nor digest, the tag is "latest".
 *
 * A parsed reference is a plain value (no heap): copy it freely.
 *
 * Plain HTTP is only ever used for loopback registries (127.0.0.0/8, ::1,
 * localhost) or for hosts the user named explicitly as insecure.
 */
#ifndef TKM_OCI_REF_H
#define TKM_OCI_REF_H

#include <stddef.h>

#include <tkm/err.h>

#define TKM_OCI_NAME_MAX   255
#define TKM_OCI_TAG_MAX    128
#define TKM_OCI_DIGEST_LEN 71 /* "sha256:" + 64 hex */
#define TKM_OCI_DOCKER_HUB "registry-1.docker.io"

struct tkm_oci_ref {
    char host[TKM_OCI_NAME_MAX + 1];     /* API host[:port]: "registry-1.docker.io", "[::1]:5000" */
    char repo[TKM_OCI_NAME_MAX + 1];     /* "library/busybox" */
    char tag[TKM_OCI_TAG_MAX + 1];       /* "" when only a digest was given */
    char digest[TKM_OCI_DIGEST_LEN + 1]; /* "sha256:<hex>" or "" */
};

/* Parses s (borrowed) into *ref. Returns 0, or -EINVAL with err saying
 * "invalid reference 's': <why>". */
int tkm_oci_ref_parse(struct tkm_oci_ref *ref, const char *s, struct tkm_err *err);

/* The canonical form "host/repo[:tag][@digest]" into out (n bytes). Returns
 * the length, or -ENOSPC when it does not fit. Docker Hub shows as
 * "docker.io/...". */
int tkm_oci_ref_format(const struct tkm_oci_ref *ref, char *out, size_t n);

/* What to put after /manifests/: the digest when there is one, else the tag
 * (borrowed from ref). */
const char *tkm_oci_ref_reference(const struct tkm_oci_ref *ref);

/* 1 when host (host[:port], brackets for IPv6) is localhost, in 127.0.0.0/8
 * or ::1. */
int tkm_oci_host_is_loopback(const char *host);

/* 1 when plain HTTP may be used for host: it is loopback, or it appears in
 * insecure (a NULL-terminated list of "host[:port]" entries, or NULL; an
 * entry without a port matches every port of that host). */
int tkm_oci_host_plain_http(const char *host, const char *const *insecure);

/* 1 when s is "sha256:" followed by 64 lower-case hex digits: the check
 * of tkm_digest_valid (archive.h), under this header's name. */
int tkm_oci_digest_valid(const char *s);

#endif
