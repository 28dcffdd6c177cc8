/*
 * test.h - tkm's in-tree unit-test framework (no dependency).
 *
 * A test file defines tests with TEST(name) { ... } and is linked with
 * runner.c into one executable per file. The runner forks every test into its
 * own process with a timeout, so a crash or a hang fails only that test, and
 * prints TAP. ctest registers each TEST() as its own case (unit.<file>.<name>)
 * by running the executable with --run <name>.
 *
 * Assertions print both values and stop the test (the child exits 1):
 *   ASSERT(cond)              ASSERT_EQ(a, b) / ASSERT_NE(a, b)  (integers, as long long)
 *   ASSERT_UEQ(a, b)          (unsigned, as unsigned long long)
 *   ASSERT_STREQ(a, b)        ASSERT_STRCONTAINS(haystack, needle)
 *   ASSERT_MEMEQ(a, b, n)     ASSERT_NULL(p) / ASSERT_NOT_NULL(p)
 *   ASSERT_OK(rc)             rc == 0, else prints rc and strerror(-rc)
 *
 * Helpers: tkm_test_tmpdir() gives a fresh directory removed after the test;
 * tkm_test_fixtures() the path of tests/fixtures (env TKM_FIXTURES wins);
 * tkm_test_source_dir() the source tree (env TKM_SOURCE_DIR wins);
 * tkm_test_slurp() a whole file (caller frees); tkm_test_subdirs() the sorted
 * entries of a directory. The last two fail the test on any error.
 */
#ifndef TKM_TEST_H
#define TKM_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tkm_test {
    const char *name;
    void (*fn)(void);
    unsigned timeout_s;
    struct tkm_test *next;
};

void tkm_test_register(struct tkm_test *t);
/* A directory created for the running test; removed by the runner afterwards. */
const char *tkm_test_tmpdir(void);
const char *tkm_test_fixtures(void);
/* A test-only RSA key from tests/fixtures/keys/<name>.pem (EVP_PKEY *, owned by the
 * caller: EVP_PKEY_free); the test fails when it cannot be read. RSA keys are not
 * generated per run: that takes 30-50 s each under valgrind. */
void *tkm_test_rsa_key(const char *name);
/* TKM_TEST_TIMEOUT_SCALE (1 when unset; 10 under valgrind): long randomised tests
 * walk fewer steps when it is above 1. */
unsigned tkm_test_timeout_scale(void);
const char *tkm_test_source_dir(void);
/* The file's bytes, NUL-terminated (owned by the caller: free); *len (may be
 * NULL) gets the length. A file that cannot be read fails the test. */
char *tkm_test_slurp(const char *path, size_t *len);
/* Up to max paths "dir/<entry>" (1024 bytes each, sorted, dot entries
 * skipped) into out; returns how many. A directory that cannot be read fails
 * the test. */
size_t tkm_test_subdirs(const char *dir, char out[][1024], size_t max);
/* Prints where a failed assertion is, then ends the test process. */
_Noreturn void tkm_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define TKM_TEST_DEFINE(tname, secs)                                                               \
    static void test_##tname(void);                                                                \
    static struct tkm_test tdesc_##tname = {#tname, test_##tname, (secs), NULL};                   \
    __attribute__((constructor)) static void treg_##tname(void)                                    \
    {                                                                                              \
        tkm_test_register(&tdesc_##tname);                                                         \
    }                                                                                              \
    static void test_##tname(void)

/* TEST(name): a test with the default 20 s timeout. */
#define TEST(tname) TKM_TEST_DEFINE(tname, 20)
/* TEST_TIMEOUT(name, seconds): a test with its own timeout. */
#define TEST_TIMEOUT(tname, secs) TKM_TEST_DEFINE(tname, secs)

#define ASSERT(c)                                                                                  \
    do {                                                                                           \
        if (!(c))                                                                                  \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT(%s) failed", #c);                            \
    } while (0)

#define ASSERT_EQ(a, b)                                                                            \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_)                                                                            \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_EQ(%s, %s): %lld != %lld", #a, #b, va_,      \
                          vb_);                                                                    \
    } while (0)

#define ASSERT_NE(a, b)                                                                            \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ == vb_)                                                                            \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_NE(%s, %s): both %lld", #a, #b, va_);        \
    } while (0)

#define ASSERT_UEQ(a, b)                                                                           \
    do {                                                                                           \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b);           \
        if (va_ != vb_)                                                                            \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_UEQ(%s, %s): %llu != %llu", #a, #b, va_,     \
                          vb_);                                                                    \
    } while (0)

#define ASSERT_STREQ(a, b)                                                                         \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                                 \
            tkm_test_fail(__FILE__, __LINE__,                                                      \
                          "ASSERT_STREQ(%s, %s):\n  left:  \"%s\"\n  right: \"%s\"", #a, #b,       \
                          sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                             \
    } while (0)

#define ASSERT_STRCONTAINS(h, n)                                                                   \
    do {                                                                                           \
        const char *sh_ = (h), *sn_ = (n);                                                         \
        if (!sh_ || !sn_ || !strstr(sh_, sn_))                                                     \
            tkm_test_fail(__FILE__, __LINE__,                                                      \
                          "ASSERT_STRCONTAINS(%s, %s):\n  \"%s\"\n  lacks \"%s\"", #h, #n,         \
                          sh_ ? sh_ : "(null)", sn_ ? sn_ : "(null)");                             \
    } while (0)

#define ASSERT_MEMEQ(a, b, n)                                                                      \
    do {                                                                                           \
        if (memcmp((a), (b), (n)) != 0)                                                            \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_MEMEQ(%s, %s, %s): differ", #a, #b, #n);     \
    } while (0)

#define ASSERT_NULL(p)                                                                             \
    do {                                                                                           \
        const void *p_ = (const void *)(p);                                                        \
        if (p_)                                                                                    \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_NULL(%s): %p", #p, p_);                      \
    } while (0)

#define ASSERT_NOT_NULL(p)                                                                         \
    do {                                                                                           \
        if (!(p))                                                                                  \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_NOT_NULL(%s) failed", #p);                   \
    } while (0)

#define ASSERT_OK(rc)                                                                              \
    do {                                                                                           \
        long long r_ = (long long)(rc);                                                            \
        if (r_ != 0)                                                                               \
            tkm_test_fail(__FILE__, __LINE__, "ASSERT_OK(%s): %lld (%s)", #rc, r_,                 \
                          r_ < 0 ? strerror((int)-r_) : "positive");                               \
    } while (0)

#endif
