/*
 * tarbuild.h - writes tar bytes directly, for tests of lib/archive and
 * lib/store: ustar headers, PAX records, GNU long names, raw size fields,
 * and gzip/zstd compression of the result. Everything lives in one struct
 * tkm_buf (owned by the caller, released with tkm_buf_release).
 */
#ifndef TKM_TARBUILD_H
#define TKM_TARBUILD_H

#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <tkm/buf.h>

#include "test.h"

/* A header with the size field given as raw bytes (12 of them), e.g. base-256. */
static inline void tb_header_raw(struct tkm_buf *b, const char *name, char type,
                                 const unsigned char size_field[12], unsigned mode,
                                 const char *link)
{
    unsigned char h[512];
    memset(h, 0, sizeof h);
    size_t n = strlen(name);
    memcpy(h, name, n > 100 ? 100 : n);
    snprintf((char *)h + 100, 8, "%07o", mode & 07777);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    memcpy(h + 124, size_field, 12);
    snprintf((char *)h + 136, 12, "%011o", 1700000000u);
    h[156] = (unsigned char)type;
    if (link) {
        size_t l = strlen(link);
        memcpy(h + 157, link, l > 100 ? 100 : l);
    }
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    ASSERT_OK(tkm_buf_append(b, h, sizeof h));
}

static inline void tb_header(struct tkm_buf *b, const char *name, char type, uint64_t size,
                             unsigned mode, const char *link)
{
    char f[13];
    snprintf(f, sizeof f, "%011llo", (unsigned long long)size);
    tb_header_raw(b, name, type, (const unsigned char *)f, mode, link);
}

static inline void tb_pad(struct tkm_buf *b)
{
    static const char zero[512];
    size_t r = b->len % 512;
    if (r)
        ASSERT_OK(tkm_buf_append(b, zero, 512 - r));
}

static inline void tb_file(struct tkm_buf *b, const char *name, const void *data, size_t n,
                           unsigned mode)
{
    tb_header(b, name, '0', n, mode, NULL);
    ASSERT_OK(tkm_buf_append(b, data, n));
    tb_pad(b);
}

static inline void tb_dir(struct tkm_buf *b, const char *name)
{
    tb_header(b, name, '5', 0, 0755, NULL);
}

/* A PAX 'x' header holding the given "key=value" records. */
static inline void tb_pax(struct tkm_buf *b, const char *const *kv, size_t nkv)
{
    struct tkm_buf body = TKM_BUF_INIT(64 << 20);
    for (size_t i = 0; i < nkv; i++) {
        size_t l = strlen(kv[i]) + 3; /* " " + "\n" + at least one digit */
        char num[32];
        for (;;) {
            int d = snprintf(num, sizeof num, "%zu", l);
            if (strlen(kv[i]) + 2 + (size_t)d == l)
                break;
            l = strlen(kv[i]) + 2 + (size_t)d;
        }
        ASSERT_OK(tkm_buf_printf(&body, "%s %s\n", num, kv[i]));
    }
    tb_header(b, "PaxHeaders/x", 'x', body.len, 0644, NULL);
    ASSERT_OK(tkm_buf_append(b, body.data, body.len));
    tb_pad(b);
    tkm_buf_release(&body);
}

/* A GNU long-name ('L') or long-link ('K') header. */
static inline void tb_gnu_long(struct tkm_buf *b, char type, const char *name)
{
    tb_header(b, "././@LongLink", type, strlen(name) + 1, 0644, NULL);
    ASSERT_OK(tkm_buf_append(b, name, strlen(name) + 1));
    tb_pad(b);
}

static inline void tb_end(struct tkm_buf *b)
{
    static const char zero[1024];
    ASSERT_OK(tkm_buf_append(b, zero, sizeof zero));
}

static inline void tb_gzip(const struct tkm_buf *in, struct tkm_buf *out)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    ASSERT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&zs, in->len) + 64;
    ASSERT_OK(tkm_buf_grow(out, cap));
    zs.next_in = (unsigned char *)in->data;
    zs.avail_in = (uInt)in->len;
    zs.next_out = (unsigned char *)out->data;
    zs.avail_out = (uInt)cap;
    ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out->len = cap - zs.avail_out;
    out->data[out->len] = '\0';
    deflateEnd(&zs);
}

static inline void tb_zstd(const struct tkm_buf *in, struct tkm_buf *out, int level)
{
    size_t cap = ZSTD_compressBound(in->len);
    ASSERT_OK(tkm_buf_grow(out, cap));
    size_t n = ZSTD_compress(out->data, cap, in->data, in->len, level);
    ASSERT(!ZSTD_isError(n));
    out->len = n;
    out->data[n] = '\0';
}

static inline void tb_write(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT(fd >= 0);
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        ASSERT(w > 0);
        c += w;
        n -= (size_t)w;
    }
    ASSERT_OK(close(fd));
}

#endif
