/*
 * test_daemon.c - the daemons' shared skeleton: the command line (<tkm/flags.h>:
 * durations, sizes, the table parser, the logging flags, the deprecated
 * spellings and --help) and the stop (<tkm/daemon.h>: signals, closes counted
 * by callbacks, the exit status). The daemons' own tables are exercised in
 * test_agent.c and the e2e scenarios (ctrl_basic, agent_*, csi_*).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/daemon.h>
#include <tkm/flags.h>
#include <tkm/http.h>
#include <tkm/log.h>
#include <tkm/oci/session.h>
#include <tkm/util.h>

#include "test.h"
#include "tsrv.h"

TEST(durations)
{
    static const struct {
        const char *s;
        uint64_t ms;
    } ok[] = {{"500ms", 500}, {"10s", 10000},     {"5m", 300000},         {"1h", 3600000},
              {"0", 0},       {"1m30s", 90000},   {"1h2m3s4ms", 3723004}, {"0s", 0},
              {"90s", 90000}, {"2h", 7200000ULL}, {"100ms", 100}};
    uint64_t v;
    for (size_t i = 0; i < TKM_ARRAY_SIZE(ok); i++) {
        v = 12345;
        ASSERT_OK(tkm_parse_duration(ok[i].s, &v));
        ASSERT_UEQ(v, ok[i].ms);
    }
    /* a bare number (other than 0) is not a duration: the flag layer decides */
    static const char *const bad[] = {"",   "10", "10x", "-1m", "1.5s", "m",   "ms",  "10 m",
                                      "s1", "1d", "5M",  "1h-", " 1s",  "1s ", "1mss"};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bad); i++) {
        v = 7;
        ASSERT_EQ(tkm_parse_duration(bad[i], &v), -EINVAL);
        ASSERT_UEQ(v, 7); /* untouched */
    }
    ASSERT_EQ(tkm_parse_duration("99999999999999999999h", &v), -ERANGE);
    ASSERT_EQ(tkm_parse_duration("5124095576030432h", &v), -ERANGE); /* * 3600000 > 2^64 */
}

TEST(sizes)
{
    uint64_t v;
    ASSERT_OK(tkm_parse_size("10Gi", &v));
    ASSERT_UEQ(v, 10737418240ULL);
    ASSERT_OK(tkm_parse_size("512Mi", &v));
    ASSERT_UEQ(v, 512ULL << 20);
    ASSERT_OK(tkm_parse_size("1000000", &v));
    ASSERT_UEQ(v, 1000000);
    ASSERT_OK(tkm_parse_size("2G", &v));
    ASSERT_UEQ(v, 2000000000ULL);
    ASSERT_OK(tkm_parse_size("1Ti", &v));
    ASSERT_UEQ(v, 1ULL << 40);
    ASSERT_EQ(tkm_parse_size("Gi", &v), -EINVAL);
    ASSERT_EQ(tkm_parse_size("lots", &v), -EINVAL);
    ASSERT_EQ(tkm_parse_size("10GB", &v), -EINVAL);
    ASSERT_NE(tkm_parse_size("99999999999999999999", &v), 0);
    ASSERT_NE(tkm_parse_size("17179869184Gi", &v), 0); /* 2^34 Gi = 2^64 */
}

/* A daemon-like table over every flag type. */
struct opts {
    const char *name, *fmt;
    uint64_t timeout_ms, settle_ms, budget, workers;
    int elect;
    const char *roots[4];
    size_t n_roots;
};

static int add_root(const char *v, void *dst, struct tkm_err *err)
{
    struct opts *o = dst;
    if (v[0] != '/')
        return tkm_err_set(err, -EINVAL, "not an absolute path");
    o->roots[o->n_roots++] = v;
    return 0;
}

static int run_parse(struct tkm_flagset *fs, struct opts *o, const char *const *args)
{
    /* clang-format off */
    static struct tkm_flag flags[] = {
        {.name = "name", .type = TKM_FLAG_STRING, .arg = "NAME", .def = "x", .help = "a name"},
        {.name = "timeout", .type = TKM_FLAG_DURATION, .arg = "DURATION", .def = "30s",
         .bare_ms = 1000, .max = 86400000, .help = "a timeout"},
        {.name = "settle", .type = TKM_FLAG_DURATION, .arg = "DURATION", .def = "250ms",
         .bare_ms = 1, .help = "a settle time"},
        {.name = "grace", .type = TKM_FLAG_DURATION, .arg = "DURATION", .def = "10m",
         .help = "a duration that never took bare numbers"},
        {.name = "budget", .type = TKM_FLAG_SIZE, .arg = "SIZE", .def = "10Gi", .min = 1,
         .help = "a size"},
        {.name = "workers", .type = TKM_FLAG_UINT, .arg = "N", .def = "64", .min = 1,
         .max = 256, .help = "a count"},
        {.name = "elect", .type = TKM_FLAG_BOOL, .def = "false", .help = "a switch"},
        {.name = "output", .alias = "o", .type = TKM_FLAG_CHOICE, .choices = "json|yaml",
         .def = "json", .help = "a choice"},
        {.name = "root", .type = TKM_FLAG_FUNC, .arg = "DIR", .set = add_root,
         .help = "repeatable"},
    };
    /* clang-format on */
    char *argv[32];
    int argc = 0;
    memset(o, 0, sizeof *o);
    o->name = "x";
    o->fmt = "json";
    o->timeout_ms = 30000;
    void *dst[] = {&o->name,      &o->timeout_ms, &o->settle_ms,
                   &o->settle_ms, &o->budget,     &o->workers,
                   &o->elect,     &o->fmt,        o};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(flags); i++)
        flags[i].dst = dst[i];
    flags[3].dst = &o->budget; /* grace: any uint64_t */
    flags[4].dst = &o->budget;
    *fs = (struct tkm_flagset){.prog = "tkm-test",
                               .synopsis = "tkm-test [flags]",
                               .about = "A test daemon.\n",
                               .flags = flags,
                               .n_flags = TKM_ARRAY_SIZE(flags),
                               .epilogue = "Example:\n  tkm-test --timeout 10s\n"};
    argv[argc++] = (char *)"tkm-test";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    return tkm_flags_parse(fs, argc, argv);
}

#define PARSE(...) run_parse(&fs, &o, (const char *[]){__VA_ARGS__, NULL})

TEST(flags_current_spellings)
{
    struct tkm_flagset fs;
    struct opts o;
    ASSERT_OK(PARSE("--name", "n1", "--timeout=1m30s", "--settle", "500ms", "--budget", "512Mi",
                    "--workers=8", "--elect", "-o", "yaml", "--root", "/a", "--root=/b"));
    ASSERT_STREQ(o.name, "n1");
    ASSERT_UEQ(o.timeout_ms, 90000);
    ASSERT_UEQ(o.settle_ms, 500);
    ASSERT_UEQ(o.budget, 512ULL << 20);
    ASSERT_UEQ(o.workers, 8);
    ASSERT_EQ(o.elect, 1);
    ASSERT_STREQ(o.fmt, "yaml");
    ASSERT_EQ((int)o.n_roots, 2);
    ASSERT_STREQ(o.roots[1], "/b");
    ASSERT_EQ((int)fs.n_notes, 0); /* nothing deprecated */
    ASSERT_EQ(fs.verbosity, 0);
    ASSERT_EQ(fs.level, -1);
    ASSERT_STREQ(fs.log_format, "text");
    ASSERT_OK(PARSE("--elect=false", "--output=json", "--timeout", "0"));
    ASSERT_EQ(o.elect, 0);
    ASSERT_UEQ(o.timeout_ms, 0);
    ASSERT_STREQ(o.fmt, "json");
    /* the logging flags, the same in every daemon */
    ASSERT_OK(PARSE("-v", "2", "--log-format", "json"));
    ASSERT_EQ(fs.verbosity, 2);
    ASSERT_STREQ(fs.log_format, "json");
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_TRACE);
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_WARN), TKM_LOG_DEBUG); /* agent --once */
    ASSERT_OK(PARSE("-v=1", "--log-format=text"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_DEBUG);
    ASSERT_OK(PARSE("-v", "warn"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_WARN);
    ASSERT_OK(PARSE("-v", "10"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_TRACE); /* capped */
    ASSERT_EQ((int)fs.n_notes, 0);
}

TEST(flags_bad_input_refused)
{
    struct tkm_flagset fs;
    struct opts o;
    ASSERT_EQ(PARSE("--grace", "10 minutes"), -EINVAL);
    ASSERT_EQ(PARSE("--grace", "45"), -EINVAL); /* no legacy unit: a bare number is an error */
    ASSERT_EQ(PARSE("--timeout", "1.5s"), -EINVAL);
    ASSERT_EQ(PARSE("--timeout", "25h"), -EINVAL); /* above max */
    ASSERT_EQ(PARSE("--budget", "0"), -EINVAL);    /* below min */
    ASSERT_EQ(PARSE("--budget", "lots"), -EINVAL);
    ASSERT_EQ(PARSE("--workers", "0"), -EINVAL);
    ASSERT_EQ(PARSE("--workers", "257"), -EINVAL);
    ASSERT_EQ(PARSE("--workers", "-1"), -EINVAL);
    ASSERT_EQ(PARSE("--elect=maybe"), -EINVAL);
    ASSERT_EQ(PARSE("-o", "xml"), -EINVAL);
    ASSERT_EQ(PARSE("--output", "jso"), -EINVAL);
    ASSERT_EQ(PARSE("--root", "rel"), -EINVAL); /* the FUNC's own error */
    ASSERT_EQ(PARSE("--bogus"), -EINVAL);
    ASSERT_EQ(PARSE("-name", "x"), -EINVAL); /* one dash: one-letter flags only */
    ASSERT_EQ(PARSE("--o", "json"), -EINVAL);
    ASSERT_EQ(PARSE("--name"), -EINVAL); /* needs a value */
    ASSERT_EQ(PARSE("positional"), -EINVAL);
    ASSERT_EQ(PARSE("-v", "x"), -EINVAL); /* -v then a positional "x" */
    ASSERT_EQ(PARSE("--log-format", "yaml"), -EINVAL);
    ASSERT_EQ(PARSE("--log-level", "loud"), -EINVAL);
    ASSERT_EQ(PARSE("--help"), 1);
}

/* The message names the flag, the value and the grammar (captured from stderr). */
TEST(flags_error_message)
{
    struct tkm_flagset fs;
    struct opts o;
    char buf[1024] = {0};
    int fds[2], saved = dup(2);
    ASSERT_OK(pipe(fds));
    dup2(fds[1], 2);
    int rc = PARSE("--timeout", "10x");
    int rc2 = PARSE("--workers", "0");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fds[1]);
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    ASSERT(n > 0);
    ASSERT_EQ(rc, -EINVAL);
    ASSERT_EQ(rc2, -EINVAL);
    ASSERT_STRCONTAINS(buf, "tkm-test: --timeout 10x: expected a duration such as 500ms, 10s, 5m");
    ASSERT_STRCONTAINS(buf, "(see tkm-test --help)");
    ASSERT_STRCONTAINS(buf, "tkm-test: --workers 0: use 1..256");
}

TEST(deprecated_spellings)
{
    struct tkm_flagset fs;
    struct opts o;
    /* a bare number: the unit the flag used to take, with a note */
    ASSERT_OK(PARSE("--timeout", "45", "--settle", "250"));
    ASSERT_UEQ(o.timeout_ms, 45000);
    ASSERT_UEQ(o.settle_ms, 250);
    ASSERT_EQ((int)fs.n_notes, 2);
    ASSERT_STRCONTAINS(fs.notes[0], "--timeout 45: a duration without a unit is deprecated");
    ASSERT_STRCONTAINS(fs.notes[0], "write 45s");
    ASSERT_STRCONTAINS(fs.notes[1], "write 250ms");
    ASSERT_OK(PARSE("--timeout=86400"));
    ASSERT_UEQ(o.timeout_ms, 86400000);
    ASSERT_EQ(PARSE("--timeout", "86401"), -EINVAL); /* the range still holds */
    /* the logging flags of earlier releases */
    ASSERT_OK(PARSE("--log-level", "warn", "--log-json"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_WARN);
    ASSERT_STREQ(fs.log_format, "json");
    ASSERT_EQ((int)fs.n_notes, 2);
    ASSERT_STRCONTAINS(fs.notes[0], "--log-level is deprecated");
    ASSERT_STRCONTAINS(fs.notes[0], "write -v warn");
    ASSERT_STRCONTAINS(fs.notes[1], "write --log-format json");
    ASSERT_OK(PARSE("--zap-log-level=debug"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_DEBUG);
    ASSERT_STRCONTAINS(fs.notes[0], "--zap-log-level is deprecated");
    /* tkm-csi's -v without a level: one more level each, then the next flag */
    ASSERT_OK(PARSE("-v", "--name", "n4"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_DEBUG);
    ASSERT_STREQ(o.name, "n4");
    ASSERT_STRCONTAINS(fs.notes[0], "-v without a level is deprecated");
    ASSERT_OK(PARSE("-v", "-v"));
    ASSERT_EQ(tkm_flags_log_level(&fs, TKM_LOG_INFO), TKM_LOG_TRACE);
    ASSERT_EQ((int)fs.n_notes, 1); /* the same note once */
    ASSERT_OK(PARSE("-vv"));
    ASSERT_EQ(fs.verbosity, 2);
    ASSERT_OK(PARSE("--verbose"));
    ASSERT_EQ(fs.verbosity, 1);
    ASSERT_STRCONTAINS(fs.notes[0], "--verbose is deprecated");
}

static char *usage_text(struct tkm_flagset *fs)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    tkm_flags_usage(fs, f);
    fclose(f);
    return text;
}

TEST(help_teaches_every_flag)
{
    struct tkm_flagset fs;
    struct opts o;
    ASSERT_OK(PARSE("--name", "x"));
    char *t = usage_text(&fs);
    ASSERT_STRCONTAINS(t, "Usage: tkm-test [flags]\n\nA test daemon.\n");
    for (unsigned i = 0; i < fs.n_flags; i++) {
        char want[64];
        snprintf(want, sizeof want, "--%s", fs.flags[i].name);
        ASSERT_STRCONTAINS(t, want);
        if (fs.flags[i].def) {
            snprintf(want, sizeof want, "(default %s)", fs.flags[i].def);
            ASSERT_STRCONTAINS(t, want);
        }
    }
    ASSERT_STRCONTAINS(t, "  --timeout DURATION\n        a timeout (default 30s)\n");
    ASSERT_STRCONTAINS(t, "  -o, --output json|yaml\n");
    ASSERT_STRCONTAINS(t, "  -v LEVEL\n");
    ASSERT_STRCONTAINS(t, "  --log-format text|json\n");
    ASSERT_STRCONTAINS(t, "Durations: one or more <integer><unit>, unit ms, s, m or h: 500ms, 10s");
    ASSERT_STRCONTAINS(t, "Sizes: bytes, or with Ki Mi Gi Ti");
    ASSERT_STRCONTAINS(t, "--timeout N (N seconds)");
    ASSERT_STRCONTAINS(t, "--settle N (N milliseconds)");
    ASSERT(!strstr(t, "--grace N"));
    ASSERT_STRCONTAINS(t, "--log-json (write --log-format json)");
    ASSERT_STRCONTAINS(t, "Example:\n  tkm-test --timeout 10s\n");
    free(t);
}

/* stderr into a temporary file while fn runs; the text returned (owned). */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/tkm-test-daemon-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    if (fd < 0 || saved < 0)
        return NULL;
    unlink(path);
    fflush(stderr);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *out = calloc(1, (size_t)n + 1);
    if (out && n > 0 && pread(fd, out, (size_t)n, 0) != n)
        out[0] = 0;
    close(fd);
    return out;
}

static void log_init_and_info(void *arg)
{
    tkm_flags_log_init(arg, TKM_LOG_INFO);
    tkm_info("hello \"world\"");
    tkm_dbg("not shown");
}

/* The deprecation notes become warnings in the log, in the chosen format. */
TEST(log_init_logs_the_notes)
{
    struct tkm_flagset fs;
    struct opts o;
    ASSERT_OK(PARSE("--log-json", "--timeout", "5"));
    char *log = capture_stderr(log_init_and_info, &fs);
    tkm_log_init("tkm-test", TKM_LOG_INFO, 0);
    ASSERT_NOT_NULL(log);
    ASSERT_STRCONTAINS(log, "\"level\":\"warn\",\"prog\":\"tkm-test\",\"msg\":\"--log-json is "
                            "deprecated");
    ASSERT_STRCONTAINS(log, "\"msg\":\"--timeout 5: a duration without a unit is deprecated");
    ASSERT_STRCONTAINS(log, "\"level\":\"info\",\"prog\":\"tkm-test\",\"msg\":\"hello "
                            "\\\"world\\\"\"}\n");
    ASSERT(!strstr(log, "not shown"));
    size_t lines = 0;
    for (const char *p = log; *p; p++)
        lines += *p == '\n';
    ASSERT_UEQ(lines, 3); /* one line a note, then the message */
    free(log);
    ASSERT_OK(PARSE("-v", "1"));
    log = capture_stderr(log_init_and_info, &fs);
    tkm_log_init("tkm-test", TKM_LOG_INFO, 0);
    ASSERT_NOT_NULL(log);
    ASSERT_STRCONTAINS(log, " INFO  tkm-test: hello \"world\"\n");
    ASSERT_STRCONTAINS(log, " DEBUG tkm-test: not shown\n");
    ASSERT(!strstr(log, "WARN"));
    free(log);
}

/* ---- the stop ------------------------------------------------------------------------------ */

/* A component whose close takes a while (work in flight that finishes). */
struct comp {
    uv_timer_t t;
    void (*cb)(void *);
    void *data;
    int closed;
};

static void comp_done(uv_timer_t *t)
{
    struct comp *c = t->data;
    c->closed = 1;
    uv_close((uv_handle_t *)t, NULL);
    c->cb(c->data);
}

static void comp_close(struct comp *c, void (*cb)(void *), void *data)
{
    c->cb = cb;
    c->data = data;
    uv_timer_start(&c->t, comp_done, 30, 0);
}

struct stop_ctx {
    struct comp a, b;
    int stops, last_signum, hups;
};

static void chain_b(void *data) /* a's close reported: b's starts (a chain) */
{
    struct tkm_daemon *d = data;
    struct stop_ctx *x = d->o.data;
    ASSERT_EQ(x->b.closed, 0);
    TKM_DAEMON_CLOSE(d, comp_close, &x->b);
    tkm_daemon_closed(d);
}

static void on_stop(struct tkm_daemon *d, int signum, void *data)
{
    struct stop_ctx *x = data;
    x->stops++;
    x->last_signum = signum;
    tkm_daemon_closing(d);
    comp_close(&x->a, chain_b, d);
    raise(SIGTERM); /* a second signal while stopping: logged, nothing more */
}

static void on_hup(struct tkm_daemon *d, void *data)
{
    struct stop_ctx *x = data;
    x->hups++;
    if (x->hups == 1)
        raise(SIGTERM);
    (void)d;
}

static void kick(uv_timer_t *t)
{
    raise(*(int *)t->data);
    uv_close((uv_handle_t *)t, NULL);
}

static int run_daemon(int sig, int stop_code, struct stop_ctx *x)
{
    uv_loop_t loop;
    struct tkm_daemon d;
    struct tkm_err e = {0};
    uv_timer_t t;
    memset(x, 0, sizeof *x);
    ASSERT_OK(uv_loop_init(&loop));
    uv_timer_init(&loop, &x->a.t);
    uv_timer_init(&loop, &x->b.t);
    x->a.t.data = &x->a;
    x->b.t.data = &x->b;
    struct tkm_daemon_opts o = {.on_stop = on_stop, .on_hup = on_hup, .data = x};
    ASSERT_OK(tkm_daemon_init(&d, &loop, &o, &e));
    if (sig) {
        uv_timer_init(&loop, &t);
        t.data = &sig;
        uv_timer_start(&t, kick, 5, 0);
    } else {
        tkm_daemon_stop(&d, stop_code);
    }
    int code = tkm_daemon_run(&d);
    /* the loop ended on its own: nothing is left open, no timer decided it */
    ASSERT_EQ(uv_loop_alive(&loop), 0);
    ASSERT_OK(uv_loop_close(&loop));
    ASSERT_EQ(x->a.closed, 1);
    ASSERT_EQ(x->b.closed, 1);
    ASSERT_EQ(x->stops, 1);
    return code;
}

TEST(stop_by_signal_exits_0_after_every_close)
{
    struct stop_ctx x;
    ASSERT_EQ(run_daemon(SIGTERM, 0, &x), 0);
    ASSERT_EQ(x.last_signum, SIGTERM);
    ASSERT_EQ(run_daemon(SIGINT, 0, &x), 0);
    ASSERT_EQ(x.last_signum, SIGINT);
    ASSERT_EQ(run_daemon(SIGHUP, 0, &x), 0); /* SIGHUP: on_hup (which sends SIGTERM here) */
    ASSERT_EQ(x.hups, 1);
    ASSERT_EQ(x.last_signum, SIGTERM);
}

TEST(stop_by_the_daemon_keeps_its_code)
{
    struct stop_ctx x;
    ASSERT_EQ(run_daemon(0, 3, &x), 3); /* the later SIGTERM does not change it */
    ASSERT_EQ(x.last_signum, 0);
}

static void count_done(void *data)
{
    (*(int *)data)++;
}

static void close_at_once(int *obj, void (*cb)(void *), void *data)
{
    (void)obj;
    cb(data);
}

TEST(closer_counts_closes_that_report_at_once)
{
    struct tkm_closer g;
    int done = 0, obj = 0;
    tkm_closer_init(&g, count_done, &done);
    close_at_once(&obj, tkm_closer_done, tkm_closer_add(&g)); /* reports inside its close */
    ASSERT_EQ(done, 0);                                       /* the hold keeps the set open */
    tkm_closer_add(&g);
    tkm_closer_done(&g); /* the hold goes: one close still in flight */
    ASSERT_EQ(done, 0);
    tkm_closer_done(&g);
    ASSERT_EQ(done, 1);
}

/* Work in flight at the stop: a registry request that the server never answers. The
 * session's close cancels it (the job reports -ECANCELED), then the http client closes,
 * and the daemon exits 0 at once, without waiting for the server. */
struct reg_ctx {
    struct tkm_http *http;
    struct tkm_oci_session *ses;
    struct tsrv *srv;
    int job_rc, job_calls, session_closed, http_closed;
    struct tkm_closer users;
    struct tkm_daemon *d;
};

static void reg_job_cb(struct tkm_oci_job *job, int rc, struct tkm_oci_job_result *res,
                       const struct tkm_err *err, void *data)
{
    struct reg_ctx *x = data;
    (void)job;
    (void)res;
    (void)err;
    x->job_rc = rc;
    x->job_calls++;
}

static void reg_http_closed(void *data)
{
    struct reg_ctx *x = data;
    x->http_closed = 1;
    tkm_daemon_closed(x->d);
}

static void reg_session_closed(void *data)
{
    struct reg_ctx *x = data;
    x->session_closed = 1;
    ASSERT_EQ(x->job_calls, 1); /* the job reported before its session went */
    tkm_daemon_closing(x->d);
    tkm_http_close(x->http, reg_http_closed, x);
    tkm_daemon_closed(x->d);
}

static void reg_on_stop(struct tkm_daemon *d, int signum, void *data)
{
    struct reg_ctx *x = data;
    (void)signum;
    tkm_daemon_closing(d);
    tkm_oci_session_close(x->ses, reg_session_closed, x);
}

static void reg_kick(uv_timer_t *t)
{
    struct reg_ctx *x = t->data;
    if (tsrv_nreqs(x->srv) == 0) /* the request is in flight at the server */
        return;
    uv_close((uv_handle_t *)t, NULL);
    raise(SIGTERM);
}

TEST(sigterm_with_a_registry_request_in_flight)
{
    static const struct tsrv_reply hang[] = {{.hang_ms = -1}};
    struct tsrv srv;
    struct reg_ctx x = {0};
    struct tkm_daemon d;
    struct tkm_err e = {0};
    uv_loop_t loop;
    uv_timer_t t;
    char host[64];
    ASSERT_OK(tkm_http_global_init(&e));
    ASSERT_OK(uv_loop_init(&loop));
    tsrv_init(&srv);
    tsrv_route(&srv, NULL, NULL, TSRV_PREFIX, NULL, hang, 1);
    int port = tsrv_listen(&srv);
    ASSERT(port > 0);
    snprintf(host, sizeof host, "127.0.0.1:%d", port);
    x.srv = &srv;
    x.d = &d;
    ASSERT_OK(tkm_http_new(&loop, NULL, &x.http, &e));
    struct tkm_oci_registry_opts ro = {.anonymous = 1, .timeout_ms = 60000};
    ASSERT_OK(tkm_oci_session_new(x.http, host, &ro, &x.ses, &e));
    ASSERT_OK(tkm_oci_job_resolve(x.ses, "a/b", "v1", reg_job_cb, &x, NULL, &e));
    struct tkm_daemon_opts o = {.on_stop = reg_on_stop, .data = &x};
    ASSERT_OK(tkm_daemon_init(&d, &loop, &o, &e));
    uv_timer_init(&loop, &t);
    t.data = &x;
    uv_timer_start(&t, reg_kick, 5, 5);
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(tkm_daemon_run(&d), 0);
    uint64_t took = tkm_now_ms() - t0;
    ASSERT_EQ(x.job_calls, 1);
    ASSERT_EQ(x.job_rc, -ECANCELED);
    ASSERT_EQ(x.session_closed, 1);
    ASSERT_EQ(x.http_closed, 1);
    ASSERT(took < 5000u * tkm_test_timeout_scale()); /* promptly: the server never answers */
    ASSERT_EQ(uv_loop_alive(&loop), 0);
    ASSERT_OK(uv_loop_close(&loop));
    tsrv_stop(&srv);
}
