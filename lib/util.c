/* util.c - see util.h. */
#include <tkm/util.h>

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
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
