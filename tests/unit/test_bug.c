/*
 * Unit tests for TKM_BUG() (<tkm/bug.h>) and the broken invariants it guards:
 * a second k8s_watch_close(), k8s_workqueue_close() or tkm_http_close() on
 * the same object. Each case runs in a forked child with stderr captured.
 * In builds where TKM_BUG aborts (Debug, ASan/UBSan, fuzz) the child must die
 * of SIGABRT after logging the file, line and condition; in the others
 * (RelWithDebInfo, Release) it must log once and go on, and the first
 * caller's closed callback must still run.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <k8s/client.h>
#include <k8s/config.h>
#include <k8s/watch.h>
#include <k8s/workqueue.h>
#include <tkm/bug.h>
#include <tkm/http.h>

#include "test.h"

struct child {
    int status;
    char log[8192];
};

/* Runs fn in a child whose stderr goes to a file; fn's return value is the
 * child's exit status. */
static void run_child(int (*fn)(void), struct child *c)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/stderr.txt", tkm_test_tmpdir());
    fflush(NULL);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(path, "w", stderr);
        if (!f)
            _exit(90);
        setvbuf(stderr, NULL, _IONBF, 0);
        int rc = fn();
        fflush(NULL);
        _exit(rc);
    }
    while (waitpid(pid, &c->status, 0) < 0)
        ASSERT_EQ(errno, EINTR);
    FILE *f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    size_t n = fread(c->log, 1, sizeof c->log - 1, f);
    c->log[n] = '\0';
    fclose(f);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* The verdict on a child that hit a TKM_BUG in file at cond. */
static void assert_bug(const struct child *c, const char *file, const char *cond)
{
    char want[256];
    snprintf(want, sizeof want, "%s:", file);
    ASSERT_STRCONTAINS(c->log, "BUG: ");
    ASSERT_STRCONTAINS(c->log, want);
    ASSERT_STRCONTAINS(c->log, cond);
    if (TKM_BUG_ABORT) {
        ASSERT(WIFSIGNALED(c->status));
        ASSERT_EQ(WTERMSIG(c->status), SIGABRT);
        ASSERT_STRCONTAINS(c->log, "(aborting)");
    } else {
        if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0)
            tkm_test_fail(__FILE__, __LINE__, "child status 0x%x, log:\n%s", c->status, c->log);
        ASSERT_EQ(count(c->log, "BUG: "), 1);
        ASSERT_STRCONTAINS(c->log, "(logged once; going on)");
    }
}

/* CMake's definition reaches lib and the tests alike: assert_bug() checks each
 * child's fate (a TKM_BUG in lib code) against the tests' TKM_BUG_ABORT. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
_Static_assert(TKM_BUG_ABORT == 1, "sanitizer builds abort on TKM_BUG()");
#endif

static int twice(int x)
{
    if (TKM_BUG(x > 1))
        return -1;
    return x;
}

static int macro_child(void)
{
    /* a false condition logs nothing and yields 0 */
    if (twice(1) != 1)
        return 3;
    /* the same site twice: one log line, -1 both times (Release) */
    if (twice(5) != -1 || twice(6) != -1)
        return 4;
    return 0;
}

TEST(macro_logs_once_and_yields_the_condition)
{
    struct child c;
    run_child(macro_child, &c);
    assert_bug(&c, "test_bug.c", "x > 1");
    ASSERT_STRCONTAINS(c.log, "twice");
}

static void set_flag(void *d)
{
    (*(int *)d)++;
}

static int watch_child(void)
{
    /* nothing listens on port 1: the watch would only retry */
    static const char kc[] =
        "apiVersion: v1\nkind: Config\nclusters:\n- name: f\n  cluster: {server: "
        "\"http://127.0.0.1:1\"}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: f\n"
        "  context: {cluster: f, user: u}\ncurrent-context: f\n";
    static const struct k8s_watch_handler h = {0};
    struct k8s_watch_opts o = {.res = &k8s_res_configmaps, .ns = "t"};
    struct k8s_config cfg;
    struct k8s_client *cl = NULL;
    struct k8s_watch *w = NULL;
    struct tkm_err err = {0};
    uv_loop_t loop;
    int first = 0, second = 0, client_closed = 0;
    if (uv_loop_init(&loop) != 0)
        return 10;
    k8s_config_init(&cfg);
    if (k8s_config_load_yaml(&cfg, kc, strlen(kc), "/", "test", NULL, &err) != 0 ||
        k8s_client_new(&loop, &cfg, NULL, &cl, &err) != 0)
        return 11;
    k8s_config_release(&cfg);
    if (k8s_watch_start(cl, &o, &h, NULL, &w, &err) != 0)
        return 12;
    k8s_watch_close(w, set_flag, &first);
    k8s_watch_close(w, set_flag, &second); /* the bug */
    uv_run(&loop, UV_RUN_DEFAULT);
    k8s_client_close(cl, set_flag, &client_closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        return 13;
    /* Release: the first caller is told, the second call changed nothing */
    return first == 1 && second == 0 && client_closed == 1 ? 0 : 14;
}

TEST(second_watch_stop_is_caught)
{
    struct child c;
    run_child(watch_child, &c);
    assert_bug(&c, "watch.c", "w->stopping");
    ASSERT_STRCONTAINS(c.log, "k8s_watch_close");
}

static void wq_fn(struct k8s_workqueue *q, const char *key, void *data)
{
    (void)data;
    k8s_workqueue_done(q, key, K8S_WQ_OK);
}

static int workqueue_child(void)
{
    struct k8s_workqueue *q = NULL;
    struct tkm_err err = {0};
    uv_loop_t loop;
    int first = 0, second = 0;
    if (uv_loop_init(&loop) != 0 || k8s_workqueue_new(&loop, NULL, wq_fn, NULL, &q, &err) != 0)
        return 10;
    k8s_workqueue_close(q, set_flag, &first);
    k8s_workqueue_close(q, set_flag, &second); /* the bug */
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        return 13;
    return first == 1 && second == 0 ? 0 : 14;
}

TEST(second_workqueue_shutdown_is_caught)
{
    struct child c;
    run_child(workqueue_child, &c);
    assert_bug(&c, "workqueue.c", "q->closing");
}

static int http_child(void)
{
    struct tkm_http *h = NULL;
    struct tkm_err err = {0};
    uv_loop_t loop;
    int first = 0, second = 0;
    if (tkm_http_global_init(&err) != 0 || uv_loop_init(&loop) != 0 ||
        tkm_http_new(&loop, NULL, &h, &err) != 0)
        return 10;
    tkm_http_close(h, set_flag, &first);
    tkm_http_close(h, set_flag, &second); /* the bug */
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0)
        return 13;
    return first == 1 && second == 0 ? 0 : 14;
}

TEST(second_http_close_is_caught)
{
    struct child c;
    run_child(http_child, &c);
    assert_bug(&c, "http.c", "h->closing");
}
