/*
 * bug.h - TKM_BUG(cond): a broken invariant (a bug in tkm, never bad input).
 *
 *   if (TKM_BUG(w->stopping))   // k8s_watch_close() called twice
 *       return;
 *
 * TKM_BUG(cond) evaluates cond once and yields it (0 or 1). When it is true it
 * logs "BUG: <file>:<line>: <function>: <cond>" through tkm_log() at error
 * level, then:
 *   - in builds where TKM_BUG_ABORT is 1, calls abort(), so a test, CI or a
 *     developer sees the bug at the place it happened, with a core dump;
 *   - otherwise goes on: the caller handles the condition (returns, skips the
 *     second free, keeps the first callback). Each TKM_BUG() site logs only
 *     the first time it fires in a process, so a bug on a hot path cannot
 *     flood the log.
 * Use it only where going on is safe; it is not for input validation.
 *
 * Which builds abort (decided in CMakeLists.txt, not from NDEBUG):
 *   CMAKE_BUILD_TYPE Debug                          -> TKM_BUG_ABORT=1
 *   -DTKM_ASAN=ON, -DTKM_UBSAN=ON or -DTKM_FUZZ=ON  -> TKM_BUG_ABORT=1 (any build type)
 *   RelWithDebInfo (the default), Release, MinSizeRel -> TKM_BUG_ABORT=0
 * RelWithDebInfo is what a plain build and the shipped daemons use, so it
 * keeps Release's behaviour (log and go on) and CI's main phase tests that
 * behaviour; CI's ASan/UBSan and valgrind phases (Debug) abort. NDEBUG is
 * not used because RelWithDebInfo defines it too. Code built without CMake's
 * definition aborts unless NDEBUG is defined.
 */
#ifndef TKM_BUG_H
#define TKM_BUG_H

#ifndef TKM_BUG_ABORT
#ifdef NDEBUG
#define TKM_BUG_ABORT 0
#else
#define TKM_BUG_ABORT 1
#endif
#endif

/* Logs the broken invariant (once per site, through *once: a zero-initialised
 * int of that site) and aborts when TKM_BUG_ABORT is 1. file, func and cond
 * are borrowed (string literals). Returns 1. Thread-safe. */
int tkm_bug_report(const char *file, int line, const char *func, const char *cond, int *once);

#define TKM_BUG(cond)                                                                              \
    __extension__({                                                                                \
        int tkm_bug_hit_ = !!(cond);                                                               \
        if (__builtin_expect(tkm_bug_hit_, 0)) {                                                   \
            static int tkm_bug_once_;                                                              \
            tkm_bug_report(__FILE__, __LINE__, __func__, #cond, &tkm_bug_once_);                   \
        }                                                                                          \
        tkm_bug_hit_;                                                                              \
    })

#endif
