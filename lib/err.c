/* err.c - see err.h. */
#include <tkm/err.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int tkm_err_set(struct tkm_err *err, int code, const char *fmt, ...)
{
    if (!err || err->code)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

void tkm_err_prefix(struct tkm_err *err, const char *fmt, ...)
{
    if (!err || !err->code)
        return;
    char pre[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    const char *rest = old[0] ? old : strerror(-err->code);
    /* "<pre>: <rest>", truncated to fit; composed by hand so no format can truncate silently. */
    size_t cap = sizeof err->msg - 1, n = 0;
    for (const char *parts[] = {pre, ": ", rest}, **p = parts; p < parts + 3; p++) {
        size_t l = strlen(*p);
        if (l > cap - n)
            l = cap - n;
        memcpy(err->msg + n, *p, l);
        n += l;
    }
    err->msg[n] = '\0';
}

const char *tkm_err_str(const struct tkm_err *err)
{
    if (!err || !err->code)
        return "no error";
    return err->msg[0] ? err->msg : strerror(-err->code);
}

void tkm_err_clear(struct tkm_err *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}
