/*
 * session.c - the asynchronous registry core (see session.h): a session per
 * registry host (credentials, tokens) and calls (one request with its
 * authentication and retries) on the caller's tkm_http/libuv loop.
 */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <tkm/backoff.h>
#include <tkm/log.h>
#include <tkm/oci/auth.h>
#include <tkm/reach.h>
#include <tkm/util.h>

#include "oci/session-int.h"

#define SES_TOKENS            16
#define SES_TOKEN_MAX         16384
#define SES_ERR_BODY_MAX      (64u << 10)
#define SES_DEFAULT_TO_MS     60000
#define SES_RETRIES           3
#define SES_BACKOFF_MS        500u
#define SES_RETRY_AFTER_MAX_S 30
#define SES_DEFAULT_DEADLINE  (30u * 60 * 1000)
#define SES_PINS              8     /* reach decisions kept per session */
#define SES_PIN_TTL_MS        30000 /* a decision's addresses are used this long, then re-resolved */
#define SES_MAX_REDIRECTS     5

/* The registry reach policy sessions share (read by the thread pool's
 * decisions; the count is only touched on the loop). */
struct tkm_oci_reach {
    unsigned refs;
    struct tkm_reach_policy pol;
};

/* An allowed reach decision for one host[:port] of a URL, and its pin. */
struct ses_pin {
    char hostport[TKM_OCI_NAME_MAX + 1];
    int follow_only; /* decided as a redirect/realm host (TKM_REACH_FOLLOW) */
    uint64_t expires_ms;
    char resolve[sizeof((struct tkm_reach_decision *)0)->resolve];
};

struct ses_token {
    char scope[1024];
    char *value; /* "Authorization: Bearer ..." header line, owned */
    uint64_t expires_ms;
};

struct tkm_oci_session {
    struct tkm_http *http; /* borrowed */
    char host[TKM_OCI_NAME_MAX + 1];
    char url_host[TKM_OCI_NAME_MAX + 3]; /* host[:port] as URLs write it (a literal canonical) */
    char scheme[8];
    struct tkm_oci_reach *reach; /* NULL: any host may be contacted (tkmctl's choice) */
    struct ses_pin pins[SES_PINS];
    size_t next_pin;
    char *ca_file;
    /* a mirror endpoint's settings (registry.h), owned */
    char *path_prefix, *ns, *client_cert, *client_key;
    char *headers[TKM_OCI_EXTRA_HEADERS];
    size_t n_headers;
    int skip_verify, scheme_fixed;
    int anonymous;
    int have_creds;
    struct tkm_oci_creds creds;
    int use_basic; /* the registry asked for Basic */
    uint64_t timeout_ms, idle_timeout_ms, deadline_ms;
    uint64_t max_recv_bps; /* blob transfers' rate cap, 0: none */
    tkm_oci_progress_cb progress;
    void *progress_ud;
    struct ses_token tokens[SES_TOKENS];
    size_t next_token;
    struct tkm__oci_link *links; /* calls and jobs in flight */
    size_t n_links, n_jobs;
    int freeing;
    void (*closed_cb)(void *data); /* tkm_oci_session_close() */
    void *closed_data;
    /* the session's share of the thread pool */
    unsigned pool_busy;
    struct tkm__oci_work *pool_head, *pool_tail;
};

enum call_phase { CALL_MAIN, CALL_TOKEN, CALL_WAIT, CALL_DONE };

struct tkm__oci_call {
    struct tkm__oci_link link;
    struct tkm_oci_session *s;
    struct tkm__oci_req q; /* strings point at the copies below */
    char *url, *scope, *accept, *content_type, *extra, *token_url, *token_form;
    char token_scope[1024];
    char realm[1024];
    struct tkm_oci_challenge ch; /* the challenge a token request answers */
    int gating;                  /* a reach decision for the next request is on the pool */
    unsigned redirects;          /* followed by the call itself (a reach policy is set) */
    tkm__oci_call_cb cb;
    void *data;
    struct tkm_http_req *hreq; /* the request in flight, or NULL */
    uv_timer_t timer;          /* retry waits and deferred reports */
    int timer_ready;
    enum call_phase phase;
    int authed, cancelled;
    struct tkm_backoff bo; /* retry waits; bo.steps = retries so far */
    uint64_t deadline_at;  /* downloads: tkm_now_ms() by which it ends, retries included; 0 none */
    int report_rc;         /* CALL_DONE by a timer: the code to report */
    struct tkm_err err;
};

static void call_send(struct tkm__oci_call *c);

/* ---- session ------------------------------------------------------------- */

const char *tkm_oci_session_scheme(const struct tkm_oci_session *s)
{
    return s->scheme;
}

size_t tkm_oci_session_jobs(const struct tkm_oci_session *s)
{
    return s ? s->n_jobs : 0;
}

void tkm_oci_session_set_deadline(struct tkm_oci_session *s, uint64_t ms)
{
    s->deadline_ms = ms ? ms : SES_DEFAULT_DEADLINE;
}

uint64_t tkm_oci_session_deadline(const struct tkm_oci_session *s)
{
    return s->deadline_ms;
}

uv_loop_t *tkm__oci_session_loop(const struct tkm_oci_session *s)
{
    return tkm_http_loop(s->http);
}

const char *tkm__oci_session_host(const struct tkm_oci_session *s)
{
    return s->host;
}

tkm_oci_progress_cb tkm__oci_session_progress(const struct tkm_oci_session *s, void **ud)
{
    *ud = s->progress_ud;
    return s->progress;
}

static int load_creds(struct tkm_oci_session *s, const struct tkm_oci_registry_opts *o,
                      struct tkm_err *err)
{
    int rc;
    if (o->anonymous)
        return 0;
    if (o->auth_json)
        rc = tkm_oci_creds_from_config(o->auth_json, o->auth_json_len, s->host,
                                       "registry credentials", &s->creds, err);
    else if (o->auth_file)
        rc = tkm_oci_creds_load_file(o->auth_file, s->host, &s->creds, err);
    else
        rc = tkm_oci_creds_load(s->host, &s->creds, err);
    if (rc == -ENOENT)
        return 0;
    if (rc == 0)
        s->have_creds = 1;
    return rc;
}

static void session_destroy(struct tkm_oci_session *s)
{
    for (size_t i = 0; i < SES_TOKENS; i++)
        if (s->tokens[i].value) {
            memset(s->tokens[i].value, 0, strlen(s->tokens[i].value));
            free(s->tokens[i].value);
        }
    void (*closed_cb)(void *data) = s->closed_cb;
    void *closed_data = s->closed_data;
    tkm_oci_creds_wipe(&s->creds);
    tkm_oci_reach_unref(s->reach);
    free(s->ca_file);
    free(s->path_prefix);
    free(s->ns);
    free(s->client_cert);
    free(s->client_key);
    for (size_t i = 0; i < s->n_headers; i++)
        free(s->headers[i]);
    free(s);
    if (closed_cb)
        closed_cb(closed_data);
}

static int dup_opt(char **out, const char *s);

/* Copies the endpoint settings of o (registry.h) into s. */
static int session_endpoint(struct tkm_oci_session *s, const struct tkm_oci_registry_opts *o,
                            struct tkm_err *err)
{
    if (o->scheme) {
        if (strcmp(o->scheme, "http") != 0 && strcmp(o->scheme, "https") != 0)
            return tkm_err_set(err, -EINVAL, "registry %s: scheme '%.16s' is not http or https",
                               s->host, o->scheme);
        snprintf(s->scheme, sizeof s->scheme, "%s", o->scheme);
        s->scheme_fixed = 1;
    }
    if (o->path_prefix && (o->path_prefix[0] != '/' || strpbrk(o->path_prefix, "?# \r\n")))
        return tkm_err_set(err, -EINVAL,
                           "registry %s: path '%.100s' must start with / and hold no query",
                           s->host, o->path_prefix);
    for (size_t i = 0; o->headers && o->headers[i]; i++) {
        const char *h = o->headers[i], *colon = strchr(h, ':');
        if (i >= TKM_OCI_EXTRA_HEADERS)
            return tkm_err_set(err, -E2BIG, "registry %s: more than %d extra headers", s->host,
                               TKM_OCI_EXTRA_HEADERS);
        if (!colon || colon == h || strpbrk(h, "\r\n") || strlen(h) > 1024)
            return tkm_err_set(err, -EINVAL,
                               "registry %s: header %zu is not one 'Name: value' line", s->host,
                               i + 1);
        if (!(s->headers[i] = strdup(h)))
            return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", s->host);
        s->n_headers = i + 1;
    }
    s->skip_verify = o->skip_verify;
    if (dup_opt(&s->ca_file, o->ca_file) || dup_opt(&s->path_prefix, o->path_prefix) ||
        dup_opt(&s->ns, o->ns) || dup_opt(&s->client_cert, o->client_cert) ||
        dup_opt(&s->client_key, o->client_key))
        return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", s->host);
    return 0;
}

/* The TLS settings of the session's requests to its registry (and to an
 * https token realm), or NULL for libcurl's defaults. */
static const struct tkm_http_tls *session_tls(const struct tkm_oci_session *s,
                                              struct tkm_http_tls *tls)
{
    *tls = (struct tkm_http_tls){.ca_file = s->ca_file,
                                 .cert_file = s->client_cert,
                                 .key_file = s->client_key,
                                 .insecure = s->skip_verify};
    return s->ca_file || s->client_cert || s->skip_verify ? tls : NULL;
}

int tkm_oci_session_new(struct tkm_http *http, const char *host,
                        const struct tkm_oci_registry_opts *opts, struct tkm_oci_session **out,
                        struct tkm_err *err)
{
    struct tkm_oci_registry_opts none = {0};
    const struct tkm_oci_registry_opts *o = opts ? opts : &none;
    struct tkm_oci_session *s;
    int rc;
    if (!http || !host)
        return tkm_err_set(err, -EINVAL, "registry session: http client and host are required");
    if (strlen(host) > TKM_OCI_NAME_MAX)
        return tkm_err_set(err, -EINVAL, "registry host '%.100s...' is too long", host);
    if (!(s = calloc(1, sizeof *s)))
        return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", host);
    s->http = http;
    memcpy(s->host, host, strlen(host) + 1);
    memcpy(s->url_host, host, strlen(host) + 1);
    /* A CA bundle means the registry speaks TLS, loopback or not. */
    snprintf(s->scheme, sizeof s->scheme, "%s",
             !o->ca_file && tkm_oci_host_plain_http(host, o->insecure) ? "http" : "https");
    s->anonymous = o->anonymous;
    s->timeout_ms = o->timeout_ms ? o->timeout_ms : SES_DEFAULT_TO_MS;
    s->idle_timeout_ms = o->idle_timeout_ms ? o->idle_timeout_ms : SES_DEFAULT_TO_MS;
    tkm_oci_session_set_deadline(s, o->deadline_ms);
    s->max_recv_bps = o->max_recv_bps;
    s->progress = o->progress;
    s->progress_ud = o->progress_ud;
    if ((rc = session_endpoint(s, o, err)) != 0)
        goto fail;
    if ((rc = load_creds(s, o, err)) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    session_destroy(s);
    return rc;
}

void tkm__oci_link_add(struct tkm_oci_session *s, struct tkm__oci_link *l, int is_job)
{
    l->is_job = is_job;
    l->prev = NULL;
    l->next = s->links;
    if (s->links)
        s->links->prev = l;
    s->links = l;
    s->n_links++;
    s->n_jobs += is_job ? 1 : 0;
}

void tkm__oci_link_del(struct tkm_oci_session *s, struct tkm__oci_link *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        s->links = l->next;
    if (l->next)
        l->next->prev = l->prev;
    l->prev = l->next = NULL;
    s->n_links--;
    s->n_jobs -= l->is_job ? 1 : 0;
    if (s->freeing && s->n_links == 0 && !s->pool_busy)
        session_destroy(s);
}

int tkm__oci_session_freeing(const struct tkm_oci_session *s)
{
    return s->freeing;
}

void tkm__oci_session_cancel_all(struct tkm_oci_session *s)
{
    /* Cancellation never reports synchronously, so the list holds still. */
    for (struct tkm__oci_link *l = s ? s->links : NULL; l; l = l->next)
        l->cancel(l);
}

void tkm_oci_session_close(struct tkm_oci_session *s, void (*closed_cb)(void *data), void *data)
{
    if (!s || s->freeing)
        return;
    s->freeing = 1;
    s->closed_cb = closed_cb;
    s->closed_data = data;
    if (s->n_links == 0 && !s->pool_busy) {
        session_destroy(s);
        return;
    }
    /* Cancellation never reports synchronously, so the list holds still. */
    for (struct tkm__oci_link *l = s->links; l; l = l->next)
        l->cancel(l);
}

/* ---- registry reach -------------------------------------------------------- */

struct tkm_oci_reach *tkm_oci_reach_new(struct tkm_reach_policy *p)
{
    struct tkm_oci_reach *r = calloc(1, sizeof *r);
    if (!r) {
        tkm_reach_policy_release(p);
        return NULL;
    }
    r->refs = 1;
    r->pol = *p;
    memset(p, 0, sizeof *p);
    return r;
}

void tkm_oci_reach_unref(struct tkm_oci_reach *r)
{
    if (!r || --r->refs)
        return;
    tkm_reach_policy_release(&r->pol);
    free(r);
}

void tkm_oci_session_set_reach(struct tkm_oci_session *s, struct tkm_oci_reach *r)
{
    struct tkm_reach_host h;
    if (r)
        r->refs++;
    tkm_oci_reach_unref(s->reach);
    s->reach = r;
    memset(s->pins, 0, sizeof s->pins); /* decided under the policy before */
    memcpy(s->url_host, s->host, sizeof s->host);
    /* A host that does not parse keeps its spelling: the first call's decision refuses it. */
    if (!r || tkm_reach_host_parse(s->host, strlen(s->host), &h, NULL) < 0)
        return;
    /* The scheme is the admin's (registryPlainHTTP), not "loopback is plain HTTP". */
    if (!s->ca_file && !s->scheme_fixed)
        snprintf(s->scheme, sizeof s->scheme, "%s",
                 tkm_reach_list_match(&r->pol.plain_http, &h) ? "http" : "https");
    /* An IP literal goes into URLs as the address that is checked ("0177.1" is 127.0.0.1). */
    if (h.is_ip && h.port)
        snprintf(s->url_host, sizeof s->url_host, h.addr.family == 6 ? "[%s]:%u" : "%s:%u", h.name,
                 h.port);
    else if (h.is_ip)
        snprintf(s->url_host, sizeof s->url_host, h.addr.family == 6 ? "[%s]" : "%s", h.name);
}

/* ---- the session's share of the thread pool ----------------------------- */

static void pool_next(struct tkm_oci_session *s);

static void pool_after(uv_work_t *w, int status)
{
    struct tkm__oci_work *wk = w->data;
    struct tkm_oci_session *s = wk->s;
    (void)status;
    wk->after(wk); /* may free wk; not s, whose pool_busy still counts it */
    s->pool_busy--;
    pool_next(s);
    if (s->freeing && s->n_links == 0 && !s->pool_busy)
        session_destroy(s);
}

static void pool_run(uv_work_t *w)
{
    struct tkm__oci_work *wk = w->data;
    wk->work(wk);
}

static void pool_next(struct tkm_oci_session *s)
{
    while (s->pool_head && s->pool_busy < TKM_OCI_POOL_JOBS) {
        struct tkm__oci_work *wk = s->pool_head;
        s->pool_head = wk->next;
        if (!s->pool_head)
            s->pool_tail = NULL;
        wk->req.data = wk;
        int rc = uv_queue_work(tkm__oci_session_loop(s), &wk->req, pool_run, pool_after);
        if (rc) { /* cannot happen with a valid loop and callback; report it */
            wk->rc = rc;
            wk->after(wk);
            continue;
        }
        s->pool_busy++;
    }
}

void tkm__oci_pool_queue(struct tkm_oci_session *s, struct tkm__oci_work *wk)
{
    wk->s = s;
    wk->next = NULL;
    if (s->pool_tail)
        s->pool_tail->next = wk;
    else
        s->pool_head = wk;
    s->pool_tail = wk;
    pool_next(s);
}

/* ---- errors and URLs ----------------------------------------------------- */

int tkm__oci_status_error(const struct tkm_oci_session *s, const struct tkm_http_resp *resp,
                          const char *what, struct tkm_err *err)
{
    /* Never the body's text: a registry (or whatever answers at a tenant's
     * reference) reaches condition messages and events through this. Only
     * the status and a code from the distribution spec's list
     * (tkm_reach_remote_summary); the URL is the one tkm built, except for
     * a token request, whose URL is the registry's realm. */
    char sum[64];
    const char *spec = tkm_reach_oci_error_code(resp->body.data, resp->body.len);
    int code;
    tkm_reach_remote_summary(resp->status, resp->body.data, resp->body.len, sum, sizeof sum);
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
    const char *url = strcmp(what, "token request") == 0 ? s->host : resp->url;
    if (resp->status == 401 && s->have_creds && !s->anonymous)
        return tkm_err_set(err, code,
                           "%s: %s: 401 Unauthorized (the credentials for %s from %s were "
                           "rejected)",
                           what, url, s->host, s->creds.source);
    if (resp->status == 401) /* the spec's code for a 401 says no more than the status */
        return tkm_err_set(err, code, "%s: %s: 401 Unauthorized (%s)", what, url,
                           s->anonymous    ? "anonymous access requested"
                           : s->have_creds ? "the credentials were rejected"
                                           : "no credentials found for this registry: add them "
                                             "with docker login or --auth-file");
    return tkm_err_set(
        err, code, "%s: %s: %s%s", what, url, sum,
        !spec && resp->status == 404 ? ": not found (no such repository, tag or digest)" : "");
}

int tkm__oci_url(const struct tkm_oci_session *s, struct tkm_buf *b, const char *fmt, ...)
{
    va_list ap;
    int rc = tkm_buf_printf(b, "%s://%s", s->scheme, s->url_host);
    if (rc)
        return rc;
    va_start(ap, fmt);
    rc = tkm_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

int tkm__oci_api_url(const struct tkm_oci_session *s, struct tkm_buf *b, const char *fmt, ...)
{
    va_list ap;
    int rc = tkm_buf_printf(b, "%s://%s%s", s->scheme, s->url_host,
                            s->path_prefix ? s->path_prefix : "/v2");
    if (rc)
        return rc;
    va_start(ap, fmt);
    rc = tkm_buf_vprintf(b, fmt, ap);
    va_end(ap);
    if (rc == 0 && s->ns) {
        char *esc = curl_easy_escape(NULL, s->ns, 0);
        rc = esc ? tkm_buf_printf(b, "%sns=%s", memchr(b->data, '?', b->len) ? "&" : "?", esc)
                 : -ENOMEM;
        curl_free(esc);
    }
    return rc;
}

void tkm__oci_scope(char *out, size_t n, const char *repo, int push)
{
    snprintf(out, n, "repository:%s:%s", repo, push ? "pull,push" : "pull");
}

/* ---- tokens -------------------------------------------------------------- */

static struct ses_token *token_find(struct tkm_oci_session *s, const char *scope)
{
    uint64_t now = tkm_now_ms();
    for (size_t i = 0; i < SES_TOKENS; i++)
        if (s->tokens[i].value && strcmp(s->tokens[i].scope, scope) == 0 &&
            s->tokens[i].expires_ms > now)
            return &s->tokens[i];
    return NULL;
}

static int token_store(struct tkm_oci_session *s, const char *scope, const char *tok, long ttl)
{
    struct ses_token *t = &s->tokens[s->next_token++ % SES_TOKENS];
    struct tkm_buf b = TKM_BUF_INIT(SES_TOKEN_MAX + 64);
    if (tkm_buf_printf(&b, "Authorization: Bearer %s", tok) != 0)
        return -ENOMEM;
    if (t->value) {
        memset(t->value, 0, strlen(t->value));
        free(t->value);
    }
    t->value = tkm_buf_detach(&b, NULL);
    snprintf(t->scope, sizeof t->scope, "%s", scope);
    /* Renew a little early: the clock of the token service is not ours. */
    t->expires_ms = tkm_now_ms() + (uint64_t)(ttl > 20 ? ttl - 10 : ttl) * 1000;
    return t->value ? 0 : -ENOMEM;
}

/* 1 when credentials may go to the token realm: https, or plain http to a
 * loopback host or to the registry itself when that is already plain http
 * (loopback or named --insecure). */
static int realm_ok(const struct tkm_oci_session *s, const char *realm)
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
           (strcmp(s->scheme, "http") == 0 && strcasecmp(host, s->host) == 0);
}

/* ---- calls --------------------------------------------------------------- */

static void call_free(struct tkm__oci_call *c)
{
    free(c->url);
    free(c->scope);
    free(c->accept);
    free(c->content_type);
    free(c->extra);
    free(c->token_url);
    if (c->token_form) {
        memset(c->token_form, 0, strlen(c->token_form));
        free(c->token_form);
    }
    free(c);
}

static void call_timer_closed(uv_handle_t *h)
{
    call_free(h->data);
}

/* Reports to the owner once and frees the call. resp may be NULL. */
static void call_finish(struct tkm__oci_call *c, int rc, struct tkm_http_resp *resp)
{
    struct tkm_oci_session *s = c->s;
    struct tkm_http_resp none;
    c->phase = CALL_DONE;
    c->hreq = NULL;
    if (!resp) {
        tkm_http_resp_init(&none);
        none.url = c->url;
        resp = &none;
    }
    if (c->cancelled && rc == 0) {
        rc = -ECANCELED;
    }
    if (rc == -ECANCELED && !c->err.msg[0])
        tkm_err_set(&c->err, -ECANCELED, "%s: cancelled", c->url);
    c->cb(rc, resp, &c->err, c->data);
    if (resp == &none)
        tkm_http_resp_release(&none);
    tkm__oci_link_del(s, &c->link); /* may free s; c stays valid */
    if (c->timer_ready) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, call_timer_closed);
    } else {
        call_free(c);
    }
}

static void call_timer_fire(uv_timer_t *t)
{
    struct tkm__oci_call *c = t->data;
    if (c->phase == CALL_DONE)
        return;
    if (c->report_rc) {
        call_finish(c, c->report_rc, NULL);
        return;
    }
    if (c->cancelled) {
        call_finish(c, -ECANCELED, NULL);
        return;
    }
    if (c->q.reset) {
        int rc = c->q.reset(c->q.data);
        if (rc) {
            tkm_err_set(&c->err, rc, "%s: cannot restart the transfer: %s", c->url, strerror(-rc));
            call_finish(c, rc, NULL);
            return;
        }
    }
    call_send(c);
}

/* Runs call_timer_fire after ms (0: on the next loop iteration). */
static int call_defer(struct tkm__oci_call *c, uint64_t ms)
{
    if (!c->timer_ready) {
        int rc = uv_timer_init(tkm__oci_session_loop(c->s), &c->timer);
        if (rc)
            return rc;
        c->timer.data = c;
        c->timer_ready = 1;
    }
    return uv_timer_start(&c->timer, call_timer_fire, ms, 0);
}

static void call_link_cancel(struct tkm__oci_link *l)
{
    tkm__oci_call_cancel((struct tkm__oci_call *)l);
}

void tkm__oci_call_cancel(struct tkm__oci_call *c)
{
    if (!c || c->cancelled || c->phase == CALL_DONE)
        return;
    c->cancelled = 1;
    if (c->hreq)
        tkm_http_cancel(c->hreq); /* its done_cb reports -ECANCELED */
    else if (!c->gating)          /* a decision on the pool reports when it is back */
        call_defer(c, 0);
}

/* 1 when a failed attempt may be repeated: idempotent, and a transport
 * error or a status that says "later" (429, 500, 502, 503, 504). */
static int retryable(const struct tkm__oci_req *q, int rc, const struct tkm_http_resp *resp)
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

/* The wait before the next attempt: Retry-After, else the backoff (advanced
 * either way, so bo.steps counts the retries). */
static uint64_t retry_delay(struct tkm__oci_call *c, const struct tkm_http_resp *resp)
{
    long ra = tkm_http_retry_after(resp, SES_RETRY_AFTER_MAX_S);
    uint64_t ms = tkm_backoff_next(&c->bo, 0);
    if (ra >= 0)
        ms = (uint64_t)ra * 1000;
    /* A transport error wins over the status seen before it: a stalled 200
     * is a stall (resp->error names the URL and the cause), not "HTTP 200". */
    if (resp->code)
        tkm_info("registry: %s, retrying in %llu ms", resp->error, (unsigned long long)ms);
    else
        tkm_info("registry: %s: HTTP %ld, retrying in %llu ms", c->url, resp->status,
                 (unsigned long long)ms);
    return ms;
}

/* 1 when a download's deadline has passed (or will have after wait_ms). */
static int past_deadline(const struct tkm__oci_call *c, uint64_t wait_ms)
{
    return c->deadline_at && tkm_now_ms() + wait_ms >= c->deadline_at;
}

/* Ends a download at its deadline: -ETIME (callers name it
 * TKM_OCI_REASON_PULL_DEADLINE), the deadline and the last attempt's cause
 * (a transport sentence or a status, never a remote body). */
static void call_deadline(struct tkm__oci_call *c, int rc, struct tkm_http_resp *resp)
{
    char last[600], limit[32];
    uint64_t ms = c->s->deadline_ms;
    if (ms % 1000)
        snprintf(limit, sizeof limit, "%llu ms", (unsigned long long)ms);
    else
        snprintf(limit, sizeof limit, "%llu s", (unsigned long long)(ms / 1000));
    if (rc)
        snprintf(last, sizeof last, "%s", resp->error);
    else
        snprintf(last, sizeof last, "%s: HTTP %ld", c->url, resp->status);
    tkm_err_set(&c->err, -ETIME, "download deadline of %s reached (%u attempt%s; last: %s)", limit,
                c->bo.steps + 1, c->bo.steps ? "s" : "", last);
    tkm_warn("registry: %s", c->err.msg);
    call_finish(c, -ETIME, resp);
}

/* ---- reach: decide before a request, connect to what was checked -------- */

static int token_request(struct tkm__oci_call *c);

/* One decision on the thread pool, for the call's next request (or token
 * request). The call holds its link, and cannot report, until after ran. */
struct ses_decide {
    struct tkm__oci_work w;
    struct tkm__oci_call *c;
    struct tkm_oci_reach *reach; /* a reference, dropped in after */
    enum tkm_reach_purpose purpose;
    int token;
    char hostport[TKM_OCI_NAME_MAX + 1];
    struct tkm_reach_decision d;
};

/* host[:port] of an http(s) URL (no user info); *https set. -EINVAL otherwise. */
static int url_hostport(const char *url, char *out, size_t n, int *https)
{
    size_t skip = strncasecmp(url, "https://", 8) == 0  ? 8
                  : strncasecmp(url, "http://", 7) == 0 ? 7
                                                        : 0;
    size_t len = skip ? strcspn(url + skip, "/?#") : 0;
    if (!skip || !len || len >= n || memchr(url + skip, '@', len))
        return -EINVAL;
    *https = skip == 8;
    memcpy(out, url + skip, len);
    out[len] = '\0';
    return 0;
}

static void decide_work(struct tkm__oci_work *w)
{
    struct ses_decide *k = (struct ses_decide *)w;
    w->rc = tkm_reach_decide(&k->reach->pol, k->purpose, k->hostport, NULL, NULL, &k->d);
}

static void decide_after(struct tkm__oci_work *w)
{
    struct ses_decide *k = (struct ses_decide *)w;
    struct tkm__oci_call *c = k->c;
    struct tkm_oci_session *s = c->s;
    struct tkm_reach_decision *d = &k->d;
    char addr[TKM_REACH_ADDRSTR_MAX];
    int rc = w->rc, https = 0;
    char hp[TKM_OCI_NAME_MAX + 1] = "";
    c->gating = 0;
    if (rc == 0 && url_hostport(k->token ? c->ch.realm : c->url, hp, sizeof hp, &https) == 0 &&
        https == d->plain_http) {
        rc = TKM_OCI_EREACH;
        tkm_err_set(&c->err, rc, "registry \"%.64s\" is not allowed: %s", d->host,
                    https ? "it is in registryPlainHTTP, and was asked for over https"
                          : "plain http is used only for hosts in registryPlainHTTP");
    } else if (rc == 0 && k->reach == s->reach) {
        struct ses_pin *p = &s->pins[s->next_pin++ % SES_PINS];
        snprintf(p->hostport, sizeof p->hostport, "%s", hp);
        p->follow_only = k->purpose == TKM_REACH_FOLLOW;
        p->expires_ms = tkm_now_ms() + SES_PIN_TTL_MS;
        memcpy(p->resolve, d->resolve, sizeof p->resolve);
    } else if (rc == 0) { /* the policy changed meanwhile: decide again under the new one */
        rc = 1;
    } else {
        if (d->refused_addr.family)
            tkm_reach_addr_str(&d->refused_addr, addr, sizeof addr);
        tkm_warn("registry reach: %s%s%s%s", d->message, d->refused_addr.family ? " (address " : "",
                 d->refused_addr.family ? addr : "", d->refused_addr.family ? ")" : "");
        rc = rc == -EACCES ? TKM_OCI_EREACH : -EHOSTUNREACH;
        tkm_err_set(&c->err, rc, "%s", d->message);
    }
    tkm_oci_reach_unref(k->reach);
    int token = k->token;
    free(k);
    if (c->cancelled)
        call_finish(c, -ECANCELED, NULL);
    else if (rc < 0)
        call_finish(c, rc, NULL);
    else if (token && (rc = token_request(c)) < 0)
        call_finish(c, rc, NULL);
    else if (!token)
        call_send(c);
}

/* Before a request to url: 0 with *pin the CURLOPT_RESOLVE line to use (NULL
 * without a policy) and *foreign 1 when url is not on the session's registry
 * (a redirect or realm host: no credentials go there); 1 when a decision was
 * queued (it sends again once decided); < 0 with c->err set. */
static int gate(struct tkm__oci_call *c, const char *url, int token, const char **pin, int *foreign)
{
    struct tkm_oci_session *s = c->s;
    char hp[TKM_OCI_NAME_MAX + 1];
    int https;
    *pin = NULL;
    *foreign = 0;
    if (!s->reach) {
        /* the session follows redirects itself when it has headers of its own */
        if (s->n_headers && url_hostport(url, hp, sizeof hp, &https) == 0)
            *foreign = strcasecmp(hp, s->url_host) != 0;
        return 0;
    }
    if (url_hostport(url, hp, sizeof hp, &https) < 0)
        return tkm_err_set(&c->err, TKM_OCI_EREACH,
                           "registry %s: a URL without a plain host[:port] is not followed",
                           s->host);
    *foreign = strcasecmp(hp, s->url_host) != 0;
    uint64_t now = tkm_now_ms();
    for (size_t i = 0; i < SES_PINS; i++) {
        const struct ses_pin *p = &s->pins[i];
        if (p->expires_ms > now && strcasecmp(p->hostport, hp) == 0 &&
            (*foreign || !p->follow_only)) {
            *pin = p->resolve;
            return 0;
        }
    }
    struct ses_decide *k = calloc(1, sizeof *k);
    if (!k)
        return tkm_err_set(&c->err, -ENOMEM, "registry %s: out of memory", s->host);
    k->c = c;
    k->reach = s->reach;
    k->reach->refs++;
    k->purpose = *foreign ? TKM_REACH_FOLLOW : TKM_REACH_REGISTRY;
    k->token = token;
    /* the registry as the reference wrote it (the tenant sees that spelling) */
    snprintf(k->hostport, sizeof k->hostport, "%s", *foreign ? hp : s->host);
    k->w.work = decide_work;
    k->w.after = decide_after;
    c->gating = 1;
    tkm__oci_pool_queue(s, &k->w);
    return 1;
}

static void token_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    struct tkm__oci_call *c = data;
    char tok[SES_TOKEN_MAX];
    long ttl = 60;
    int rc = resp->code;
    (void)req;
    c->hreq = NULL;
    if (c->cancelled) {
        call_finish(c, -ECANCELED, NULL);
        return;
    }
    if (rc) {
        tkm_err_set(&c->err, rc, "token request: %s: the registry's token service: %s", c->s->host,
                    strerror(-rc));
    } else if (resp->status != 200) {
        rc = tkm__oci_status_error(c->s, resp, "token request", &c->err);
    } else if ((rc = tkm_oci_token_parse(resp->body.data, resp->body.len, "token request", tok,
                                         sizeof tok, &ttl, &c->err)) == 0 &&
               (rc = token_store(c->s, c->q.scope, tok, ttl)) != 0) {
        tkm_err_set(&c->err, rc, "registry %s: out of memory", c->s->host);
    }
    memset(tok, 0, sizeof tok);
    if (rc) {
        call_finish(c, rc, NULL);
        return;
    }
    c->phase = CALL_MAIN;
    call_send(c);
}

/* Builds the token request (GET with Basic or anonymous; POST for an
 * identity token) for the challenge c->ch, scope c->token_scope, once the
 * realm's host is allowed (0 also while that is being decided). */
static int token_request(struct tkm__oci_call *c)
{
    struct tkm_oci_session *s = c->s;
    const struct tkm_oci_challenge *ch = &c->ch;
    const char *scope = c->token_scope;
    const char *pin;
    int foreign, g = gate(c, ch->realm, 1, &pin, &foreign);
    if (g)
        return g > 0 ? 0 : g;
    struct tkm_buf url = TKM_BUF_INIT(TKM__OCI_URL_MAX), form = TKM_BUF_INIT(TKM__OCI_URL_MAX);
    char basic[2048], authz[2100];
    const char *hdrs[3] = {NULL, NULL, NULL};
    char *esc_service = curl_easy_escape(NULL, ch->service, 0);
    char *esc_scope = curl_easy_escape(NULL, scope, 0);
    struct tkm_http_req_opts o = {.timeout_ms = s->timeout_ms, .headers = hdrs, .resolve = pin};
    int rc = 0;
    basic[0] = authz[0] = '\0';
    if (!esc_service || !esc_scope) {
        rc = tkm_err_set(&c->err, -ENOMEM, "out of memory");
        goto out;
    }
    if (s->have_creds && s->creds.identity_token[0]) {
        char *esc_rt = curl_easy_escape(NULL, s->creds.identity_token, 0);
        rc = tkm_buf_printf(&url, "%s", ch->realm);
        if (rc == 0)
            rc = esc_rt ? tkm_buf_printf(&form,
                                         "grant_type=refresh_token&client_id=tkm&service=%s&"
                                         "scope=%s&refresh_token=%s",
                                         esc_service, esc_scope, esc_rt)
                        : -ENOMEM;
        curl_free(esc_rt);
        o.method = "POST";
        o.body = form.data;
        o.body_len = form.len;
        hdrs[0] = "Content-Type: application/x-www-form-urlencoded";
    } else {
        rc = tkm_buf_printf(&url, "%s%sservice=%s&scope=%s", ch->realm,
                            strchr(ch->realm, '?') ? "&" : "?", esc_service, esc_scope);
        if (rc == 0 && s->have_creds && !s->anonymous && s->creds.username[0]) {
            rc = tkm_oci_basic_header(&s->creds, basic, sizeof basic);
            snprintf(authz, sizeof authz, "Authorization: %s", basic);
            hdrs[0] = authz;
        }
    }
    if (rc) {
        tkm_err_set(&c->err, rc, "registry %s: token request: out of memory", s->host);
        goto out;
    }
    o.url = url.data;
    o.done_cb = token_done;
    o.data = c;
    struct tkm_http_tls tls;
    if (strncasecmp(ch->realm, "https://", 8) == 0)
        o.tls = session_tls(s, &tls);
    c->phase = CALL_TOKEN;
    rc = tkm_http_start(s->http, &o, &c->hreq, &c->err);
out:
    memset(basic, 0, sizeof basic);
    memset(authz, 0, sizeof authz);
    curl_free(esc_service);
    curl_free(esc_scope);
    if (form.data)
        memset(form.data, 0, form.len);
    tkm_buf_release(&url);
    tkm_buf_release(&form);
    return rc;
}

/* Reacts to a 401: 0 when a retry was set going, 1 to report the 401 as it
 * is, < 0 on error (c->err says why). */
static int authenticate(struct tkm__oci_call *c, const struct tkm_http_resp *resp)
{
    struct tkm_oci_session *s = c->s;
    char hdr[2048];
    struct tkm_oci_challenge ch;
    int rc;
    if (tkm_http_resp_header(resp, "WWW-Authenticate", hdr, sizeof hdr) < 0)
        return tkm_err_set(&c->err, -EACCES,
                           "%s: 401 Unauthorized without a WWW-Authenticate header", resp->url);
    if ((rc = tkm_oci_challenge_parse(&ch, hdr, &c->err)) != 0) {
        tkm_err_prefix(&c->err, "%s: 401 Unauthorized", resp->url);
        return rc;
    }
    if (ch.scheme == TKM_OCI_AUTH_BASIC) {
        if (!s->have_creds || !s->creds.username[0] || s->use_basic)
            return 1; /* nothing (more) to try: the caller reports the 401 */
        s->use_basic = 1;
        return call_defer(c, 0) ? -ENOMEM : 0;
    }
    if (!s->reach && !realm_ok(s, ch.realm)) /* with a policy, registryPlainHTTP decides */
        return tkm_err_set(&c->err, -EPERM,
                           "registry %s: its token realm is not https (refusing to send "
                           "credentials in clear text)",
                           s->host);
    /* Bearer: the scope the registry asks for wins over the one we guessed;
     * the token is cached under ours, which is what the retry looks up. */
    c->ch = ch;
    snprintf(c->token_scope, sizeof c->token_scope, "%s", ch.scope[0] ? ch.scope : c->q.scope);
    return token_request(c);
}

/* A redirect of a call that follows them, under a reach policy (or on a
 * session with headers of its own, which must not go to another host): the
 * next host is decided (TKM_REACH_FOLLOW) and pinned like the registry, so curl
 * never follows one itself. 0 when sent on, < 0 with c->err. */
static int call_redirect(struct tkm__oci_call *c, const struct tkm_http_resp *resp)
{
    char *loc = malloc(TKM__OCI_URL_MAX), *next = NULL;
    CURLU *u = curl_url();
    int rc = 0;
    if (!loc || !u)
        rc = tkm_err_set(&c->err, -ENOMEM, "%s: out of memory", c->url);
    else if (++c->redirects > SES_MAX_REDIRECTS)
        rc = tkm_err_set(&c->err, -ELOOP, "%s: more than %d redirects", c->url, SES_MAX_REDIRECTS);
    else if (tkm_http_resp_header(resp, "Location", loc, TKM__OCI_URL_MAX) < 0 ||
             curl_url_set(u, CURLUPART_URL, c->url, 0) != CURLUE_OK ||
             curl_url_set(u, CURLUPART_URL, loc, 0) != CURLUE_OK ||
             curl_url_get(u, CURLUPART_URL, &next, 0) != CURLUE_OK)
        rc = tkm_err_set(&c->err, -EPROTO, "%s: HTTP %ld without a usable Location", c->url,
                         resp->status);
    else if (strncasecmp(c->url, "https:", 6) == 0 && strncasecmp(next, "https:", 6) != 0)
        rc = tkm_err_set(&c->err, -EPROTO, "%s: a redirect from https to another scheme", c->url);
    if (rc == 0) {
        char *dup = strdup(next);
        if (!dup) {
            rc = tkm_err_set(&c->err, -ENOMEM, "%s: out of memory", c->url);
        } else {
            free(c->url);
            c->url = dup;
            c->q.url = c->url;
            call_send(c);
        }
    }
    curl_free(next);
    curl_url_cleanup(u);
    free(loc);
    return rc;
}

static void call_done(struct tkm_http_req *req, struct tkm_http_resp *resp, void *data)
{
    struct tkm__oci_call *c = data;
    int rc = resp->code;
    (void)req;
    c->hreq = NULL;
    resp->url = c->url;
    if (c->cancelled || rc == -ECANCELED) {
        call_finish(c, -ECANCELED, resp);
        return;
    }
    if (rc == 0 && (c->s->reach || c->s->n_headers) && c->q.follow && resp->status >= 300 &&
        resp->status < 400 && resp->status != 304 && resp->status != 300) {
        if ((rc = call_redirect(c, resp)) < 0)
            call_finish(c, rc, resp);
        return;
    }
    if (rc == 0 && resp->status == 401 && !c->authed) {
        c->authed = 1;
        rc = authenticate(c, resp);
        if (rc < 0)
            call_finish(c, rc, resp);
        else if (rc > 0)
            call_finish(c, 0, resp);
        return;
    }
    if ((rc == -ETIMEDOUT || retryable(&c->q, rc, resp)) &&
        past_deadline(c, rc == -ETIMEDOUT ? 50 : 0)) {
        call_deadline(c, rc, resp);
        return;
    }
    if (c->bo.steps < SES_RETRIES && retryable(&c->q, rc, resp)) {
        uint64_t ms = retry_delay(c, resp);
        if (past_deadline(c, ms)) {
            call_deadline(c, rc, resp);
            return;
        }
        c->phase = CALL_WAIT;
        if (call_defer(c, ms) == 0)
            return;
    }
    if (rc && c->bo.steps)
        tkm_err_set(&c->err, rc, "%s (gave up after %u attempts)", resp->error, c->bo.steps + 1);
    else if (rc)
        tkm_err_set(&c->err, rc, "%s", resp->error);
    call_finish(c, rc, resp);
}

static int call_data(struct tkm_http_req *req, const char *p, size_t n, void *data)
{
    struct tkm__oci_call *c = data;
    return c->q.data_cb(req, p, n, c->q.data);
}

/* Builds the header lines into hdrs (at most 4 + the endpoint's + NULL) and starts. */
static void call_send(struct tkm__oci_call *c)
{
    struct tkm_oci_session *s = c->s;
    const struct tkm__oci_req *q = &c->q;
    char authz[2100], accept[512], ctype[256], basic[2048];
    const char *hdrs[5 + TKM_OCI_EXTRA_HEADERS], *pin;
    size_t nh = 0;
    int foreign, rc;
    c->phase = CALL_MAIN;
    if ((rc = gate(c, q->url, 0, &pin, &foreign)) > 0)
        return; /* sent once the host is decided */
    if (rc < 0)
        goto fail;
    if (foreign) {
        /* a redirect to another host: no credentials go there */
    } else if (s->use_basic && s->have_creds && !s->anonymous) {
        if (tkm_oci_basic_header(&s->creds, basic, sizeof basic) == 0) {
            snprintf(authz, sizeof authz, "Authorization: %s", basic);
            hdrs[nh++] = authz;
        }
        memset(basic, 0, sizeof basic);
    } else {
        struct ses_token *t = token_find(s, q->scope);
        if (t)
            hdrs[nh++] = t->value;
    }
    if (q->accept) {
        snprintf(accept, sizeof accept, "Accept: %s", q->accept);
        hdrs[nh++] = accept;
    }
    if (q->content_type) {
        snprintf(ctype, sizeof ctype, "Content-Type: %s", q->content_type);
        hdrs[nh++] = ctype;
    }
    if (q->extra)
        hdrs[nh++] = q->extra;
    for (size_t i = 0; !foreign && i < s->n_headers; i++)
        hdrs[nh++] = s->headers[i];
    hdrs[nh] = NULL;
    uint64_t now = tkm_now_ms();
    struct tkm_http_req_opts o = {
        .method = q->method,
        .url = q->url,
        .headers = hdrs,
        .body = q->body,
        .body_len = q->body_len,
        /* a download has no per-request limit but the rest of its deadline */
        .timeout_ms = !q->streaming    ? s->timeout_ms
                      : c->deadline_at ? (c->deadline_at > now ? c->deadline_at - now : 1)
                                       : 0,
        .idle_timeout_ms = q->streaming ? s->idle_timeout_ms : 0,
        .max_recv_bps = q->streaming ? s->max_recv_bps : 0,
        .max_body = q->max_body ? q->max_body : SES_ERR_BODY_MAX,
        /* with a policy or headers of its own, call_redirect follows */
        .follow_redirects = q->follow && !s->reach && !s->n_headers,
        .resolve = pin,
        .data_cb = q->data_cb ? call_data : NULL,
        .done_cb = call_done,
        .data = c,
    };
    struct tkm_http_tls tls;
    o.tls = session_tls(s, &tls);
    rc = tkm_http_start(s->http, &o, &c->hreq, &c->err);
    memset(authz, 0, sizeof authz);
fail:
    if (rc) {
        /* Report from the loop, not from inside a start function. */
        c->report_rc = rc;
        c->phase = CALL_WAIT;
        if (call_defer(c, 0) != 0)
            call_finish(c, rc, NULL); /* never happens with a live loop */
    }
}

static int dup_opt(char **out, const char *s)
{
    if (!s)
        return 0;
    return (*out = strdup(s)) ? 0 : -ENOMEM;
}

int tkm__oci_call_start(struct tkm_oci_session *s, const struct tkm__oci_req *q,
                        tkm__oci_call_cb cb, void *data, struct tkm__oci_call **out,
                        struct tkm_err *err)
{
    struct tkm__oci_call *c;
    if (s->freeing)
        return tkm_err_set(err, -ESHUTDOWN, "registry %s: the session is closing", s->host);
    if (!(c = calloc(1, sizeof *c)))
        return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", s->host);
    c->s = s;
    c->q = *q;
    c->bo = (struct tkm_backoff){.initial_ms = SES_BACKOFF_MS,
                                 .max_ms = SES_BACKOFF_MS << SES_RETRIES,
                                 .jitter_pct = 25,
                                 .rng = tkm_now_ms() ^ (uint64_t)(uintptr_t)c};
    c->cb = cb;
    c->data = data;
    if (q->streaming && s->deadline_ms != TKM_OCI_NO_DEADLINE)
        c->deadline_at = tkm_now_ms() + s->deadline_ms;
    if (dup_opt(&c->url, q->url) || dup_opt(&c->scope, q->scope) ||
        dup_opt(&c->accept, q->accept) || dup_opt(&c->content_type, q->content_type) ||
        dup_opt(&c->extra, q->extra)) {
        call_free(c);
        return tkm_err_set(err, -ENOMEM, "registry %s: out of memory", s->host);
    }
    c->q.url = c->url;
    c->q.scope = c->scope;
    c->q.accept = c->accept;
    c->q.content_type = c->content_type;
    c->q.extra = c->extra;
    c->link.cancel = call_link_cancel;
    tkm__oci_link_add(s, &c->link, 0);
    if (out)
        *out = c;
    call_send(c);
    return 0;
}
