/* buf.c - see buf.h for the invariants. */
#include <tkm/buf.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char tkm_buf_empty[1];

void tkm_buf_init(struct tkm_buf *b, size_t max)
{
    b->data = tkm_buf_empty;
    b->len = 0;
    b->cap = 0;
    b->max = max;
}

void tkm_buf_release(struct tkm_buf *b)
{
    if (!b)
        return;
    if (b->cap)
        free(b->data);
    tkm_buf_init(b, b->max);
}

void tkm_buf_reset(struct tkm_buf *b)
{
    b->len = 0;
    b->data[0] = '\0';
}

int tkm_buf_grow(struct tkm_buf *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra) {
        tkm_buf_release(b);
        return -E2BIG;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    if (ncap > b->max + 1)
        ncap = b->max + 1;
    char *n = b->cap ? realloc(b->data, ncap) : malloc(ncap);
    if (!n) {
        tkm_buf_release(b);
        return -ENOMEM;
    }
    if (!b->cap)
        n[0] = '\0';
    b->data = n;
    b->cap = ncap;
    return 0;
}

int tkm_buf_append(struct tkm_buf *b, const void *p, size_t n)
{
    int rc = tkm_buf_grow(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int tkm_buf_puts(struct tkm_buf *b, const char *s)
{
    return tkm_buf_append(b, s, strlen(s));
}

int tkm_buf_putc(struct tkm_buf *b, char c)
{
    return tkm_buf_append(b, &c, 1);
}

int tkm_buf_vprintf(struct tkm_buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, cp);
    va_end(cp);
    if (n < 0) {
        tkm_buf_release(b);
        return -EINVAL;
    }
    if ((size_t)n < sizeof small)
        return tkm_buf_append(b, small, (size_t)n);
    int rc = tkm_buf_grow(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int tkm_buf_printf(struct tkm_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tkm_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void tkm_buf_consume(struct tkm_buf *b, size_t n)
{
    if (n >= b->len) {
        tkm_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *tkm_buf_detach(struct tkm_buf *b, size_t *len)
{
    char *p = b->data;
    if (len)
        *len = b->len;
    if (!b->cap) {
        p = strdup("");
    }
    tkm_buf_init(b, b->max);
    return p;
}
