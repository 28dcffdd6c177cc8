/* test_capture.c - tkmctl capture (cli/cmd_capture.c), run as the binary with a small shell
 * command as the workload: what it captures and records, and how it refuses and explains
 * (a failed command, nothing written, a cache dir it cannot read -- by root too: a path that
 * is a file, a FIFO or a symlink, special files inside --, a command that cannot be started,
 * Ctrl-C while the command runs and during the push), leaving no temporary directory behind
 * in every case. A push without credentials is tests/e2e/capture_registry.sh's (a real
 * registry that wants them). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tkm/oci/manifest.h>
#include <tkm/triton/image.h>
#include <tkm/util.h>

#include "test.h"
#include "tsrv.h"

/* <build>/X from this test binary (<build>/tests/unit_capture). */
static void build_path(const char *rel, char *out, size_t size)
{
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT(n > 0);
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    *strrchr(self, '/') = '\0';
    snprintf(out, size, "%s/%s", self, rel);
    ASSERT_OK(access(out, R_OK));
}

static char ctl[1100];

/* The test's TMPDIR for tkmctl (its private dirs go there), created once. */
static const char *tmp(void)
{
    static char t[1100];
    snprintf(t, sizeof t, "%s/tmp", tkm_test_tmpdir());
    mkdir(t, 0700);
    return t;
}

/* Runs tkmctl capture ARGS in the test's directory with TMPDIR=tmp() and no
 * NVML: its exit status; its output (stdout and stderr) in out.txt. */
static int capture(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int capture(const char *fmt, ...)
{
    char args[6000], full[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (!ctl[0])
        build_path("cli/tkmctl", ctl, sizeof ctl);
    snprintf(full, sizeof full, "cd '%s' && TMPDIR='%s' '%s' capture %s >out.txt 2>&1",
             tkm_test_tmpdir(), tmp(), ctl, args);
    int st = system(full);
    ASSERT(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static char *out_txt(void)
{
    static char buf[16384];
    char p[1200];
    snprintf(p, sizeof p, "%s/out.txt", tkm_test_tmpdir());
    FILE *f = fopen(p, "r");
    ASSERT_NOT_NULL(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Nothing of tkmctl's left in its TMPDIR, nor a staging dir next to the test's outputs. */
static void assert_nothing_left(void)
{
    const char *dirs[] = {tmp(), tkm_test_tmpdir()};
    for (size_t i = 0; i < 2; i++) {
        DIR *d = opendir(dirs[i]);
        struct dirent *e;
        ASSERT_NOT_NULL(d);
        while ((e = readdir(d)) != NULL)
            if (strstr(e->d_name, "tkmctl-") || strstr(e->d_name, ".capture-"))
                tkm_test_fail(__FILE__, __LINE__, "left behind: %s/%s", dirs[i], e->d_name);
        closedir(d);
    }
}

static int exists(const char *name)
{
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", tkm_test_tmpdir(), name);
    return stat(p, &st) == 0;
}

/* The workload: copies the sm90 fixture cache into $TRITON_CACHE_DIR. */
#define COPY_TRITON                                                                                \
    "sh -c 'cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/' '%s/triton-3.6-sm90-native/cache'"

TEST_TIMEOUT(captures_triton_with_gpu_and_versions, 60)
{
    char nvml[1200], conf[1200];
    build_path("fakenvml/libnvidia-ml.so.1", nvml, sizeof nvml);
    snprintf(conf, sizeof conf, "%s/nvml.conf", tkm_test_tmpdir());
    FILE *c = fopen(conf, "w");
    ASSERT_NOT_NULL(c);
    fputs("driver=580.159.04\ncuda=13000\n[gpu]\nname=NVIDIA H100 80GB HBM3\n"
          "uuid=GPU-11111111-2222-3333-4444-555555555555\ncc=9.0\nmem=85520809984\n"
          "busid=00000000:00:05.0\npcidevid=0x233010de\nmig=-1\n",
          c);
    fclose(c);
    ASSERT_OK(setenv("TKM_FAKE_NVML", conf, 1));
    char sys[1200];
    snprintf(sys, sizeof sys, "%s/sys", tkm_test_tmpdir());
    ASSERT_OK(mkdir(sys, 0755));
    ASSERT_EQ(capture("--output img --tag sm90 --sysfs-root sys --procfs-root sys --nvml-lib '%s' "
                      "-- " COPY_TRITON,
                      nvml, tkm_test_fixtures()),
              0);
    const char *o = out_txt();
    ASSERT_STRCONTAINS(o, "triton   TRITON_CACHE_DIR: 36 files");
    ASSERT_STRCONTAINS(o, "inductor TORCHINDUCTOR_CACHE_DIR: 0 files");
    ASSERT_STRCONTAINS(o, "4 kernel entries");
    ASSERT_STRCONTAINS(o, "layout img (tag sm90)");

    struct tkm_triton_image im;
    struct tkm_err e = {0};
    char layout[1200];
    snprintf(layout, sizeof layout, "%s/img", tkm_test_tmpdir());
    ASSERT_OK(tkm_triton_image_load_layout(&im, layout, "sm90", &e));
    ASSERT_STREQ(im.entry_count, "4");
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/gpu-name"),
                 "NVIDIA H100 80GB HBM3");
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/gpu-type"), "nvidia-h100");
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/gpu-arch"), "90");
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/driver-version"), "580.159.04");
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/cuda-driver-version"), "13.0");
    ASSERT_STREQ(tkm_oci_config_label(&im.config, "io.tkm.capture/triton-version"), "3.6.0");
    ASSERT_STRCONTAINS(tkm_oci_config_label(&im.config, "io.tkm.capture/tool"), "tkmctl capture");
    tkm_triton_image_release(&im);
    assert_nothing_left();
}

TEST_TIMEOUT(inductor_only_is_built_without_a_triton_part, 60)
{
    /* the workload fills only TORCHINDUCTOR_CACHE_DIR, renamed by --env-inductor */
    ASSERT_EQ(capture("--output img --tag v1 --add-variant --no-nvml --env-inductor MY_IND -- "
                      "sh -c 'tar xzf \"$0\" --strip-components=1 -C \"$MY_IND\"' "
                      "'%s/inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz'",
                      tkm_test_fixtures()),
              0);
    const char *o = out_txt();
    ASSERT_STRCONTAINS(o, "inductor MY_IND: 297 files");
    ASSERT_STRCONTAINS(o, "no Triton part, 297 files");
    ASSERT_STRCONTAINS(o, "inductor part: 3 FX graph + AOTAutograd entries");
    ASSERT_STRCONTAINS(o, "variant linux/");
    ASSERT_STRCONTAINS(o, "cuda sm90 warp 32");
    ASSERT_STRCONTAINS(o, "variant index sha256:");
    assert_nothing_left();
}

TEST_TIMEOUT(json_keeps_stdout_for_the_result, 60)
{
    /* the workload prints on stdout: with -o json that goes to stderr */
    char cmd[6000], p[1200];
    json_error_t je;
    if (!ctl[0])
        build_path("cli/tkmctl", ctl, sizeof ctl);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && TMPDIR='%s' '%s' capture --output img --no-nvml -o json -- sh -c "
             "'echo workload-says-hi; cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/' "
             "'%s/triton-3.6-sm90-native/cache' >res.json 2>out.txt",
             tkm_test_tmpdir(), tmp(), ctl, tkm_test_fixtures());
    ASSERT_EQ(system(cmd), 0);
    ASSERT_STRCONTAINS(out_txt(), "workload-says-hi");
    snprintf(p, sizeof p, "%s/res.json", tkm_test_tmpdir());
    json_t *j = json_load_file(p, 0, &je);
    if (!j)
        tkm_test_fail(__FILE__, __LINE__, "res.json: %s", je.text);
    ASSERT_EQ(json_integer_value(json_object_get(j, "commandStatus")), 0);
    ASSERT_EQ(json_integer_value(json_object_get(j, "entries")), 4);
    json_t *t = json_object_get(json_object_get(j, "captured"), "triton");
    ASSERT_STREQ(json_string_value(json_object_get(t, "env")), "TRITON_CACHE_DIR");
    ASSERT_EQ(json_integer_value(json_object_get(t, "files")), 36);
    ASSERT_NULL(json_object_get(j, "signCommand"));
    json_decref(j);
    assert_nothing_left();
}

TEST_TIMEOUT(a_failed_command_publishes_nothing, 60)
{
    /* it wrote a cache, then failed: its status is tkmctl's, nothing is built */
    ASSERT_EQ(capture("--output img -- sh -c 'cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/; exit 3' "
                      "'%s/triton-3.6-sm90-native/cache'",
                      tkm_test_fixtures()),
              3);
    ASSERT_STRCONTAINS(out_txt(), "the command failed (exit status 3): nothing built");
    ASSERT(!exists("img"));
    assert_nothing_left();
    /* told to, it publishes what it wrote */
    ASSERT_EQ(capture("--output img --allow-failure --no-nvml -- sh -c "
                      "'cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/; exit 3' "
                      "'%s/triton-3.6-sm90-native/cache'",
                      tkm_test_fixtures()),
              0);
    ASSERT_STRCONTAINS(out_txt(), "command exited with status 3; captured:");
    ASSERT(exists("img/index.json"));
    assert_nothing_left();
    /* a command that cannot be started: 127, as a shell says */
    ASSERT_EQ(capture("--output img2 -- /nonexistent/workload"), 127);
    ASSERT_STRCONTAINS(out_txt(), "cannot run /nonexistent/workload: No such file or directory");
    ASSERT(!exists("img2"));
    /* killed by a signal: 128+N, nothing built even with --allow-failure */
    ASSERT_EQ(capture("--output img2 --allow-failure -- sh -c 'cp -r \"$0\"/. "
                      "\"$TRITON_CACHE_DIR\"/; kill -TERM $$' '%s/triton-3.6-sm90-native/cache'",
                      tkm_test_fixtures()),
              128 + SIGTERM);
    ASSERT_STRCONTAINS(out_txt(), "interrupted (Terminated): nothing built");
    ASSERT(!exists("img2"));
    assert_nothing_left();
}

TEST_TIMEOUT(nothing_written_is_refused, 60)
{
    ASSERT_EQ(capture("--output img -- true"), 1);
    ASSERT_STRCONTAINS(out_txt(), "the command wrote nothing into TRITON_CACHE_DIR, "
                                  "TORCHINDUCTOR_CACHE_DIR or VLLM_CACHE_ROOT");
    ASSERT(!exists("img"));
    /* files, but no cache in any of them */
    ASSERT_EQ(capture("--output img -- sh -c 'echo x > \"$TRITON_CACHE_DIR/notes.txt\"'"), 1);
    ASSERT_STRCONTAINS(out_txt(), "TRITON_CACHE_DIR holds no Triton kernel: left out");
    ASSERT_STRCONTAINS(out_txt(), "nothing to publish");
    ASSERT(!exists("img"));
    assert_nothing_left();
}

/* "A cache dir it cannot read": the tests run as root, who reads a chmod 000 directory, so
 * the cases below are ones root cannot read either: the cache dir's path turned into a
 * regular file, a FIFO or a symbolic link (never followed: O_NOFOLLOW), and special files
 * inside a cache (a FIFO, a dangling symlink), which the image cannot hold. Each is refused
 * naming the variable or the path, with nothing built and nothing left behind. */
TEST_TIMEOUT(an_unreadable_cache_dir_is_refused, 60)
{
    static const struct {
        const char *script, *env, *why;
    } gone[] = {
        /* the command replaced its cache dir with a file, a FIFO, a symlink to a directory */
        {"rm -rf \"$TRITON_CACHE_DIR\"; echo x > \"$TRITON_CACHE_DIR\"", "TRITON_CACHE_DIR",
         "Not a directory; nothing built"},
        {"rm -rf \"$TORCHINDUCTOR_CACHE_DIR\"; mkfifo \"$TORCHINDUCTOR_CACHE_DIR\"",
         "TORCHINDUCTOR_CACHE_DIR", "Not a directory; nothing built"},
        {"rm -rf \"$VLLM_CACHE_ROOT\"; ln -s \"$TRITON_CACHE_DIR\" \"$VLLM_CACHE_ROOT\"",
         "VLLM_CACHE_ROOT", "; nothing built"},
    };
    char msg[256];
    for (size_t i = 0; i < TKM_ARRAY_SIZE(gone); i++) {
        /* the other parts hold a real cache: the refusal is not "nothing written" */
        ASSERT_EQ(capture("--output img -- sh -c 'cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/; %s' "
                          "'%s/triton-3.6-sm90-native/cache'",
                          gone[i].script, tkm_test_fixtures()),
                  1);
        snprintf(msg, sizeof msg, "cannot read what the command wrote into %s: ", gone[i].env);
        ASSERT_STRCONTAINS(out_txt(), msg);
        ASSERT_STRCONTAINS(out_txt(), gone[i].why);
        ASSERT(!exists("img"));
        assert_nothing_left();
    }
    /* special files in the Triton cache: refused by the build, naming the path */
    static const struct {
        const char *script, *why;
    } special[] = {
        {"mkfifo \"$TRITON_CACHE_DIR/p\"",
         "io.triton.cache/p is a special file: a Triton cache holds only directories and "
         "regular files"},
        {"ln -s /nonexistent/x \"$TRITON_CACHE_DIR/l\"",
         "io.triton.cache/l is a symbolic link: a Triton cache holds only directories and "
         "regular files"},
    };
    for (size_t i = 0; i < TKM_ARRAY_SIZE(special); i++) {
        ASSERT_EQ(capture("--output img --no-nvml -- sh -c 'cp -r \"$0\"/. "
                          "\"$TRITON_CACHE_DIR\"/; %s' '%s/triton-3.6-sm90-native/cache'",
                          special[i].script, tkm_test_fixtures()),
                  1);
        ASSERT_STRCONTAINS(out_txt(), special[i].why);
        ASSERT(!exists("img"));
        assert_nothing_left();
    }
    /* a directory without permissions: another user cannot read it, root reads a file
     * that is no cache; either way refused, and the directory removed afterwards */
    int st = capture("--output img -- sh -c 'mkdir \"$VLLM_CACHE_ROOT/x\"; touch "
                     "\"$VLLM_CACHE_ROOT/x/f\"; chmod 000 \"$VLLM_CACHE_ROOT/x\"'");
    ASSERT_EQ(st, 1);
    ASSERT_STRCONTAINS(out_txt(), geteuid() != 0
                                      ? "cannot read what the command wrote into VLLM_CACHE_ROOT: "
                                      : "VLLM_CACHE_ROOT holds no torch.compile cache hash "
                                        "directory: left out");
    ASSERT(!exists("img"));
    assert_nothing_left();
}

static int file_written(void *name)
{
    return exists(name);
}

/* Starts tkmctl capture FLAG TARGET --no-nvml -- sh -c SCRIPT ARG0 (TMPDIR=tmp(), its
 * stderr into out.txt) in the test's directory, waits (polling, bounded) until ready(data),
 * sends sig to tkmctl: its exit status. */
static int interrupt_when(const char *flag, const char *target, const char *script,
                          const char *arg0, int (*ready)(void *), void *data, int sig)
{
    if (!ctl[0])
        build_path("cli/tkmctl", ctl, sizeof ctl);
    ASSERT_OK(chdir(tkm_test_tmpdir()));
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        setenv("TMPDIR", tmp(), 1);
        if (!freopen("out.txt", "w", stderr))
            _exit(98);
        execl(ctl, ctl, "capture", flag, target, "--no-nvml", "--", "sh", "-c", script, arg0,
              (char *)NULL);
        _exit(99);
    }
    for (unsigned i = 0; i < 3000u * tkm_test_timeout_scale() && !ready(data); i++)
        usleep(10000);
    ASSERT(ready(data));
    ASSERT_OK(kill(pid, sig));
    int st;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The same with --output img, once the script wrote "ready". */
static int interrupt(const char *script, const char *arg0, int sig)
{
    return interrupt_when("--output", "img", script, arg0, file_written, (void *)"ready", sig);
}

TEST_TIMEOUT(sigint_reaches_the_command_and_leaves_nothing, 60)
{
    char fx[1200];
    snprintf(fx, sizeof fx, "%s/triton-3.6-sm90-native/cache", tkm_test_fixtures());
    /* writes its cache, says it is ready, waits; on SIGINT notes it and exits 7 */
    ASSERT_EQ(interrupt("trap 'echo got-int > got; exit 7' INT; cp -r \"$0\"/. "
                        "\"$TRITON_CACHE_DIR\"/; echo > ready; while :; do sleep 0.05; done",
                        fx, SIGINT),
              7);          /* the command's status */
    ASSERT(exists("got")); /* the command got the SIGINT */
    ASSERT(!exists("img"));
    assert_nothing_left();
}

TEST_TIMEOUT(sigterm_to_a_command_that_ignores_nothing, 60)
{
    ASSERT_EQ(
        interrupt("echo x > \"$TRITON_CACHE_DIR/f\"; echo > ready; exec sleep 60", "sh", SIGTERM),
        128 + SIGTERM);
    ASSERT(!exists("img"));
    assert_nothing_left();
}

TEST_TIMEOUT(ctrl_c_on_a_terminal, 60)
{
    /* on a terminal the command stays in tkmctl's group: it reads the terminal, a typed
     * Ctrl-C reaches it directly, and tkmctl (which got it too) builds nothing even though
     * the command's trap exits 0 */
    char tmpd[1200];
    if (!ctl[0])
        build_path("cli/tkmctl", ctl, sizeof ctl);
    snprintf(tmpd, sizeof tmpd, "%s/tmp", tkm_test_tmpdir());
    mkdir(tmpd, 0700);
    char cmd[5000];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && python3 '%s/tests/unit/data/capture/pty_ctrl_c.py' '%s' "
             "'%s/triton-3.6-sm90-native/cache' '%s' >out.txt 2>&1",
             tkm_test_tmpdir(), tkm_test_source_dir(), ctl, tkm_test_fixtures(), tkm_test_tmpdir());
    ASSERT_EQ(system(cmd), 0);
    const char *o = out_txt();
    ASSERT_STRCONTAINS(o, "READ hello");
    ASSERT_STRCONTAINS(o, "Interrupt: the command got it from the terminal");
    ASSERT_STRCONTAINS(o, "interrupted (Interrupt): nothing built");
    ASSERT_STRCONTAINS(o, "status 130");
    ASSERT(exists("got"));
    ASSERT(!exists("img"));
    assert_nothing_left();
}

TEST(usage_errors)
{
    ASSERT_EQ(capture("-- true"), 2);
    ASSERT_STRCONTAINS(out_txt(), "need --output DIR and/or --push REF");
    ASSERT_EQ(capture("--output img"), 2);
    ASSERT_STRCONTAINS(out_txt(), "need the command after --");
    ASSERT_EQ(capture("--output img --sign-key k -- true"), 2);
    ASSERT_STRCONTAINS(out_txt(), "--sign-key signs what --push pushed");
    ASSERT_EQ(capture("--push 127.0.0.1:1/x:v1 --sign-key /nonexistent.key -- true"), 2);
    ASSERT_STRCONTAINS(out_txt(), "--sign-key /nonexistent.key: No such file or directory");
    ASSERT_EQ(capture("--output img --env-triton A=B -- true"), 2);
    ASSERT_STRCONTAINS(out_txt(), "'A=B' is not an environment variable name");
    ASSERT(!exists("img"));
    assert_nothing_left();
}

/* Ctrl-C after the command, during tkmctl's own push (a registry that answers every request
 * slowly with 503): the push ends (it does not take the cancel flag: it runs to its error,
 * said), the staged image and the cache dirs go: nothing is left behind. */
static int heard(void *srv)
{
    return tsrv_nreqs(srv) >= 1;
}

TEST_TIMEOUT(sigint_during_the_push_leaves_nothing, 60)
{
    static const struct tsrv_reply busy[] = {{503, NULL, "busy", 200}};
    struct tsrv s;
    char ref[128], fx[1200];
    tsrv_init(&s);
    int port = tsrv_start(&s, busy, 1);
    ASSERT(port > 0);
    snprintf(ref, sizeof ref, "127.0.0.1:%d/e2e/c:v1", port);
    snprintf(fx, sizeof fx, "%s/triton-3.6-sm90-native/cache", tkm_test_fixtures());
    /* the command is done and the image built once the registry hears from tkmctl */
    int rc = interrupt_when("--push", ref, "cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/", fx, heard, &s,
                            SIGINT);
    ASSERT(rc != 0);
    ASSERT_STRCONTAINS(out_txt(), "tkmctl capture: push ");
    tsrv_stop(&s);
    assert_nothing_left();
}
