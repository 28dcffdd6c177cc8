/* registry.c - see registry.h. */
#include <tkm/oci/registry.h>

#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/oci/auth.h>
#include <tkm/oci/digest.h>
#include <tkm/util.h>

#define REG_TOKENS            16
#define REG_TOKEN_MAX         16384
#define REG_CHUNK             (8u << 20)
#define REG_ERR_BODY_MAX      (64u << 10)
#define REG_DEFAULT_TO_MS     60000
#define REG_URL_MAX           8192
#define REG_RETRIES           3
#define REG_BACKOFF_MS        500u
#define REG_RETRY_AFTER_MAX_S 30

struct reg_token {
    char scope[1024];
    char *value; /* "Bearer ..." header line, owned */
    uint64_t expires_ms;
};

struct tkm_oci_registry {
    char host[TKM_OCI_NAME_MAX + 1];
    char scheme[8];
    char *ca_file;
    int anonymous;
    int have_creds;
    struct tkm_oci_creds creds;
    int use_basic; /* the registry asked for Basic */
    uint64_t timeout_ms, idle_timeout_ms;
    tkm_oci_progress_cb progress;
    void *progress_ud;
    struct reg_token tokens[REG_TOKENS];
    size_t next_token;
    /* A private loop and client, so connections (and TLS sessions) are reused
     * across the requests of one registry. */
    uv_loop_t loop;
    int loop_ready;
    struct tkm_http *http;
};

/* One request as the registry layer sees it. */
struct reg_req {
    const char *method;
    const char *url;
    const char *scope; /* "repository:<repo>:pull" or ":pull,push" */
    const char *accept;
    const char *content_type;
    const char *extra; /* one more "Name: value" header, or NULL */
    const void *body;
    size_t body_len;
    size_t max_body;
    int follow;
    int streaming;
    tkm_http_data_cb data_cb;
    void *data;
    int (*reset)(void *data); /* streaming: start the sink over before a retry */
};

const char *tkm_oci_registry_scheme(const struct tkm_oci_registry *r)
{
    return r->scheme;
}

static int load_creds(struct tkm_oci_registry *r, const struct tkm_oci_registry_opts *o,
                      struct tkm_err *err)
{
    int rc;
    if (o->anonymous)
        return 0;
    if (o->auth_json)
        rc = tkm_oci_creds_from_config(o->auth_json, o->auth_json_len, r->host,
                                       "registry credentials", &r->creds, err);
    else if (o->auth_file)
        rc = tkm_oci_creds_load_file(o->auth_file, r->host, &r->creds, err);
    else
        rc = tkm_oci_creds_load(r->host, &r->creds, err);
    if (rc == -ENOENT)
        return 0;
    if (rc == 0)
        r->have_creds = 1;
    return rc;
}

int tkm_oci_registry_new(const char *host, const struct tkm_oci_registry_opts *opts,
                         struct tkm_oci_registry **out, struct tkm_err *err)
{
    struct tkm_oci_registry_opts none = {0};
    const struct tkm_oci_registry_opts *o = opts ? opts : &none;
    struct tkm_oci_registry *r = calloc(1, sizeof *r);
    int rc;
    if (!r)
        return -ENOMEM;
    if (strlen(host) >= sizeof r->host) {
        rc = tkm_err_set(err, -EINVAL, "registry host '%.100s...' is too long", host);
        goto fail;
    }
    memcpy(r->host, host, strlen(host) + 1);
    /* A CA bundle means the registry speaks TLS, loopback or not. */
    snprintf(r->scheme, sizeof r->scheme, "%s",
             !o->ca_file && tkm_oci_host_plain_http(host, o->insecure) ? "http" : "https");
    r->anonymous = o->anonymous;
    r->timeout_ms = o->timeout_ms ? o->timeout_ms : REG_DEFAULT_TO_MS;
    r->idle_timeout_ms = o->idle_timeout_ms ? o->idle_timeout_ms : REG_DEFAULT_TO_MS;
    r->progress = o->progress;
    r->progress_ud = o->progress_ud;
    if (o->ca_file && !(r->ca_file = strdup(o->ca_file))) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = load_creds(r, o, err)) != 0)
        goto fail;
    if ((rc = uv_loop_init(&r->loop)) != 0) {
        rc = tkm_err_set(err, rc, "registry %s: cannot create an event loop: %s", host,
                         uv_strerror(rc));
        goto fail;
    }
    r->loop_ready = 1;
    if ((rc = tkm_http_new(&r->loop, NULL, &r->http, err)) != 0)
        goto fail;
    *out = r;
    return 0;
fail:
    tkm_oci_registry_free(r);
    return rc;
}

void tkm_oci_registry_free(struct tkm_oci_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < REG_TOKENS; i++)
        if (r->tokens[i].value) {
            memset(r->tokens[i].value, 0, strlen(r->tokens[i].value));
            free(r->tokens[i].value);
        }
    tkm_oci_creds_wipe(&r->creds);
    if (r->http)
        tkm_http_close(r->http, NULL, NULL);
    if (r->loop_ready) {
        uv_run(&r->loop, UV_RUN_DEFAULT);
        uv_loop_close(&r->loop);
    }
    free(r->ca_file);
    free(r);
}

/* ---- errors -------------------------------------------------------------- */

/* "CODE: message; CODE: message" from an OCI error body, into out. */
static void oci_errors(const struct tkm_http_resp *resp, char *out, size_t n)
{
    json_t *root = json_loadb(resp->body.data, resp->body.len, 0, NULL);
    json_t *errs = json_object_get(root, "errors");
    size_t i, used = 0;
    json_t *e;
    out[0] = '\0';
    json_array_foreach(errs, i, e)
    {
        const char *code = json_string_value(json_object_get(e, "code"));
        const char *msg = json_string_value(json_object_get(e, "message"));
        int w = snprintf(out + used, n - used, "%s%s: %s", used ? "; " : "", code ? code : "?",
                         msg ? msg : "");
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
    json_decref(root);
}

static int status_error(struct tkm_oci_registry *r, const struct tkm_http_resp *resp,
                        const char *what, struct tkm_err *err)
{
    char detail[512];
    int code;
    oci_errors(resp, detail, sizeof detail);
    switch (resp->status) {
    case 401:
        code = -EACCES;
        break;
    case 403:
        code = -EPERM;
        break;
    case 404:
        code = -ENOENT;
        break;
    case 429:
        code = -EAGAIN;
        break;
    default:
        code = -EIO;
    }
    if (resp->status == 401 && r->have_creds && !r->anonymous)
        return tkm_err_set(err, code,
                           "%s: %s: 401 Unauthorized%s%s (the credentials for %s from %s were "
                           "rejected)",
                           what, resp->url, detail[0] ? ": " : "", detail, r->host,
                           r->creds.source);
    if (resp->status == 401)
        return tkm_err_set(err, code, "%s: %s: 401 Unauthorized%s%s (%s)", what, resp->url,
                           detail[0] ? ": " : "", detail,
                           r->anonymous    ? "anonymous access requested"
                           : r->have_creds ? "the credentials were rejected"
                                           : "no credentials found for this registry: add them "
                                             "with docker login or --auth-file");
    if (!detail[0] && resp->status == 404)
        snprintf(detail, sizeof detail, "not found (no such repository, tag or digest)");
    return tkm_err_set(err, code, "%s: %s: HTTP %ld%s%s", what, resp->url, resp->status,
                       detail[0] ? ": " : "", detail);
}

/* ---- transport ----------------------------------------------------------- */

struct http_wait {
    struct tkm_http_resp *resp;
    tkm_http_data_cb data_cb;
    void *data;
    int done;
};

static void http_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    struct http_wait *w = data;
    (void)req;
    tkm_buf_release(&w->resp->body);
    tkm_buf_release(&w->resp->headers);
    *w->resp = *resp; /* takes the buffers */
    tkm_buf_init(&resp->body, resp->body.max);
    tkm_buf_init(&resp->headers, resp->headers.max);
    w->done = 1;
}

static int http_data(struct tkm_http_req *req, const char *p, size_t n, void *data)
{
    struct http_wait *w = data;
    return w->data_cb(req, p, n, w->data);
}

/* One request on the registry's own loop, run until it completes (the
 * synchronous contract of tkm_http_do, with connection reuse). */
static int reg_http(struct tkm_oci_registry *r, const struct tkm_http_req_opts *o,
                    struct tkm_http_resp *resp, struct tkm_err *err)
{
    struct http_wait w = {.resp = resp, .data_cb = o->data_cb, .data = o->data};
    struct tkm_http_req_opts ro = *o;
    ro.done_cb = http_done;
    ro.data = &w;
    ro.data_cb = o->data_cb ? http_data : NULL;
    int rc = tkm_http_start(r->http, &ro, NULL, err);
    if (rc)
        return rc;
    while (!w.done)
        uv_run(&r->loop, UV_RUN_ONCE);
    resp->url = o->url;
    rc = resp->code;
    if (rc)
        tkm_err_set(err, rc, "%s", resp->error);
    return rc;
}

/* ---- authentication ------------------------------------------------------ */

static struct reg_token *token_find(struct tkm_oci_registry *r, const char *scope)
{
    uint64_t now = tkm_now_ms();
    for (size_t i = 0; i < REG_TOKENS; i++)
        if (r->tokens[i].value && strcmp(r->tokens[i].scope, scope) == 0 &&
            r->tokens[i].expires_ms > now)
            return &r->tokens[i];
    return NULL;
}

static int token_store(struct tkm_oci_registry *r, const char *scope, const char *tok, long ttl)
{
    struct reg_token *t = &r->tokens[r->next_token++ % REG_TOKENS];
    struct tkm_buf b = TKM_BUF_INIT(REG_TOKEN_MAX + 64);
    if (tkm_buf_printf(&b, "Authorization: Bearer %s", tok) != 0)
        return -ENOMEM;
    free(t->value);
    t->value = tkm_buf_detach(&b, NULL);
    snprintf(t->scope, sizeof t->scope, "%s", scope);
    /* Renew a little early: the clock of the token service is not ours. */
    t->expires_ms = tkm_now_ms() + (uint64_t)(ttl > 20 ? ttl - 10 : ttl) * 1000;
    return t->value ? 0 : -ENOMEM;
}

/* 1 when credentials may go to the token realm: https, or plain http to a
 * loopback host or to the registry itself when that is already plain http
 * (loopback or named --insecure). */
static int realm_ok(const struct tkm_oci_registry *r, const char *realm)
{
    if (strncasecmp(realm, "https://", 8) == 0)
        return 1;
    if (strncasecmp(realm, "http://", 7) != 0)
        return 0;
    char host[TKM_OCI_NAME_MAX + 1];
    const char *h = realm + 7;
    size_t n = strcspn(h, "/?#");
    if (n >= sizeof host)
        return 0;
    memcpy(host, h, n);
    host[n] = '\0';
    return tkm_oci_host_is_loopback(host) ||
           (strcmp(r->scheme, "http") == 0 && strcasecmp(host, r->host) == 0);
}

/* Gets a token for scope (what the registry asked for) and caches it under
 * key (the scope of our request, which is what the retry looks up). */
static int fetch_token(struct tkm_oci_registry *r, const struct tkm_oci_challenge *c,
                       const char *scope, const char *key, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX), form = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char basic[2048], authz[2100], tok[REG_TOKEN_MAX];
    const char *hdrs[3] = {NULL, NULL, NULL};
    char *esc_service = curl_easy_escape(NULL, c->service, 0);
    char *esc_scope = curl_easy_escape(NULL, scope, 0);
    long ttl = 60;
    int rc;
    tkm_http_resp_init(&resp);
    if (!esc_service || !esc_scope) {
        rc = -ENOMEM;
        goto out;
    }
    if (!realm_ok(r, c->realm)) {
        rc = tkm_err_set(err, -EPERM,
                         "registry %s: token realm '%.200s' is not https (refusing to send "
                         "credentials in clear text)",
                         r->host, c->realm);
        goto out;
    }
    struct tkm_http_req_opts o = {.url = NULL, .timeout_ms = r->timeout_ms, .headers = hdrs};
    if (r->have_creds && r->creds.identity_token[0]) {
        /* OAuth2 refresh token (docker login with an identity provider). */
        rc = tkm_buf_printf(&url, "%s", c->realm);
        char *esc_rt = curl_easy_escape(NULL, r->creds.identity_token, 0);
        if (rc == 0 && esc_rt)
            rc = tkm_buf_printf(&form,
                                "grant_type=refresh_token&client_id=tkm&service=%s&scope=%s&"
                                "refresh_token=%s",
                                esc_service, esc_scope, esc_rt);
        curl_free(esc_rt);
        o.method = "POST";
        o.body = form.data;
        o.body_len = form.len;
        hdrs[0] = "Content-Type: application/x-www-form-urlencoded";
    } else {
        rc = tkm_buf_printf(&url, "%s%sservice=%s&scope=%s", c->realm,
                            strchr(c->realm, '?') ? "&" : "?", esc_service, esc_scope);
        if (rc == 0 && r->have_creds && !r->anonymous && r->creds.username[0]) {
            rc = tkm_oci_basic_header(&r->creds, basic, sizeof basic);
            snprintf(authz, sizeof authz, "Authorization: %s", basic);
            hdrs[0] = authz;
        }
    }
    if (rc)
        goto out;
    o.url = url.data;
    if ((rc = reg_http(r, &o, &resp, err)) != 0)
        goto out;
    if (resp.status != 200) {
        rc = status_error(r, &resp, "token request", err);
        goto out;
    }
    if ((rc = tkm_oci_token_parse(resp.body.data, resp.body.len, c->realm, tok, sizeof tok, &ttl,
                                  err)) != 0)
        goto out;
    rc = token_store(r, key, tok, ttl);
out:
    memset(basic, 0, sizeof basic);
    memset(authz, 0, sizeof authz);
    memset(tok, 0, sizeof tok);
    curl_free(esc_service);
    curl_free(esc_scope);
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    tkm_buf_release(&form);
    return rc;
}

/* Reacts to a 401: learns the scheme, gets a token. */
static int authenticate(struct tkm_oci_registry *r, const struct tkm_http_resp *resp,
                        const char *scope, struct tkm_err *err)
{
    char hdr[2048];
    struct tkm_oci_challenge c;
    if (tkm_http_resp_header(resp, "WWW-Authenticate", hdr, sizeof hdr) < 0)
        return tkm_err_set(err, -EACCES, "%s: 401 Unauthorized without a WWW-Authenticate header",
                           resp->url);
    int rc = tkm_oci_challenge_parse(&c, hdr, err);
    if (rc) {
        tkm_err_prefix(err, "%s", resp->url);
        return rc;
    }
    if (c.scheme == TKM_OCI_AUTH_BASIC) {
        if (!r->have_creds || !r->creds.username[0])
            return 1; /* nothing to try: the caller reports the 401 */
        if (r->use_basic)
            return 1; /* already sent, rejected */
        r->use_basic = 1;
        return 0;
    }
    /* Bearer: the scope the registry asks for wins over the one we guessed. */
    return fetch_token(r, &c, c.scope[0] ? c.scope : scope, scope, err);
}

/* 1 when a failed attempt of q may be repeated: idempotent, and a transport
 * error or a status that says "later" (429, 500, 502, 503, 504). */
static int retryable(const struct reg_req *q, int rc, const struct tkm_http_resp *resp)
{
    if (strcmp(q->method, "GET") != 0 && strcmp(q->method, "HEAD") != 0)
        return 0;
    if (q->streaming && !q->reset)
        return 0;
    if (rc)
        return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -ETIMEDOUT || rc == -EIO;
    return resp->status == 429 || resp->status == 500 || resp->status == 502 ||
           resp->status == 503 || resp->status == 504;
}

static void retry_wait(const struct tkm_http_resp *resp, int tries, const char *url)
{
    long ra = tkm_http_retry_after(resp, REG_RETRY_AFTER_MAX_S);
    uint64_t ms = ra >= 0 ? (uint64_t)ra * 1000 : (REG_BACKOFF_MS << tries) + tkm_now_ms() % 250;
    if (resp->status)
        tkm_info("registry: %s: HTTP %ld, retrying in %llu ms", url, resp->status,
                 (unsigned long long)ms);
    else
        tkm_info("registry: %s: %s, retrying in %llu ms", url, strerror(-resp->code),
                 (unsigned long long)ms);
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Builds the header lines of q into hdrs (at most 5 + NULL). */
static void build_headers(struct tkm_oci_registry *r, const struct reg_req *q, const char **hdrs,
                          char *authz, size_t authz_n, char *accept, size_t accept_n, char *ctype,
                          size_t ctype_n)
{
    char basic[2048];
    size_t nh = 0;
    if (r->use_basic && r->have_creds && !r->anonymous) {
        if (tkm_oci_basic_header(&r->creds, basic, sizeof basic) == 0) {
            snprintf(authz, authz_n, "Authorization: %s", basic);
            hdrs[nh++] = authz;
        }
        memset(basic, 0, sizeof basic);
    } else {
        struct reg_token *t = token_find(r, q->scope);
        if (t)
            hdrs[nh++] = t->value;
    }
    if (q->accept) {
        snprintf(accept, accept_n, "Accept: %s", q->accept);
        hdrs[nh++] = accept;
    }
    if (q->content_type) {
        snprintf(ctype, ctype_n, "Content-Type: %s", q->content_type);
        hdrs[nh++] = ctype;
    }
    if (q->extra)
        hdrs[nh++] = q->extra;
    hdrs[nh] = NULL;
}

/* Performs q: once more after authenticating on a 401, and up to
 * REG_RETRIES more times with backoff when retryable(). resp is initialised
 * here; the caller releases it in every case. */
static int reg_do(struct tkm_oci_registry *r, const struct reg_req *q, struct tkm_http_resp *resp,
                  struct tkm_err *err)
{
    char authz[2100], accept[512], ctype[256];
    const char *hdrs[6];
    int rc = 0, authed = 0, tries = 0;
    tkm_http_resp_init(resp);
    for (;;) {
        struct tkm_err e = {0};
        build_headers(r, q, hdrs, authz, sizeof authz, accept, sizeof accept, ctype, sizeof ctype);
        struct tkm_http_req_opts o = {
            .method = q->method,
            .url = q->url,
            .headers = hdrs,
            .body = q->body,
            .body_len = q->body_len,
            .timeout_ms = q->streaming ? 0 : r->timeout_ms,
            .idle_timeout_ms = q->streaming ? r->idle_timeout_ms : 0,
            .max_body = q->max_body ? q->max_body : REG_ERR_BODY_MAX,
            .follow_redirects = q->follow,
            .data_cb = q->data_cb,
            .data = q->data,
        };
        struct tkm_http_tls tls = {.ca_file = r->ca_file};
        if (r->ca_file)
            o.tls = &tls;
        rc = reg_http(r, &o, resp, &e);
        memset(authz, 0, sizeof authz);
        int again = 0;
        if (rc == 0 && resp->status == 401 && !authed) {
            authed = 1;
            rc = authenticate(r, resp, q->scope, err);
            if (rc) {
                rc = rc > 0 ? 0 : rc; /* > 0: leave the 401 for the caller to report */
                break;
            }
            again = 1;
        } else if (tries < REG_RETRIES && retryable(q, rc, resp)) {
            retry_wait(resp, tries++, q->url);
            again = 1;
        }
        if (!again) {
            if (rc && tries)
                tkm_err_set(err, rc, "%s (gave up after %d attempts)", e.msg, tries + 1);
            else if (rc)
                tkm_err_set(err, rc, "%s", e.msg);
            break;
        }
        if (q->reset && (rc = q->reset(q->data)) != 0) {
            tkm_err_set(err, rc, "%s: cannot restart the transfer: %s", q->url, strerror(-rc));
            break;
        }
        tkm_http_resp_release(resp);
        tkm_http_resp_init(resp);
    }
    return rc;
}

static int url_printf(struct tkm_buf *b, struct tkm_oci_registry *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int url_printf(struct tkm_buf *b, struct tkm_oci_registry *r, const char *fmt, ...)
{
    va_list ap;
    int rc = tkm_buf_printf(b, "%s://%s", r->scheme, r->host);
    if (rc)
        return rc;
    va_start(ap, fmt);
    rc = tkm_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

static void scope_of(char *out, size_t n, const char *repo, int push)
{
    snprintf(out, n, "repository:%s:%s", repo, push ? "pull,push" : "pull");
}

/* ---- manifests ----------------------------------------------------------- */

int tkm_oci_registry_get_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, struct tkm_buf *body, char *content_type,
                                  size_t ct_n, char digest[TKM_OCI_DIGEST_LEN + 1],
                                  struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char scope[600], got[TKM_OCI_DIGEST_LEN + 1];
    int rc;
    scope_of(scope, sizeof scope, repo, 0);
    tkm_http_resp_init(&resp);
    if ((rc = url_printf(&url, r, "/v2/%s/manifests/%s", repo, reference)) != 0)
        goto out;
    struct reg_req q = {.method = "GET",
                        .url = url.data,
                        .scope = scope,
                        .accept = TKM_OCI_MANIFEST_ACCEPT,
                        .max_body = TKM_OCI_MANIFEST_MAX};
    tkm_http_resp_release(&resp);
    if ((rc = reg_do(r, &q, &resp, err)) != 0) {
        if (rc == -E2BIG)
            tkm_err_prefix(err, "manifest larger than %u bytes", TKM_OCI_MANIFEST_MAX);
        goto out;
    }
    if (resp.status != 200) {
        rc = status_error(r, &resp, "manifest", err);
        goto out;
    }
    if ((rc = tkm_oci_digest_bytes(resp.body.data, resp.body.len, got)) != 0)
        goto out;
    if (tkm_oci_digest_valid(reference) && strcmp(reference, got) != 0) {
        rc = tkm_err_set(err, -EBADMSG,
                         "manifest %s: digest mismatch: expected %s, the bytes received hash to %s",
                         url.data, reference, got);
        goto out;
    }
    if (content_type && ct_n && tkm_http_resp_header(&resp, "Content-Type", content_type, ct_n) < 0)
        content_type[0] = '\0';
    tkm_buf_reset(body);
    if ((rc = tkm_buf_append(body, resp.body.data, resp.body.len)) != 0) {
        rc = tkm_err_set(err, rc, "manifest %s: %zu bytes do not fit the caller's buffer", url.data,
                         resp.body.len);
        goto out;
    }
    memcpy(digest, got, sizeof got);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* OCI 1.1 referrers: GET /v2/<repo>/referrers/<digest>[?artifactType=<pct-encoded>]. A 404 (the
 * spec's answer), 400/405/501 (what registries without the route answer), or a 200 that is not an
 * image index means no referrers API: -ENOTSUP, so the caller falls back to the "sha256-<hex>"
 * tag schema. */
int tkm_oci_registry_get_referrers(struct tkm_oci_registry *r, const char *repo, const char *digest,
                                   const char *artifact_type, struct tkm_buf *body,
                                   struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char scope[600], ct[256] = "";
    int rc;
    scope_of(scope, sizeof scope, repo, 0);
    tkm_http_resp_init(&resp);
    if (!tkm_oci_digest_valid(digest)) {
        rc = tkm_err_set(err, -EINVAL, "referrers: '%s' is not a sha256 digest", digest);
        goto out;
    }
    if ((rc = url_printf(&url, r, "/v2/%s/referrers/%s", repo, digest)) != 0)
        goto out;
    for (const char *p = artifact_type; p && *p && rc == 0; p++) {
        unsigned char c = (unsigned char)*p;
        if (p == artifact_type)
            rc = tkm_buf_printf(&url, "?artifactType=");
        if (rc == 0 && (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~'))
            rc = tkm_buf_printf(&url, "%c", c);
        else if (rc == 0)
            rc = tkm_buf_printf(&url, "%%%02X", c);
    }
    if (rc != 0)
        goto out;
    struct reg_req q = {.method = "GET",
                        .url = url.data,
                        .scope = scope,
                        .accept = "application/vnd.oci.image.index.v1+json",
                        .max_body = TKM_OCI_MANIFEST_MAX};
    tkm_http_resp_release(&resp);
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status == 404 || resp.status == 405 || resp.status == 400 || resp.status == 501) {
        rc = tkm_err_set(err, -ENOTSUP, "referrers: %s: HTTP %ld (no OCI referrers API)", url.data,
                         resp.status);
        goto out;
    }
    if (resp.status != 200) {
        rc = status_error(r, &resp, "referrers", err);
        goto out;
    }
    if (tkm_http_resp_header(&resp, "Content-Type", ct, sizeof ct) < 0 ||
        strncmp(ct, "application/vnd.oci.image.index.v1+json", 39) != 0) {
        rc = tkm_err_set(err, -ENOTSUP,
                         "referrers: %s: answered Content-Type '%s', not an OCI index", url.data,
                         ct);
        goto out;
    }
    tkm_buf_reset(body);
    if ((rc = tkm_buf_append(body, resp.body.data, resp.body.len)) != 0)
        rc = tkm_err_set(err, rc, "referrers %s: %zu bytes do not fit the caller's buffer",
                         url.data, resp.body.len);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

int tkm_oci_registry_resolve(struct tkm_oci_registry *r, const char *repo, const char *reference,
                             char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX), body = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    struct tkm_http_resp resp;
    char scope[600], hdr[128];
    int rc;
    if (tkm_oci_digest_valid(reference)) {
        memcpy(digest, reference, TKM_OCI_DIGEST_LEN + 1);
        return 0;
    }
    scope_of(scope, sizeof scope, repo, 0);
    if ((rc = url_printf(&url, r, "/v2/%s/manifests/%s", repo, reference)) != 0)
        goto out_nor;
    struct reg_req q = {
        .method = "HEAD", .url = url.data, .scope = scope, .accept = TKM_OCI_MANIFEST_ACCEPT};
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status == 200 &&
        tkm_http_resp_header(&resp, "Docker-Content-Digest", hdr, sizeof hdr) > 0 &&
        tkm_oci_digest_valid(hdr)) {
        memcpy(digest, hdr, TKM_OCI_DIGEST_LEN + 1);
        goto out;
    }
    if (resp.status != 200 && resp.status != 405) {
        rc = status_error(r, &resp, "manifest", err);
        goto out;
    }
    /* No usable header: GET and hash the bytes. */
    rc = tkm_oci_registry_get_manifest(r, repo, reference, &body, NULL, 0, digest, err);
out:
    tkm_http_resp_release(&resp);
out_nor:
    tkm_buf_release(&url);
    tkm_buf_release(&body);
    return rc;
}

int tkm_oci_registry_put_manifest(struct tkm_oci_registry *r, const char *repo,
                                  const char *reference, const char *media_type, const void *p,
                                  size_t n, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char scope[600];
    int rc;
    scope_of(scope, sizeof scope, repo, 1);
    tkm_http_resp_init(&resp);
    if ((rc = url_printf(&url, r, "/v2/%s/manifests/%s", repo, reference)) != 0)
        goto out;
    struct reg_req q = {.method = "PUT",
                        .url = url.data,
                        .scope = scope,
                        .content_type = media_type,
                        .body = p,
                        .body_len = n};
    tkm_http_resp_release(&resp);
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status != 201 && resp.status != 200)
        rc = status_error(r, &resp, "manifest upload", err);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* ---- blobs --------------------------------------------------------------- */

struct blob_sink {
    struct tkm_oci_registry *r;
    int fd;                  /* file sink, or -1 */
    struct tkm_buf *mem;     /* memory sink, or NULL */
    struct tkm_oci_hasher h; /* over every byte received */
    uint64_t size;           /* the descriptor's size: an exact limit */
    uint64_t next_progress;
    int write_errno;
};

static int blob_data(struct tkm_http_req *req, const char *p, size_t n, void *data)
{
    struct blob_sink *s = data;
    (void)req;
    if (s->h.bytes + n > s->size)
        return 1; /* more than declared */
    if (tkm_oci_hasher_update(&s->h, p, n) != 0)
        return 3;
    if (s->mem) {
        if (tkm_buf_append(s->mem, p, n) != 0)
            return 4;
    } else {
        for (size_t off = 0; off < n;) {
            ssize_t w = write(s->fd, p + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                s->write_errno = errno;
                return 2;
            }
            off += (size_t)w;
        }
    }
    if (s->r->progress && s->h.bytes >= s->next_progress) {
        s->r->progress(s->r->progress_ud, s->h.bytes, s->size);
        s->next_progress = s->h.bytes + (1u << 20);
    }
    return 0;
}

/* Starts the sink over (a retried download). */
static int blob_reset(void *data)
{
    struct blob_sink *s = data;
    tkm_oci_hasher_release(&s->h);
    if (s->mem)
        tkm_buf_reset(s->mem);
    else if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0)
        return -errno;
    s->next_progress = 0;
    return tkm_oci_hasher_init(&s->h);
}

/* Streams blob d into the sink and checks size and digest. */
static int blob_get(struct tkm_oci_registry *r, const char *repo, const struct tkm_oci_desc *d,
                    struct blob_sink *s, const char *where, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char scope[600], got[TKM_OCI_DIGEST_LEN + 1];
    int rc;
    scope_of(scope, sizeof scope, repo, 0);
    tkm_http_resp_init(&resp);
    if (!tkm_oci_digest_valid(d->digest)) {
        rc = tkm_err_set(err, -EINVAL, "blob digest '%.80s' is not sha256:<64 hex>", d->digest);
        goto out;
    }
    if ((rc = tkm_oci_hasher_init(&s->h)) != 0 ||
        (rc = url_printf(&url, r, "/v2/%s/blobs/%s", repo, d->digest)) != 0)
        goto out;
    struct reg_req q = {.method = "GET",
                        .url = url.data,
                        .scope = scope,
                        .follow = 1,
                        .streaming = 1,
                        .data_cb = blob_data,
                        .reset = blob_reset,
                        .data = s};
    tkm_http_resp_release(&resp);
    rc = reg_do(r, &q, &resp, err);
    if (rc == -EINTR) {
        tkm_err_clear(err);
        if (resp.cb_rc == 1)
            rc = tkm_err_set(err, -EBADMSG,
                             "blob %s from %s: more bytes than the %llu its descriptor declares",
                             d->digest, url.data, (unsigned long long)d->size);
        else if (resp.cb_rc == 2)
            rc = tkm_err_set(err, -s->write_errno, "blob %s: write %s: %s", d->digest, where,
                             strerror(s->write_errno));
        else
            rc = tkm_err_set(err, -ENOMEM, "blob %s: cannot hold %llu bytes in memory", d->digest,
                             (unsigned long long)d->size);
        goto out;
    }
    if (rc) {
        tkm_err_prefix(err, "blob %s", d->digest);
        goto out;
    }
    if (resp.status != 200) {
        char what[128];
        snprintf(what, sizeof what, "blob %s", d->digest);
        rc = status_error(r, &resp, what, err);
        goto out;
    }
    if (s->h.bytes != d->size) {
        rc = tkm_err_set(err, -EBADMSG, "blob %s from %s: got %llu bytes, the descriptor says %llu",
                         d->digest, url.data, (unsigned long long)s->h.bytes,
                         (unsigned long long)d->size);
        goto out;
    }
    if ((rc = tkm_oci_hasher_final(&s->h, got)) != 0)
        goto out;
    if (strcmp(got, d->digest) != 0) {
        rc = tkm_err_set(err, -EBADMSG,
                         "blob %s from %s: digest mismatch: the bytes received hash to %s",
                         d->digest, url.data, got);
        goto out;
    }
    if (r->progress)
        r->progress(r->progress_ud, s->h.bytes, d->size);
out:
    tkm_oci_hasher_release(&s->h);
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

int tkm_oci_registry_fetch_blob(struct tkm_oci_registry *r, const char *repo,
                                const struct tkm_oci_desc *d, const char *path, struct tkm_err *err)
{
    struct blob_sink s = {.r = r, .size = d->size};
    int rc;
    s.fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (s.fd < 0)
        return tkm_err_set(err, -errno, "blob %s: create %s: %s", d->digest, path, strerror(errno));
    rc = blob_get(r, repo, d, &s, path, err);
    if (rc == 0 && fsync(s.fd) != 0)
        rc = tkm_err_set(err, -errno, "blob %s: fsync %s: %s", d->digest, path, strerror(errno));
    if (close(s.fd) != 0 && rc == 0)
        rc = tkm_err_set(err, -errno, "blob %s: close %s: %s", d->digest, path, strerror(errno));
    if (rc)
        unlink(path);
    return rc;
}

int tkm_oci_registry_fetch_blob_mem(struct tkm_oci_registry *r, const char *repo,
                                    const struct tkm_oci_desc *d, struct tkm_buf *out,
                                    struct tkm_err *err)
{
    struct blob_sink s = {.r = r, .fd = -1, .mem = out, .size = d->size};
    if (d->size > out->max)
        return tkm_err_set(err, -E2BIG, "blob %s: %llu bytes exceed the %zu byte limit", d->digest,
                           (unsigned long long)d->size, out->max);
    tkm_buf_reset(out);
    int rc = blob_get(r, repo, d, &s, "memory", err);
    if (rc)
        tkm_buf_reset(out);
    return rc;
}

int tkm_oci_registry_blob_exists(struct tkm_oci_registry *r, const char *repo, const char *digest,
                                 struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    char scope[600];
    int rc;
    scope_of(scope, sizeof scope, repo, 1);
    tkm_http_resp_init(&resp);
    if ((rc = url_printf(&url, r, "/v2/%s/blobs/%s", repo, digest)) != 0)
        goto out;
    struct reg_req q = {.method = "HEAD", .url = url.data, .scope = scope, .follow = 1};
    tkm_http_resp_release(&resp);
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status == 200)
        rc = 1;
    else if (resp.status == 404)
        rc = 0;
    else
        rc = status_error(r, &resp, "blob check", err);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* ---- push ---------------------------------------------------------------- */

/* The absolute upload URL from a 202's Location header, into loc. */
static int upload_location(struct tkm_oci_registry *r, const struct tkm_http_resp *resp,
                           struct tkm_buf *loc, struct tkm_err *err)
{
    char hdr[4096];
    int n = tkm_http_resp_header(resp, "Location", hdr, sizeof hdr);
    if (n < 0 || (size_t)n >= sizeof hdr)
        return tkm_err_set(err, -EPROTO, "%s: upload response without a usable Location header",
                           resp->url);
    tkm_buf_reset(loc);
    if (hdr[0] == '/')
        return url_printf(loc, r, "%s", hdr);
    if (strncasecmp(hdr, "https://", 8) != 0 && strncasecmp(hdr, "http://", 7) != 0)
        return tkm_err_set(err, -EPROTO, "%s: upload Location '%.200s' is not a URL", resp->url,
                           hdr);
    return tkm_buf_puts(loc, hdr);
}

/* POST /v2/<repo>/blobs/uploads/ -> loc. */
static int upload_start(struct tkm_oci_registry *r, const char *repo, const char *scope,
                        struct tkm_buf *loc, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    int rc = url_printf(&url, r, "/v2/%s/blobs/uploads/", repo);
    tkm_http_resp_init(&resp);
    if (rc)
        goto out;
    struct reg_req q = {.method = "POST",
                        .url = url.data,
                        .scope = scope,
                        .content_type = "application/octet-stream",
                        .extra = "Content-Length: 0"};
    tkm_http_resp_release(&resp);
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status != 202) {
        rc = status_error(r, &resp, "blob upload start", err);
        goto out;
    }
    rc = upload_location(r, &resp, loc, err);
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* PUT loc?digest=D with the last (or only) bytes. */
static int upload_finish(struct tkm_oci_registry *r, const char *scope, const struct tkm_buf *loc,
                         const char *digest, const void *p, size_t n, struct tkm_err *err)
{
    struct tkm_buf url = TKM_BUF_INIT(REG_URL_MAX);
    struct tkm_http_resp resp;
    int rc = tkm_buf_printf(&url, "%s%sdigest=%s", loc->data, strchr(loc->data, '?') ? "&" : "?",
                            digest);
    tkm_http_resp_init(&resp);
    if (rc)
        goto out;
    struct reg_req q = {.method = "PUT",
                        .url = url.data,
                        .scope = scope,
                        .content_type = "application/octet-stream",
                        .body = n ? p : NULL,
                        .body_len = n,
                        .extra = n ? NULL : "Content-Length: 0"};
    tkm_http_resp_release(&resp);
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status != 201) {
        char what[128];
        snprintf(what, sizeof what, "blob %s upload", digest);
        rc = status_error(r, &resp, what, err);
    }
out:
    tkm_http_resp_release(&resp);
    tkm_buf_release(&url);
    return rc;
}

/* PATCH one chunk at offset off; loc is updated to the next Location. */
static int upload_chunk(struct tkm_oci_registry *r, const char *scope, struct tkm_buf *loc,
                        uint64_t off, const void *p, size_t n, struct tkm_err *err)
{
    struct tkm_http_resp resp;
    char range[96];
    int rc;
    snprintf(range, sizeof range, "Content-Range: %llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + n - 1));
    struct reg_req q = {.method = "PATCH",
                        .url = loc->data,
                        .scope = scope,
                        .content_type = "application/octet-stream",
                        .extra = range,
                        .body = p,
                        .body_len = n};
    if ((rc = reg_do(r, &q, &resp, err)) != 0)
        goto out;
    if (resp.status != 202) {
        rc = status_error(r, &resp, "blob chunk upload", err);
        goto out;
    }
    rc = upload_location(r, &resp, loc, err);
out:
    tkm_http_resp_release(&resp);
    return rc;
}

int tkm_oci_registry_push_blob_mem(struct tkm_oci_registry *r, const char *repo, const void *p,
                                   size_t n, const char *digest, int *skipped, struct tkm_err *err)
{
    struct tkm_buf loc = TKM_BUF_INIT(REG_URL_MAX);
    char scope[600];
    int rc = tkm_oci_registry_blob_exists(r, repo, digest, err);
    if (skipped)
        *skipped = rc == 1;
    if (rc != 0)
        return rc < 0 ? rc : 0;
    scope_of(scope, sizeof scope, repo, 1);
    if ((rc = upload_start(r, repo, scope, &loc, err)) == 0)
        rc = upload_finish(r, scope, &loc, digest, p, n, err);
    tkm_buf_release(&loc);
    return rc;
}

static int read_full(int fd, char *p, size_t n, size_t *got)
{
    size_t off = 0;
    while (off < n) {
        ssize_t rd = read(fd, p + off, n - off);
        if (rd < 0 && errno == EINTR)
            continue;
        if (rd < 0)
            return -errno;
        if (rd == 0)
            break;
        off += (size_t)rd;
    }
    *got = off;
    return 0;
}

int tkm_oci_registry_push_blob_file(struct tkm_oci_registry *r, const char *repo, const char *path,
                                    const char *digest, uint64_t size, int *skipped,
                                    struct tkm_err *err)
{
    struct tkm_buf loc = TKM_BUF_INIT(REG_URL_MAX);
    char scope[600];
    char *chunk = NULL;
    int fd = -1, rc = tkm_oci_registry_blob_exists(r, repo, digest, err);
    if (skipped)
        *skipped = rc == 1;
    if (rc != 0)
        return rc < 0 ? rc : 0;
    scope_of(scope, sizeof scope, repo, 1);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = tkm_err_set(err, -errno, "blob %s: open %s: %s", digest, path, strerror(errno));
        goto out;
    }
    if (!(chunk = malloc(REG_CHUNK))) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = upload_start(r, repo, scope, &loc, err)) != 0)
        goto out;
    uint64_t off = 0;
    for (;;) {
        size_t got = 0;
        if ((rc = read_full(fd, chunk, REG_CHUNK, &got)) != 0) {
            rc = tkm_err_set(err, rc, "blob %s: read %s: %s", digest, path, strerror(-rc));
            goto out;
        }
        if (off + got > size) {
            rc = tkm_err_set(err, -EBADMSG, "blob %s: %s is larger than %llu bytes", digest, path,
                             (unsigned long long)size);
            goto out;
        }
        if (off + got == size) { /* the last piece goes with the PUT */
            rc = upload_finish(r, scope, &loc, digest, chunk, got, err);
            off += got;
            break;
        }
        if (got == 0) {
            rc = tkm_err_set(err, -EBADMSG, "blob %s: %s ended after %llu of %llu bytes", digest,
                             path, (unsigned long long)off, (unsigned long long)size);
            goto out;
        }
        if ((rc = upload_chunk(r, scope, &loc, off, chunk, got, err)) != 0)
            goto out;
        off += got;
        if (r->progress)
            r->progress(r->progress_ud, off, size);
    }
    if (rc == 0 && r->progress)
        r->progress(r->progress_ud, off, size);
out:
    if (fd >= 0)
        close(fd);
    free(chunk);
    tkm_buf_release(&loc);
    return rc;
}
