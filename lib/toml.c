/* toml.c - see toml.h. A recursive-descent parser over a bounded buffer:
 * every read checks pos < len, recursion is bounded by TKM_TOML_MAX_DEPTH. */
#include <tkm/toml.h>

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/err.h>

enum {
    F_HEADER = 1,   /* a table defined by a [header] (or a [[header]] element) */
    F_IMPLICIT = 2, /* a table created as an intermediate of a header */
    F_DOTTED = 4,   /* a table created by a dotted key */
    F_INLINE = 8,   /* an inline table or a static array: closed */
    F_AOT = 16,     /* an array created by [[header]] */
};

struct parser {
    const char *d;
    size_t len, pos;
    unsigned line;
    size_t line_start;
    const char *what;
    struct tkm_err *err;
    size_t nodes;
};

#define MAX_KEYS TKM_TOML_MAX_DEPTH

struct keypath {
    char *k[MAX_KEYS];
    size_t n;
    unsigned line, col;
};

static unsigned col_of(const struct parser *p)
{
    return (unsigned)(p->pos - p->line_start + 1);
}

static int fail_at(struct parser *p, int code, unsigned line, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail_at(struct parser *p, int code, unsigned line, unsigned col, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tkm_err_set(p->err, code, "%s%sline %u, column %u: %s", p->what ? p->what : "",
                       p->what ? ": " : "", line, col, msg);
}

#define FAIL(p, ...) fail_at((p), -EPROTO, (p)->line, col_of(p), __VA_ARGS__)

const char *tkm_toml_type_name(enum tkm_toml_type type)
{
    switch (type) {
    case TKM_TOML_STRING:
        return "string";
    case TKM_TOML_INT:
        return "integer";
    case TKM_TOML_BOOL:
        return "boolean";
    case TKM_TOML_ARRAY:
        return "array";
    case TKM_TOML_TABLE:
        return "table";
    }
    return "value";
}

void tkm_toml_free(struct tkm_toml *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        tkm_toml_free(t->items[i]);
        if (t->keys)
            free(t->keys[i]);
    }
    free(t->items);
    free(t->keys);
    free(t->s);
    free(t);
}

const struct tkm_toml *tkm_toml_get(const struct tkm_toml *t, const char *key)
{
    if (!t || t->type != TKM_TOML_TABLE)
        return NULL;
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->keys[i], key) == 0)
            return t->items[i];
    return NULL;
}

static struct tkm_toml *get_mut(struct tkm_toml *t, const char *key)
{
    return (struct tkm_toml *)tkm_toml_get(t, key);
}

static int node_new(struct parser *p, enum tkm_toml_type type, unsigned line, unsigned col,
                    struct tkm_toml **out)
{
    *out = NULL;
    if (p->nodes >= TKM_TOML_MAX_NODES)
        return fail_at(p, -E2BIG, line, col, "more than %d values", TKM_TOML_MAX_NODES);
    struct tkm_toml *t = calloc(1, sizeof *t);
    if (!t)
        return tkm_err_set(p->err, -ENOMEM, "out of memory");
    p->nodes++;
    t->type = type;
    t->line = line;
    t->col = col;
    *out = t;
    return 0;
}

/* Appends v (and key, for a table; both owned by the parent afterwards, or
 * freed on failure). */
static int add_item(struct parser *p, struct tkm_toml *t, char *key, struct tkm_toml *v)
{
    if (t->n >= TKM_TOML_MAX_ITEMS) {
        int rc = fail_at(p, -E2BIG, v->line, v->col, "more than %d entries in one %s",
                         TKM_TOML_MAX_ITEMS, tkm_toml_type_name(t->type));
        free(key);
        tkm_toml_free(v);
        return rc;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4;
        struct tkm_toml **items = realloc(t->items, cap * sizeof *items);
        if (items)
            t->items = items;
        char **keys = NULL;
        if (items && t->type == TKM_TOML_TABLE) {
            keys = realloc(t->keys, cap * sizeof *keys);
            if (keys)
                t->keys = keys;
        }
        if (!items || (t->type == TKM_TOML_TABLE && !keys)) {
            free(key);
            tkm_toml_free(v);
            return tkm_err_set(p->err, -ENOMEM, "out of memory");
        }
        t->cap = cap;
    }
    if (t->type == TKM_TOML_TABLE)
        t->keys[t->n] = key;
    else
        free(key);
    t->items[t->n++] = v;
    return 0;
}

/* ---- lexical helpers ---------------------------------------------------- */

static int at_end(const struct parser *p)
{
    return p->pos >= p->len;
}

static char peek(const struct parser *p, size_t ahead)
{
    return p->pos + ahead < p->len ? p->d[p->pos + ahead] : '\0';
}

static void skip_ws(struct parser *p)
{
    while (!at_end(p) && (p->d[p->pos] == ' ' || p->d[p->pos] == '\t'))
        p->pos++;
}

/* A comment from '#' to the end of the line (not consuming the newline). */
static int skip_comment(struct parser *p)
{
    if (peek(p, 0) != '#')
        return 0;
    for (; !at_end(p) && p->d[p->pos] != '\n'; p->pos++) {
        unsigned char c = (unsigned char)p->d[p->pos];
        if (c == '\r' && peek(p, 1) == '\n')
            continue;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return FAIL(p, "control character 0x%02x in a comment", c);
    }
    return 0;
}

/* Consumes one newline if there is one; returns 1 if it did. */
static int eat_newline(struct parser *p)
{
    if (peek(p, 0) == '\n' || (peek(p, 0) == '\r' && peek(p, 1) == '\n')) {
        p->pos += peek(p, 0) == '\r' ? 2 : 1;
        p->line++;
        p->line_start = p->pos;
        return 1;
    }
    return 0;
}

/* Whitespace, comments and newlines (inside arrays). */
static int skip_ws_nl(struct parser *p)
{
    for (;;) {
        skip_ws(p);
        int rc = skip_comment(p);
        if (rc)
            return rc;
        if (!eat_newline(p))
            return 0;
    }
}

/* After a key/value pair or a header: only whitespace, a comment, then a
 * newline or the end. */
static int end_of_line(struct parser *p)
{
    skip_ws(p);
    int rc = skip_comment(p);
    if (rc)
        return rc;
    if (at_end(p) || eat_newline(p))
        return 0;
    if (peek(p, 0) == '\r')
        return FAIL(p, "a carriage return not followed by a newline");
    return FAIL(p, "unexpected '%c' after the value (one key/value pair per line)", peek(p, 0));
}

/* Checks the whole input is UTF-8 without NUL bytes (TOML is UTF-8). */
static int check_utf8(struct parser *p)
{
    const unsigned char *s = (const unsigned char *)p->d;
    for (size_t i = 0; i < p->len;) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        uint32_t cp = n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
        int ok = n != 0 && i + n <= p->len && c != 0;
        for (size_t k = 1; ok && k < n; k++) {
            ok = (s[i + k] & 0xc0) == 0x80;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (ok && n > 1)
            ok = (n == 2 && cp >= 0x80) ||
                 (n == 3 && cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff)) ||
                 (n == 4 && cp >= 0x10000 && cp <= 0x10ffff);
        if (c == '\n') {
            p->line++;
            p->line_start = i + 1;
        }
        if (!ok) {
            p->pos = i;
            return c == 0 ? FAIL(p, "a NUL byte") : FAIL(p, "invalid UTF-8");
        }
        i += n;
    }
    p->line = 1;
    p->line_start = 0;
    p->pos = 0;
    return 0;
}

static int put_utf8(struct tkm_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return tkm_buf_append(b, u, n);
}

static int hexval(char c)
{
    static const char digits[] = "0123456789abcdefABCDEF";
    const char *q = c ? strchr(digits, c) : NULL;
    if (!q)
        return -1;
    return q - digits < 16 ? (int)(q - digits) : (int)(q - digits) - 6;
}

/* A single-line basic ("...") or literal ('...') string at pos; *out owned
 * by the caller. */
static int parse_string(struct parser *p, char **out)
{
    char q = peek(p, 0);
    struct tkm_buf b = TKM_BUF_INIT(TKM_TOML_MAX_BYTES);
    int rc = 0;
    *out = NULL;
    if (peek(p, 1) == q && peek(p, 2) == q)
        return FAIL(p, "multi-line strings are not supported");
    p->pos++;
    for (;;) {
        if (at_end(p) || peek(p, 0) == '\n' || peek(p, 0) == '\r') {
            rc = FAIL(p, "unterminated string");
            break;
        }
        unsigned char c = (unsigned char)p->d[p->pos];
        if (c == (unsigned char)q) {
            p->pos++;
            break;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            rc = FAIL(p, "control character 0x%02x in a string", c);
            break;
        }
        if (c != '\\' || q == '\'') {
            rc = tkm_buf_putc(&b, (char)c);
            p->pos++;
        } else {
            char e = peek(p, 1);
            const char *map = "b\bt\tn\nf\fr\r\"\"\\\\";
            const char *m = e ? strchr(map, e) : NULL;
            if (m && (m - map) % 2 == 0) {
                rc = tkm_buf_putc(&b, m[1]);
                p->pos += 2;
            } else if (e == 'u' || e == 'U') {
                size_t nd = e == 'u' ? 4 : 8;
                uint32_t cp = 0;
                size_t k;
                for (k = 0; k < nd && hexval(peek(p, 2 + k)) >= 0; k++)
                    cp = (cp << 4) | (uint32_t)hexval(peek(p, 2 + k));
                if (k < nd) {
                    p->pos++;
                    rc = FAIL(p, "\\%c needs %zu hex digits", e, nd);
                    break;
                }
                if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
                    rc = FAIL(p, "\\%c escape is not a Unicode scalar value (or is NUL)", e);
                    break;
                }
                rc = put_utf8(&b, cp);
                p->pos += 2 + nd;
            } else {
                p->pos++;
                rc = FAIL(p, "invalid escape sequence");
                break;
            }
        }
        if (rc) {
            rc = rc == -E2BIG ? FAIL(p, "string too long")
                              : tkm_err_set(p->err, rc, "out of memory");
            break;
        }
    }
    if (rc) {
        tkm_buf_release(&b);
        return rc;
    }
    *out = tkm_buf_detach(&b, NULL);
    return *out ? 0 : tkm_err_set(p->err, -ENOMEM, "out of memory");
}

static int is_bare(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static void keypath_free(struct keypath *kp)
{
    for (size_t i = 0; i < kp->n; i++)
        free(kp->k[i]);
    kp->n = 0;
}

/* key = simple-key *( ws '.' ws simple-key ); max_keys bounds the depth. */
static int parse_key(struct parser *p, struct keypath *kp, size_t max_keys)
{
    int rc;
    kp->n = 0;
    kp->line = p->line;
    kp->col = col_of(p);
    for (;;) {
        char *k = NULL;
        if (kp->n >= max_keys) {
            rc = fail_at(p, -E2BIG, p->line, col_of(p), "nested deeper than %d levels",
                         TKM_TOML_MAX_DEPTH);
            goto fail;
        }
        char c = peek(p, 0);
        if (c == '"' || c == '\'') {
            if ((rc = parse_string(p, &k)))
                goto fail;
        } else if (!at_end(p) && is_bare(c)) {
            size_t s = p->pos;
            while (!at_end(p) && is_bare(p->d[p->pos]))
                p->pos++;
            k = malloc(p->pos - s + 1);
            if (!k) {
                rc = tkm_err_set(p->err, -ENOMEM, "out of memory");
                goto fail;
            }
            memcpy(k, p->d + s, p->pos - s);
            k[p->pos - s] = '\0';
        } else {
            rc = at_end(p) || c == '\n' || c == '\r' ? FAIL(p, "a key is expected")
                                                     : FAIL(p, "unexpected '%c' in a key", c);
            goto fail;
        }
        kp->k[kp->n++] = k;
        skip_ws(p);
        if (peek(p, 0) != '.')
            return 0;
        p->pos++;
        skip_ws(p);
    }
fail:
    keypath_free(kp);
    return rc;
}

/* A new child of t named kp->k[i] (the key moves into t), of type and flags. */
static int add_child(struct parser *p, struct tkm_toml *t, struct keypath *kp, size_t i,
                     enum tkm_toml_type type, unsigned flags, struct tkm_toml **out)
{
    int rc = node_new(p, type, kp->line, kp->col, out);
    if (rc)
        return rc;
    (*out)->flags = flags;
    rc = add_item(p, t, kp->k[i], *out);
    kp->k[i] = NULL;
    return rc;
}

/* Closes an inline table and the tables its dotted keys made. */
static void close_inline(struct tkm_toml *t)
{
    t->flags |= F_INLINE;
    for (size_t i = 0; i < t->n; i++)
        if (t->items[i]->type == TKM_TOML_TABLE && (t->items[i]->flags & F_DOTTED))
            close_inline(t->items[i]);
}

static int parse_value(struct parser *p, unsigned depth, struct tkm_toml **out);

/* Puts v at the dotted path kp under t (key/value pairs). Takes v and the
 * keys in kp in every case. */
static int set_path(struct parser *p, struct tkm_toml *t, struct keypath *kp, struct tkm_toml *v)
{
    int rc = 0;
    for (size_t i = 0; i + 1 < kp->n; i++) {
        struct tkm_toml *c = get_mut(t, kp->k[i]);
        if (!c) {
            if ((rc = add_child(p, t, kp, i, TKM_TOML_TABLE, F_DOTTED, &c)))
                goto out;
        } else if (c->type != TKM_TOML_TABLE || !(c->flags & F_DOTTED) || (c->flags & F_INLINE)) {
            rc = fail_at(p, -EPROTO, kp->line, kp->col,
                         "key \"%s\" is already defined and cannot be extended with a dotted key",
                         kp->k[i]);
            goto out;
        }
        t = c;
    }
    if (get_mut(t, kp->k[kp->n - 1])) {
        rc =
            fail_at(p, -EPROTO, kp->line, kp->col, "key \"%s\" is defined twice", kp->k[kp->n - 1]);
        goto out;
    }
    rc = add_item(p, t, kp->k[kp->n - 1], v);
    kp->k[kp->n - 1] = NULL;
    v = NULL;
out:
    tkm_toml_free(v);
    keypath_free(kp);
    return rc;
}

/* key ws '=' ws value, into t at tree depth `depth` (t's own). */
static int parse_keyval(struct parser *p, struct tkm_toml *t, unsigned depth)
{
    struct keypath kp;
    struct tkm_toml *v = NULL;
    if (depth >= TKM_TOML_MAX_DEPTH)
        return fail_at(p, -E2BIG, p->line, col_of(p), "nested deeper than %d levels",
                       TKM_TOML_MAX_DEPTH);
    int rc = parse_key(p, &kp, TKM_TOML_MAX_DEPTH - depth);
    if (rc)
        return rc;
    skip_ws(p);
    if (peek(p, 0) != '=') {
        keypath_free(&kp);
        return at_end(p) ? FAIL(p, "'=' is expected after the key")
                         : FAIL(p, "'=' is expected after the key, not '%c'", peek(p, 0));
    }
    p->pos++;
    skip_ws(p);
    if ((rc = parse_value(p, depth + (unsigned)kp.n, &v))) {
        keypath_free(&kp);
        return rc;
    }
    return set_path(p, t, &kp, v);
}

static int parse_array(struct parser *p, unsigned depth, struct tkm_toml *a)
{
    int rc;
    p->pos++; /* '[' */
    for (;;) {
        if ((rc = skip_ws_nl(p)))
            return rc;
        if (peek(p, 0) == ']') {
            p->pos++;
            return 0;
        }
        struct tkm_toml *v;
        if ((rc = parse_value(p, depth + 1, &v)))
            return rc;
        if ((rc = add_item(p, a, NULL, v)))
            return rc;
        if ((rc = skip_ws_nl(p)))
            return rc;
        if (peek(p, 0) == ',') {
            p->pos++;
        } else if (peek(p, 0) != ']') {
            return at_end(p) ? FAIL(p, "unterminated array")
                             : FAIL(p, "',' or ']' is expected in an array, not '%c'", peek(p, 0));
        }
    }
}

static int parse_inline_table(struct parser *p, unsigned depth, struct tkm_toml *t)
{
    int rc;
    p->pos++; /* '{' */
    skip_ws(p);
    if (peek(p, 0) == '}') {
        p->pos++;
        close_inline(t);
        return 0;
    }
    for (;;) {
        skip_ws(p);
        if ((rc = parse_keyval(p, t, depth)))
            return rc;
        skip_ws(p);
        if (peek(p, 0) == '}') {
            p->pos++;
            close_inline(t);
            return 0;
        }
        if (peek(p, 0) != ',')
            return at_end(p) || peek(p, 0) == '\n' || peek(p, 0) == '\r'
                       ? FAIL(p, "unterminated inline table (inline tables are one line)")
                       : FAIL(p, "',' or '}' is expected in an inline table, not '%c'", peek(p, 0));
        p->pos++;
        skip_ws(p);
        if (peek(p, 0) == '}')
            return FAIL(p, "a trailing comma is not allowed in an inline table");
    }
}

/* Integers, and a clear refusal of the number-like forms outside the subset. */
static int parse_number(struct parser *p, struct tkm_toml *v)
{
    size_t s = p->pos, e = s;
    while (e < p->len && (is_bare(p->d[e]) || p->d[e] == '+' || p->d[e] == '.' || p->d[e] == ':'))
        e++;
    const char *t = p->d + s;
    size_t n = e - s;
    size_t k = (t[0] == '+' || t[0] == '-') ? 1 : 0;
    if (n == k || t[k] < '0' || t[k] > '9') {
        if (n - k == 3 && (!memcmp(t + k, "inf", 3) || !memcmp(t + k, "nan", 3)))
            return FAIL(p, "floats are not supported");
        return FAIL(p, "unexpected '%c' where a value is expected", t[0]);
    }
    if (memchr(t, ':', n) || (n > 4 && memchr(t + 1, '-', n - 1) && t[0] != '-' && t[0] != '+'))
        return FAIL(p, "dates and times are not supported");
    if (memchr(t, '.', n))
        return FAIL(p, "floats are not supported");
    if (n - k >= 2 && t[k] == '0' && (t[k + 1] == 'x' || t[k + 1] == 'o' || t[k + 1] == 'b'))
        return FAIL(p, "hexadecimal, octal and binary integers are not supported");
    for (size_t i = k; i < n; i++)
        if (t[i] == 'e' || t[i] == 'E')
            return FAIL(p, "floats are not supported");
    if (t[k] == '0' && n - k > 1)
        return FAIL(p, "leading zeros are not allowed in an integer");
    uint64_t acc = 0, lim = t[0] == '-' ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (size_t i = k; i < n; i++) {
        if (t[i] == '_') {
            if (i == k || i + 1 == n || t[i + 1] < '0' || t[i + 1] > '9')
                return FAIL(p, "'_' in an integer must be between digits");
            continue;
        }
        if (t[i] < '0' || t[i] > '9') {
            p->pos = s + i;
            return FAIL(p, "invalid character '%c' in an integer", t[i]);
        }
        unsigned dgt = (unsigned)(t[i] - '0');
        if (acc > (lim - dgt) / 10)
            return FAIL(p, "integer out of range");
        acc = acc * 10 + dgt;
    }
    v->type = TKM_TOML_INT;
    v->i =
        t[0] == '-' ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
    p->pos = e;
    return 0;
}

static int word_at(const struct parser *p, const char *w)
{
    size_t n = strlen(w);
    return p->len - p->pos >= n && memcmp(p->d + p->pos, w, n) == 0 &&
           (p->pos + n == p->len || !is_bare(p->d[p->pos + n]));
}

/* One value; depth is the tree depth it will live at. *out owned by the
 * caller on success, NULL on failure. */
static int parse_value(struct parser *p, unsigned depth, struct tkm_toml **out)
{
    struct tkm_toml *v;
    int rc;
    *out = NULL;
    if (depth > TKM_TOML_MAX_DEPTH)
        return fail_at(p, -E2BIG, p->line, col_of(p), "nested deeper than %d levels",
                       TKM_TOML_MAX_DEPTH);
    char c = peek(p, 0);
    if ((rc = node_new(p, TKM_TOML_STRING, p->line, col_of(p), &v)))
        return rc;
    if (at_end(p) || c == '\n' || c == '\r' || c == '#') {
        rc = FAIL(p, "a value is expected");
    } else if (c == '"' || c == '\'') {
        rc = parse_string(p, &v->s);
    } else if (word_at(p, "true") || word_at(p, "false")) {
        v->type = TKM_TOML_BOOL;
        v->i = c == 't';
        p->pos += v->i ? 4 : 5;
    } else if (c == '[') {
        v->type = TKM_TOML_ARRAY;
        v->flags = F_INLINE;
        rc = parse_array(p, depth, v);
    } else if (c == '{') {
        v->type = TKM_TOML_TABLE;
        rc = parse_inline_table(p, depth, v);
    } else if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'i' || c == 'n') {
        rc = parse_number(p, v);
    } else {
        rc = FAIL(p, "unexpected '%c' where a value is expected", c);
    }
    if (rc) {
        tkm_toml_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* [a.b] or [[a.b]] at pos; *cur and *cur_depth get the table that follows. */
static int parse_header(struct parser *p, struct tkm_toml *root, struct tkm_toml **cur,
                        unsigned *cur_depth)
{
    struct keypath kp;
    int aot = peek(p, 1) == '[';
    int rc;
    p->pos += aot ? 2 : 1;
    skip_ws(p);
    if ((rc = parse_key(p, &kp, TKM_TOML_MAX_DEPTH)))
        return rc;
    if (peek(p, 0) != ']' || (aot && peek(p, 1) != ']')) {
        keypath_free(&kp);
        return FAIL(p, aot ? "']]' is expected to close the header"
                           : "']' is expected to close "
                             "the header");
    }
    p->pos += aot ? 2 : 1;
    struct tkm_toml *t = root;
    unsigned depth = (unsigned)kp.n + (aot ? 1 : 0); /* an array of tables is two levels */
    for (size_t i = 0; i + 1 < kp.n; i++) {
        struct tkm_toml *c = get_mut(t, kp.k[i]);
        if (!c) {
            if ((rc = add_child(p, t, &kp, i, TKM_TOML_TABLE, F_IMPLICIT, &c)))
                goto out;
        } else if (c->type == TKM_TOML_ARRAY && (c->flags & F_AOT)) {
            c = c->items[c->n - 1];
            depth++;
        } else if (c->type != TKM_TOML_TABLE || (c->flags & F_INLINE)) {
            rc = fail_at(p, -EPROTO, kp.line, kp.col, "key \"%s\" is a %s that cannot be extended",
                         kp.k[i], c->type == TKM_TOML_TABLE ? "inline table" : "value");
            goto out;
        }
        t = c;
    }
    if (depth > TKM_TOML_MAX_DEPTH) {
        rc =
            fail_at(p, -E2BIG, kp.line, kp.col, "nested deeper than %d levels", TKM_TOML_MAX_DEPTH);
        goto out;
    }
    const char *last = kp.k[kp.n - 1];
    struct tkm_toml *c = get_mut(t, last);
    if (!aot) {
        if (c && c->type == TKM_TOML_TABLE && c->flags == F_IMPLICIT) {
            c->flags = F_HEADER;
        } else if (c) {
            rc = fail_at(p, -EPROTO, kp.line, kp.col, "table \"%s\" is defined twice", last);
            goto out;
        } else {
            if ((rc = add_child(p, t, &kp, kp.n - 1, TKM_TOML_TABLE, F_HEADER, &c)))
                goto out;
        }
    } else {
        if (!c) {
            if ((rc = add_child(p, t, &kp, kp.n - 1, TKM_TOML_ARRAY, F_AOT, &c)))
                goto out;
        } else if (c->type != TKM_TOML_ARRAY || !(c->flags & F_AOT)) {
            rc = fail_at(p, -EPROTO, kp.line, kp.col,
                         "key \"%s\" is already defined and is not an array of tables", last);
            goto out;
        }
        struct tkm_toml *e;
        if ((rc = node_new(p, TKM_TOML_TABLE, kp.line, kp.col, &e)))
            goto out;
        e->flags = F_HEADER;
        if ((rc = add_item(p, c, NULL, e)))
            goto out;
        c = e;
    }
    *cur = c;
    *cur_depth = depth;
out:
    keypath_free(&kp);
    return rc;
}

int tkm_toml_parse(const char *data, size_t len, const char *what, struct tkm_toml **out,
                   struct tkm_err *err)
{
    struct parser p = {.d = data, .len = len, .line = 1, .what = what, .err = err};
    struct tkm_toml *root, *cur;
    unsigned depth = 0;
    int rc;
    *out = NULL;
    if (len > TKM_TOML_MAX_BYTES)
        return tkm_err_set(err, -E2BIG, "%s%slarger than %d bytes", what ? what : "",
                           what ? ": " : "", TKM_TOML_MAX_BYTES);
    if ((rc = check_utf8(&p)))
        return rc;
    if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0)
        p.pos = p.line_start = 3; /* a byte order mark */
    if ((rc = node_new(&p, TKM_TOML_TABLE, 1, 1, &root)))
        return rc;
    root->flags = F_HEADER;
    cur = root;
    while (!at_end(&p)) {
        if ((rc = skip_ws_nl(&p)))
            break;
        if (at_end(&p))
            break;
        if (peek(&p, 0) == '[')
            rc = parse_header(&p, root, &cur, &depth);
        else
            rc = parse_keyval(&p, cur, depth);
        if (rc || (rc = end_of_line(&p)))
            break;
    }
    if (rc) {
        tkm_toml_free(root);
        return rc;
    }
    *out = root;
    return 0;
}
