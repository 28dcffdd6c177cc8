/*
 * registry.h - a distribution v2 (OCI) registry client for one registry host.
 *
 * The synchronous client: a thin wrapper that runs the asynchronous core
 * (session.h: the same session, requests, authentication and retries) on a
 * private loop of its own until each operation completes. It serves
 * tkmctl, tests and benchmarks; daemons that run one libuv loop use
 * session.h's jobs instead and must not call this from the loop thread.
 *
 * What it does:
 *   - picks the scheme: https, or plain http only for loopback hosts and the
 *     hosts in opts.insecure (see ref.h) unless opts.ca_file is given;
 *   - authenticates on demand: a 401 with WWW-Authenticate Basic gets the
 *     credentials (if any) as Basic; Bearer runs the token flow against the
 *     realm (GET with Basic or anonymously; POST with grant_type=refresh_token
 *     for an identitytoken), tokens cached per scope with their expiry;
 *     credentials come from opts (Secret bytes or a config file) or from the
 *     default docker config locations; a 401 that remains names the host and
 *     whether credentials were found;
 *   - manifests: GET with an Accept for OCI and Docker manifests and indexes,
 *     at most 4 MiB, the digest is the sha256 of the bytes received and must
 *     equal the reference when it is a digest (tag pulls ignore
 *     Docker-Content-Digest, which is only used by resolve() to avoid a body);
 *   - blobs: GET following redirects (curl never forwards Authorization to
 *     another host), streamed into a new file (O_EXCL) while hashing, with an
 *     exact size limit; the file is removed unless digest and size match;
 *   - push: HEAD to skip existing blobs, POST then PUT (monolithic) for small
 *     blobs, PATCH chunks of 8 MiB then PUT for large ones; manifest PUT by
 *     tag or digest;
 *   - registry error bodies ({"errors":[{"code","message"}]}) are quoted in
 *     messages, which always name the URL, and the digest where there is one.
 *
 * Ownership: tkm_oci_registry_new() returns an owned client; free it with
 * tkm_oci_registry_free() (NULL is a no-op). Strings passed in are borrowed
 * for the call (opts strings are copied by _new).
 */
#ifndef TKM_OCI_REGISTRY_H
#define TKM_OCI_REGISTRY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/oci/manifest.h>
#include <tkm/oci/ref.h>

/* Progress of a long transfer: done bytes of total (0 when unknown). Called
 * on the loop's thread (the caller's, for this synchronous client), about
 * every MiB and once at the end. */
typedef void (*tkm_oci_progress_cb)(void *ud, uint64_t done, uint64_t total);

/* The condition/event reason of a download stopped by its deadline. */
#define TKM_OCI_REASON_PULL_DEADLINE "PullDeadlineExceeded"
#define TKM_OCI_NO_DEADLINE          UINT64_MAX

struct tkm_oci_registry_opts {
    const char *const *insecure; /* NULL-terminated "host[:port]" allowed plain HTTP, or NULL */
    const char *auth_file;       /* a docker config.json to read instead of the defaults */
    const void *auth_json;       /* bytes of a .dockerconfigjson/.dockercfg (wins over files) */
    size_t auth_json_len;
    int anonymous;            /* 1: never send credentials */
    const char *ca_file;      /* CA bundle for the registry's TLS certificate, or NULL;
                                 when set, https is used even for loopback hosts */
    uint64_t timeout_ms;      /* per manifest/token request; default 60 s */
    uint64_t idle_timeout_ms; /* blob transfers: abort after this long without data; 60 s */
    /* blob transfers: each download, its retries and their waits included,
     * ends after this long (a registry that trickles bytes faster than the
     * idle limit), with -ETIME and TKM_OCI_REASON_PULL_DEADLINE; default 30 min;
     * TKM_OCI_NO_DEADLINE: none (tkmctl, where a person can interrupt) */
    uint64_t deadline_ms;
    tkm_oci_progress_cb progress;
    void *progress_ud;
    /* Borrowed, may be NULL: a flag that stops tkm_oci_pull / tkm_oci_inspect
     * (image.h) when it becomes nonzero (e.g. set by a signal handler). They
     * poll it on their private loop about every 50 ms and cancel the job,
     * which returns -ECANCELED after removing what it staged. Sessions and
     * the per-request calls of this client ignore it (cancel a job instead). */
    const atomic_int *cancel;
};

struct tkm_oci_registry;

int tkm_oci_registry_new(const char *host, const struct tkm_oci_registry_opts *opts,
                         struct tkm_oci_registry **out, struct tkm_err *err);
void tkm_oci_registry_free(struct tkm_oci_registry *r);
/* "https" or "http" (borrowed). */
const char *tkm_oci_registry_scheme(const struct tkm_oci_registry *r);

/* GET /v2/<repo>/manifests/<reference>. body is caller-owned (any max; it is
 * capped at 4 MiB here) and gets the raw bytes; content_type (ct_n bytes)
 * the Content-Type; digest the sha256 of the bytes. -ENOENT when the
 * registry says it does not exist, -EBADMSG on a digest mismatch. */
int tkm_oci_registry_get_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, struct tkm_buf *body, char *content_type,
                                  size_t ct_n, char digest[TKM_OCI_DIGEST_LEN + 1],
                                  struct tkm_err *err);

/* Resolves a reference to the manifest's digest: GET and hash the bytes
 * (a Docker-Content-Digest header is never trusted); a digest reference is
 * fetched and verified. Everything after is fetched by that digest. */
int tkm_oci_registry_resolve(struct tkm_oci_registry *r, const char *repo, const char *reference,
                             char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err);

/* Downloads blob d into path (created with O_EXCL, 0644), verifying size and
 * digest while streaming. On failure path does not exist. -EBADMSG on a
 * digest or size mismatch (err names the digest and the URL). */
int tkm_oci_registry_fetch_blob(struct tkm_oci_registry *r, const char *repo,
                                const struct tkm_oci_desc *d, const char *path,
                                struct tkm_err *err);

/* Downloads a small blob (config) into out (its max caps it), verified. */
int tkm_oci_registry_fetch_blob_mem(struct tkm_oci_registry *r, const char *repo,
                                    const struct tkm_oci_desc *d, struct tkm_buf *out,
                                    struct tkm_err *err);

/* Uploads the file at path whose digest and size the caller computed (the
 * registry verifies). Skips the upload when the blob exists (*skipped = 1,
 * optional). */
int tkm_oci_registry_push_blob_file(struct tkm_oci_registry *r, const char *repo, const char *path,
                                    const char *digest, uint64_t size, int *skipped,
                                    struct tkm_err *err);
int tkm_oci_registry_push_blob_mem(struct tkm_oci_registry *r, const char *repo, const void *p,
                                   size_t n, const char *digest, int *skipped, struct tkm_err *err);

/* Bounds on a paginated referrers answer (see tkm_oci_registry_get_referrers). */
#define TKM_OCI_REFERRERS_MAX_PAGES 16
#define TKM_OCI_REFERRERS_MAX       512

/* GET /v2/<repo>/referrers/<digest>[?artifactType=<percent-encoded type>]
 * (OCI 1.1; artifact_type NULL: all): the image index of the subject's
 * referrers into body (caller-owned, capped at 4 MiB). Registries may ignore
 * the filter, so callers filter again. A registry that paginates sends
 * `Link: <url>; rel="next"`: the pages are followed and their "manifests"
 * merged into one index (page 1's other fields) in body; a single page is
 * given as its bytes. A next URL must be on this registry (a path, a
 * "?query" on the current path, or an absolute URL with the same scheme and
 * host[:port]): any other is refused (-EPERM), never sent our credentials.
 * More than TKM_OCI_REFERRERS_MAX_PAGES pages (a loop, say): -ELOOP; more
 * than TKM_OCI_REFERRERS_MAX manifests over several pages: -E2BIG; a Link
 * header that is not `<url>[; param=value]...[, ...]`: -EBADMSG (refused
 * rather than ignored, which would hide the later pages). Links with other
 * rels are ignored. -ENOTSUP when the registry has no
 * referrers API (400, 405, 501, a 404 that is not a NAME_UNKNOWN or
 * MANIFEST_UNKNOWN error, or a 200 that is not an OCI image index): fall back
 * to the "sha256-<hex>" tag schema. -ENOENT when the repository is unknown. */
int tkm_oci_registry_get_referrers(struct tkm_oci_registry *r, const char *repo, const char *digest,
                                   const char *artifact_type, struct tkm_buf *body,
                                   struct tkm_err *err);

/* PUT /v2/<repo>/manifests/<reference> (a tag or the digest). */
int tkm_oci_registry_put_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, const char *media_type, const void *p,
                                  size_t n, struct tkm_err *err);

#endif
