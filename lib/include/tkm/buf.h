/*
 * buf.h - the one owned, growable byte buffer of tkm.
 *
 * Invariants (after tkm_buf_init or TKM_BUF_INIT, until tkm_buf_release):
 *   - data is never NULL and is always NUL-terminated at data[len], so a
 *     buffer holding text can be passed straight to string functions;
 *   - len never exceeds max: every buffer has a ceiling chosen by its owner
 *     (an HTTP body, one watch event, a manifest), so hostile input cannot
 *     make it grow without bound;
 *   - on any failed append the buffer is released (curl's dynbuf rule): the
 *     caller never works on with a half-appended buffer.
 *
 * Ownership: the struct is owned by the caller (usually embedded); its heap
 * storage is owned by the buffer until tkm_buf_detach() hands it over, after
 * which the caller frees it with free(). Fields may be read directly; write
 * them only through these functions.
 *
 * Errors: 0 on success, -ENOMEM when allocation fails, -E2BIG when max would
 * be exceeded.
 */
#ifndef TKM_BUF_H
#define TKM_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct tkm_buf {
    char *data;
    size_t len;
    size_t cap; /* 0 while data points at the shared empty string */
    size_t max;
};

extern char tkm_buf_empty[1];
#define TKM_BUF_INIT(maxlen)                                                                       \
    {                                                                                              \
        .data = tkm_buf_empty, .len = 0, .cap = 0, .max = (maxlen)                                 \
    }

void tkm_buf_init(struct tkm_buf *b, size_t max);
/* Frees the storage and re-initialises with the same max. NULL is a no-op. */
void tkm_buf_release(struct tkm_buf *b);
/* Keeps the storage, empties the content. */
void tkm_buf_reset(struct tkm_buf *b);
/* Makes room for at least extra more bytes (plus the NUL) without appending. */
int tkm_buf_grow(struct tkm_buf *b, size_t extra);
int tkm_buf_append(struct tkm_buf *b, const void *p, size_t n);
int tkm_buf_puts(struct tkm_buf *b, const char *s);
int tkm_buf_putc(struct tkm_buf *b, char c);
int tkm_buf_printf(struct tkm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tkm_buf_vprintf(struct tkm_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Drops the first n bytes (n > len drops all); used by stream framers. */
void tkm_buf_consume(struct tkm_buf *b, size_t n);
/* Hands the storage to the caller (free() it); *len (optional) gets the
 * length. The buffer is left empty and reusable. Never returns NULL unless
 * allocation of an empty string fails. */
char *tkm_buf_detach(struct tkm_buf *b, size_t *len);

#endif
