/* util.c - see util.h. */
#include <tkm/util.h>

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/buf.h>

int tkm_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    if (!s || !*s || isspace((unsigned char)*s))
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int tkm_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || !*s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

uint64_t tkm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void tkm_hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int b64_val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int tkm_base64_decode(const char *in, size_t n, struct tkm_buf *out)
{
    unsigned acc = 0;
    int bits = 0, pad = 0, rc;
    tkm_buf_reset(out);
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)in[i];
        if (isspace(c))
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = b64_val(c);
        if (v < 0 || pad)
            return -EINVAL;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if ((rc = tkm_buf_putc(out, (char)((acc >> bits) & 0xff))))
                return rc;
        }
    }
    if (pad > 2 || bits >= 6)
        return -EINVAL;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (< n bytes left) that is safe to
 * print, else 0: overlong forms, surrogates, C1 controls and bidi overrides
 * are not. */
static size_t utf8_printable(const unsigned char *p, size_t n)
{
    size_t len;
    uint32_t cp;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        len = 2;
        cp = p[0] & 0x1fu;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3;
        cp = p[0] & 0x0fu;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4;
        cp = p[0] & 0x07u;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0 || (cp >= 0x202a && cp <= 0x202e) ||
        (cp >= 0x2066 && cp <= 0x2069))
        return 0;
    return len;
}

/* The escape of the text at p (n > 0 bytes left) into e (8 bytes); *take
 * gets the input bytes it covers. Returns the escape's length. */
static size_t escape_one(const unsigned char *p, size_t n, char e[8], size_t *take)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char b = p[0];
    size_t u = b >= 0x80 ? utf8_printable(p, n) : 0;
    *take = 1;
    if (b == '\\' || b == '\n' || b == '\t' || b == '\r') {
        e[0] = '\\';
        e[1] = b == '\\' ? '\\' : b == '\n' ? 'n' : b == '\t' ? 't' : 'r';
        return 2;
    }
    if (b < 0x20 || b == 0x7f || (b >= 0x80 && u == 0)) {
        e[0] = '\\';
        e[1] = 'x';
        e[2] = digits[b >> 4];
        e[3] = digits[b & 15];
        return 4;
    }
    *take = u ? u : 1;
    memcpy(e, p, *take);
    return *take;
}

char *tkm_escape(const char *s, size_t n, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, total = 0, take;
    char e[8];
    if (outlen == 0)
        return out;
    for (size_t i = 0; i < n; i += take)
        total += escape_one(p + i, n - i, e, &take);
    /* All of it when it fits, else whole escapes up to a "..." mark. */
    size_t room = total < outlen ? outlen - 1 : (outlen > 4 ? outlen - 4 : 0);
    for (size_t i = 0; i < n; i += take) {
        size_t el = escape_one(p + i, n - i, e, &take);
        if (o + el > room)
            break;
        memcpy(out + o, e, el);
        o += el;
    }
    if (total >= outlen) {
        size_t dots = outlen - 1 - o < 3 ? outlen - 1 - o : 3;
        memcpy(out + o, "...", dots);
        o += dots;
    }
    out[o] = '\0';
    return out;
}

static int lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One label of any length: [a-z0-9]([-a-z0-9]*[a-z0-9])? */
static int label_ok(const char *s, size_t n)
{
    if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
        return 0;
    for (size_t i = 1; i + 1 < n; i++)
        if (!lower_alnum(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

int tkm_dns1123_label(const char *s, size_t n)
{
    return n <= 63 && label_ok(s, n);
}

int tkm_dns1123_subdomain(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    for (size_t start = 0, i = 0; i <= n; i++) {
        if (i < n && s[i] != '.')
            continue;
        if (!label_ok(s + start, i - start))
            return 0;
        start = i + 1;
    }
    return 1;
}
