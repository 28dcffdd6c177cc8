/*
 * archive.c - safe extraction of layer blobs (see archive.h, docs/security.md).
 *
 * Data flow, all on the calling thread, with fixed-size buffers:
 *   blob fd -> [sha256 of the blob] -> gzip/zstd/none decoder -> [caps: total,
 *   ratio] -> [sha256 = diff_id] -> [header screen] -> libarchive (tar formats
 *   only, via archive_read_open2) -> entry checks -> openat()-relative writes.
 */
#include <tkm/archive.h>

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/log.h>
#include <tkm/util.h>

#define IN_CHUNK       (64 * 1024)
#define OUT_CHUNK      (128 * 1024)
#define TAR_BLOCK      512
#define PROGRESS_BYTES (1024 * 1024)
#define PROGRESS_ENTS  64
#define MAX_META_RUN   16 /* g, x, L, K before one entry: 4 are plenty */

void tkm_archive_opts_init(struct tkm_archive_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->limits = (struct tkm_archive_limits){.max_total_bytes = 32ULL << 30,
                                            .max_file_bytes = 4ULL << 30,
                                            .max_entries = 200000,
                                            .max_pax_bytes = 1 << 20,
                                            .max_path_len = 1024,
                                            .max_depth = 32,
                                            .max_ratio = 250,
                                            .ratio_grace_bytes = 16 << 20,
                                            .zstd_window_log_max = 27};
    o->compression = TKM_COMPRESSION_AUTO;
    o->fsync = 1;
}

const char *tkm_compression_name(enum tkm_compression c)
{
    static const char *const names[] = {"auto", "none", "gzip", "zstd"}; /* enum order */
    return (unsigned)c < TKM_ARRAY_SIZE(names) ? names[c] : "auto";
}

/* ---- the header screen ---------------------------------------------------- */

enum sc_state { SC_HEADER, SC_SKIP, SC_META, SC_END };

struct screen {
    enum sc_state st;
    unsigned char hdr[TAR_BLOCK];
    size_t hlen;
    uint64_t skip;         /* data + padding still to pass over */
    char meta_type;        /* 'x', 'g', 'L', 'K' while collecting a body */
    uint64_t meta_left;    /* body bytes still to collect */
    uint64_t meta_pad;     /* padding after the body */
    char meta_name[404];   /* the ustar name of the meta header, escaped, for messages */
    struct tkm_buf meta;   /* the body */
    struct tkm_buf path;   /* PAX path= / GNU 'L' for the next entry */
    struct tkm_buf link;   /* PAX linkpath= / GNU 'K' for the next entry */
    int64_t size_override; /* PAX size= for the next entry, -1 none */
    uint64_t offset;       /* bytes screened so far */
    uint64_t entries;
    int meta_run; /* extended headers since the last entry */
};

struct xctx {
    const struct tkm_archive_opts *o;
    const struct tkm_archive_limits *lim;
    struct tkm_err e; /* the first error; copied to the caller's at the end */
    int fd;
    enum tkm_compression comp;
    unsigned char *in;
    unsigned char *out;
    size_t in_len, in_pos;
    int in_eof;
    int done; /* decoder reached the end of the stream */
    z_stream zs;
    int zs_init;
    ZSTD_DStream *zd;
    size_t zret;
    EVP_MD_CTX *h_blob, *h_tar;
    uint64_t blob_bytes, tar_bytes;
    struct screen sc;
    int dirfd;
    struct tkm_buf cache_path; /* parent dir whose fd is cached */
    int cache_fd;
    uint64_t entries, files, dirs, skipped, file_bytes;
    uint64_t prog_bytes, prog_entries;
    uint64_t space_checked; /* file_bytes at the last free-space check */
};

static int xfail(struct xctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int xfail(struct xctx *c, int code, const char *fmt, ...)
{
    if (c->e.code == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->e.msg, sizeof(c->e.msg), fmt, ap);
        va_end(ap);
        c->e.code = code;
    }
    return code;
}

/* A tar text field, NUL-terminated within its width, copied into out (n+1 bytes). */
static void field_str(const unsigned char *f, size_t n, char *out)
{
    size_t i = 0;
    for (; i < n && f[i]; i++)
        out[i] = (char)f[i];
    out[i] = '\0';
}

/* Octal number field; base-256 (high bit set) is refused. 0 / -EINVAL / -ERANGE(base-256). */
static int field_octal(const unsigned char *f, size_t n, uint64_t *out)
{
    if (f[0] & 0x80)
        return -ERANGE;
    size_t i = 0;
    uint64_t v = 0;
    while (i < n && f[i] == ' ')
        i++;
    size_t start = i;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (UINT64_MAX >> 3))
            return -EINVAL;
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    if (i == start && !(i < n && (f[i] == '\0' || f[i] == ' ')))
        return -EINVAL;
    for (; i < n; i++)
        if (f[i] != '\0' && f[i] != ' ')
            return -EINVAL;
    *out = v;
    return 0;
}

static uint64_t pad512(uint64_t n)
{
    return (TAR_BLOCK - (n % TAR_BLOCK)) % TAR_BLOCK;
}

/* The name the next entry will have, escaped (tkm_escape), for messages. */
static void screen_name(struct xctx *c, char *out, size_t outlen)
{
    const unsigned char *h = c->sc.hdr;
    char name[101], prefix[156], raw[260];
    if (c->sc.path.len) {
        tkm_escape(c->sc.path.data, c->sc.path.len, out, outlen);
        return;
    }
    field_str(h, 100, name);
    field_str(h + 345, 155, prefix);
    if (memcmp(h + 257, "ustar\0", 6) == 0 && prefix[0]) /* POSIX only: old GNU uses 345.. */
        snprintf(raw, sizeof raw, "%s/%s", prefix, name);
    else
        snprintf(raw, sizeof raw, "%s", name);
    tkm_escape(raw, strlen(raw), out, outlen);
}

/* A PAX path or linkpath value: a NUL would cut the name short in libarchive
 * (the entry would be written under a shorter name than the one screened). */
static int screen_pax_name(struct xctx *c, struct tkm_buf *dst, const char *key, const char *val,
                           size_t vlen)
{
    char shown[400];
    const char *nul = memchr(val, '\0', vlen);
    if (nul)
        return xfail(c, -EINVAL, "PAX header %s: %s '%s' contains a NUL byte at offset %zu",
                     c->sc.meta_name, key, tkm_escape(val, vlen, shown, sizeof shown),
                     (size_t)(nul - val));
    if (!dst) /* a global ('g') record: checked, not applied */
        return 0;
    tkm_buf_reset(dst);
    if (tkm_buf_append(dst, val, vlen) < 0)
        return xfail(c, -EINVAL, "PAX header %s: %s of %zu bytes is too long", c->sc.meta_name, key,
                     vlen);
    return 0;
}

/* Parses the records of a PAX body: "<len> <key>=<value>\n". */
static int screen_pax(struct xctx *c, int global)
{
    const char *p = c->sc.meta.data, *end = p + c->sc.meta.len;
    while (p < end) {
        uint64_t len = 0;
        const char *q = p;
        while (q < end && *q >= '0' && *q <= '9' && len < (1u << 30))
            len = len * 10 + (uint64_t)(*q++ - '0');
        if (q == p || q >= end || *q != ' ' || len < 5 || len > (uint64_t)(end - p) ||
            p[len - 1] != '\n')
            return xfail(c, -EINVAL, "PAX header %s: malformed record at byte %zu", c->sc.meta_name,
                         (size_t)(p - c->sc.meta.data));
        const char *key = q + 1, *rend = p + len - 1;
        const char *eq = memchr(key, '=', (size_t)(rend - key));
        if (!eq || eq == key)
            return xfail(c, -EINVAL, "PAX header %s: record without key=value", c->sc.meta_name);
        size_t klen = (size_t)(eq - key), vlen = (size_t)(rend - eq - 1);
        const char *val = eq + 1;
        if (klen == 4 && memcmp(key, "path", 4) == 0) {
            if (screen_pax_name(c, global ? NULL : &c->sc.path, "path", val, vlen) < 0)
                return c->e.code;
        } else if (klen == 8 && memcmp(key, "linkpath", 8) == 0) {
            if (screen_pax_name(c, global ? NULL : &c->sc.link, "linkpath", val, vlen) < 0)
                return c->e.code;
        } else if (klen == 4 && memcmp(key, "size", 4) == 0) {
            char num[24], shown[100];
            uint64_t v;
            if (vlen == 0 || vlen >= sizeof(num))
                return xfail(c, -EINVAL, "PAX header %s: bad size record", c->sc.meta_name);
            memcpy(num, val, vlen);
            num[vlen] = '\0';
            if (num[0] == '-' || tkm_parse_u64(num, INT64_MAX, &v) < 0)
                return xfail(c, -EINVAL, "PAX header %s: size '%s' is not a non-negative number",
                             c->sc.meta_name, tkm_escape(num, vlen, shown, sizeof shown));
            if (!global)
                c->sc.size_override = (int64_t)v;
        } else if (klen >= 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
            return xfail(c, -EINVAL, "PAX header %s: sparse files are not allowed",
                         c->sc.meta_name);
        }
        p += len;
    }
    return 0;
}

static int screen_meta_done(struct xctx *c)
{
    int rc = 0;
    if (c->sc.meta_type == 'x' || c->sc.meta_type == 'g') {
        rc = screen_pax(c, c->sc.meta_type == 'g');
    } else {
        struct tkm_buf *dst = c->sc.meta_type == 'L' ? &c->sc.path : &c->sc.link;
        size_t n = strnlen(c->sc.meta.data, c->sc.meta.len);
        char shown[400];
        tkm_buf_reset(dst);
        for (size_t i = n; i < c->sc.meta.len && rc == 0; i++)
            if (c->sc.meta.data[i] != '\0') /* a name the reader would cut at the NUL */
                rc = xfail(c, -EINVAL, "GNU long name '%s' contains a NUL byte at offset %zu",
                           tkm_escape(c->sc.meta.data, c->sc.meta.len, shown, sizeof shown), n);
        if (rc == 0 && tkm_buf_append(dst, c->sc.meta.data, n) < 0)
            rc = xfail(c, -EINVAL, "GNU long name of %zu bytes is too long", n);
    }
    tkm_buf_reset(&c->sc.meta);
    c->sc.skip = c->sc.meta_pad;
    c->sc.st = c->sc.skip ? SC_SKIP : SC_HEADER;
    return rc;
}

static int screen_reject_type(struct xctx *c, const char *name, char type)
{
    char raw[101], link[1100];
    if (c->sc.link.len) {
        tkm_escape(c->sc.link.data, c->sc.link.len, link, sizeof link);
    } else {
        field_str(c->sc.hdr + 157, 100, raw);
        tkm_escape(raw, strlen(raw), link, sizeof link);
    }
    switch (type) {
    case '1':
        return xfail(c, -EINVAL, "entry %s: hard links are not allowed (link to %s)", name, link);
    case '2':
        return xfail(c, -EINVAL, "entry %s: symbolic links are not allowed (-> %s)", name, link);
    case '3':
    case '4':
        return xfail(c, -EINVAL, "entry %s: device nodes are not allowed", name);
    case '6':
        return xfail(c, -EINVAL, "entry %s: FIFOs are not allowed", name);
    case 'S':
        return xfail(c, -EINVAL, "entry %s: GNU sparse files are not allowed", name);
    default:
        if (type > 32 && type < 127)
            return xfail(c, -EINVAL, "entry %s: tar entry type '%c' is not allowed", name, type);
        return xfail(c, -EINVAL, "entry %s: tar entry type 0x%02x is not allowed", name,
                     (unsigned char)type);
    }
}

static int screen_checksum(struct xctx *c)
{
    const unsigned char *h = c->sc.hdr;
    uint64_t want;
    unsigned long usum = 0;
    long ssum = 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        unsigned char b = (i >= 148 && i < 156) ? ' ' : h[i];
        usum += b;
        ssum += (signed char)b;
    }
    if (field_octal(h + 148, 8, &want) < 0 || (want != usum && (long)want != ssum))
        return xfail(c, -EINVAL,
                     "tar header at offset %llu: bad checksum (not a tar stream, or corrupt)",
                     (unsigned long long)(c->sc.offset - TAR_BLOCK));
    return 0;
}

static int screen_header(struct xctx *c)
{
    const unsigned char *h = c->sc.hdr;
    const struct tkm_archive_limits *l = c->lim;
    char name[1100], raw[101];
    uint64_t size;
    int zero = 1;
    for (int i = 0; i < TAR_BLOCK && zero; i++)
        zero = h[i] == 0;
    if (zero) {
        c->sc.st = SC_END; /* end-of-archive; libarchive stops here too */
        return 0;
    }
    if (screen_checksum(c) < 0)
        return c->e.code;
    char type = (char)h[156];
    screen_name(c, name, sizeof(name));
    int rc = field_octal(h + 124, 12, &size);
    if (rc == -ERANGE)
        return xfail(c, -EINVAL, "entry %s: base-256 (binary) size fields are not accepted", name);
    if (rc < 0)
        return xfail(c, -EINVAL, "entry %s: malformed size field", name);
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
        field_str(h, 100, raw);
        tkm_escape(raw, strlen(raw), c->sc.meta_name, sizeof c->sc.meta_name);
        uint64_t cap = (type == 'x' || type == 'g') ? l->max_pax_bytes : l->max_path_len + 1ULL;
        if (size > cap)
            return xfail(c, -EFBIG, "%s header %s: %llu bytes exceeds the %llu-byte limit",
                         type == 'L' || type == 'K' ? "GNU long-name" : "PAX", c->sc.meta_name,
                         (unsigned long long)size, (unsigned long long)cap);
        if (++c->sc.meta_run > MAX_META_RUN)
            return xfail(c, -EINVAL, "header %s: more than %d extended headers in a row",
                         c->sc.meta_name, MAX_META_RUN);
        c->sc.meta_type = type;
        c->sc.meta_left = size;
        c->sc.meta_pad = pad512(size);
        c->sc.st = SC_META;
        if (size == 0)
            return screen_meta_done(c);
        return 0;
    }
    c->sc.meta_run = 0;
    if (c->sc.size_override >= 0)
        size = (uint64_t)c->sc.size_override;
    if (++c->sc.entries > l->max_entries)
        return xfail(c, -EFBIG, "entry %s: more than %llu entries", name,
                     (unsigned long long)l->max_entries);
    if (type == '5') {
        if (size != 0)
            return xfail(c, -EINVAL, "directory entry %s has a non-zero size", name);
    } else if (type == '0' || type == '\0' || type == '7') {
        size_t nl = strlen(name);
        if (nl > 0 && name[nl - 1] == '/')
            return xfail(c, -EINVAL, "entry %s: a regular file whose name ends in '/'", name);
        if (size > l->max_file_bytes)
            return xfail(c, -EFBIG, "entry %s: %llu bytes exceeds the %llu-byte per-file limit",
                         name, (unsigned long long)size, (unsigned long long)l->max_file_bytes);
    } else {
        return screen_reject_type(c, name, type);
    }
    tkm_buf_reset(&c->sc.path);
    tkm_buf_reset(&c->sc.link);
    c->sc.size_override = -1;
    c->sc.skip = size + pad512(size);
    c->sc.st = c->sc.skip ? SC_SKIP : SC_HEADER;
    return 0;
}

/* After the first zero block only zeros may follow: the rest of the
 * end-of-archive marker and padding to the record size. */
static int screen_trailer(struct xctx *c, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0)
            return xfail(c, -EINVAL,
                         "data after the end-of-archive marker: byte 0x%02x at offset %llu of the "
                         "tar stream (only zero padding may follow)",
                         p[i], (unsigned long long)(c->sc.offset + i));
    c->sc.offset += n;
    return 0;
}

static int screen_feed(struct xctx *c, const unsigned char *p, size_t n)
{
    struct screen *s = &c->sc;
    while (n > 0) {
        if (s->st == SC_END)
            return screen_trailer(c, p, n);
        size_t k;
        if (s->st == SC_SKIP) {
            k = s->skip < n ? (size_t)s->skip : n;
            s->skip -= k;
            if (s->skip == 0)
                s->st = SC_HEADER;
        } else if (s->st == SC_META) {
            k = s->meta_left < n ? (size_t)s->meta_left : n;
            if (tkm_buf_append(&s->meta, p, k) < 0)
                return xfail(c, -ENOMEM, "out of memory reading header %s", s->meta_name);
            s->meta_left -= k;
            if (s->meta_left == 0 && screen_meta_done(c) < 0)
                return c->e.code;
        } else {
            k = TAR_BLOCK - s->hlen < n ? TAR_BLOCK - s->hlen : n;
            memcpy(s->hdr + s->hlen, p, k);
            s->hlen += k;
        }
        p += k;
        n -= k;
        s->offset += k;
        if (s->st == SC_HEADER && s->hlen == TAR_BLOCK) {
            s->hlen = 0;
            if (screen_header(c) < 0)
                return c->e.code;
        }
    }
    return 0;
}

/* ---- decoding ------------------------------------------------------------- */

static int cancelled(struct xctx *c)
{
    if (c->o->cancel && atomic_load(c->o->cancel))
        return xfail(c, -ECANCELED, "extraction cancelled");
    return 0;
}

static int fill_input(struct xctx *c)
{
    ssize_t n;
    do {
        n = read(c->fd, c->in, IN_CHUNK);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return xfail(c, -errno, "reading the layer blob: %s", strerror(errno));
    c->in_len = (size_t)n;
    c->in_pos = 0;
    if (n == 0) {
        c->in_eof = 1;
        if (c->o->blob_size && c->blob_bytes != c->o->blob_size)
            return xfail(c, -EINVAL, "layer blob has %llu bytes, its descriptor says %llu",
                         (unsigned long long)c->blob_bytes, (unsigned long long)c->o->blob_size);
        return 0;
    }
    c->blob_bytes += (uint64_t)n;
    if (c->o->blob_size && c->blob_bytes > c->o->blob_size)
        return xfail(c, -EFBIG, "layer blob is larger than the %llu bytes its descriptor says",
                     (unsigned long long)c->o->blob_size);
    if (EVP_DigestUpdate(c->h_blob, c->in, (size_t)n) != 1)
        return xfail(c, -EIO, "sha256 of the layer blob failed");
    return 0;
}

static int detect(struct xctx *c)
{
    if (fill_input(c) < 0)
        return c->e.code;
    enum tkm_compression found = TKM_COMPRESSION_NONE;
    if (c->in_len >= 2 && c->in[0] == 0x1f && c->in[1] == 0x8b)
        found = TKM_COMPRESSION_GZIP;
    else if (c->in_len >= 4 && memcmp(c->in, "\x28\xb5\x2f\xfd", 4) == 0)
        found = TKM_COMPRESSION_ZSTD;
    if (c->o->compression != TKM_COMPRESSION_AUTO && c->o->compression != found)
        return xfail(c, -EINVAL, "layer blob is %s-compressed, but %s was expected",
                     tkm_compression_name(found), tkm_compression_name(c->o->compression));
    c->comp = found;
    if (found == TKM_COMPRESSION_GZIP) {
        if (inflateInit2(&c->zs, 15 + 16) != Z_OK)
            return xfail(c, -ENOMEM, "gzip: cannot initialise the decoder");
        c->zs_init = 1;
    } else if (found == TKM_COMPRESSION_ZSTD) {
        c->zd = ZSTD_createDStream();
        if (!c->zd || ZSTD_isError(ZSTD_initDStream(c->zd)) ||
            ZSTD_isError(ZSTD_DCtx_setParameter(c->zd, ZSTD_d_windowLogMax,
                                                (int)c->lim->zstd_window_log_max)))
            return xfail(c, -ENOMEM, "zstd: cannot initialise the decoder");
        c->zret = 1;
    }
    return 0;
}

/* One step of gzip: returns bytes produced (>= 0) or a negative code. */
static ssize_t gunzip_some(struct xctx *c)
{
    for (;;) {
        if (c->in_pos == c->in_len && !c->in_eof && fill_input(c) < 0)
            return c->e.code;
        c->zs.next_in = c->in + c->in_pos;
        c->zs.avail_in = (uInt)(c->in_len - c->in_pos);
        c->zs.next_out = c->out;
        c->zs.avail_out = OUT_CHUNK;
        int zr = inflate(&c->zs, Z_NO_FLUSH);
        c->in_pos = c->in_len - c->zs.avail_in;
        size_t got = OUT_CHUNK - c->zs.avail_out;
        if (zr == Z_STREAM_END) {
            if (c->in_pos == c->in_len && !c->in_eof && fill_input(c) < 0)
                return c->e.code;
            if (c->in_pos == c->in_len && c->in_eof)
                c->done = 1;
            else if (inflateReset(&c->zs) != Z_OK) /* another gzip member follows */
                return xfail(c, -EINVAL, "gzip: cannot start the next member");
        } else if (zr == Z_BUF_ERROR && c->in_eof && c->in_pos == c->in_len && got == 0) {
            return xfail(c, -EINVAL, "gzip stream is truncated after %llu compressed bytes",
                         (unsigned long long)c->blob_bytes);
        } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
            return xfail(c, -EINVAL, "gzip stream is corrupt at compressed byte %llu: %s",
                         (unsigned long long)(c->blob_bytes - (c->in_len - c->in_pos)),
                         c->zs.msg ? c->zs.msg : "inflate error");
        }
        if (got > 0 || c->done)
            return (ssize_t)got;
    }
}

static ssize_t unzstd_some(struct xctx *c)
{
    for (;;) {
        if (c->in_pos == c->in_len && !c->in_eof && fill_input(c) < 0)
            return c->e.code;
        if (c->in_eof && c->in_pos == c->in_len && c->zret == 0) {
            c->done = 1; /* the last frame ended and was flushed */
            return 0;
        }
        ZSTD_inBuffer ib = {c->in, c->in_len, c->in_pos};
        ZSTD_outBuffer ob = {c->out, OUT_CHUNK, 0};
        size_t zr = ZSTD_decompressStream(c->zd, &ob, &ib);
        if (ZSTD_isError(zr))
            return xfail(c, -EINVAL, "zstd stream rejected near compressed byte %llu: %s",
                         (unsigned long long)c->blob_bytes, ZSTD_getErrorName(zr));
        if (ob.pos > 0 || ib.pos > c->in_pos)
            c->zret = zr; /* without progress zr only asks for the next frame's header */
        c->in_pos = ib.pos;
        if (ob.pos > 0)
            return (ssize_t)ob.pos;
        if (c->in_eof && c->in_pos == c->in_len) {
            if (c->zret != 0)
                return xfail(c, -EINVAL, "zstd stream is truncated after %llu compressed bytes",
                             (unsigned long long)c->blob_bytes);
            c->done = 1;
            return 0;
        }
    }
}

/* Produces the next piece of the plain tar stream into c->out: >0 bytes, 0 at
 * the end, or a negative code (c->e set). Enforces the caps, hashes, screens. */
static ssize_t produce(struct xctx *c)
{
    ssize_t n;
    if (c->done)
        return 0;
    if (cancelled(c) < 0)
        return c->e.code;
    if (c->comp == TKM_COMPRESSION_GZIP) {
        n = gunzip_some(c);
    } else if (c->comp == TKM_COMPRESSION_ZSTD) {
        n = unzstd_some(c);
    } else {
        if (c->in_pos == c->in_len && fill_input(c) < 0)
            return c->e.code;
        n = (ssize_t)(c->in_len - c->in_pos);
        memcpy(c->out, c->in + c->in_pos, (size_t)n);
        c->in_pos = c->in_len;
        if (n == 0)
            c->done = 1;
    }
    if (n <= 0)
        return n;
    const struct tkm_archive_limits *l = c->lim;
    c->tar_bytes += (uint64_t)n;
    if (c->tar_bytes > l->max_total_bytes)
        return xfail(c, -EFBIG, "layer expands past the %llu-byte limit (max_total_bytes)",
                     (unsigned long long)l->max_total_bytes);
    if (c->comp != TKM_COMPRESSION_NONE && c->tar_bytes > l->ratio_grace_bytes &&
        c->tar_bytes / (c->blob_bytes ? c->blob_bytes : 1) >= l->max_ratio)
        return xfail(c, -EFBIG,
                     "%s stream expands more than %u:1 (%llu bytes from %llu): "
                     "decompression bomb rejected",
                     tkm_compression_name(c->comp), l->max_ratio, (unsigned long long)c->tar_bytes,
                     (unsigned long long)c->blob_bytes);
    if (EVP_DigestUpdate(c->h_tar, c->out, (size_t)n) != 1)
        return xfail(c, -EIO, "sha256 of the layer stream failed");
    if (screen_feed(c, c->out, (size_t)n) < 0)
        return c->e.code;
    return n;
}

static la_ssize_t read_cb(struct archive *a, void *ud, const void **buf)
{
    struct xctx *c = ud;
    ssize_t n = c->e.code ? c->e.code : produce(c);
    if (n < 0) {
        archive_set_error(a, EINVAL, "%s", c->e.msg);
        return -1;
    }
    *buf = c->out;
    return (la_ssize_t)n;
}

static void progress(struct xctx *c, int force)
{
    if (!c->o->progress)
        return;
    if (!force && c->tar_bytes - c->prog_bytes < PROGRESS_BYTES &&
        c->entries - c->prog_entries < PROGRESS_ENTS)
        return;
    c->prog_bytes = c->tar_bytes;
    c->prog_entries = c->entries;
    struct tkm_archive_progress p = {c->blob_bytes, c->tar_bytes, c->entries, c->file_bytes};
    c->o->progress(c->o->progress_ud, &p);
}

/* ---- names and writes ----------------------------------------------------- */

/* Checks an entry name and writes its normalised form ("a/b/c", "" for the
 * root) into out: no absolute path, "..", control character, whiteout or
 * over-long component; depth and length within the limits. Messages quote
 * name, the escaped form of raw. */
static int check_name(struct xctx *c, const char *raw, const char *name, struct tkm_buf *out)
{
    size_t len = strlen(raw);
    uint32_t depth = 0;
    tkm_buf_reset(out);
    if (len == 0)
        return xfail(c, -EINVAL, "entry #%llu has an empty name", (unsigned long long)c->entries);
    if (len > c->lim->max_path_len)
        return xfail(c, -EINVAL, "entry %.200s...: name of %zu bytes exceeds the %u-byte limit",
                     name, len, c->lim->max_path_len);
    if (raw[0] == '/')
        return xfail(c, -EINVAL, "entry %s: absolute paths are not allowed", name);
    for (const char *p = raw; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return xfail(c, -EINVAL, "entry %s: control character 0x%02x in the name", name,
                         (unsigned char)*p);
    for (const char *p = raw; *p;) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return xfail(c, -EINVAL, "entry %s: '..' components are not allowed", name);
        if (n >= 4 && memcmp(p, ".wh.", 4) == 0)
            return xfail(c, -EINVAL, "entry %s: whiteout entries (.wh.*) are not allowed", name);
        if (n > NAME_MAX)
            return xfail(c, -EINVAL, "entry %s: a component is longer than %d bytes", name,
                         NAME_MAX);
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (++depth > c->lim->max_depth)
                return xfail(c, -EINVAL, "entry %s: deeper than %u components", name,
                             c->lim->max_depth);
            if ((out->len && tkm_buf_putc(out, '/') < 0) || tkm_buf_append(out, p, n) < 0)
                return xfail(c, -ENOMEM, "entry %s: out of memory", name);
        }
        p += n;
        if (*p == '/')
            p++;
    }
    return 0;
}

/* Applies opts.include and opts.strip to a normalised name. Returns 1 to
 * extract (*rel = the name to write), 0 to skip. */
static int filter_name(const struct tkm_archive_opts *o, const char *name, const char **rel,
                       char *tmp, size_t tmp_size)
{
    *rel = name;
    if (o->include) {
        int hit = 0;
        for (const char *const *p = o->include; *p && !hit; p++) {
            size_t n = strlen(*p);
            while (n > 0 && (*p)[n - 1] == '/')
                n--;
            hit = n == 0 || (strncmp(name, *p, n) == 0 && (name[n] == '\0' || name[n] == '/'));
        }
        if (!hit)
            return 0;
    }
    if (o->rename) {
        for (const char *const *p = o->rename; p[0] && p[1]; p += 2) {
            size_t n = strlen(p[0]), m = strlen(p[1]);
            while (n > 0 && p[0][n - 1] == '/')
                n--;
            while (m > 0 && p[1][m - 1] == '/')
                m--;
            if (n == 0 || strncmp(name, p[0], n) != 0 || (name[n] != '\0' && name[n] != '/'))
                continue;
            int w = snprintf(tmp, tmp_size, "%.*s%s", (int)m, p[1], name + n);
            if (w < 0 || (size_t)w >= tmp_size)
                return -1;
            *rel = tmp;
            return 1;
        }
        return 0;
    }
    if (o->strip) {
        size_t n = strlen(o->strip);
        while (n > 0 && o->strip[n - 1] == '/')
            n--;
        if (n > 0 && strncmp(name, o->strip, n) == 0 && (name[n] == '\0' || name[n] == '/'))
            *rel = name[n] ? name + n + 1 : name + n;
        else if (n > 0)
            return 0; /* outside the stripped prefix: not part of what was asked for */
    }
    return 1;
}

/* Opens (creating as needed, mode 0755) the directory rel (normalised, "" =
 * the root) beneath c->dirfd, one component at a time, never following a
 * symlink. Returns an fd the caller must not close (cached), or a negative code. */
static int open_dir(struct xctx *c, const char *entry, const char *rel, size_t rlen)
{
    if (rlen == 0)
        return c->dirfd;
    if (c->cache_fd >= 0 && c->cache_path.len == rlen && memcmp(c->cache_path.data, rel, rlen) == 0)
        return c->cache_fd;
    int fd = dup(c->dirfd);
    if (fd < 0)
        return xfail(c, -errno, "entry %s: dup: %s", entry, strerror(errno));
    char comp[NAME_MAX + 1], shown[1100]; /* shown: rel escaped for messages */
    for (size_t i = 0; i < rlen;) {
        size_t j = i;
        while (j < rlen && rel[j] != '/')
            j++;
        memcpy(comp, rel + i, j - i);
        comp[j - i] = '\0';
        int created = 0;
        if (mkdirat(fd, comp, 0755) == 0)
            created = 1;
        else if (errno != EEXIST) {
            int e = errno;
            close(fd);
            return xfail(c, -e, "entry %s: cannot create directory %s: %s", entry,
                         tkm_escape(rel, j, shown, sizeof shown), strerror(e));
        }
        int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(fd);
        if (nfd < 0)
            return xfail(c, e == ENOTDIR || e == ELOOP ? -EINVAL : -e,
                         "entry %s: %s is not a directory beneath the extraction root (%s)", entry,
                         tkm_escape(rel, j, shown, sizeof shown), strerror(e));
        if (created) {
            c->dirs++;
            if (fchmod(nfd, 0755) < 0) {
                e = errno;
                close(nfd);
                return xfail(c, -e, "entry %s: chmod %s: %s", entry,
                             tkm_escape(rel, j, shown, sizeof shown), strerror(e));
            }
        }
        fd = nfd;
        i = j < rlen ? j + 1 : j;
    }
    if (c->cache_fd >= 0)
        close(c->cache_fd);
    c->cache_fd = fd;
    tkm_buf_reset(&c->cache_path);
    if (tkm_buf_append(&c->cache_path, rel, rlen) < 0) {
        close(fd);
        c->cache_fd = -1;
        return xfail(c, -ENOMEM, "entry %s: out of memory", entry);
    }
    return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Keeps limits.min_free_bytes free on the destination filesystem. */
static int check_space(struct xctx *c, const char *entry, int force)
{
    uint64_t want = c->lim->min_free_bytes;
    struct statvfs sv;
    if (want == 0 || (!force && c->file_bytes - c->space_checked < (1 << 20)))
        return 0;
    c->space_checked = c->file_bytes;
    if (fstatvfs(c->dirfd, &sv) < 0)
        return xfail(c, -errno, "entry %s: statvfs: %s", entry, strerror(errno));
    uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    if (avail < want)
        return xfail(c, -ENOSPC,
                     "entry %s: the filesystem has %llu bytes free, less than the %llu-byte "
                     "reserve (min_free_bytes)",
                     entry, (unsigned long long)avail, (unsigned long long)want);
    return 0;
}

static int copy_data(struct xctx *c, struct archive *a, int fd, const char *entry)
{
    uint64_t written = 0;
    for (;;) {
        const void *blk;
        size_t n;
        la_int64_t off;
        int r = archive_read_data_block(a, &blk, &n, &off);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r != ARCHIVE_OK)
            return xfail(c, -EINVAL, "entry %s: %s", entry,
                         c->e.code ? c->e.msg : archive_error_string(a));
        if (off < 0 || (uint64_t)off != written)
            return xfail(c, -EINVAL, "entry %s: sparse data is not allowed", entry);
        if (written + n > c->lim->max_file_bytes)
            return xfail(c, -EFBIG, "entry %s: more than %llu bytes", entry,
                         (unsigned long long)c->lim->max_file_bytes);
        int rc = write_all(fd, blk, n);
        if (rc < 0)
            return xfail(c, rc, "entry %s: write: %s", entry, strerror(-rc));
        written += n;
        c->file_bytes += n;
        if (cancelled(c) < 0 || check_space(c, entry, 0) < 0)
            return c->e.code;
    }
}

static int write_file(struct xctx *c, struct archive *a, struct archive_entry *ae,
                      const char *entry, const char *rel)
{
    const char *slash = strrchr(rel, '/');
    const char *leaf = slash ? slash + 1 : rel;
    int pfd = open_dir(c, entry, rel, slash ? (size_t)(slash - rel) : 0);
    if (pfd < 0)
        return pfd;
    if (c->files == 0 && check_space(c, entry, 1) < 0)
        return c->e.code;
    char shown[1100];
    int fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int e = errno;
    if (fd < 0 && e == EEXIST)
        return xfail(c, -EINVAL, "entry %s: duplicate entry (%s already exists)", entry,
                     tkm_escape(rel, strlen(rel), shown, sizeof shown));
    if (fd < 0)
        return xfail(c, -e, "entry %s: cannot create %s: %s", entry,
                     tkm_escape(rel, strlen(rel), shown, sizeof shown), strerror(e));
    int rc = copy_data(c, a, fd, entry);
    mode_t mode = (archive_entry_perm(ae) & 0111) ? 0755 : 0644;
    if (rc == 0 && fchmod(fd, mode) < 0)
        rc = xfail(c, -errno, "entry %s: chmod: %s", entry, strerror(errno));
    if (close(fd) < 0 && rc == 0)
        rc = xfail(c, -errno, "entry %s: close: %s", entry, strerror(errno));
    if (rc == 0)
        c->files++;
    return rc;
}

static int handle_entry(struct xctx *c, struct archive *a, struct archive_entry *ae,
                        struct tkm_buf *norm)
{
    const char *raw = archive_entry_pathname(ae);
    char name[1100], target[1100];
    if (!raw)
        raw = archive_entry_pathname_utf8(ae);
    if (!raw)
        return xfail(c, -EINVAL, "entry #%llu: the name cannot be read",
                     (unsigned long long)c->entries + 1);
    tkm_escape(raw, strlen(raw), name, sizeof name); /* what messages quote */
    if (++c->entries > c->lim->max_entries)
        return xfail(c, -EFBIG, "entry %s: more than %llu entries", name,
                     (unsigned long long)c->lim->max_entries);
    const char *hl = archive_entry_hardlink(ae), *sl = archive_entry_symlink(ae);
    if (hl)
        return xfail(c, -EINVAL, "entry %s: hard links are not allowed (link to %s)", name,
                     tkm_escape(hl, strlen(hl), target, sizeof target));
    if (sl)
        return xfail(c, -EINVAL, "entry %s: symbolic links are not allowed (-> %s)", name,
                     tkm_escape(sl, strlen(sl), target, sizeof target));
    mode_t type = archive_entry_filetype(ae);
    if (type != AE_IFREG && type != AE_IFDIR)
        return xfail(c, -EINVAL,
                     "entry %s: only regular files and directories are allowed "
                     "(type 0%o)",
                     name, (unsigned)type);
    if (archive_entry_sparse_count(ae) > 0)
        return xfail(c, -EINVAL, "entry %s: sparse files are not allowed", name);
    if (archive_entry_size_is_set(ae) && archive_entry_size(ae) < 0)
        return xfail(c, -EINVAL, "entry %s: negative size", name);
    if (type == AE_IFREG && (uint64_t)archive_entry_size(ae) > c->lim->max_file_bytes)
        return xfail(c, -EFBIG, "entry %s: %lld bytes exceeds the %llu-byte per-file limit", name,
                     (long long)archive_entry_size(ae), (unsigned long long)c->lim->max_file_bytes);
    if (check_name(c, raw, name, norm) < 0)
        return c->e.code;
    const char *rel;
    char renamed[PATH_MAX];
    int keep = filter_name(c->o, norm->data, &rel, renamed, sizeof renamed);
    if (keep < 0)
        return xfail(c, -ENAMETOOLONG, "entry %s: name too long once renamed", name);
    if (!keep) {
        c->skipped++;
        return 0;
    }
    if (rel[0] == '\0') {
        if (type == AE_IFDIR)
            return 0; /* the root itself: exists already, its mode is ours */
        return xfail(c, -EINVAL, "entry %s: a file that resolves to the extraction root", name);
    }
    if (type == AE_IFDIR) {
        int fd = open_dir(c, name, rel, strlen(rel));
        return fd < 0 ? fd : 0;
    }
    return write_file(c, a, ae, name, rel);
}

/* ---- driving ---------------------------------------------------------------- */

static void digest_final(EVP_MD_CTX *h, char out[72])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(h, md, &n);
    memcpy(out, "sha256:", 7);
    tkm_hex(md, n > 32 ? 32 : n, out + 7);
}

static int check_expected(struct xctx *c)
{
    const struct tkm_archive_opts *o = c->o;
    struct stat st;
    if (o->blob_size && fstat(c->fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t pos = lseek(c->fd, 0, SEEK_CUR);
        uint64_t left = (uint64_t)st.st_size - (uint64_t)(pos > 0 ? pos : 0);
        if (left != o->blob_size)
            return xfail(c, left > o->blob_size ? -EFBIG : -EINVAL,
                         "layer blob has %llu bytes, its descriptor says %llu",
                         (unsigned long long)left, (unsigned long long)o->blob_size);
    }
    if (o->blob_digest && !tkm_digest_valid(o->blob_digest))
        return xfail(c, -EINVAL, "expected blob digest '%s' is not sha256:<64 hex>",
                     o->blob_digest);
    if (o->diff_id && !tkm_digest_valid(o->diff_id))
        return xfail(c, -EINVAL, "expected diff_id '%s' is not sha256:<64 hex>", o->diff_id);
    return 0;
}

static int run_archive(struct xctx *c, struct tkm_buf *norm)
{
    struct archive *a = archive_read_new();
    struct archive_entry *ae;
    int rc = 0;
    if (!a)
        return xfail(c, -ENOMEM, "out of memory");
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    if (archive_read_open2(a, c, NULL, read_cb, NULL, NULL) != ARCHIVE_OK) {
        rc = xfail(c, -EINVAL, "layer is not a tar stream: %s", archive_error_string(a));
        goto out;
    }
    for (;;) {
        int r = archive_read_next_header(a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            rc = xfail(c, -EINVAL, "tar stream rejected after entry #%llu: %s",
                       (unsigned long long)c->entries,
                       archive_error_string(a) ? archive_error_string(a) : "unknown error");
            goto out;
        }
        rc = handle_entry(c, a, ae, norm);
        if (rc < 0)
            goto out;
        progress(c, 0);
    }
    /* Hash what follows the end-of-archive blocks too: the diff_id covers it all. */
    for (ssize_t n; (n = produce(c)) != 0;) {
        if (n < 0) {
            rc = (int)n;
            goto out;
        }
    }
out:
    archive_read_free(a);
    return rc;
}

/* 1 when dirfd holds no entry, 0 when it does or cannot be read. */
static int dir_is_empty(int dirfd)
{
    char **names;
    size_t n;
    int rc = tkm_list_dir(dirfd, TKM_LIST_ALL, 0, &names, &n); /* -E2BIG at the first entry */
    tkm_names_free(names, n);
    return rc == 0;
}

/* Removes everything beneath dirfd (not dirfd itself). */
static void clear_dir(int dirfd)
{
    char **names;
    size_t n;
    if (tkm_list_dir(dirfd, TKM_LIST_ALL, SIZE_MAX, &names, &n) == 0)
        for (size_t i = 0; i < n; i++)
            tkm_rmtree_at(dirfd, names[i]);
    tkm_names_free(names, n);
}

int tkm_archive_extract_fd(int blob_fd, int dest_dirfd, const struct tkm_archive_opts *o,
                           struct tkm_archive_result *res, struct tkm_err *err)
{
    struct xctx *c = calloc(1, sizeof(*c));
    struct tkm_buf norm = TKM_BUF_INIT(8192);
    int rc, was_empty = dir_is_empty(dest_dirfd);
    if (!c)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    c->o = o;
    c->lim = &o->limits;
    c->fd = blob_fd;
    c->dirfd = dest_dirfd;
    c->cache_fd = -1;
    c->sc.size_override = -1;
    tkm_buf_init(&c->sc.meta, o->limits.max_pax_bytes + o->limits.max_path_len + 2);
    tkm_buf_init(&c->sc.path, o->limits.max_path_len + 1);
    tkm_buf_init(&c->sc.link, o->limits.max_path_len + 1);
    tkm_buf_init(&c->cache_path, 8192);
    c->in = malloc(IN_CHUNK);
    c->out = malloc(OUT_CHUNK);
    c->h_blob = EVP_MD_CTX_new();
    c->h_tar = EVP_MD_CTX_new();
    if (!c->in || !c->out || !c->h_blob || !c->h_tar ||
        EVP_DigestInit_ex(c->h_blob, EVP_sha256(), NULL) != 1 ||
        EVP_DigestInit_ex(c->h_tar, EVP_sha256(), NULL) != 1) {
        rc = xfail(c, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = check_expected(c)) < 0 || (rc = detect(c)) < 0 || (rc = run_archive(c, &norm)) < 0)
        goto out;
    struct tkm_archive_result r = {.entries = c->entries,
                                   .files = c->files,
                                   .dirs = c->dirs,
                                   .skipped = c->skipped,
                                   .file_bytes = c->file_bytes,
                                   .tar_bytes = c->tar_bytes,
                                   .blob_bytes = c->blob_bytes,
                                   .compression = c->comp};
    digest_final(c->h_blob, r.blob_digest);
    digest_final(c->h_tar, r.diff_id);
    if (o->blob_digest && strcmp(o->blob_digest, r.blob_digest) != 0) {
        rc = xfail(c, -EBADMSG, "layer blob digest mismatch: got %s, expected %s", r.blob_digest,
                   o->blob_digest);
        goto out;
    }
    if (o->diff_id && strcmp(o->diff_id, r.diff_id) != 0) {
        rc = xfail(c, -EBADMSG, "layer diff_id mismatch: uncompressed stream is %s, expected %s",
                   r.diff_id, o->diff_id);
        goto out;
    }
    /* One syncfs for the whole tree: every file and directory written above is durable
     * when it returns, as with an fsync of each, at the cost of one flush (a layer of
     * tens of thousands of small files took seconds in per-file fsyncs; bench/volumes.sh). */
    if (o->fsync && syncfs(dest_dirfd) < 0) {
        rc = -errno;
        xfail(c, rc, "syncfs of the extracted tree: %s", strerror(-rc));
        goto out;
    }
    progress(c, 1);
    if (res)
        *res = r;
out:
    if (rc < 0)
        tkm_err_set(err, c->e.code ? c->e.code : rc, "%s", c->e.code ? c->e.msg : strerror(-rc));
    if (c->cache_fd >= 0)
        close(c->cache_fd);
    if (rc < 0 && was_empty)
        clear_dir(dest_dirfd); /* leave the directory as it was: empty */
    if (c->zs_init)
        inflateEnd(&c->zs);
    ZSTD_freeDStream(c->zd);
    EVP_MD_CTX_free(c->h_blob);
    EVP_MD_CTX_free(c->h_tar);
    free(c->in);
    free(c->out);
    tkm_buf_release(&c->sc.meta);
    tkm_buf_release(&c->sc.path);
    tkm_buf_release(&c->sc.link);
    tkm_buf_release(&c->cache_path);
    tkm_buf_release(&norm);
    rc = rc < 0 && c->e.code ? c->e.code : rc;
    free(c);
    return rc;
}

/* ---- staging directories ------------------------------------------------ */

/* The start time of pid (field 22 of /proc/<pid>/stat, clock ticks since
 * boot): 0, -ENOENT when there is no such process, or -errno. */
static int proc_start_time(pid_t pid, unsigned long long *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ESRCH ? -ENOENT : -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n <= 0)
        return n == 0 || e == ESRCH ? -ENOENT : -e;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
    if (!p)
        return -EIO;
    for (int field = 2; field < 22 && p; field++) /* p is at the end of field 2 */
        p = strchr(p + 1, ' ');
    if (!p)
        return -EIO;
    char *end = NULL;
    errno = 0;
    *out = strtoull(p + 1, &end, 10);
    return errno || end == p + 1 ? -EIO : 0;
}

int tkm_staging_create(int parent_fd, char *name, size_t namelen, struct tkm_err *err)
{
    unsigned long long start = 0;
    unsigned char rnd[6];
    char hex[13];
    int rc;
    if (proc_start_time(getpid(), &start) < 0)
        start = 0; /* no /proc: the flock alone keeps the directory ours */
    for (int attempt = 0; attempt < 16; attempt++) {
        if (getentropy(rnd, sizeof rnd) < 0)
            return tkm_err_set(err, -errno, "getentropy: %s", strerror(errno));
        tkm_hex(rnd, sizeof rnd, hex);
        if (snprintf(name, namelen, TKM_STAGING_PREFIX "%d-%llu-%s", (int)getpid(), start, hex) >=
            (int)namelen)
            return tkm_err_set(err, -ENAMETOOLONG, "staging name buffer too small");
        if (mkdirat(parent_fd, name, 0700) < 0) {
            if (errno == EEXIST)
                continue;
            return tkm_err_set(err, -errno, "cannot create a staging directory %s: %s", name,
                               strerror(errno));
        }
        int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
            rc = tkm_err_set(err, -errno, "cannot open and lock staging directory %s: %s", name,
                             strerror(errno));
            if (fd >= 0)
                close(fd);
            tkm_rmtree_at(parent_fd, name);
            return rc;
        }
        return fd;
    }
    return tkm_err_set(err, -EEXIST, "cannot find a free staging directory name");
}

/* Parses ".tkm-staging-<pid>-<start>-<hex>"; 0 or -EINVAL. */
static int staging_parse(const char *name, pid_t *pid, unsigned long long *start)
{
    size_t pl = strlen(TKM_STAGING_PREFIX);
    uint64_t v;
    char num[24];
    if (strncmp(name, TKM_STAGING_PREFIX, pl) != 0)
        return -EINVAL;
    const char *p = name + pl, *d1 = strchr(p, '-'), *d2 = d1 ? strchr(d1 + 1, '-') : NULL;
    if (!d2 || d1 - p >= (ptrdiff_t)sizeof num || d2 - d1 - 1 >= (ptrdiff_t)sizeof num ||
        d2[1] == '\0')
        return -EINVAL;
    snprintf(num, sizeof num, "%.*s", (int)(d1 - p), p);
    if (tkm_parse_u64(num, INT32_MAX, &v) < 0 || v == 0)
        return -EINVAL;
    *pid = (pid_t)v;
    snprintf(num, sizeof num, "%.*s", (int)(d2 - d1 - 1), d1 + 1);
    if (tkm_parse_u64(num, UINT64_MAX, &v) < 0)
        return -EINVAL;
    *start = v;
    return 0;
}

int tkm_staging_live(int parent_fd, const char *name)
{
    pid_t pid;
    unsigned long long start, now;
    if (staging_parse(name, &pid, &start) < 0)
        return -EINVAL;
    int rc = proc_start_time(pid, &now);
    if (rc == 0 && now == start)
        return 1; /* its creator runs */
    if (rc < 0 && rc != -ENOENT)
        return 1; /* cannot tell: keep it */
    /* The creator is gone here (or the pid was reused). A process of another
     * PID namespace sharing this directory still holds the flock. */
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : 1;
    int held = flock(fd, LOCK_EX | LOCK_NB) < 0;
    close(fd);
    return held;
}

int tkm_staging_purge(int parent_fd, const char *where)
{
    unsigned long long self;
    char **names;
    size_t n;
    int removed = 0;
    if (proc_start_time(getpid(), &self) < 0)
        return 0; /* no /proc: nothing can be attributed, nothing is removed */
    int rc = tkm_list_dir(parent_fd, TKM_LIST_ALL, SIZE_MAX, &names, &n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (tkm_staging_live(parent_fd, names[i]) != 0)
            continue; /* not ours, or its process lives */
        if ((rc = tkm_rmtree_at(parent_fd, names[i])) < 0) {
            tkm_warn("cannot remove the stale staging directory %s/%s: %s", where ? where : ".",
                     names[i], strerror(-rc));
            continue;
        }
        removed++;
        tkm_info("removed the staging directory %s/%s of a process that is gone",
                 where ? where : ".", names[i]);
    }
    tkm_names_free(names, n);
    return removed;
}
