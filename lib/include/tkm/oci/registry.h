/*
 * registry.h - a distribution v2 (OCI) registry client for one registry host.
 *
 * The synchronous client: a thin wrapper that runs the asynchronous core
 * (session.h: the same session, requests, authentication and retries) on a
 * private loop of its own until each operation completes. It serves
 * tkmctl (push, verify), tests and benchmarks; daemons that run one libuv
 * loop use session.h's jobs instead (which also do every blob download) and
 * must not call this from the loop thread.
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
 *     equal the reference when it is a digest (Docker-Content-Digest is never
 *     trusted);
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
#define TKM_OCI_EXTRA_HEADERS        8

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
    /* blob transfers: each one's receive rate cap in bytes/s; 0: none */
    uint64_t max_recv_bps;
    /* A mirror endpoint (mirrors.h); all optional. scheme ("http" or
     * "https") wins over the rules above; path_prefix replaces "/v2" in
     * every registry URL (containerd's hosts.toml path or override_path); ns
     * adds ?ns=<ns> to every registry URL (the upstream's name, as
     * containerd sends it); client_cert/client_key: a TLS client certificate
     * (PEM files; key NULL: in the cert file); skip_verify: no verification
     * of the registry's certificate (the admin's explicit choice); headers:
     * NULL-terminated "Name: value" lines (at most TKM_OCI_EXTRA_HEADERS)
     * sent with every request to the registry's own host (never to a token
     * realm or a redirect's host). */
    const char *scheme;
    const char *path_prefix;
    const char *ns;
    const char *client_cert, *client_key;
    int skip_verify;
    const char *const *headers;
    tkm_oci_progress_cb progress;
    void *progress_ud;
    /* Borrowed, may be NULL: a flag that stops tkm_oci_pull / tkm_oci_inspect
     * (image.h) when it becomes nonzero (e.g. set by a signal handler). They
     * poll it on their private loop about every 50 ms and cancel the job,
     * which returns -ECANCELED after removing what it staged. The synchronous
     * client below (and so tkm_oci_push) polls it the same way while a request
     * runs: the request is cancelled, it and every later call of that client
     * return -ECANCELED ("cancelled"); what a registry already accepted stays
     * (blobs are content-addressed; a manifest is the last request). Sessions
     * ignore it (cancel a job instead). */
    const atomic_int *cancel;
};

struct tkm_oci_registry;

int tkm_oci_registry_new(const char *host, const struct tkm_oci_registry_opts *opts,
                         struct tkm_oci_registry **out, struct tkm_err *err);
void tkm_oci_registry_free(struct tkm_oci_registry *r);

/* GET /v2/<repo>/manifests/<reference>. body is caller-owned (any max; it is
 * capped at 4 MiB here) and gets the raw bytes; content_type (ct_n bytes)
 * the Content-Type; digest the sha256 of the bytes. -ENOENT when the
 * registry says it does not exist, -EBADMSG on a digest mismatch. */
int tkm_oci_registry_get_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, struct tkm_buf *body, char *content_type,
                                  size_t ct_n, char digest[TKM_OCI_DIGEST_LEN + 1],
                                  struct tkm_err *err);

/* Uploads the file at path whose digest and size the caller computed (the
 * registry verifies). Skips the upload when the blob exists (*skipped = 1,
 * optional). */
int tkm_oci_registry_push_blob_file(struct tkm_oci_registry *r, const char *repo, const char *path,
                                    const char *digest, uint64_t size, int *skipped,
                                    struct tkm_err *err);

/* PUT /v2/<repo>/manifests/<reference> (a tag or the digest). */
int tkm_oci_registry_put_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, const char *media_type, const void *p,
                                  size_t n, struct tkm_err *err);

#endif
