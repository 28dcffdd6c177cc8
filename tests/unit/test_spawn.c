/*
 * Unit tests for lib/spawn.c: real programs (/bin/sh scripts, cat, printf)
 * run through tkm_spawn_run(): output capture and caps, stdin, exit status
 * and signals, missing programs, and a timeout that kills the whole process
 * group (a background grandchild too). Every test also checks that no
 * descriptor leaked and no child is left to reap.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/spawn.h>
#include <tkm/util.h>

#include "test.h"

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;
    ASSERT_NOT_NULL(d);
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the DIR's own descriptor */
}

/* No child of this process is left, running or zombie. */
static void assert_no_children(void)
{
    int st;
    errno = 0;
    ASSERT_EQ(waitpid(-1, &st, WNOHANG), -1);
    ASSERT_EQ(errno, ECHILD);
}

/* A script under the test's tmpdir; returns its path. */
static const char *script(const char *name, const char *body)
{
    static char path[8][1024];
    static int i;
    char *p = path[i++ % 8];
    snprintf(p, 1024, "%s/%s", tkm_test_tmpdir(), name);
    FILE *f = fopen(p, "w");
    ASSERT_NOT_NULL(f);
    fputs(body, f);
    fclose(f);
    ASSERT_OK(chmod(p, 0755));
    return p;
}

TEST(normal_run_captures_stdout)
{
    int fds = count_fds();
    char *argv[] = {"printf", "%s-%s", "hello", "world", NULL};
    struct tkm_spawn_opts o = {.argv = argv};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_spawn_run(&o, &r, &e));
    ASSERT_STREQ(r.out.data, "hello-world");
    ASSERT_EQ(r.out.len, 11);
    ASSERT_EQ(r.exited, 1);
    ASSERT_EQ(r.exit_status, 0);
    ASSERT_EQ(r.signaled, 0);
    ASSERT_EQ(r.timed_out, 0);
    ASSERT_EQ(r.err.len, 0);
    ASSERT_EQ(e.code, 0);
    tkm_spawn_result_release(&r);
    ASSERT_EQ(count_fds(), fds);
    assert_no_children();
}

TEST(stdin_round_trip_and_explicit_env)
{
    int fds = count_fds();
    /* 256 KiB: more than a pipe holds, so writing and reading must interleave */
    size_t n = 256 * 1024;
    char *in = malloc(n);
    ASSERT_NOT_NULL(in);
    for (size_t i = 0; i < n; i++)
        in[i] = (char)('a' + i % 26);
    char *argv[] = {"cat", NULL};
    struct tkm_spawn_opts o = {.argv = argv, .stdin_data = in, .stdin_len = n};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_spawn_run(&o, &r, &e));
    ASSERT_EQ(r.out.len, n);
    ASSERT_MEMEQ(r.out.data, in, n);
    tkm_spawn_result_release(&r);
    free(in);
    /* envp is exactly what the child gets */
    const char *s =
        script("env.sh", "#!/bin/sh\nread line\necho \"$line/$TKM_X/${HOME:-nohome}\"\n");
    char *argv2[] = {(char *)s, NULL};
    char *envp[] = {"TKM_X=42", NULL};
    struct tkm_spawn_opts o2 = {.argv = argv2, .envp = envp, .stdin_data = "in\n", .stdin_len = 3};
    ASSERT_OK(tkm_spawn_run(&o2, &r, &e));
    ASSERT_STREQ(r.out.data, "in/42/nohome\n");
    tkm_spawn_result_release(&r);
    ASSERT_EQ(count_fds(), fds);
    assert_no_children();
}

TEST(stderr_captured_and_capped)
{
    const char *s = script("err.sh", "#!/bin/sh\necho out\necho 'something broke' >&2\n"
                                     "i=0; while [ $i -lt 200 ]; do echo xxxxxxxxxx >&2; "
                                     "i=$((i+1)); done\n");
    char *argv[] = {(char *)s, NULL};
    struct tkm_spawn_opts o = {.argv = argv, .stderr_max = 64};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_spawn_run(&o, &r, &e));
    ASSERT_STREQ(r.out.data, "out\n");
    ASSERT_EQ(r.err.len, 64);
    ASSERT_EQ(strncmp(r.err.data, "something broke\n", 16), 0);
    ASSERT_EQ(r.stderr_truncated, 1);
    ASSERT_EQ(r.exit_status, 0); /* the writer was never blocked by the cap */
    tkm_spawn_result_release(&r);
    assert_no_children();
}

TEST(nonzero_exit_and_signal_reported)
{
    char buf[64];
    char *argv[] = {"sh", "-c", "echo failing >&2; exit 7", NULL};
    struct tkm_spawn_opts o = {.argv = argv};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_spawn_run(&o, &r, &e));
    ASSERT_EQ(r.exited, 1);
    ASSERT_EQ(r.exit_status, 7);
    ASSERT_STREQ(r.err.data, "failing\n");
    ASSERT_STREQ(tkm_spawn_status_str(&r, buf, sizeof buf), "exited with status 7");
    tkm_spawn_result_release(&r);
    char *argv2[] = {"sh", "-c", "kill -TERM $$", NULL};
    o.argv = argv2;
    ASSERT_OK(tkm_spawn_run(&o, &r, &e));
    ASSERT_EQ(r.exited, 0);
    ASSERT_EQ(r.signaled, 1);
    ASSERT_EQ(r.term_signal, SIGTERM);
    ASSERT_STRCONTAINS(tkm_spawn_status_str(&r, buf, sizeof buf), "killed by signal 15");
    tkm_spawn_result_release(&r);
    assert_no_children();
}

TEST(missing_program_is_named)
{
    int fds = count_fds();
    char *argv[] = {"tkm-no-such-program-xyz", "get", NULL};
    struct tkm_spawn_opts o = {.argv = argv, .stdin_data = "x", .stdin_len = 1};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_spawn_run(&o, &r, &e), -ENOENT);
    ASSERT_STREQ(e.msg, "tkm-no-such-program-xyz: cannot run: program not found on PATH");
    ASSERT_EQ(r.exited, 0);
    tkm_spawn_result_release(&r);
    char p[1024];
    snprintf(p, sizeof p, "%s/nope/prog", tkm_test_tmpdir());
    char *argv2[] = {p, NULL};
    struct tkm_spawn_opts o2 = {.argv = argv2, .name = "credential helper nope"};
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_spawn_run(&o2, &r, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "credential helper nope: cannot run ");
    ASSERT_STRCONTAINS(e.msg, "/nope/prog: no such file");
    tkm_spawn_result_release(&r);
    /* not executable */
    const char *s = script("noexec.sh", "#!/bin/sh\necho hi\n");
    ASSERT_OK(chmod(s, 0644));
    char *argv3[] = {(char *)s, NULL};
    o2.argv = argv3;
    o2.name = NULL;
    tkm_err_clear(&e);
    ASSERT_EQ(tkm_spawn_run(&o2, &r, &e), -EACCES);
    ASSERT_STRCONTAINS(e.msg, s);
    ASSERT_STRCONTAINS(e.msg, "Permission denied");
    tkm_spawn_result_release(&r);
    ASSERT_EQ(count_fds(), fds);
    assert_no_children();
}

static int alive(pid_t pid)
{
    char p[64], st[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *rp = strrchr(st, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

TEST_TIMEOUT(timeout_kills_the_process_group, 60)
{
    int fds = count_fds();
    /* Orphans come to this process (not init), so the grandchild can be
     * awaited and its death observed. */
    ASSERT_OK(prctl(PR_SET_CHILD_SUBREAPER, 1));
    const char *s = script("hang.sh", "#!/bin/sh\nsleep 100 &\necho \"$$ $!\"\nwait\n");
    char *argv[] = {(char *)s, NULL};
    struct tkm_spawn_opts o = {.argv = argv, .name = "hang.sh", .timeout_ms = 700};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(tkm_spawn_run(&o, &r, &e), -ETIMEDOUT);
    uint64_t dt = tkm_now_ms() - t0;
    ASSERT(dt >= 700);
    ASSERT(dt < 10000);
    ASSERT_STREQ(e.msg, "hang.sh did not finish within 700 ms (killed with its process group)");
    ASSERT_EQ(r.timed_out, 1);
    ASSERT_EQ(r.signaled, 1);
    ASSERT_EQ(r.term_signal, SIGKILL);
    int sh_pid = 0, sleep_pid = 0;
    ASSERT_EQ(sscanf(r.out.data, "%d %d", &sh_pid, &sleep_pid), 2);
    tkm_spawn_result_release(&r);
    ASSERT(sleep_pid > 0);
    ASSERT_EQ(alive(sh_pid), 0); /* the child is reaped */
    /* the grandchild was SIGKILLed too: it is ours to reap now */
    int st = 0;
    pid_t w;
    while ((w = waitpid(sleep_pid, &st, 0)) < 0 && errno == EINTR)
        ;
    ASSERT_EQ(w, sleep_pid);
    ASSERT(WIFSIGNALED(st));
    ASSERT_EQ(WTERMSIG(st), SIGKILL);
    ASSERT_EQ(alive(sleep_pid), 0);
    ASSERT(tkm_now_ms() - t0 <
           50000); /* not after sleep 100 (bound wide for a starved valgrind run) */
    ASSERT_EQ(count_fds(), fds);
    assert_no_children();
}

TEST_TIMEOUT(child_that_closes_its_output_still_times_out, 60)
{
    char *argv[] = {"sh", "-c", "exec >&- 2>&-; sleep 100", NULL};
    struct tkm_spawn_opts o = {.argv = argv, .timeout_ms = 500};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(tkm_spawn_run(&o, &r, &e), -ETIMEDOUT);
    ASSERT(tkm_now_ms() - t0 < 50000);
    ASSERT_EQ(r.term_signal, SIGKILL);
    tkm_spawn_result_release(&r);
    assert_no_children();
}

TEST(output_over_the_cap_is_refused)
{
    int fds = count_fds();
    /* writes forever: only the cap ends it */
    char *argv[] = {"sh", "-c", "while :; do echo 0123456789abcdef; done", NULL};
    struct tkm_spawn_opts o = {.argv = argv, .name = "chatty", .stdout_max = 4096};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_spawn_run(&o, &r, &e), -E2BIG);
    ASSERT_STREQ(e.msg, "chatty: output larger than 4096 bytes (killed with its process group)");
    ASSERT(r.out.len <= 4096);
    ASSERT_EQ(r.signaled, 1);
    ASSERT_EQ(r.term_signal, SIGKILL);
    tkm_spawn_result_release(&r);
    ASSERT_EQ(count_fds(), fds);
    assert_no_children();
}

TEST(child_that_ignores_stdin_raises_no_sigpipe)
{
    /* 1 MiB of stdin to a program that exits at once: EPIPE, never SIGPIPE */
    size_t n = 1 << 20;
    char *in = calloc(1, n);
    ASSERT_NOT_NULL(in);
    char *argv[] = {"true", NULL};
    struct tkm_spawn_opts o = {.argv = argv, .stdin_data = in, .stdin_len = n};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_OK(tkm_spawn_run(&o, &r, &e));
    ASSERT_EQ(r.exit_status, 0);
    tkm_spawn_result_release(&r);
    free(in);
    sigset_t pend;
    sigpending(&pend);
    ASSERT_EQ(sigismember(&pend, SIGPIPE), 0);
    assert_no_children();
}

TEST(no_program_is_einval)
{
    char *argv[] = {NULL};
    struct tkm_spawn_opts o = {.argv = argv};
    struct tkm_spawn_result r;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_spawn_run(&o, &r, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "no program");
    tkm_spawn_result_release(&r);
}
