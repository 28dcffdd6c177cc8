/* status.c - decoding the apiserver's metav1.Status error replies. See k8s/status.h. */
#include <k8s/status.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include <tkm/buf.h>

#define STATUS_RAW_MAX   1024 /* bytes of a non-Status body kept in message */
#define STATUS_MAX_CAUSE 64   /* causes kept (the apiserver caps its own lists too) */

void k8s_status_init(struct k8s_status *st)
{
    memset(st, 0, sizeof *st);
    st->retry_after_s = -1;
}

void k8s_status_release(struct k8s_status *st)
{
    if (!st)
        return;
    free(st->status);
    free(st->reason);
    free(st->message);
    free(st->details_name);
    free(st->details_group);
    free(st->details_kind);
    free(st->details_uid);
    for (size_t i = 0; i < st->ncauses; i++) {
        free(st->causes[i].reason);
        free(st->causes[i].message);
        free(st->causes[i].field);
    }
    free(st->causes);
    k8s_status_init(st);
}

int k8s_status_errno(long code, const char *reason)
{
    if (code >= 200 && code < 300)
        return 0;
    switch (code) {
    case 400:
    case 422:
        return -EINVAL;
    case 401:
        return -EKEYREJECTED;
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    case 405:
        return -EOPNOTSUPP;
    case 406:
    case 415:
        return -EPROTO;
    case 409:
        return reason && strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : -ESTALE;
    case 410:
        return -EIDRM;
    case 413:
        return -E2BIG;
    case 429:
        return -EBUSY;
    case 504:
        return -ETIMEDOUT;
    default:
        if (code >= 500 && code < 600)
            return -EREMOTEIO;
        return -EPROTO;
    }
}

/* strdup of a JSON string member, NULL when absent or not a string. *ok is
 * cleared on allocation failure. */
static char *dup_member(json_t *o, const char *key, int *ok)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return NULL;
    char *s = strndup(json_string_value(v), json_string_length(v));
    if (!s)
        *ok = 0;
    return s;
}

static int decode_causes(struct k8s_status *st, json_t *causes)
{
    size_t n = json_array_size(causes);
    if (n == 0)
        return 0;
    if (n > STATUS_MAX_CAUSE)
        n = STATUS_MAX_CAUSE;
    st->causes = calloc(n, sizeof *st->causes);
    if (!st->causes)
        return -ENOMEM;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(causes, i);
        if (!json_is_object(c))
            continue;
        struct k8s_status_cause *sc = &st->causes[st->ncauses++];
        sc->reason = dup_member(c, "reason", &ok);
        sc->message = dup_member(c, "message", &ok);
        sc->field = dup_member(c, "field", &ok);
    }
    return ok ? 0 : -ENOMEM;
}

int k8s_status_decode_json(struct k8s_status *st, long http_code, const void *objp)
{
    json_t *obj = (json_t *)objp;
    k8s_status_release(st);
    int ok = 1;
    json_t *code = json_object_get(obj, "code");
    st->code = http_code ? http_code : (json_is_integer(code) ? (long)json_integer_value(code) : 0);
    st->status = dup_member(obj, "status", &ok);
    st->reason = dup_member(obj, "reason", &ok);
    st->message = dup_member(obj, "message", &ok);
    json_t *d = json_object_get(obj, "details");
    if (json_is_object(d)) {
        st->details_name = dup_member(d, "name", &ok);
        st->details_group = dup_member(d, "group", &ok);
        st->details_kind = dup_member(d, "kind", &ok);
        st->details_uid = dup_member(d, "uid", &ok);
        json_t *ra = json_object_get(d, "retryAfterSeconds");
        if (json_is_integer(ra) && json_integer_value(ra) >= 0)
            st->retry_after_s = (long)json_integer_value(ra);
        if (ok && decode_causes(st, json_object_get(d, "causes")))
            ok = 0;
    }
    st->rc = k8s_status_errno(st->code, st->reason);
    if (!ok) {
        k8s_status_release(st);
        return -ENOMEM;
    }
    return st->rc;
}

/* Keeps a readable, bounded version of a body that is not a Status. */
static char *raw_message(const char *body, size_t len)
{
    while (len && isspace((unsigned char)*body))
        body++, len--;
    while (len && isspace((unsigned char)body[len - 1]))
        len--;
    int cut = len > STATUS_RAW_MAX;
    if (cut)
        len = STATUS_RAW_MAX;
    char *m = malloc(len + 4);
    if (!m)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)body[i];
        m[i] = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f ? '?' : (char)c;
    }
    if (cut) {
        memcpy(m + len, "...", 4);
    } else {
        m[len] = '\0';
    }
    return m;
}

static const char *http_reason(long code)
{
    switch (code) {
    case 400:
        return "BadRequest";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "NotFound";
    case 405:
        return "MethodNotAllowed";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 413:
        return "RequestEntityTooLarge";
    case 415:
        return "UnsupportedMediaType";
    case 422:
        return "Invalid";
    case 429:
        return "TooManyRequests";
    case 500:
        return "InternalError";
    case 503:
        return "ServiceUnavailable";
    case 504:
        return "Timeout";
    default:
        return NULL;
    }
}

int k8s_status_decode(struct k8s_status *st, long http_code, const char *body, size_t len,
                      long retry_after_s)
{
    json_error_t jerr;
    json_t *obj = NULL;
    if (body && len)
        obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *kind = json_object_get(obj, "kind");
    if (json_is_object(obj) && json_is_string(kind) &&
        strcmp(json_string_value(kind), "Status") == 0) {
        int rc = k8s_status_decode_json(st, http_code, obj);
        json_decref(obj);
        if (rc == -ENOMEM && !st->rc)
            return -ENOMEM;
        if (st->retry_after_s < 0)
            st->retry_after_s = retry_after_s;
        return st->rc;
    }
    json_decref(obj);
    k8s_status_release(st);
    st->code = http_code;
    const char *r = http_reason(http_code);
    if (r && !(st->reason = strdup(r)))
        return -ENOMEM;
    if (body && len) {
        if (!(st->message = raw_message(body, len)))
            return -ENOMEM;
    } else {
        char m[64];
        snprintf(m, sizeof m, "HTTP %ld with an empty body", http_code);
        if (!(st->message = strdup(m)))
            return -ENOMEM;
    }
    st->retry_after_s = retry_after_s;
    st->rc = k8s_status_errno(http_code, st->reason);
    return st->rc;
}

int k8s_status_set_transport(struct k8s_status *st, int rc, const char *msg)
{
    k8s_status_release(st);
    st->transport = 1;
    st->rc = rc;
    st->message = strdup(msg ? msg : "transport error");
    return rc;
}

const char *k8s_status_str(const struct k8s_status *st, char *out, size_t n)
{
    if (!n)
        return out;
    struct tkm_buf b = TKM_BUF_INIT(65536);
    if (st->transport)
        tkm_buf_printf(&b, "transport error: %s", st->message ? st->message : "?");
    else if (st->code == 0 && st->rc == 0)
        tkm_buf_puts(&b, "no error");
    else
        tkm_buf_printf(&b, "%ld %s: %s", st->code, st->reason ? st->reason : "Failure",
                       st->message ? st->message : "(no message)");
    for (size_t i = 0; i < st->ncauses; i++) {
        const struct k8s_status_cause *c = &st->causes[i];
        tkm_buf_printf(&b, " [%s%s%s%s%s]", c->reason ? c->reason : "", c->field ? " " : "",
                       c->field ? c->field : "", c->message ? ": " : "",
                       c->message ? c->message : "");
    }
    /* A failed append releases b; fall back to the head of the message. */
    if (b.len == 0 && st->message) {
        snprintf(out, n, "%ld %s", st->code, st->message);
    } else {
        size_t c = b.len < n - 1 ? b.len : n - 1;
        memcpy(out, b.data, c);
        out[c] = '\0';
    }
    tkm_buf_release(&b);
    return out;
}

int k8s_status_has_cause(const struct k8s_status *st, const char *reason)
{
    for (size_t i = 0; i < st->ncauses; i++)
        if (st->causes[i].reason && strcmp(st->causes[i].reason, reason) == 0)
            return 1;
    return 0;
}

int k8s_status_retryable(const struct k8s_status *st, int idempotent)
{
    if (st->transport)
        return idempotent && st->rc != -ECANCELED && st->rc != -E2BIG && st->rc != -EINVAL &&
               st->rc != -EPROTO;
    if (st->code == 429)
        return 1;
    if (st->code >= 500 && st->code < 600)
        return st->retry_after_s >= 0 || idempotent;
    return 0;
}
