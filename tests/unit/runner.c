/*
 * runner.c - forks each registered test with a timeout and prints TAP.
 *
 *   unit_x            run every test in this file
 *   unit_x --list     print the test names, one a line
 *   unit_x --run N    run the test named N (still forked, with its timeout)
 *
 * Exit status: 0 when every test run passed, 1 otherwise, 2 for usage errors.
 * TKM_TEST_TIMEOUT_SCALE (a positive integer, default 1) multiplies every
 * timeout, for valgrind and sanitizer runs.
 */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#define TKM_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TKM_HAVE_LSAN 1
#endif
#endif
#ifdef TKM_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct tkm_test *tests_head, **tests_tail = &tests_head;
static char tmpdir_path[256];

void tkm_test_register(struct tkm_test *t)
{
    *tests_tail = t;
    tests_tail = &t->next;
}

const char *tkm_test_tmpdir(void)
{
    if (!tmpdir_path[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir_path, sizeof tmpdir_path, "%s/tkm-unit-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir_path)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tmpdir_path;
}

const char *tkm_test_fixtures(void)
{
    const char *e = getenv("TKM_FIXTURES");
#ifdef TKM_FIXTURES_DIR
    return e && *e ? e : TKM_FIXTURES_DIR;
#else
    return e && *e ? e : "tests/fixtures";
#endif
}

void *tkm_test_rsa_key(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/keys/%s.pem", tkm_test_fixtures(), name);
    FILE *f = fopen(path, "r");
    EVP_PKEY *k = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    if (!k) {
        fprintf(stderr, "cannot read the test key %s\n", path);
        abort();
    }
    return k;
}

const char *tkm_test_source_dir(void)
{
    const char *e = getenv("TKM_SOURCE_DIR");
    if (e && *e)
        return e;
#ifdef TKM_SOURCE_DIR
    return TKM_SOURCE_DIR;
#else
    tkm_test_fail(__FILE__, __LINE__, "TKM_SOURCE_DIR is not set");
#endif
}

char *tkm_test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", path, strerror(errno));
    ASSERT_OK(fseek(f, 0, SEEK_END));
    long n = ftell(f);
    ASSERT(n >= 0);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    ASSERT_NOT_NULL(b);
    ASSERT_UEQ(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return b;
}

size_t tkm_test_subdirs(const char *dir, char out[][1024], size_t max)
{
    struct dirent **ents = NULL;
    int n = scandir(dir, &ents, NULL, alphasort);
    if (n < 0)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", dir, strerror(errno));
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (ents[i]->d_name[0] != '.' && k < max)
            snprintf(out[k++], 1024, "%s/%s", dir, ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    return k;
}

void tkm_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "# %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(NULL);
    _exit(1);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs one test in a child; returns 0 when it passed. */
unsigned tkm_test_timeout_scale(void)
{
    const char *s = getenv("TKM_TEST_TIMEOUT_SCALE");
    return s && *s >= '1' && *s <= '9' ? (unsigned)strtoul(s, NULL, 10) : 1;
}

static int run_one(struct tkm_test *t, int num)
{
    unsigned scale = tkm_test_timeout_scale();
    char dir[256];
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tkm-unit-%s-XXXXXX", base ? base : "/tmp", t->name);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        snprintf(tmpdir_path, sizeof tmpdir_path, "%s", dir);
        alarm(t->timeout_s * scale);
        t->fn();
        fflush(NULL);
#ifdef TKM_HAVE_LSAN
        /* A passing test is still failed by its leaks. Checked here, because
         * _exit() skips LeakSanitizer's atexit hook, and exit() would run
         * while helper threads of the test (loopback servers) still use its
         * stack. Valgrind checks leaks at _exit() by itself. */
        __lsan_do_leak_check();
#endif
        _exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        ;
    kill(-pid, SIGKILL); /* anything the test left running */
    double dt = now_s() - t0;
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (ok) {
        printf("ok %d - %s (%.3fs)\n", num, t->name, dt);
    } else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
        printf("not ok %d - %s (timeout after %us)\n", num, t->name, t->timeout_s * scale);
    } else if (WIFSIGNALED(st)) {
        printf("not ok %d - %s (killed by signal %d: %s)\n", num, t->name, WTERMSIG(st),
               strsignal(WTERMSIG(st)));
    } else {
        printf("not ok %d - %s (exit %d)\n", num, t->name, WEXITSTATUS(st));
    }
    fflush(stdout);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    int n = 0;
    for (struct tkm_test *t = tests_head; t; t = t->next)
        n++;
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (struct tkm_test *t = tests_head; t; t = t->next)
            printf("%s\n", t->name);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--run") == 0) {
        for (struct tkm_test *t = tests_head; t; t = t->next)
            if (strcmp(t->name, argv[2]) == 0) {
                printf("1..1\n");
                return run_one(t, 1);
            }
        fprintf(stderr, "%s: no test named '%s' (see --list)\n", argv[0], argv[2]);
        return 2;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--list | --run NAME]\n", argv[0]);
        return 2;
    }
    printf("1..%d\n", n);
    int failed = 0, i = 0;
    for (struct tkm_test *t = tests_head; t; t = t->next)
        failed += run_one(t, ++i);
    printf("# %d passed, %d failed\n", n - failed, failed);
    return failed ? 1 : 0;
}
