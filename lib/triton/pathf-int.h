/*
 * triton/pathf.h - private: bounded path formatting for lib/triton and lib/gpu.
 */
#ifndef TKM_TRITON_PATHF_H
#define TKM_TRITON_PATHF_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* Formats into out (n bytes); -ENAMETOOLONG (out then holds a truncated,
 * terminated string) when it does not fit, else 0. */
__attribute__((format(printf, 3, 4))) static inline int tkm_pathf(char *out, size_t n,
                                                                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    return r < 0 || (size_t)r >= n ? -ENAMETOOLONG : 0;
}

#endif
