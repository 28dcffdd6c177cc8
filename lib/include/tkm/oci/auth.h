/*
 * auth.h - registry authentication: challenges, credentials, tokens.
 *
 * - WWW-Authenticate parsing (RFC 7235 challenges; Bearer realm/service/scope
 *   as the distribution token spec, Basic).
 * - Credentials from a docker config.json (DOCKER_CONFIG/config.json,
 *   ~/.docker/config.json, REGISTRY_AUTH_FILE, XDG_RUNTIME_DIR/containers/
 *   auth.json) and from the bytes of a kubernetes.io/dockerconfigjson Secret
 *   (.dockerconfigjson, with the "auths" wrapper) or a legacy
 *   kubernetes.io/dockercfg one (.dockercfg, without it). Keys match by host,
 *   ignoring the scheme and any path ("https://index.docker.io/v1/"); the
 *   Docker Hub names docker.io, index.docker.io and registry-1.docker.io are
 *   one registry. Entries carry "auth" (base64 user:password), or "username"
 *   and "password", and/or "identitytoken" (an OAuth2 refresh token).
 * - Token replies ({"token"|"access_token", "expires_in"}).
 *
 * All structs are plain values owned by the caller; no heap inside.
 * Files (not Secret bytes) may name credential helpers (credHelpers, credsStore),
 * which are run as docker does. Credentials are secrets: nothing here logs them; clear them with
 * tkm_oci_creds_wipe() when done.
 */
#ifndef TKM_OCI_AUTH_H
#define TKM_OCI_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>

enum tkm_oci_auth_scheme { TKM_OCI_AUTH_NONE = 0, TKM_OCI_AUTH_BASIC, TKM_OCI_AUTH_BEARER };

struct tkm_oci_challenge {
    enum tkm_oci_auth_scheme scheme;
    char realm[1024];
    char service[256];
    char scope[1024];
    char error[64]; /* "insufficient_scope", "invalid_token", or "" */
};

/* Parses a WWW-Authenticate value (borrowed). When it holds several
 * challenges, Bearer wins over Basic. -EINVAL when no known scheme is found
 * or a Bearer challenge has no realm; err quotes the header. */
int tkm_oci_challenge_parse(struct tkm_oci_challenge *c, const char *header, struct tkm_err *err);

struct tkm_oci_creds {
    char username[256];
    char password[1024];
    char identity_token[4096];
    char source[512]; /* where they came from, for messages: "/root/.docker/config.json" */
};

/* Looks host (an API host[:port], as in struct tkm_oci_ref) up in the n
 * bytes at json: a config.json / .dockerconfigjson ("auths": {...}) or a
 * legacy .dockercfg ({host: {...}}). what names the source. Returns 0 and
 * fills *out, -ENOENT when no entry matches, -EINVAL for malformed JSON or a
 * malformed entry (err names what and the key). */
int tkm_oci_creds_from_config(const void *json, size_t n, const char *host, const char *what,
                              struct tkm_oci_creds *out, struct tkm_err *err);

/* Reads the first existing file among $REGISTRY_AUTH_FILE,
 * $DOCKER_CONFIG/config.json, ~/.docker/config.json and
 * $XDG_RUNTIME_DIR/containers/auth.json that has an entry for host. Returns
 * 0, -ENOENT (no credentials anywhere: anonymous), or an error naming the
 * file. */
int tkm_oci_creds_load(const char *host, struct tkm_oci_creds *out, struct tkm_err *err);

/* Reads the file at path and looks host up in it (as above). */
int tkm_oci_creds_load_file(const char *path, const char *host, struct tkm_oci_creds *out,
                            struct tkm_err *err);

/* Runs the docker credential helper docker-credential-<helper> (on PATH)
 * with "get", the server URL for host on stdin ("https://index.docker.io/v1/"
 * for Docker Hub, else host), and reads {"Username","Secret"} ("<token>" as
 * the user means an identity token). 10 s timeout. Returns 0, -ENOENT when
 * the helper has nothing for host, or an error naming the helper.
 * tkm_oci_creds_load[_file] use it for credHelpers/credsStore entries when
 * "auths" has none for host; Secret bytes never run programs. */
int tkm_oci_creds_from_helper(const char *helper, const char *host, struct tkm_oci_creds *out,
                              struct tkm_err *err);

void tkm_oci_creds_wipe(struct tkm_oci_creds *c);

/* "Basic <base64(user:password)>" into out. -ENOSPC when it does not fit. */
int tkm_oci_basic_header(const struct tkm_oci_creds *c, char *out, size_t n);

/* Decodes a token endpoint reply: "token", else "access_token", into out
 * (NUL-terminated); *expires_in_s (optional) gets "expires_in" or 60 (the
 * spec's default). -EINVAL naming what when neither is present. */
int tkm_oci_token_parse(const void *json, size_t n, const char *what, char *out, size_t out_n,
                        long *expires_in_s, struct tkm_err *err);

/* Standard base64 decode of n chars at in (padding optional, no spaces) into
 * out (out_n bytes); *len gets the decoded size. -EINVAL on bad input,
 * -ENOSPC when out is too small. */
int tkm_oci_base64_decode(const char *in, size_t n, unsigned char *out, size_t out_n, size_t *len);

#endif
