/*
 * err.h - an error a person can read, carried beside a negative return code.
 *
 * Functions that can fail for reasons a user must understand take an optional
 * `struct tkm_err *err` (may be NULL). On failure they return a negative
 * errno-style code and, if err is non-NULL and still empty, fill it with the
 * same code and one sentence naming what failed and where (the file, field,
 * archive entry, URL, digest). The first error set wins, so callers can add
 * context with tkm_err_prefix() while the root cause stays. On success err is
 * untouched, so several calls can share one.
 *
 * The struct is caller-owned, usually on the stack: `struct tkm_err e = {0};`.
 */
#ifndef TKM_ERR_H
#define TKM_ERR_H

struct tkm_err {
    int code;       /* negative errno-style code, 0 = no error */
    char msg[1024]; /* NUL-terminated sentence, "" when code == 0 */
};

/* Sets err (when non-NULL and empty) and returns code, so a caller can write
 * `return tkm_err_set(err, -EINVAL, "manifest %s: no layers", ref);`. */
int tkm_err_set(struct tkm_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "<context>: " to an existing message (no-op without one). */
void tkm_err_prefix(struct tkm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The message, or strerror(-code) when no message was set. Borrowed from err. */
const char *tkm_err_str(const struct tkm_err *err);
void tkm_err_clear(struct tkm_err *err);

#endif
