/*
 * util.h - small checked helpers used across tkm.
 *
 * Number parsing replaces atoi/strtol-without-checks: the whole string must
 * be a number within [min, max]; returns 0, or -EINVAL (not a number, junk
 * after it, empty) or -ERANGE (outside the bounds). *out is written only on
 * success. Strings are borrowed.
 */
#ifndef TKM_UTIL_H
#define TKM_UTIL_H

#include <stddef.h>
#include <stdint.h>

int tkm_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int tkm_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* Monotonic clock in milliseconds (CLOCK_MONOTONIC). */
uint64_t tkm_now_ms(void);

/* Lower-case hex of n bytes into out, which must hold 2n+1 bytes. */
void tkm_hex(const unsigned char *in, size_t n, char *out);

struct tkm_buf;
/* Decodes standard base64 (RFC 4648 alphabet; whitespace ignored; '=' padding
 * only at the end) into out, which is reset first. Returns 0, -EINVAL for
 * malformed input, or the buffer's error (-E2BIG past its max, -ENOMEM). */
int tkm_base64_decode(const char *in, size_t n, struct tkm_buf *out);

/*
 * Escapes n bytes of s (borrowed; may hold NULs) into out (outlen bytes,
 * borrowed) for quoting untrusted names in messages and logs: C0 controls and
 * DEL as \n, \t, \r or \xHH, a backslash as \\, bytes that are not valid UTF-8
 * and the UTF-8 encodings of C1 controls (U+0080-U+009F) and of bidi
 * overrides (U+202A-U+202E, U+2066-U+2069) as \xHH each; other text is
 * copied. Output that does not fit is cut at a whole escape and ends in
 * "...". Always NUL-terminates (outlen > 0) and returns out, so it can be a
 * printf argument. At most 4 output bytes per input byte.
 */
char *tkm_escape(const char *s, size_t n, char *out, size_t outlen);

#define TKM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Kubernetes object names (RFC 1123 as Kubernetes applies it; s borrowed, n
 * bytes, no NUL inside). Return 1 when s is one, else 0.
 * A DNS-1123 label: 1 to 63 characters a-z, 0-9 and '-', starting and ending
 * with a letter or digit (namespaces).
 * A DNS-1123 subdomain: 1 to 253 characters: such labels (of any length)
 * joined by single dots (pods, TritonKernelCaches, most objects), so "a-.b",
 * "a..b" and ".a" are not. */
int tkm_dns1123_label(const char *s, size_t n);
int tkm_dns1123_subdomain(const char *s, size_t n);

#endif
