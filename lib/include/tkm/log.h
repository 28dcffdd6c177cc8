/*
 * log.h - leveled logging to stderr, as text or as one JSON object a line.
 *
 * Process-wide settings are made once in main() with tkm_log_init() before
 * any other thread or callback logs; afterwards logging is read-only on that
 * state. Text lines look like
 *   2026-11-21T23:40:01.123Z INFO  tkm-agent: store: extracted sha256:ab.. (12 files)
 * JSON lines like {"ts":"...","level":"info","prog":"tkm-agent","msg":"..."}.
 * Nothing here allocates; messages longer than 4 KiB are truncated.
 */
#ifndef TKM_LOG_H
#define TKM_LOG_H

enum tkm_log_level { TKM_LOG_ERROR = 0, TKM_LOG_WARN, TKM_LOG_INFO, TKM_LOG_DEBUG, TKM_LOG_TRACE };

/* prog is borrowed for the life of the process (normally a string literal). */
void tkm_log_init(const char *prog, enum tkm_log_level level, int json);
/* Parses "error", "warn", "info", "debug", "trace"; returns -1 if unknown. */
int tkm_log_level_parse(const char *s);
enum tkm_log_level tkm_log_get_level(void);
void tkm_log(enum tkm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define tkm_err(...)  tkm_log(TKM_LOG_ERROR, __VA_ARGS__)
#define tkm_warn(...) tkm_log(TKM_LOG_WARN, __VA_ARGS__)
#define tkm_info(...) tkm_log(TKM_LOG_INFO, __VA_ARGS__)
#define tkm_dbg(...)                                                                               \
    do {                                                                                           \
        if (tkm_log_get_level() >= TKM_LOG_DEBUG)                                                  \
            tkm_log(TKM_LOG_DEBUG, __VA_ARGS__);                                                   \
    } while (0)

#endif
