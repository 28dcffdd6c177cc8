/*
 * framer.c - watch and list body framing, event decoding, backoff.
 *
 * See watch-int.h for the framer's contract. The scanner is a small state
 * machine over bytes (depth, in-string, escape) that resumes where the last
 * call stopped: bytes are scanned exactly once, and the buffer is compacted
 * once per slice, not once per event, so many small events in one chunk cost
 * no repeated memmove.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "watch-int.h"

#define SLICE (64u * 1024u)

void k8s__framer_init(struct k8s__framer *f, enum k8s__frame_mode mode, size_t max_event)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->max_event = max_event ? max_event : 8u * 1024u * 1024u;
    tkm_buf_init(&f->buf, f->max_event + SLICE + 1);
    tkm_buf_init(&f->rest, K8S__FRAME_REST_MAX);
}

void k8s__framer_release(struct k8s__framer *f)
{
    if (!f)
        return;
    tkm_buf_release(&f->buf);
    tkm_buf_release(&f->rest);
}

/* Names the stream in messages. */
static const char *kind(const struct k8s__framer *f)
{
    return f->mode == K8S__FRAME_LIST ? "list body" : "watch stream";
}

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static int emit(struct k8s__framer *f, size_t end, k8s__frame_cb cb, void *data,
                struct tkm_err *err)
{
    size_t n = end - f->start;
    if (n > f->max_event)
        return tkm_err_set(err, -E2BIG,
                           "%s: object at byte %" PRIu64 " is %zu bytes, over the "
                           "limit of %zu",
                           kind(f), f->offset + f->start, n, f->max_event);
    f->in_obj = 0;
    f->emitted++;
    return cb(f->buf.data + f->start, n, data);
}

static int bad_byte(const struct k8s__framer *f, size_t i, const char *what, struct tkm_err *err)
{
    unsigned char c = (unsigned char)f->buf.data[i];
    return tkm_err_set(err, -EPROTO, "%s: %s at byte %" PRIu64 " (0x%02x)", kind(f), what,
                       f->offset + i, c);
}

/* Enters a level opened by c ('{' or '['), remembering its kind. */
static int open_level(struct k8s__framer *f, size_t i, char c, struct tkm_err *err)
{
    if (f->depth >= K8S__FRAME_MAX_DEPTH)
        return bad_byte(f, i, "nesting deeper than 1000 levels", err);
    unsigned d = f->depth++;
    unsigned char bit = (unsigned char)(1u << (d % 8));
    if (c == '[')
        f->kinds[d / 8] |= bit;
    else
        f->kinds[d / 8] &= (unsigned char)~bit;
    return 0;
}

/* Leaves a level closed by c, which must match the bracket that opened it. */
static int close_level(struct k8s__framer *f, size_t i, char c, struct tkm_err *err)
{
    if (f->depth == 0)
        return bad_byte(f, i, "unbalanced bracket", err);
    unsigned d = f->depth - 1;
    int was_array = (f->kinds[d / 8] >> (d % 8)) & 1;
    if (was_array != (c == ']'))
        return bad_byte(f, i, "mismatched bracket", err);
    f->depth = d;
    return 0;
}

/* Inside an object (event or list item) outside strings. Returns 1 when the
 * object closed at i, 0 to go on, < 0 on error. */
static int step_nested(struct k8s__framer *f, size_t i, unsigned close_depth, struct tkm_err *err)
{
    char c = f->buf.data[i];
    int rc = 0;
    if (c == '"') {
        f->in_str = 1;
    } else if (c == '{' || c == '[') {
        rc = open_level(f, i, c, err);
    } else if (c == '}' || c == ']') {
        if ((rc = close_level(f, i, c, err)) == 0 && f->depth == close_depth)
            return 1;
    }
    return rc;
}

/* Inside a JSON string: consumes c (tracking escapes and the closing quote)
 * and returns 1; outside one returns 0 and leaves c to the caller. */
static int in_string(struct k8s__framer *f, char c)
{
    if (!f->in_str)
        return 0;
    if (f->esc)
        f->esc = 0;
    else if (c == '\\')
        f->esc = 1;
    else if (c == '"')
        f->in_str = 0;
    return 1;
}

static int scan_stream(struct k8s__framer *f, size_t from, k8s__frame_cb cb, void *data,
                       struct tkm_err *err)
{
    for (size_t i = from; i < f->buf.len; i++) {
        char c = f->buf.data[i];
        if (in_string(f, c))
            continue;
        if (!f->in_obj) {
            if (is_ws(c))
                continue;
            if (c != '{')
                return bad_byte(f, i, "expected '{' starting an event", err);
            f->in_obj = 1;
            f->start = i;
            f->depth = 0;
            open_level(f, i, c, err);
            continue;
        }
        int rc = step_nested(f, i, 0, err);
        if (rc < 0)
            return rc;
        if (rc == 1 && (rc = emit(f, i + 1, cb, data, err)) != 0)
            return rc;
    }
    return 0;
}

static int rest_put(struct k8s__framer *f, char c, struct tkm_err *err)
{
    if (tkm_buf_putc(&f->rest, c) < 0)
        return tkm_err_set(err, -E2BIG, "list body: the list's own fields exceed %u bytes",
                           K8S__FRAME_REST_MAX);
    return 0;
}

/* One byte of a LIST body outside any item. */
static int step_list(struct k8s__framer *f, size_t i, struct tkm_err *err)
{
    char c = f->buf.data[i];
    if (f->in_str) {
        if (f->esc)
            f->esc = 0;
        else if (c == '\\')
            f->esc = 1;
        else if (c == '"')
            f->in_str = 0;
        else if (f->depth == 1 && f->expect_key && f->key_len++ < sizeof f->key)
            f->key[f->key_len - 1] = c;
        return rest_put(f, c, err);
    }
    if (f->done) {
        if (is_ws(c))
            return 0;
        return bad_byte(f, i, "data after the end of the list", err);
    }
    if (is_ws(c))
        return 0;
    if (f->depth == 0) {
        if (c != '{')
            return bad_byte(f, i, "expected '{' starting the list", err);
        open_level(f, i, c, err);
        f->expect_key = 1;
        return rest_put(f, c, err);
    }
    if (f->in_items && f->depth == 2) {
        if (c == ',')
            return 0;
        if (c == '{') {
            f->in_obj = 1;
            f->start = i;
            return open_level(f, i, c, err);
        }
        if (c != ']')
            return bad_byte(f, i, "list item that is not an object", err);
    }
    switch (c) {
    case '"':
        f->in_str = 1;
        if (f->depth == 1 && f->expect_key)
            f->key_len = 0;
        break;
    case ':':
        if (f->depth == 1) {
            f->expect_key = 0;
            f->key_items = f->key_len == 5 && memcmp(f->key, "items", 5) == 0;
        }
        break;
    case ',':
        if (f->depth == 1)
            f->expect_key = 1;
        break;
    case '{':
    case '[': {
        int rc = open_level(f, i, c, err);
        if (rc < 0)
            return rc;
        if (c == '[' && f->depth == 2 && f->key_items)
            f->in_items = 1;
        break;
    }
    case '}':
    case ']': {
        int rc = close_level(f, i, c, err);
        if (rc < 0)
            return rc;
        if (f->depth == 1)
            f->in_items = 0;
        if (f->depth == 0)
            f->done = 1;
        break;
    }
    default:
        break;
    }
    return rest_put(f, c, err);
}

static int scan_list(struct k8s__framer *f, size_t from, k8s__frame_cb cb, void *data,
                     struct tkm_err *err)
{
    for (size_t i = from; i < f->buf.len; i++) {
        int rc;
        if (!f->in_obj) {
            if ((rc = step_list(f, i, err)) < 0)
                return rc;
            continue;
        }
        char c = f->buf.data[i];
        if (in_string(f, c))
            continue;
        rc = step_nested(f, i, 2, err);
        if (rc < 0)
            return rc;
        if (rc == 1 && (rc = emit(f, i + 1, cb, data, err)) != 0)
            return rc;
    }
    return 0;
}

/* Drops the bytes no longer needed: all of them, or those before the object
 * in progress. */
static void compact(struct k8s__framer *f)
{
    size_t drop = f->in_obj ? f->start : f->buf.len;
    if (drop == 0)
        return;
    tkm_buf_consume(&f->buf, drop);
    f->offset += drop;
    if (f->in_obj)
        f->start = 0;
}

int k8s__framer_feed(struct k8s__framer *f, const char *p, size_t n, k8s__frame_cb cb, void *data,
                     struct tkm_err *err)
{
    while (n > 0) {
        size_t take = n < SLICE ? n : SLICE;
        size_t from = f->buf.len;
        int rc = tkm_buf_append(&f->buf, p, take);
        if (rc < 0)
            return tkm_err_set(err, rc, "%s: cannot buffer %zu bytes: %s", kind(f), take,
                               strerror(-rc));
        if (f->mode == K8S__FRAME_STREAM)
            rc = scan_stream(f, from, cb, data, err);
        else
            rc = scan_list(f, from, cb, data, err);
        if (rc != 0)
            return rc;
        if (f->in_obj && f->buf.len - f->start > f->max_event)
            return tkm_err_set(err, -E2BIG,
                               "%s: object at byte %" PRIu64 " exceeds the limit of "
                               "%zu bytes",
                               kind(f), f->offset + f->start, f->max_event);
        compact(f);
        p += take;
        n -= take;
    }
    return 0;
}

int k8s__framer_finish(struct k8s__framer *f, struct tkm_err *err)
{
    if (f->in_obj)
        return tkm_err_set(err, -EPROTO,
                           "%s: truncated object at byte %" PRIu64 " (%zu bytes "
                           "received, stream ended)",
                           kind(f), f->offset + f->start, f->buf.len - f->start);
    if (f->mode == K8S__FRAME_LIST && !f->done)
        return tkm_err_set(err, -EPROTO, "list body: truncated after %" PRIu64 " bytes",
                           f->offset + f->buf.len);
    return 0;
}

/* ---- JSON member span ---------------------------------------------------- */

/* The bytes are skipped by lib/jscan's scanner (tkm_jscan_ws, tkm_jscan_skip:
 * on unvalidated text an unterminated string or container runs to n). */

int k8s__json_member_span(const char *p, size_t n, const char *key, size_t *off, size_t *len)
{
    size_t klen = strlen(key);
    size_t i = tkm_jscan_ws(p, n, 0);
    if (i >= n || p[i] != '{')
        return -ENOENT;
    i++;
    for (;;) {
        i = tkm_jscan_ws(p, n, i);
        if (i >= n || p[i] != '"')
            return -ENOENT;
        size_t ks = i + 1, ke = tkm_jscan_skip(p, n, i);
        if (ke >= n)
            return -ENOENT;
        i = tkm_jscan_ws(p, n, ke);
        if (i >= n || p[i] != ':')
            return -ENOENT;
        i = tkm_jscan_ws(p, n, i + 1);
        size_t vs = i, ve = tkm_jscan_skip(p, n, i);
        if (ve > n || ve == vs)
            return -ENOENT;
        if (ke - 1 - ks == klen && memcmp(p + ks, key, klen) == 0) {
            *off = vs;
            *len = ve - vs;
            return 0;
        }
        i = tkm_jscan_ws(p, n, ve);
        if (i >= n || p[i] != ',')
            return -ENOENT;
        i++;
    }
}

/* ---- event decoding ------------------------------------------------------ */

const char *k8s_watch_type_str(enum k8s_watch_type t)
{
    switch (t) {
    case K8S_WATCH_ADDED:
        return "ADDED";
    case K8S_WATCH_MODIFIED:
        return "MODIFIED";
    case K8S_WATCH_DELETED:
        return "DELETED";
    case K8S_WATCH_BOOKMARK:
        return "BOOKMARK";
    case K8S_WATCH_ERROR:
        return "ERROR";
    }
    return "?";
}

static const char *str_or_empty(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static void fill_meta(struct k8s_watch_event *ev, json_t *obj)
{
    json_t *md = json_object_get(obj, "metadata");
    ev->ns = str_or_empty(md, "namespace");
    ev->name = str_or_empty(md, "name");
    ev->resource_version = str_or_empty(md, "resourceVersion");
    ev->uid = str_or_empty(md, "uid");
}

static json_t *parse(const char *p, size_t n, const char *what, struct tkm_err *err)
{
    json_error_t je;
    /* jansson skips a NUL byte outside strings ({"a":1<NUL>} loads); JSON has
     * none, and the raw decoder (tkm_jscan) refuses it: so do we. */
    const char *z = memchr(p, 0, n);
    if (z) {
        tkm_err_set(err, -EPROTO, "%s is not valid JSON: a NUL byte (byte %zu)", what,
                    (size_t)(z - p));
        return NULL;
    }
    json_t *r = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!r) {
        tkm_err_set(err, -EPROTO, "%s is not valid JSON: %s (byte %d)", what, je.text, je.position);
        return NULL;
    }
    if (!json_is_object(r)) {
        json_decref(r);
        tkm_err_set(err, -EPROTO, "%s is not a JSON object", what);
        return NULL;
    }
    return r;
}

static int decode_type(const char *t, enum k8s_watch_type *out)
{
    static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(t, names[i]) == 0) {
            *out = (enum k8s_watch_type)(K8S_WATCH_ADDED + (int)i);
            return 0;
        }
    }
    return -EPROTO;
}

int k8s__event_decode(const char *p, size_t n, struct k8s_watch_event *ev, json_t **root,
                      struct tkm_err *err)
{
    int rc = -EPROTO;
    size_t off = 0, len = 0;
    memset(ev, 0, sizeof *ev);
    *root = NULL;
    json_t *r = parse(p, n, "watch event", err);
    if (!r)
        return -EPROTO;
    const char *type = json_string_value(json_object_get(r, "type"));
    json_t *obj = json_object_get(r, "object");
    if (!type) {
        tkm_err_set(err, -EPROTO, "watch event has no \"type\" string");
        goto out;
    }
    if (decode_type(type, &ev->type) < 0) {
        tkm_err_set(err, -EPROTO, "watch event has unknown type \"%.40s\"", type);
        goto out;
    }
    if (!json_is_object(obj)) {
        tkm_err_set(err, -EPROTO, "watch event %s has no \"object\" object", type);
        goto out;
    }
    if (k8s__json_member_span(p, n, "object", &off, &len) < 0) {
        tkm_err_set(err, -EPROTO, "watch event %s: cannot locate the bytes of \"object\"", type);
        goto out;
    }
    ev->object = obj;
    ev->raw = p + off;
    ev->raw_len = len;
    fill_meta(ev, obj);
    if (ev->type == K8S_WATCH_ERROR) {
        ev->code = (long)json_integer_value(json_object_get(obj, "code"));
        ev->reason = str_or_empty(obj, "reason");
        ev->message = str_or_empty(obj, "message");
    }
    *root = r;
    r = NULL;
    rc = 0;
out:
    json_decref(r);
    return rc;
}

int k8s__item_decode(const char *p, size_t n, struct k8s_watch_event *ev, json_t **root,
                     struct tkm_err *err)
{
    memset(ev, 0, sizeof *ev);
    *root = parse(p, n, "list item", err);
    if (!*root)
        return -EPROTO;
    ev->type = K8S_WATCH_ADDED;
    ev->object = *root;
    ev->raw = p;
    ev->raw_len = n;
    fill_meta(ev, *root);
    return 0;
}

/* ---- raw decoding (no tree) --------------------------------------------- */

/* metadata strings; an event is at most max_event_bytes (8 MiB by default) */
#define RAW_STR_MAX (64u * 1024u * 1024u)

void k8s__rawdec_init(struct k8s__rawdec *d)
{
    tkm_jscan_init(&d->js);
    tkm_buf_init(&d->str, RAW_STR_MAX);
}

void k8s__rawdec_release(struct k8s__rawdec *d)
{
    if (!d)
        return;
    tkm_jscan_release(&d->js);
    tkm_buf_release(&d->str);
}

/* Reads object.metadata's strings into d->str; ev's pointers are set at the
 * end (d->str may move while it grows). A member that is not a string reads
 * as "", as with json_string_value(). */
static int raw_meta(struct k8s__rawdec *d, const char *p, size_t n, size_t obj,
                    struct k8s_watch_event *ev, struct tkm_err *err)
{
    static const char *const keys[4] = {"namespace", "name", "resourceVersion", "uid"};
    size_t at[4];
    struct tkm_jscan_member md, m, found[4] = {{0}};
    size_t pos;
    /* one pass over metadata (managedFields may be most of it) */
    if (tkm_jscan_member(p, n, obj, "metadata", &md) && p[md.val] == '{') {
        pos = md.val;
        while (tkm_jscan_next(p, n, &pos, &m))
            for (size_t k = 0; k < 4; k++)
                if (!found[k].val_len && tkm_jscan_key_is(p, &m, keys[k])) {
                    found[k] = m;
                    break;
                }
    }
    tkm_buf_reset(&d->str);
    for (size_t k = 0; k < 4; k++) {
        at[k] = d->str.len;
        int rc = 0;
        if (found[k].val_len && p[found[k].val] == '"')
            rc = tkm_jscan_str(p, found[k].val, found[k].val_len, &d->str);
        else
            rc = tkm_buf_putc(&d->str, '\0');
        if (rc < 0)
            return tkm_err_set(err, rc == -E2BIG ? -EPROTO : rc,
                               "object metadata: %s cannot be stored (%s)", keys[k], strerror(-rc));
    }
    ev->ns = d->str.data + at[0];
    ev->name = d->str.data + at[1];
    ev->resource_version = d->str.data + at[2];
    ev->uid = d->str.data + at[3];
    return 0;
}

int k8s__event_decode_raw(struct k8s__rawdec *d, const char *p, size_t n,
                          struct k8s_watch_event *ev, json_t **root, struct tkm_err *err)
{
    struct tkm_jscan_member t, o;
    memset(ev, 0, sizeof *ev);
    *root = NULL;
    int rc = tkm_jscan_validate(&d->js, p, n, "watch event", err);
    if (rc < 0)
        return rc;
    size_t s = tkm_jscan_ws(p, n, 0);
    if (p[s] != '{')
        return tkm_err_set(err, -EPROTO, "watch event is not a JSON object");
    if (!tkm_jscan_member(p, n, s, "type", &t) || p[t.val] != '"')
        return tkm_err_set(err, -EPROTO, "watch event has no \"type\" string");
    tkm_buf_reset(&d->str);
    if (tkm_jscan_str(p, t.val, t.val_len, &d->str) < 0 ||
        decode_type(d->str.data, &ev->type) < 0) {
        int tl = t.val_len - 2 < 40 ? (int)(t.val_len - 2) : 40;
        return tkm_err_set(err, -EPROTO, "watch event has unknown type \"%.*s\"", tl,
                           p + t.val + 1);
    }
    if (ev->type == K8S_WATCH_BOOKMARK || ev->type == K8S_WATCH_ERROR)
        return k8s__event_decode(p, n, ev, root, err);
    if (!tkm_jscan_member(p, n, s, "object", &o) || p[o.val] != '{')
        return tkm_err_set(err, -EPROTO, "watch event %s has no \"object\" object",
                           k8s_watch_type_str(ev->type));
    enum k8s_watch_type ty = ev->type;
    if ((rc = raw_meta(d, p, n, o.val, ev, err)) < 0)
        return rc;
    ev->type = ty;
    ev->raw = p + o.val;
    ev->raw_len = o.val_len;
    return 0;
}

int k8s__item_decode_raw(struct k8s__rawdec *d, const char *p, size_t n, struct k8s_watch_event *ev,
                         struct tkm_err *err)
{
    memset(ev, 0, sizeof *ev);
    int rc = tkm_jscan_validate(&d->js, p, n, "list item", err);
    if (rc < 0)
        return rc;
    size_t s = tkm_jscan_ws(p, n, 0);
    if (p[s] != '{')
        return tkm_err_set(err, -EPROTO, "list item is not a JSON object");
    if ((rc = raw_meta(d, p, n, s, ev, err)) < 0)
        return rc;
    ev->type = K8S_WATCH_ADDED;
    ev->raw = p;
    ev->raw_len = n;
    return 0;
}

void k8s__managed_fields_span(const char *p, size_t n, size_t *cut, size_t *cut_len)
{
    struct tkm_jscan_member md, m, prev = {0};
    size_t s = tkm_jscan_ws(p, n, 0), pos;
    int have_prev = 0;
    *cut = *cut_len = 0;
    if (!tkm_jscan_member(p, n, s, "metadata", &md) || p[md.val] != '{')
        return;
    pos = md.val;
    while (tkm_jscan_next(p, n, &pos, &m)) {
        if (!tkm_jscan_key_is(p, &m, "managedFields")) {
            prev = m;
            have_prev = 1;
            continue;
        }
        size_t end = m.val + m.val_len;
        if (have_prev) {
            /* ,"managedFields":[...] after the previous member's value */
            *cut = prev.val + prev.val_len;
            *cut_len = end - *cut;
        } else {
            /* first member: "managedFields":[...] and the comma after it */
            size_t after = tkm_jscan_ws(p, n, end);
            if (after < n && p[after] == ',')
                end = tkm_jscan_ws(p, n, after + 1);
            *cut = m.key;
            *cut_len = end - m.key;
        }
        return;
    }
}
