/*
 * jscan.c - JSON validation and span reading without a tree. See
 * tkm/jscan.h for what is accepted (jansson 2.14's grammar and limits).
 *
 * The validator is a recursive descent bounded by TKM_JSCAN_MAX_DEPTH. Each
 * open object keeps its decoded member names on a stack in s->dec (offsets
 * in s->keys); a new name is compared with the names of its own object only,
 * and the object's names are dropped when it closes.
 */
#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/jscan.h>

#define SCRATCH_MAX (64u * 1024u * 1024u)

struct key_ref {
    size_t off, len;
};

/* Objects with more names than this are checked for duplicates by sorting
 * their names when they close (O(k log k)) instead of comparing each new
 * name with the previous ones (O(k^2)): a ConfigMap may have thousands. */
#define LINEAR_KEYS 32u

struct v {
    const char *p;
    size_t n, i;
    unsigned depth;
    struct tkm_jscan *s;
    const char *what;
    struct tkm_err *err;
};

void tkm_jscan_init(struct tkm_jscan *s)
{
    tkm_buf_init(&s->keys, SCRATCH_MAX);
    tkm_buf_init(&s->dec, SCRATCH_MAX);
}

void tkm_jscan_release(struct tkm_jscan *s)
{
    if (!s)
        return;
    tkm_buf_release(&s->keys);
    tkm_buf_release(&s->dec);
}

static int is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

size_t tkm_jscan_ws(const char *p, size_t n, size_t i)
{
    while (i < n && is_ws(p[i]))
        i++;
    return i;
}

static int bad(struct v *v, const char *why)
{
    return tkm_err_set(v->err, -EPROTO, "%s is not valid JSON: %s (byte %zu)", v->what, why, v->i);
}

static int hex4(const char *p, size_t n, size_t i, unsigned *out)
{
    unsigned x = 0;
    if (i + 4 > n)
        return -1;
    for (size_t k = 0; k < 4; k++) {
        char c = p[i + k];
        x <<= 4;
        if (c >= '0' && c <= '9')
            x |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            x |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            x |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = x;
    return 0;
}

/* Length of the valid UTF-8 sequence at p[i] (first byte >= 0x80), or 0. */
static size_t utf8_len(const char *p, size_t n, size_t i)
{
    const unsigned char *u = (const unsigned char *)p + i;
    unsigned c = u[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (i + len > n)
        return 0;
    if (c == 0xe0)
        lo = 0xa0; /* overlong */
    else if (c == 0xed)
        hi = 0x9f; /* UTF-16 surrogates */
    else if (c == 0xf0)
        lo = 0x90; /* overlong */
    else if (c == 0xf4)
        hi = 0x8f; /* over U+10FFFF */
    if (u[1] < lo || u[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (u[k] < 0x80 || u[k] > 0xbf)
            return 0;
    return len;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One escape at p[i] == '\\': its code point and the index after it; -1 for
 * a bad escape. Surrogate pairs are joined; lone ones and \u0000 refused. */
static int escape(const char *p, size_t n, size_t i, unsigned *cp, size_t *next)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (i + 1 >= n)
        return -1;
    const char *e = memchr(from, p[i + 1], sizeof from - 1);
    if (e && p[i + 1]) {
        *cp = (unsigned char)to[e - from];
        *next = i + 2;
        return 0;
    }
    unsigned u, lo;
    if (p[i + 1] != 'u' || hex4(p, n, i + 2, &u) < 0)
        return -1;
    *next = i + 6;
    if (u >= 0xdc00 && u <= 0xdfff)
        return -1;
    if (u >= 0xd800 && u <= 0xdbff) {
        if (i + 7 >= n || p[i + 6] != '\\' || p[i + 7] != 'u' || hex4(p, n, i + 8, &lo) < 0 ||
            lo < 0xdc00 || lo > 0xdfff)
            return -1;
        u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        *next = i + 12;
    }
    if (u == 0)
        return -1;
    *cp = u;
    return 0;
}

/* Validates the string at v->i; dec (may be NULL) gets its decoded bytes. */
static int v_string(struct v *v, struct tkm_buf *dec)
{
    const char *p = v->p;
    size_t i = v->i + 1, run = i;
    int rc;
    for (;;) {
        if (i >= v->n) {
            v->i = i;
            return bad(v, "unterminated string");
        }
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            if (dec && i > run && (rc = tkm_buf_append(dec, p + run, i - run)) < 0)
                return tkm_err_set(v->err, rc, "%s: out of memory", v->what);
            if (c == '"')
                break;
            unsigned cp;
            size_t next;
            char o[4];
            if (escape(p, v->n, i, &cp, &next) < 0) {
                v->i = i;
                return bad(v, "invalid escape or Unicode code point in string");
            }
            if (dec && (rc = tkm_buf_append(dec, o, put_utf8(o, cp))) < 0)
                return tkm_err_set(v->err, rc, "%s: out of memory", v->what);
            i = run = next;
        } else if (c < 0x20) {
            v->i = i;
            return bad(v, "control character in string");
        } else if (c >= 0x80) {
            size_t l = utf8_len(p, v->n, i);
            if (!l) {
                v->i = i;
                return bad(v, "invalid UTF-8");
            }
            i += l;
        } else {
            i++;
        }
    }
    v->i = i + 1;
    return 0;
}

static int real_overflows(const char *p, size_t len)
{
    char small[128], *b = len < sizeof small ? small : malloc(len + 1);
    if (!b)
        return -1;
    memcpy(b, p, len);
    b[len] = '\0';
    errno = 0;
    double d = strtod(b, NULL);
    int over = errno == ERANGE && (d > 1.0 || d < -1.0);
    if (b != small)
        free(b);
    return over;
}

static int v_number(struct v *v)
{
    const char *p = v->p;
    size_t n = v->n, i = v->i, start = i;
    int neg = 0, real = 0;
    if (p[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= n || !is_digit(p[i]))
        return bad(v, "invalid number");
    size_t ds = i;
    if (p[i] == '0')
        i++;
    else
        while (i < n && is_digit(p[i]))
            i++;
    if (i < n && is_digit(p[i]))
        return bad(v, "invalid number (leading zero)");
    size_t de = i;
    if (i < n && p[i] == '.') {
        real = 1;
        if (++i >= n || !is_digit(p[i]))
            return bad(v, "invalid number");
        while (i < n && is_digit(p[i]))
            i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        real = 1;
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-'))
            i++;
        if (i >= n || !is_digit(p[i]))
            return bad(v, "invalid number");
        while (i < n && is_digit(p[i]))
            i++;
    }
    v->i = i;
    if (!real) {
        uint64_t x = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        for (size_t k = ds; k < de; k++) {
            unsigned d = (unsigned)(p[k] - '0');
            if (x > (lim - d) / 10) {
                v->i = start;
                return bad(v, "too big integer");
            }
            x = x * 10 + d;
        }
        return 0;
    }
    int over = real_overflows(p + start, i - start);
    if (over < 0)
        return tkm_err_set(v->err, -ENOMEM, "%s: out of memory", v->what);
    if (over) {
        v->i = start;
        return bad(v, "real number overflow");
    }
    return 0;
}

static int v_literal(struct v *v)
{
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (v->i + l <= v->n && memcmp(v->p + v->i, lits[k], l) == 0) {
            size_t e = v->i + l;
            if (e < v->n &&
                ((v->p[e] >= 'a' && v->p[e] <= 'z') || (v->p[e] >= 'A' && v->p[e] <= 'Z')))
                break;
            v->i = e;
            return 0;
        }
    }
    return bad(v, "invalid token");
}

static int v_value(struct v *v);

/* Reads a member name into s->dec and refuses it if the open object (whose
 * names start at key index first) already has it. */
static int v_key(struct v *v, size_t first)
{
    struct tkm_jscan *s = v->s;
    size_t off = s->dec.len, at = v->i;
    int rc = v_string(v, &s->dec);
    if (rc < 0)
        return rc;
    size_t len = s->dec.len - off, nk = s->keys.len / sizeof(struct key_ref);
    const struct key_ref *k = (const struct key_ref *)(void *)s->keys.data;
    /* past LINEAR_KEYS names the object is checked once, sorted, when it closes */
    for (size_t j = first; nk - first <= LINEAR_KEYS && j < nk; j++) {
        if (k[j].len == len && memcmp(s->dec.data + k[j].off, s->dec.data + off, len) == 0) {
            v->i = at;
            return bad(v, "duplicate object key");
        }
    }
    struct key_ref r = {off, len};
    if ((rc = tkm_buf_append(&s->keys, &r, sizeof r)) < 0)
        return tkm_err_set(v->err, rc, "%s: too many object keys", v->what);
    return 0;
}

/* Drops the names of an object that closed (the stack's top): tkm_buf has
 * no truncation, and this keeps its storage for the next object. */
static void keys_truncate(struct tkm_buf *b, size_t len)
{
    if (len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

static int ref_cmp(const void *a, const void *b, void *base)
{
    const struct key_ref *x = a, *y = b;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return memcmp((const char *)base + x->off, (const char *)base + y->off, x->len);
}

/* The names of a large object that closed at v->i: any two equal? */
static int big_object_dups(struct v *v, size_t first)
{
    struct tkm_jscan *s = v->s;
    struct key_ref *k = (struct key_ref *)(void *)s->keys.data + first;
    size_t nk = s->keys.len / sizeof(struct key_ref) - first;
    if (nk <= LINEAR_KEYS)
        return 0;
    qsort_r(k, nk, sizeof *k, ref_cmp, s->dec.data);
    for (size_t j = 1; j < nk; j++)
        if (ref_cmp(&k[j - 1], &k[j], s->dec.data) == 0)
            return bad(v, "duplicate object key");
    return 0;
}

static int v_object(struct v *v)
{
    struct tkm_jscan *s = v->s;
    size_t keys_len = s->keys.len, dec_len = s->dec.len, first = keys_len / sizeof(struct key_ref);
    int rc = 0;
    v->i = tkm_jscan_ws(v->p, v->n, v->i + 1);
    if (v->i < v->n && v->p[v->i] == '}') {
        v->i++;
        return 0;
    }
    for (;;) {
        if (v->i >= v->n || v->p[v->i] != '"') {
            rc = bad(v, "string or '}' expected");
            break;
        }
        if ((rc = v_key(v, first)) < 0)
            break;
        v->i = tkm_jscan_ws(v->p, v->n, v->i);
        if (v->i >= v->n || v->p[v->i] != ':') {
            rc = bad(v, "':' expected");
            break;
        }
        v->i = tkm_jscan_ws(v->p, v->n, v->i + 1);
        if ((rc = v_value(v)) < 0)
            break;
        v->i = tkm_jscan_ws(v->p, v->n, v->i);
        if (v->i < v->n && v->p[v->i] == '}') {
            rc = big_object_dups(v, first);
            v->i++;
            break;
        }
        if (v->i >= v->n || v->p[v->i] != ',') {
            rc = bad(v, "'}' or ',' expected");
            break;
        }
        v->i = tkm_jscan_ws(v->p, v->n, v->i + 1);
    }
    keys_truncate(&s->keys, keys_len);
    keys_truncate(&s->dec, dec_len);
    return rc;
}

static int v_array(struct v *v)
{
    v->i = tkm_jscan_ws(v->p, v->n, v->i + 1);
    if (v->i < v->n && v->p[v->i] == ']') {
        v->i++;
        return 0;
    }
    for (;;) {
        int rc = v_value(v);
        if (rc < 0)
            return rc;
        v->i = tkm_jscan_ws(v->p, v->n, v->i);
        if (v->i < v->n && v->p[v->i] == ']') {
            v->i++;
            return 0;
        }
        if (v->i >= v->n || v->p[v->i] != ',')
            return bad(v, "']' or ',' expected");
        v->i = tkm_jscan_ws(v->p, v->n, v->i + 1);
    }
}

static int v_value(struct v *v)
{
    int rc;
    if (v->i >= v->n)
        return bad(v, "unexpected end of input");
    if (++v->depth > TKM_JSCAN_MAX_DEPTH)
        return bad(v, "maximum parsing depth reached");
    char c = v->p[v->i];
    if (c == '{')
        rc = v_object(v);
    else if (c == '[')
        rc = v_array(v);
    else if (c == '"')
        rc = v_string(v, NULL);
    else if (c == '-' || is_digit(c))
        rc = v_number(v);
    else
        rc = v_literal(v);
    v->depth--;
    return rc;
}

int tkm_jscan_validate(struct tkm_jscan *s, const char *p, size_t n, const char *what,
                       struct tkm_err *err)
{
    struct tkm_jscan tmp;
    if (!s) {
        tkm_jscan_init(&tmp);
        s = &tmp;
    }
    tkm_buf_reset(&s->keys);
    tkm_buf_reset(&s->dec);
    struct v v = {.p = p, .n = n, .s = s, .what = what ? what : "input", .err = err};
    v.i = tkm_jscan_ws(p, n, 0);
    int rc = v_value(&v);
    if (rc == 0) {
        v.i = tkm_jscan_ws(p, n, v.i);
        if (v.i < n)
            rc = bad(&v, "end of file expected");
    }
    if (s == &tmp)
        tkm_jscan_release(&tmp);
    return rc;
}

/* ---- span readers (validated text) ------------------------------------------------------ */

static size_t skip_string(const char *p, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (p[i] == '\\')
            i++;
        else if (p[i] == '"')
            return i + 1;
    }
    return n;
}

size_t tkm_jscan_skip(const char *p, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (p[i] == '"')
        return skip_string(p, n, i);
    if (p[i] == '{' || p[i] == '[') {
        size_t depth = 0;
        while (i < n) {
            char c = p[i];
            if (c == '"') {
                i = skip_string(p, n, i);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return i + 1;
            i++;
        }
        return n;
    }
    while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && !is_ws(p[i]))
        i++;
    return i;
}

int tkm_jscan_next(const char *p, size_t n, size_t *pos, struct tkm_jscan_member *m)
{
    size_t i = tkm_jscan_ws(p, n, *pos);
    memset(m, 0, sizeof *m);
    if (i >= n || p[i] == '}' || p[i] == ']')
        return 0;
    if (p[i] == '{' || p[i] == ',' || p[i] == '[') {
        i = tkm_jscan_ws(p, n, i + 1);
        if (i >= n || p[i] == '}' || p[i] == ']')
            return 0;
    }
    if (p[i] == '"') {
        /* a member name when a ':' follows, else a string element */
        size_t e = skip_string(p, n, i), c = tkm_jscan_ws(p, n, e);
        if (c < n && p[c] == ':') {
            m->key = i;
            m->key_len = e - i;
            i = tkm_jscan_ws(p, n, c + 1);
        }
    }
    m->val = i;
    m->val_len = tkm_jscan_skip(p, n, i) - i;
    *pos = i + m->val_len;
    return 1;
}

int tkm_jscan_key_is(const char *p, const struct tkm_jscan_member *m, const char *key)
{
    size_t kl = strlen(key), rl = m->key_len >= 2 ? m->key_len - 2 : 0;
    const char *raw = p + m->key + 1;
    if (!m->key_len)
        return 0;
    if (!memchr(raw, '\\', rl))
        return rl == kl && memcmp(raw, key, kl) == 0;
    if (rl > 6 * kl + 6)
        return 0; /* even all-escapes, it decodes to more than kl bytes */
    struct tkm_buf b;
    tkm_buf_init(&b, 1024);
    int eq = tkm_jscan_str(p, m->key, m->key_len, &b) == 0 && b.len == kl + 1 &&
             memcmp(b.data, key, kl) == 0;
    tkm_buf_release(&b);
    return eq;
}

int tkm_jscan_member(const char *p, size_t n, size_t obj, const char *key,
                     struct tkm_jscan_member *m)
{
    size_t pos = obj;
    if (obj >= n || p[obj] != '{')
        return 0;
    while (tkm_jscan_next(p, n, &pos, m))
        if (tkm_jscan_key_is(p, m, key))
            return 1;
    return 0;
}

int tkm_jscan_str(const char *p, size_t off, size_t len, struct tkm_buf *out)
{
    if (len < 2 || p[off] != '"' || p[off + len - 1] != '"')
        return -EINVAL;
    size_t i = off + 1, end = off + len - 1, run = i;
    int rc;
    while (i < end) {
        if (p[i] != '\\') {
            i++;
            continue;
        }
        if (i > run && (rc = tkm_buf_append(out, p + run, i - run)) < 0)
            return rc;
        unsigned cp;
        size_t next;
        char o[4];
        if (escape(p, end, i, &cp, &next) < 0)
            return -EINVAL;
        if ((rc = tkm_buf_append(out, o, put_utf8(o, cp))) < 0)
            return rc;
        i = run = next;
    }
    if (i > run && (rc = tkm_buf_append(out, p + run, i - run)) < 0)
        return rc;
    return tkm_buf_putc(out, '\0');
}
