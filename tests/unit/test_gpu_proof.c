/*
 * test_gpu_proof.c - runs tkm's own code on the committed outputs of
 * bench/gpu/csi-proof.sh (bench/gpu/results/<run>/, see bench/gpu/README.md):
 * for every run directory and part, the group files the pod saw
 * (published-groups/) are exactly what tkm_triton_groups_rewrite_to() makes of
 * the store's (store-groups/) for the mountPath in meta.txt, every child path
 * names mountPath/<kernel dir>/<file> and that file is in the store
 * (store-before.sha256). A missing file or directory fails the test.
 * The same for every run of bench/gpu/variants-proof.sh
 * (bench/gpu/results-variants/<run>/, one flat directory), and there tkm's
 * variant code on the recorded index blobs: tkm_variants_parse() of
 * index-multi.json gives the two variants tkmctl built, tkm_variant_pick() for
 * the GPU recorded there (check-multi.json) picks the variant tkmctl extract
 * extracted (extract-multi.json), which is the native build (build-native.json),
 * and for index-only80.json answers NoVariant.
 * What the recorded files say of each other (the store unchanged, the runs'
 * verdicts, summary.json) is a results check, not a test:
 * bench/gpu/check-results.sh.
 * For bench/gpu/capture-proof.sh (bench/gpu/results-capture/<run>/) this test
 * runs that check (its files exist and agree, summary.txt is what
 * capture_summary.py prints and its verdicts hold), and tkm's kernel-name
 * grammar on the names tkm-csi sent at unpublish (releases.txt).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <tkm/gpu/probe.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/variants.h>
#include <tkm/util.h>

#include "test.h"

#define MAX_RUNS  16
#define MAX_PARTS 4

/* The run directories (sorted) under bench/gpu/<sub>, at least one. */
static size_t runs_in(const char *sub, char out[][1024])
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/bench/gpu/%s", tkm_test_source_dir(), sub);
    size_t k = tkm_test_subdirs(dir, out, MAX_RUNS);
    ASSERT(k >= 1);
    return k;
}

static size_t runs(char out[][1024])
{
    return runs_in("results", out);
}

static json_t *summary(const char *run)
{
    char p[1200];
    json_error_t je;
    snprintf(p, sizeof p, "%s/summary.json", run);
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", p, je.text);
    ASSERT(json_object_size(json_object_get(j, "parts")) >= 1);
    return j;
}

/* The parts a run recorded (summary.json's "parts"). */
static size_t parts(const char *run, char out[][64])
{
    json_t *j = summary(run);
    const char *k;
    json_t *v;
    size_t n = 0;
    json_object_foreach(json_object_get(j, "parts"), k, v)
    {
        ASSERT(n < MAX_PARTS);
        snprintf(out[n++], 64, "%s", k);
    }
    json_decref(j);
    return n;
}

/* meta.txt's "mount_path P" line (dir: a part of a run, or a flat run). */
static void mount_path(const char *dir, char *mp, size_t cap)
{
    char p[1200], line[4096];
    snprintf(p, sizeof p, "%s/meta.txt", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", p, strerror(errno));
    mp[0] = '\0';
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "mount_path /", 12) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(mp, cap, "%s", line + 11);
        }
    fclose(f);
    ASSERT(mp[0] == '/');
}

/* dir's published-groups/ is what tkm's rewrite makes of its store-groups/ for
 * its mount path; every child is mountPath/<kernel dir>/<file>, in the store
 * (store-before.sha256); every group the store holds was published. tag names
 * the scratch output. */
static void check_published(const char *dir, const char *tag)
{
    char mp[1024], sg[1200], cmd[3000], line[2048], out[1200], sums[1200];
    struct tkm_triton_rewrite_stats st = {0};
    struct tkm_err e = {0};
    mount_path(dir, mp, sizeof mp);
    snprintf(sg, sizeof sg, "%s/store-groups", dir);
    snprintf(out, sizeof out, "%s/rewritten-%s", tkm_test_tmpdir(), tag);
    ASSERT_OK(tkm_triton_groups_rewrite_to(sg, out, mp, &st, &e));
    ASSERT(st.groups >= 1);
    snprintf(sums, sizeof sums, "%s/store-before.sha256", dir);
    char *store = tkm_test_slurp(sums, NULL);
    snprintf(cmd, sizeof cmd, "cd '%s/published-groups' && find . -type f | sort", dir);
    FILE *f = popen(cmd, "r");
    ASSERT_NOT_NULL(f);
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        char pub[4000], mine[4000], want[4000];
        size_t lp, lm;
        line[strcspn(line, "\n")] = '\0';
        snprintf(pub, sizeof pub, "%s/published-groups/%s", dir, line + 2);
        snprintf(mine, sizeof mine, "%s/%s", out, line + 2);
        char *x = tkm_test_slurp(pub, &lp), *y = tkm_test_slurp(mine, &lm);
        ASSERT_UEQ(lp, lm); /* the pod saw what tkm's rewrite makes of the store's */
        ASSERT_MEMEQ(x, y, lp);
        struct tkm_triton_group g;
        ASSERT_OK(tkm_triton_group_parse(&g, x, lp, pub, &e));
        ASSERT_EQ(g.is_list, 0);
        ASSERT(g.n >= 1);
        char *kd = strdup(line + 2);
        ASSERT_NOT_NULL(kd);
        *strchr(kd, '/') = '\0';
        for (size_t c = 0; c < g.n; c++) {
            snprintf(want, sizeof want, "%s/%s/%s", mp, kd, g.names[c]);
            ASSERT_STREQ(g.paths[c], want);
            snprintf(want, sizeof want, "  ./%s/%s\n", kd, g.names[c]);
            ASSERT(strstr(store, want) != NULL); /* the child is in the store */
        }
        free(kd);
        tkm_triton_group_release(&g);
        free(x);
        free(y);
        n++;
    }
    pclose(f);
    ASSERT_UEQ(n, st.groups); /* every group the store holds was published */
    free(store);
}

TEST(published_groups_are_the_rewrite_for_mount_path)
{
    char r[MAX_RUNS][1024], p[MAX_PARTS][64], dir[1200], tag[64];
    size_t nr = runs(r);
    for (size_t i = 0; i < nr; i++) {
        size_t np = parts(r[i], p);
        for (size_t j = 0; j < np; j++) {
            snprintf(dir, sizeof dir, "%s/%s", r[i], p[j]);
            snprintf(tag, sizeof tag, "%zu-%zu", i, j);
            check_published(dir, tag);
        }
    }
}

/* ---- bench/gpu/variants-proof.sh (results-variants/<run>/) ------------------------------ */

TEST(variants_published_groups_are_the_rewrite_for_mount_path)
{
    char r[MAX_RUNS][1024], tag[64];
    size_t nr = runs_in("results-variants", r);
    for (size_t i = 0; i < nr; i++) {
        snprintf(tag, sizeof tag, "variants-%zu", i);
        check_published(r[i], tag);
    }
}

static json_t *run_json(const char *run, const char *name)
{
    char p[1200];
    json_error_t je;
    snprintf(p, sizeof p, "%s/%s", run, name);
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", p, je.text);
    return j;
}

/* The variant set tkm parses from the run's recorded index blob index-<tag>.json. */
static void run_index(const char *run, const char *tag, struct tkm_variant_set *s)
{
    char p[1200];
    size_t n;
    struct tkm_err e = {0};
    snprintf(p, sizeof p, "%s/index-%s.json", run, tag);
    char *raw = tkm_test_slurp(p, &n);
    ASSERT_EQ(tkm_variants_is_index(raw, n), 1);
    ASSERT_OK(tkm_variants_parse(raw, n, NULL, p, s, &e));
    free(raw);
}

/* The GPU the run's tkmctl check saw (check-multi.json results[0].gpu). */
static void run_gpu(const char *run, struct tkm_gpu *g)
{
    json_t *j = run_json(run, "check-multi.json");
    json_t *x = json_object_get(json_array_get(json_object_get(j, "results"), 0), "gpu");
    ASSERT_NOT_NULL(x);
    memset(g, 0, sizeof *g);
    g->index = (int)json_integer_value(json_object_get(x, "index"));
    snprintf(g->vendor, sizeof g->vendor, "%s", json_string_value(json_object_get(x, "vendor")));
    snprintf(g->backend, sizeof g->backend, "%s", json_string_value(json_object_get(x, "backend")));
    snprintf(g->name, sizeof g->name, "%s", json_string_value(json_object_get(x, "name")));
    snprintf(g->gpu_type, sizeof g->gpu_type, "%s",
             json_string_value(json_object_get(x, "gpuType")));
    snprintf(g->arch, sizeof g->arch, "%s", json_string_value(json_object_get(x, "arch")));
    g->warp_size = (int)json_integer_value(json_object_get(x, "warpSize"));
    g->usable = 1;
    ASSERT_STREQ(g->backend, "cuda");
    ASSERT(g->arch[0] && g->warp_size == 32);
    json_decref(j);
}

TEST(variants_pick_is_the_recorded_one)
{
    char r[MAX_RUNS][1024], msg[1024];
    size_t nr = runs_in("results-variants", r);
    for (size_t i = 0; i < nr; i++) {
        struct tkm_variant_set multi = {0}, only80 = {0};
        struct tkm_gpu g;
        const char *reason = NULL;
        size_t idx = 99;
        run_index(r[i], "multi", &multi);
        run_index(r[i], "only80", &only80);
        run_gpu(r[i], &g);
        json_t *nat = run_json(r[i], "build-native.json"),
               *ex = run_json(r[i], "extract-multi.json");
        const char *native = json_string_value(json_object_get(nat, "manifest"));
        const char *extracted =
            json_string_value(json_object_get(json_object_get(ex, "variant"), "digest"));
        ASSERT_NOT_NULL(native);
        ASSERT_NOT_NULL(extracted);
        /* the index tkmctl built: this GPU's target and sm80 */
        ASSERT_EQ(multi.from_index, 1);
        ASSERT_UEQ(multi.n, 2);
        /* on the platform the variants were built on (the device's) */
        ASSERT_OK(
            tkm_variant_pick(&multi, &g, multi.v[0].architecture, &idx, &reason, msg, sizeof msg));
        ASSERT(idx < multi.n);
        ASSERT_STREQ(multi.v[idx].digest, native);    /* the GPU's own build */
        ASSERT_STREQ(multi.v[idx].digest, extracted); /* what tkmctl extract took */
        ASSERT_STREQ(multi.v[idx].arch, g.arch);
        ASSERT_STREQ(multi.v[1 - idx].arch, "80");
        /* the sm80-only index: no variant for this GPU */
        ASSERT_UEQ(only80.n, 1);
        ASSERT_STREQ(only80.v[0].arch, "80");
        ASSERT_EQ(
            tkm_variant_pick(&only80, &g, only80.v[0].architecture, &idx, &reason, msg, sizeof msg),
            -ENOENT);
        ASSERT_STREQ(reason, "NoVariant");
        json_decref(nat);
        json_decref(ex);
        tkm_variant_set_release(&multi);
        tkm_variant_set_release(&only80);
    }
}

/* ---- bench/gpu/capture-proof.sh (results-capture/<run>/) -------------------------------- */

TEST(capture_results_hold)
{
    static const char *const files[] = {
        "README.md",   "capture.txt",       "extract.json",         "inspect.json",
        "runs.tsv",    "releases.txt",      "store-before.sha256",  "store-after.sha256",
        "summary.txt", "logs/capture.json", "logs/upper-pod-1.txt", "logs/upper-pod-miss.txt",
    };
    char r[MAX_RUNS][1024], p[1200], cmd[3000];
    struct stat st;
    size_t nr = runs_in("results-capture", r);
    for (size_t i = 0; i < nr; i++) {
        for (size_t k = 0; k < TKM_ARRAY_SIZE(files); k++) {
            snprintf(p, sizeof p, "%s/%s", r[i], files[k]);
            if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
                tkm_test_fail(__FILE__, __LINE__, "%s: missing", p);
        }
        /* the project's results check, on this run alone */
        snprintf(cmd, sizeof cmd, "bash '%s/bench/gpu/check-results.sh' '%s' >&2",
                 tkm_test_source_dir(), r[i]);
        ASSERT_EQ(system(cmd), 0);
        /* every name tkm-csi sent is one tkm_kernel_name_ok() takes, at most 32 (the
         * proto's cap), distinct; the run that compiled sent some */
        snprintf(p, sizeof p, "%s/releases.txt", r[i]);
        char *rel = tkm_test_slurp(p, NULL), *save = NULL;
        size_t named = 0;
        for (char *line = strtok_r(rel, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char *n = strstr(line, " names=");
            ASSERT_NOT_NULL(n);
            n += 7;
            size_t count = 0;
            for (char *q = n; *q;) {
                size_t len = strcspn(q, ",");
                ASSERT_EQ(tkm_kernel_name_ok(q, len), 1);
                /* not the same name twice */
                for (char *o = n; o < q; o += strcspn(o, ",") + 1)
                    ASSERT(!(strcspn(o, ",") == len && memcmp(o, q, len) == 0));
                count++;
                q += len + (q[len] == ',');
            }
            ASSERT(count <= 32);
            named += count;
        }
        ASSERT(named >= 1);
        free(rel);
    }
}
