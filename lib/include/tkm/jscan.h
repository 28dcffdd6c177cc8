/*
 * tkm/jscan.h - JSON without a tree: a validator that accepts exactly what
 * jansson's json_loadb(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY) accepts, and
 * span readers (members, elements, strings) over text it has validated.
 *
 * Why: a watch event of a 58 KiB object parsed by jansson costs a tree of
 * thousands of small allocations that the consumer may never look at. The
 * validator walks the bytes once and allocates nothing per value: duplicate
 * keys are found with a key stack in the caller's struct tkm_jscan, which is
 * reused from one call to the next (no allocation once it has grown).
 *
 * Accepted syntax (jansson 2.14's): RFC 8259 values; strings of valid UTF-8
 * (no overlong forms, no surrogates, nothing over U+10FFFF) without raw
 * control characters, with the escapes \" \\ \/ \b \f \n \r \t \uXXXX, where
 * \u0000 and unpaired surrogates are refused; integers (no '.', 'e') must fit
 * int64; reals must not overflow a double; a value nests at most 2048 deep
 * (scalars count, as in jansson); only whitespace after the value; no two
 * members of one object with the same (decoded) name.
 *
 * Span readers take text that tkm_jscan_validate() accepted (they check
 * bounds, never syntax) and offsets into it.
 */
#ifndef TKM_JSCAN_H
#define TKM_JSCAN_H

#include <stddef.h>

#include <tkm/buf.h>
#include <tkm/err.h>

#define TKM_JSCAN_MAX_DEPTH 2048u

/* The validator's reusable scratch (key stack). Owned by the caller:
 * tkm_jscan_init() then tkm_jscan_release(). */
struct tkm_jscan {
    struct tkm_buf keys; /* struct of (offset, length) of the decoded keys in dec */
    struct tkm_buf dec;  /* decoded keys of the objects open at the scan position */
};

void tkm_jscan_init(struct tkm_jscan *s);
void tkm_jscan_release(struct tkm_jscan *s);

/* Validates p[0..n) as one JSON text. 0, or -EPROTO with err saying
 * "<what> is not valid JSON: <reason> (byte N)", or -ENOMEM. s may be NULL
 * (a temporary scratch is then used). */
int tkm_jscan_validate(struct tkm_jscan *s, const char *p, size_t n, const char *what,
                       struct tkm_err *err);

/* Index of the first non-whitespace byte at or after i (n at the end). */
size_t tkm_jscan_ws(const char *p, size_t n, size_t i);
/* The index just past the value starting at p[i] (validated text). */
size_t tkm_jscan_skip(const char *p, size_t n, size_t i);

/* One member of an object: key is the index of the key's opening quote,
 * key_len its length with both quotes; val/val_len the value's span. */
struct tkm_jscan_member {
    size_t key, key_len, val, val_len;
};

/* Iterates an object or array: *pos starts at the index of its '{' or '['.
 * Returns 1 with the next member (or element: val/val_len only), 0 at the
 * end. */
int tkm_jscan_next(const char *p, size_t n, size_t *pos, struct tkm_jscan_member *m);

/* 1 when the member's decoded name is key. */
int tkm_jscan_key_is(const char *p, const struct tkm_jscan_member *m, const char *key);

/* Finds member key of the object at p[obj] (validated: names are unique).
 * 1 with *m, 0 when absent or when p[obj] is not an object. */
int tkm_jscan_member(const char *p, size_t n, size_t obj, const char *key,
                     struct tkm_jscan_member *m);

/* Decodes the JSON string at p[off..off+len) (quotes included) and appends
 * its UTF-8 bytes and a NUL to out. 0, -EINVAL (not a string), or out's
 * error (-ENOMEM, -E2BIG). The decoded length is at most len - 2. */
int tkm_jscan_str(const char *p, size_t off, size_t len, struct tkm_buf *out);

#endif
