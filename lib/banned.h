/*
 * banned.h - functions tkm code must not call.
 *
 * Force-included (-include) into every tkm translation unit after the system
 * headers would be, so a use of a banned function fails to compile with a
 * message naming it. Use instead: snprintf or tkm_buf_printf (sprintf,
 * vsprintf), tkm_buf or memcpy with a known length (strcpy, strcat, strncpy,
 * strncat), strtoll/strtoull with end-pointer and errno checks via
 * tkm_parse_* (atoi, atol, atoll), strtok_r or explicit scanning (strtok),
 * gmtime_r/localtime_r (gmtime, localtime).
 */
#ifndef TKM_BANNED_H
#define TKM_BANNED_H

/* Pull the system declarations in first, so the macros below do not rewrite them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TKM_BANNED(func) sorry_##func##_is_banned_in_tkm

#undef strcpy
#define strcpy(x, y) TKM_BANNED(strcpy)
#undef strcat
#define strcat(x, y) TKM_BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) TKM_BANNED(strncpy)
#undef strncat
#define strncat(x, y, n) TKM_BANNED(strncat)
#undef sprintf
#define sprintf(...) TKM_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) TKM_BANNED(vsprintf)
#undef strtok
#define strtok(x, y) TKM_BANNED(strtok)
#undef atoi
#define atoi(x) TKM_BANNED(atoi)
#undef atol
#define atol(x) TKM_BANNED(atol)
#undef atoll
#define atoll(x) TKM_BANNED(atoll)
#undef gmtime
#define gmtime(x) TKM_BANNED(gmtime)
#undef localtime
#define localtime(x) TKM_BANNED(localtime)

#endif
