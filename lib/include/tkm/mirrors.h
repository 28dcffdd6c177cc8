/*
 * mirrors.h - the node's registry mirrors as its container runtime has them
 * (issue 26, docs/mirrors.md): containerd's hosts.toml directory
 * (<dir>/<host[:port]>/hosts.toml, then <dir>/_default/hosts.toml) and
 * CRI-O's registries.conf (v2: [[registry]] prefix/location/blocked/insecure,
 * [[registry.mirror]] location/insecure/pull-from-mirror, mirror-by-digest-only).
 *
 * tkm_mirrors_resolve() turns "host + repository + by digest or not" into the
 * ordered endpoints to try: the mirrors that may serve this request, then the
 * upstream. The caller tries them in order and falls back to the next on any
 * failure (digests are verified whatever served the bytes).
 *
 * Rules (containerd):
 *   - the directory of the reference's host wins: <host>_<port>_ then
 *     <host>:<port> (containerd's order), docker.io then
 *     registry-1.docker.io for Docker Hub (one host); else _default; else
 *     no mirrors. A directory without hosts.toml still wins (upstream only).
 *     The whole directory is read at load (at most 4096 entries, names
 *     starting with '.' skipped, symlinks followed as the runtime does);
 *   - `server` replaces the upstream's URL (default https://<host>, or
 *     https://registry-1.docker.io for docker.io); top-level capabilities,
 *     ca, client, skip_verify, header, override_path apply to it;
 *   - [host."<url>"] tables in file order; capabilities default
 *     ["pull", "resolve"] (push is ignored: tkm only pulls); a mirror is used
 *     for a pull by digest when it has "pull", for a tag only when it also
 *     has "resolve" (containerd's rule: never trust a mirror to resolve
 *     unless told);
 *   - a URL without a scheme is https; its path is cleaned and gets "/v2"
 *     appended unless it ends with "/v2" or override_path = true (then the
 *     path is used as is); no path means "/v2"; at most 63 mirrors a file;
 *   - ca (string or array), client (string, array of strings, or array of
 *     [cert, key] pairs), relative paths are relative to the hosts.toml's
 *     directory; header: a table of a string or an array of strings;
 *   - requests to an endpoint whose host differs from the reference's
 *     registry carry ?ns=<registry> (ns below; "docker.io" for the hub);
 *   - unknown keys are ignored (as containerd does); a known key of the
 *     wrong type is an error naming file, line and key.
 * Rules (CRI-O), used when no hosts.toml directory matched:
 *   - the [[registry]] whose prefix matches host/repo best (longest; a
 *     "*.example.com" prefix matches subdomains) applies; location rewrites
 *     the prefix (repo below is the path at each endpoint); blocked = true:
 *     the pull is refused (-EACCES, err says which file and prefix);
 *   - mirrors in order, then the location; pull-from-mirror "digest-only"
 *     (or the registry's mirror-by-digest-only) skips a mirror for tags,
 *     "tag-only" skips it for digests; insecure = true means plain http
 *     allowed and no TLS verification: such an endpoint is returned twice,
 *     https with skip_verify then http (both upstream = 1 for the
 *     registry's own); CRI-O sends no ns;
 *   - a non-wildcard prefix wins a tie with a wildcard; a prefix defined
 *     twice is an error; a wildcard prefix takes no location; the version 1
 *     format ([registries.search/insecure/block]) is refused (-EINVAL);
 *     registries.conf.d drop-ins are not read.
 *
 * Ownership: tkm_mirrors_load() returns an owned, immutable config (free
 * with tkm_mirrors_free; NULL is a no-op), safe to read from any thread.
 * tkm_mirrors_resolve() returns an owned array (tkm_mirror_endpoints_free).
 * Every string in an endpoint is owned by the array.
 */
#ifndef TKM_MIRRORS_H
#define TKM_MIRRORS_H

#include <stddef.h>

struct tkm_err;

enum { TKM_MIRROR_CAP_PULL = 1, TKM_MIRROR_CAP_RESOLVE = 2 };

struct tkm_mirror_endpoint {
    char *host;   /* "host[:port]" as a URL writes it (IPv6 in brackets) */
    char *scheme; /* "https" or "http"; NULL for an upstream no file configured
                     (the client's usual rule: http only for loopback and
                     --insecure-registry hosts, else https) */
    char *path;   /* the prefix that replaces "/v2" in every request, e.g. "/v2" or "/mirror/v2" */
    char *repo;   /* the repository at this endpoint (CRI-O's location may rewrite it) */
    char *ns;     /* the value of ?ns= for requests to it, or NULL (none) */
    unsigned caps;
    int skip_verify;   /* skip_verify = true, or CRI-O insecure = true */
    char *ca_file;     /* absolute path, or NULL (system CAs); the first of several */
    char *client_cert; /* absolute path, or NULL; the first pair */
    char *client_key;  /* absolute path, or NULL (the key is in the cert file) */
    char **headers;    /* NULL-terminated "Name: value" lines, or NULL */
    int upstream;      /* 1: the registry itself (always last; CRI-O insecure: https, http) */
    /* borrowed from the config: the file that defined it ("" for the default) */
    const char *source;
};

struct tkm_mirrors;

/* Reads the configuration. hosts_dir (containerd) and registries_conf
 * (CRI-O) may each be NULL (not used). A missing hosts_dir or
 * registries_conf is not an error (no mirrors from it); a file that exists
 * and is bad is: -EPROTO/-E2BIG/-EINVAL with err naming the file, the line
 * and the key. The caller keeps its last good config then. */
int tkm_mirrors_load(const char *hosts_dir, const char *registries_conf, struct tkm_mirrors **out,
                     struct tkm_err *err);
void tkm_mirrors_free(struct tkm_mirrors *m);

/* A fingerprint of the files the config was read from (paths, mtimes, sizes,
 * inode numbers) so a caller can cheaply see whether a reload is due:
 * tkm_mirrors_changed() returns 1 when any of them (or the set of host
 * directories) differs from when m was loaded, 0 otherwise. m NULL: 1. */
int tkm_mirrors_changed(const struct tkm_mirrors *m, const char *hosts_dir,
                        const char *registries_conf);

/* The endpoints for a pull from host ("host[:port]", as in the reference) of
 * repo, by digest (by_digest 1) or by tag. *eps is an owned array of *n
 * entries: the usable mirrors in order, then the upstream (always there
 * unless blocked). m NULL: only the upstream (https://host/v2, repo). */
int tkm_mirrors_resolve(const struct tkm_mirrors *m, const char *host, const char *repo,
                        int by_digest, struct tkm_mirror_endpoint **eps, size_t *n,
                        struct tkm_err *err);
void tkm_mirror_endpoints_free(struct tkm_mirror_endpoint *eps, size_t n);

/* 1 when ep is the reference's own registry (host and repo as the reference
 * names them, at /v2): callers pull that through their usual client, with the
 * registry's credentials; 0 for a mirror or an upstream the files moved. */
int tkm_mirror_endpoint_is_registry(const struct tkm_mirror_endpoint *ep, const char *host,
                                    const char *repo);

struct tkm_oci_registry_opts;
/* Fills o's endpoint settings from ep (scheme, path prefix, ns, CA, client
 * certificate, skip_verify, headers: borrowed from ep) and makes it anonymous,
 * with no credential source: a registry's credentials never go to a mirror,
 * whose own come from its header lines. o's other fields are left as they are. */
void tkm_mirror_endpoint_opts(const struct tkm_mirror_endpoint *ep,
                              struct tkm_oci_registry_opts *o);

#endif
