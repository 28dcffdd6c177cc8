/* log.c - see log.h and bug.h. */
#include <tkm/bug.h>
#include <tkm/log.h>

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static const char *log_prog = "tkm";
static enum tkm_log_level log_level = TKM_LOG_INFO;
static int log_json;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void tkm_log_init(const char *prog, enum tkm_log_level level, int json)
{
    log_prog = prog ? prog : "tkm";
    log_level = level;
    log_json = json;
}

int tkm_log_level_parse(const char *s)
{
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
        if (s && strcmp(s, level_names[i]) == 0)
            return (int)i;
    return -1;
}

enum tkm_log_level tkm_log_get_level(void)
{
    return log_level;
}

static void json_escape(char *out, size_t cap, const char *in)
{
    size_t o = 0;
    for (; *in && o + 7 < cap; in++) {
        unsigned char c = (unsigned char)*in;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
}

void tkm_log(enum tkm_log_level level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[48], date[32];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts, sizeof ts, "%s.%03dZ", date, (int)(tv.tv_usec / 1000));
    if (log_json) {
        char esc[sizeof msg * 2];
        json_escape(esc, sizeof esc, msg);
        fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"prog\":\"%s\",\"msg\":\"%s\"}\n", ts,
                level_names[level], log_prog, esc);
    } else {
        char lv[8];
        snprintf(lv, sizeof lv, "%s", level_names[level]);
        for (char *p = lv; *p; p++)
            *p = (char)(*p - 32);
        fprintf(stderr, "%s %-5s %s: %s\n", ts, lv, log_prog, msg);
    }
}

int tkm_bug_report(const char *file, int line, const char *func, const char *cond, int *once)
{
    if (TKM_BUG_ABORT || !__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
        tkm_log(TKM_LOG_ERROR, "BUG: %s:%d: %s: %s%s", file, line, func, cond,
                TKM_BUG_ABORT ? " (aborting)" : " (logged once; going on)");
    if (TKM_BUG_ABORT) {
        fflush(stderr);
        abort();
    }
    return 1;
}
