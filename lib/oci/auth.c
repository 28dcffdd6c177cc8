/* auth.c - see auth.h. */
#include <tkm/oci/auth.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/util.h>
#include <tkm/buf.h>
#include <tkm/util.h>
#include <tkm/log.h>
#include <tkm/oci/ref.h>

#define CONFIG_MAX (4u << 20)

/* ---- WWW-Authenticate ---------------------------------------------------- */

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == ',')
        p++;
    return p;
}

static int is_tchar(char c)
{
    return isalnum((unsigned char)c) || strchr("!#$%&'*+-.^_`|~/=", c);
}

/* Reads a token (for names) into out; returns the end. */
static const char *read_token(const char *p, char *out, size_t n)
{
    size_t i = 0;
    while (*p && is_tchar(*p) && *p != '=') {
        if (i + 1 < n)
            out[i++] = *p;
        p++;
    }
    out[i] = '\0';
    return p;
}

/* Reads a value (quoted-string with \-escapes, or a token68) into out.
 * Returns the end, or NULL on an unterminated quote or overflow. */
static const char *read_value(const char *p, char *out, size_t n)
{
    size_t i = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            if (i + 1 >= n)
                return NULL;
            out[i++] = *p;
        }
        if (*p != '"')
            return NULL;
        p++;
    } else {
        while (*p && *p != ',' && *p != ' ' && *p != '\t') {
            if (i + 1 >= n)
                return NULL;
            out[i++] = *p++;
        }
    }
    out[i] = '\0';
    return p;
}

int tkm_oci_challenge_parse(struct tkm_oci_challenge *c, const char *header, struct tkm_err *err)
{
    struct tkm_oci_challenge cur, best;
    char name[64], value[1024];
    const char *p = header ? header : "";
    memset(&best, 0, sizeof best);
    memset(&cur, 0, sizeof cur);
    for (p = skip_ws(p); *p;) {
        const char *q = read_token(p, name, sizeof name);
        if (q == p)
            goto bad;
        const char *after = q;
        while (*after == ' ' || *after == '\t')
            after++;
        if (*after == '=' && cur.scheme != TKM_OCI_AUTH_NONE) {
            /* A parameter of the current challenge. */
            after++;
            while (*after == ' ' || *after == '\t')
                after++;
            q = read_value(after, value, sizeof value);
            if (!q)
                goto bad;
            if (strcasecmp(name, "realm") == 0)
                snprintf(cur.realm, sizeof cur.realm, "%s", value);
            else if (strcasecmp(name, "service") == 0)
                snprintf(cur.service, sizeof cur.service, "%s", value);
            else if (strcasecmp(name, "scope") == 0)
                snprintf(cur.scope, sizeof cur.scope, "%s", value);
            else if (strcasecmp(name, "error") == 0)
                snprintf(cur.error, sizeof cur.error, "%s", value);
            p = skip_ws(q);
            continue;
        }
        /* A new challenge: keep the best one so far. */
        if (cur.scheme > best.scheme)
            best = cur;
        memset(&cur, 0, sizeof cur);
        if (strcasecmp(name, "bearer") == 0)
            cur.scheme = TKM_OCI_AUTH_BEARER;
        else if (strcasecmp(name, "basic") == 0)
            cur.scheme = TKM_OCI_AUTH_BASIC;
        else
            cur.scheme = TKM_OCI_AUTH_NONE; /* unknown scheme: its params are skipped */
        p = skip_ws(q);
        if (cur.scheme == TKM_OCI_AUTH_NONE) {
            /* skip name=value pairs of an unknown scheme */
            while (*p) {
                const char *r = read_token(p, name, sizeof name);
                while (*r == ' ')
                    r++;
                if (*r != '=')
                    break;
                r = read_value(r + 1, value, sizeof value);
                if (!r)
                    goto bad;
                p = skip_ws(r);
            }
        }
    }
    if (cur.scheme > best.scheme)
        best = cur;
    if (best.scheme == TKM_OCI_AUTH_NONE)
        return tkm_err_set(err, -EINVAL, "WWW-Authenticate: no Basic or Bearer challenge");
    if (best.scheme == TKM_OCI_AUTH_BEARER && !best.realm[0])
        return tkm_err_set(err, -EINVAL, "WWW-Authenticate: Bearer challenge without realm");
    *c = best;
    return 0;
bad:
    return tkm_err_set(err, -EINVAL, "WWW-Authenticate: malformed at byte %zu of %zu",
                       (size_t)(p - header), strlen(header));
}

/* ---- base64 -------------------------------------------------------------- */

int tkm_oci_base64_decode(const char *in, size_t n, unsigned char *out, size_t out_n, size_t *len)
{
    struct tkm_buf b = TKM_BUF_INIT(out_n);
    int rc = tkm_base64_decode(in, n, &b);
    if (rc == 0) {
        memcpy(out, b.data, b.len);
        *len = b.len;
    }
    tkm_buf_release(&b);
    return rc == -E2BIG ? -ENOSPC : rc;
}

int tkm_oci_basic_header(const struct tkm_oci_creds *c, char *out, size_t n)
{
    char plain[sizeof c->username + sizeof c->password + 2];
    int pl = snprintf(plain, sizeof plain, "%s:%s", c->username, c->password);
    size_t need = 6 + 4 * (((size_t)pl + 2) / 3) + 1;
    int rc = 0;
    if (pl < 0 || need > n) {
        rc = -ENOSPC;
        goto out;
    }
    memcpy(out, "Basic ", 6);
    EVP_EncodeBlock((unsigned char *)out + 6, (const unsigned char *)plain, pl);
out:
    OPENSSL_cleanse(plain, sizeof plain);
    return rc;
}

/* ---- docker config ------------------------------------------------------- */

/* Host part of a config key: scheme and path removed, lower-cased. */
static void key_host(const char *key, char *out, size_t n)
{
    const char *p = strstr(key, "://");
    size_t i = 0;
    p = p ? p + 3 : key;
    while (p[i] && p[i] != '/' && i + 1 < n) {
        out[i] = (char)tolower((unsigned char)p[i]);
        i++;
    }
    out[i] = '\0';
}

static int is_hub(const char *h)
{
    return strcmp(h, "docker.io") == 0 || strcmp(h, "index.docker.io") == 0 ||
           strcmp(h, TKM_OCI_DOCKER_HUB) == 0;
}

static int host_matches(const char *key, const char *host)
{
    char k[TKM_OCI_NAME_MAX + 1], h[TKM_OCI_NAME_MAX + 1];
    key_host(key, k, sizeof k);
    key_host(host, h, sizeof h);
    if (strcmp(k, h) == 0)
        return 1;
    return is_hub(k) && is_hub(h);
}

static int fill_entry(json_t *e, const char *what, const char *key, struct tkm_oci_creds *out,
                      struct tkm_err *err)
{
    const char *auth = json_string_value(json_object_get(e, "auth"));
    const char *user = json_string_value(json_object_get(e, "username"));
    const char *pass = json_string_value(json_object_get(e, "password"));
    const char *idt = json_string_value(json_object_get(e, "identitytoken"));
    unsigned char dec[sizeof out->username + sizeof out->password + 2];
    size_t len = 0;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!json_is_object(e))
        return tkm_err_set(err, -EINVAL, "%s: auths entry '%.200s' is not an object", what, key);
    if (auth && auth[0]) {
        if (tkm_oci_base64_decode(auth, strlen(auth), dec, sizeof dec - 1, &len) != 0) {
            rc = tkm_err_set(err, -EINVAL, "%s: auths entry '%.200s': 'auth' is not valid base64",
                             what, key);
            goto out;
        }
        dec[len] = '\0';
        char *colon = memchr(dec, ':', len);
        if (!colon || memchr(dec, '\0', len)) {
            rc = tkm_err_set(err, -EINVAL,
                             "%s: auths entry '%.200s': 'auth' does not decode to user:password",
                             what, key);
            goto out;
        }
        *colon = '\0';
        if (strlen((char *)dec) >= sizeof out->username ||
            strlen(colon + 1) >= sizeof out->password) {
            rc = tkm_err_set(err, -EINVAL, "%s: auths entry '%.200s': user or password too long",
                             what, key);
            goto out;
        }
        snprintf(out->username, sizeof out->username, "%s", (char *)dec);
        snprintf(out->password, sizeof out->password, "%s", colon + 1);
    } else if (user && pass) {
        if (strlen(user) >= sizeof out->username || strlen(pass) >= sizeof out->password) {
            rc = tkm_err_set(err, -EINVAL, "%s: auths entry '%.200s': user or password too long",
                             what, key);
            goto out;
        }
        snprintf(out->username, sizeof out->username, "%s", user);
        snprintf(out->password, sizeof out->password, "%s", pass);
    }
    if (idt && idt[0]) {
        if (strlen(idt) >= sizeof out->identity_token) {
            rc = tkm_err_set(err, -EINVAL, "%s: auths entry '%.200s': identitytoken too long", what,
                             key);
            goto out;
        }
        snprintf(out->identity_token, sizeof out->identity_token, "%s", idt);
    }
    if (!out->username[0] && !out->identity_token[0]) {
        rc = -ENOENT; /* an empty entry ({}), as credsStore users have: no credentials here */
        goto out;
    }
    snprintf(out->source, sizeof out->source, "%s", what);
out:
    OPENSSL_cleanse(dec, sizeof dec);
    if (rc)
        tkm_oci_creds_wipe(out);
    return rc;
}

int tkm_oci_creds_from_config(const void *data, size_t n, const char *host, const char *what,
                              struct tkm_oci_creds *out, struct tkm_err *err)
{
    json_error_t je;
    int rc = -ENOENT;
    if (n > CONFIG_MAX)
        return tkm_err_set(err, -E2BIG, "%s: larger than %u bytes", what, CONFIG_MAX);
    json_t *root = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        rc = tkm_err_set(err, -EINVAL, "%s: not a JSON object: %s (line %d)", what,
                         root ? "wrong type" : je.text, je.line);
        goto out;
    }
    json_t *auths = json_object_get(root, "auths");
    if (auths && !json_is_object(auths)) {
        rc = tkm_err_set(err, -EINVAL, "%s: 'auths' is not an object", what);
        goto out;
    }
    if (!auths)
        auths = root; /* legacy .dockercfg: registries at the top level */
    /* An exact host match wins over an equivalent (Docker Hub alias) one. */
    for (int pass = 0; pass < 2 && rc == -ENOENT; pass++) {
        const char *key;
        json_t *e;
        json_object_foreach(auths, key, e)
        {
            if (auths == root &&
                (strcmp(key, "credHelpers") == 0 || strcmp(key, "credsStore") == 0 ||
                 strcmp(key, "HttpHeaders") == 0))
                continue;
            char k[TKM_OCI_NAME_MAX + 1];
            key_host(key, k, sizeof k);
            if (pass == 0 ? strcasecmp(k, host) != 0 : !host_matches(key, host))
                continue;
            rc = fill_entry(e, what, key, out, err);
            if (rc != -ENOENT)
                break;
        }
    }
out:
    json_decref(root);
    return rc;
}

/* The credential helper a docker config names for host: credHelpers[key
 * matching host], else credsStore. 0 and name in out, or -ENOENT. */
static int helper_for(const char *data, size_t n, const char *host, char *out, size_t out_n)
{
    json_t *root = json_loadb(data, n, 0, NULL);
    const char *name = NULL, *key;
    json_t *v;
    int rc = -ENOENT;
    json_object_foreach(json_object_get(root, "credHelpers"), key, v)
    {
        if (host_matches(key, host) && json_string_value(v)) {
            name = json_string_value(v);
            break;
        }
    }
    if (!name)
        name = json_string_value(json_object_get(root, "credsStore"));
    if (name && *name && strlen(name) < out_n) {
        memcpy(out, name, strlen(name) + 1);
        rc = 0;
    }
    json_decref(root);
    return rc;
}

int tkm_oci_creds_load_file(const char *path, const char *host, struct tkm_oci_creds *out,
                            struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(CONFIG_MAX);
    char chunk[8192];
    int rc = 0, fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -ENOENT
                               : tkm_err_set(err, -errno, "open %s: %s", path, strerror(errno));
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = tkm_err_set(err, -errno, "read %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        if ((rc = tkm_buf_append(&b, chunk, (size_t)r)) != 0) {
            rc = tkm_err_set(err, rc, "read %s: larger than %u bytes", path, CONFIG_MAX);
            goto out;
        }
    }
    rc = tkm_oci_creds_from_config(b.data, b.len, host, path, out, err);
    if (rc == -ENOENT) {
        char helper[80];
        struct tkm_err he = {0};
        if (helper_for(b.data, b.len, host, helper, sizeof helper) == 0) {
            rc = tkm_oci_creds_from_helper(helper, host, out, &he);
            if (rc == -ENOEXEC) {
                /* Not installed (a config copied from another machine): like a
                 * missing entry, so public images still pull; say so. */
                tkm_warn("%s: %s; going on without credentials for %s", path, he.msg, host);
                rc = -ENOENT;
            } else if (rc && rc != -ENOENT) {
                rc = tkm_err_set(err, rc, "%s: %s", path, he.msg);
            }
        }
    }
out:
    close(fd);
    OPENSSL_cleanse(b.data, b.len);
    tkm_buf_release(&b);
    return rc;
}

int tkm_oci_creds_load(const char *host, struct tkm_oci_creds *out, struct tkm_err *err)
{
    char paths[4][1024];
    size_t np = 0;
    const char *e;
    if ((e = getenv("REGISTRY_AUTH_FILE")) && *e)
        snprintf(paths[np++], sizeof paths[0], "%s", e);
    if ((e = getenv("DOCKER_CONFIG")) && *e)
        snprintf(paths[np++], sizeof paths[0], "%s/config.json", e);
    else if ((e = getenv("HOME")) && *e)
        snprintf(paths[np++], sizeof paths[0], "%s/.docker/config.json", e);
    if ((e = getenv("XDG_RUNTIME_DIR")) && *e)
        snprintf(paths[np++], sizeof paths[0], "%s/containers/auth.json", e);
    for (size_t i = 0; i < np; i++) {
        int rc = tkm_oci_creds_load_file(paths[i], host, out, err);
        if (rc != -ENOENT)
            return rc;
    }
    return -ENOENT;
}

void tkm_oci_creds_wipe(struct tkm_oci_creds *c)
{
    if (c)
        OPENSSL_cleanse(c, sizeof *c);
}

int tkm_oci_token_parse(const void *data, size_t n, const char *what, char *out, size_t out_n,
                        long *expires_in_s, struct tkm_err *err)
{
    json_error_t je;
    int rc = 0;
    json_t *root = json_loadb(data, n, JSON_REJECT_DUPLICATES, &je);
    const char *tok = json_string_value(json_object_get(root, "token"));
    if (!tok || !*tok)
        tok = json_string_value(json_object_get(root, "access_token"));
    if (!json_is_object(root) || !tok || !*tok) {
        rc = tkm_err_set(err, -EINVAL, "%s: token reply has neither 'token' nor 'access_token'",
                         what);
        goto out;
    }
    if (strlen(tok) >= out_n) {
        rc = tkm_err_set(err, -E2BIG, "%s: token longer than %zu bytes", what, out_n - 1);
        goto out;
    }
    snprintf(out, out_n, "%s", tok);
    if (expires_in_s) {
        json_t *ex = json_object_get(root, "expires_in");
        *expires_in_s =
            json_is_integer(ex) && json_integer_value(ex) > 0 ? (long)json_integer_value(ex) : 60;
    }
out:
    json_decref(root);
    return rc;
}
