/*
 * test_gpu_full_proof.c - checks the committed outputs of
 * `bench/gpu/csi-proof.sh --parts full` (bench/gpu/results-full/<run>/: a
 * torch.compile'd model with Triton's AND Inductor's caches carried by one tkm
 * volume, see bench/gpu/README.md and docs/inductor.md) with tkm's own code, so
 * the recorded proof cannot say more than its files show. Every run directory:
 *   - full/store-before.sha256 == full/store-after.sha256, not empty, and the
 *     store holds both parts (triton/ and inductor/ files);
 *   - full/published-groups/ is exactly what tkm_parts_groups_rewrite_to() makes
 *     of full/store-groups/ for the mount_path in full/meta.txt;
 *   - fx.tsv (torch's counters per process): every cold run missed the FX graph
 *     cache, every warm-local and tkm-mounted run hit it with no miss and compiled
 *     no Triton kernel, the miss run exited 0 and missed;
 *   - runs.tsv: tkm-mounted runs wrote no cubin; summary.json's tkm/warm ratio
 *     is the ratio of runs.tsv's medians and its verdicts follow from it.
 * A missing file fails the test.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/parts.h>

#include "test.h"

#define MAX_RUNS 8
#define MAX_ROWS 64

static size_t runs(char out[][1024])
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/bench/gpu/results-full", tkm_test_source_dir());
    size_t k = tkm_test_subdirs(dir, out, MAX_RUNS);
    ASSERT(k >= 1);
    return k;
}

/* Splits a TSV file into rows of at most 12 fields; the header must start with head. */
struct tsv {
    char *text;
    char *f[MAX_ROWS][12];
    size_t n;
};

static void tsv_load(struct tsv *t, const char *path, const char *head)
{
    char *save = NULL;
    t->text = tkm_test_slurp(path, NULL);
    t->n = 0;
    ASSERT_EQ(strncmp(t->text, head, strlen(head)), 0);
    char *line = strtok_r(t->text, "\n", &save); /* the header */
    ASSERT_NOT_NULL(line);
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        ASSERT(t->n < MAX_ROWS);
        size_t k = 0;
        char *p = line;
        while (k < 12) {
            t->f[t->n][k++] = p;
            char *tab = strchr(p, '\t');
            if (!tab)
                break;
            *tab = '\0';
            p = tab + 1;
        }
        while (k < 12)
            t->f[t->n][k++] = "";
        t->n++;
    }
    ASSERT(t->n >= 1);
}

TEST(store_unchanged_and_holds_both_parts)
{
    char r[MAX_RUNS][1024], p[1200];
    size_t n = runs(r);
    for (size_t i = 0; i < n; i++) {
        size_t la, lb;
        snprintf(p, sizeof p, "%s/full/store-before.sha256", r[i]);
        char *a = tkm_test_slurp(p, &la);
        snprintf(p, sizeof p, "%s/full/store-after.sha256", r[i]);
        char *b = tkm_test_slurp(p, &lb);
        ASSERT(la > 0);
        ASSERT_UEQ(la, lb);
        ASSERT_MEMEQ(a, b, la);
        ASSERT_STRCONTAINS(a, "  ./triton/");
        ASSERT_STRCONTAINS(a, "  ./inductor/fxgraph/");
        ASSERT_STRCONTAINS(a, "  ./inductor/aotautograd/");
        free(a);
        free(b);
    }
}

/* Every file under dir (relative names), for comparing two trees. */
static void list_tree(const char *root, const char *rel, char names[][512], size_t *n)
{
    char d[1600];
    snprintf(d, sizeof d, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *dp = opendir(d);
    if (!dp)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", d, strerror(errno));
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        char r2[512], full[2200];
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(r2, sizeof r2, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, r2);
        ASSERT_OK(lstat(full, &st));
        if (S_ISDIR(st.st_mode)) {
            list_tree(root, r2, names, n);
        } else {
            ASSERT(*n < 512);
            snprintf(names[(*n)++], 512, "%s", r2);
        }
    }
    closedir(dp);
}

TEST(published_groups_are_the_parts_rewrite_for_mount_path)
{
    static char pub[512][512], mine[512][512];
    char r[MAX_RUNS][1024], p[1200], q[1200], mp[1024] = "";
    size_t n = runs(r);
    for (size_t i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/full/meta.txt", r[i]);
        char *meta = tkm_test_slurp(p, NULL), *l = strstr(meta, "mount_path ");
        ASSERT_NOT_NULL(l);
        sscanf(l + 11, "%1023s", mp);
        free(meta);
        ASSERT(mp[0] == '/');
        char out[1100];
        snprintf(out, sizeof out, "%s/rewritten", tkm_test_tmpdir());
        snprintf(p, sizeof p, "%s/full/store-groups", r[i]);
        struct tkm_triton_rewrite_stats st = {0};
        struct tkm_err err = {0};
        ASSERT_OK(tkm_parts_groups_rewrite_to(p, out, mp, &st, &err));
        ASSERT(st.groups >= 1);
        size_t np = 0, nm = 0;
        snprintf(q, sizeof q, "%s/full/published-groups", r[i]);
        list_tree(q, "", pub, &np);
        list_tree(out, "", mine, &nm);
        ASSERT_UEQ(np, nm);
        ASSERT_UEQ(np, st.groups);
        for (size_t k = 0; k < np; k++) {
            char a[2200], b[2200];
            size_t la, lb;
            ASSERT_EQ(strncmp(pub[k], "triton/", 7) == 0 || strncmp(pub[k], "inductor/", 9) == 0,
                      1);
            snprintf(a, sizeof a, "%s/%s", q, pub[k]);
            snprintf(b, sizeof b, "%s/%s", out, pub[k]);
            char *x = tkm_test_slurp(a, &la), *y = tkm_test_slurp(b, &lb);
            ASSERT_UEQ(la, lb);
            ASSERT_MEMEQ(x, y, la);
            ASSERT_STRCONTAINS(x, mp);
            free(x);
            free(y);
        }
    }
}

TEST(no_fx_miss_and_no_compile_through_tkm)
{
    char r[MAX_RUNS][1024], p[1200];
    size_t n = runs(r);
    for (size_t i = 0; i < n; i++) {
        struct tsv t;
        size_t cold = 0, warm = 0, tkm = 0, miss = 0;
        snprintf(p, sizeof p, "%s/fx.tsv", r[i]);
        tsv_load(&t, p, "part\trun\trc\tfx_hit\tfx_miss\taot_hit\taot_miss\tcompile_hits");
        for (size_t k = 0; k < t.n; k++) {
            char **f = t.f[k];
            long rc = strtol(f[2], NULL, 10), hit = strtol(f[3], NULL, 10);
            long fxm = strtol(f[4], NULL, 10), cm = strtol(f[8], NULL, 10);
            ASSERT_STREQ(f[0], "full");
            ASSERT_EQ(rc, 0);
            if (!strncmp(f[1], "cold-", 5)) {
                cold++;
                ASSERT(fxm > 0);
                ASSERT_EQ(hit, 0);
            } else if (!strncmp(f[1], "warm-", 5) || !strncmp(f[1], "tkm-", 4)) {
                f[1][0] == 'w' ? warm++ : tkm++;
                ASSERT(hit > 0);
                ASSERT_EQ(fxm, 0);
                ASSERT_EQ(cm, 0);
                ASSERT_STREQ(f[9], "-");
            } else {
                ASSERT_STREQ(f[1], "miss");
                miss++;
                ASSERT(fxm > 0);
            }
        }
        ASSERT(cold >= 1);
        ASSERT(warm >= 1);
        ASSERT_UEQ(tkm, warm);
        ASSERT_UEQ(miss, 1);
        free(t.text);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(struct tsv *t, const char *mode, long *max_cubins)
{
    double v[MAX_ROWS];
    size_t k = 0;
    *max_cubins = 0;
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->f[i][0], "full") && !strcmp(t->f[i][1], mode)) {
            v[k++] = strtod(t->f[i][4], NULL);
            long c = strtol(t->f[i][8], NULL, 10);
            *max_cubins = c > *max_cubins ? c : *max_cubins;
        }
    ASSERT(k >= 1);
    qsort(v, k, sizeof v[0], cmp_double);
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

TEST(summary_is_what_the_runs_say)
{
    char r[MAX_RUNS][1024], p[1200];
    size_t n = runs(r);
    for (size_t i = 0; i < n; i++) {
        struct tsv t;
        long cw, ct, cc;
        json_error_t je;
        snprintf(p, sizeof p, "%s/runs.tsv", r[i]);
        tsv_load(&t, p, "part\tmode\trep\trc\twall_s\tstartup_s\tkernels_s\tnew_files\tnew_cubins");
        double cold = median_of(&t, "cold", &cc), warm = median_of(&t, "warm-local", &cw);
        double tkm = median_of(&t, "tkm-mounted", &ct);
        ASSERT(cc > 0);
        ASSERT_EQ(cw, 0);
        ASSERT_EQ(ct, 0);
        ASSERT(cold > warm);
        snprintf(p, sizeof p, "%s/summary.json", r[i]);
        json_t *s = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
        if (!s)
            tkm_test_fail(__FILE__, __LINE__, "%s: %s", p, je.text);
        json_t *f = json_object_get(json_object_get(s, "parts"), "full");
        ASSERT_NOT_NULL(f);
        double ratio = json_real_value(json_object_get(f, "tkm_over_warm"));
        ASSERT(fabs(ratio - tkm / warm) < 0.0001);
        ASSERT_EQ(json_is_true(json_object_get(f, "within_5pct")), tkm <= 1.05 * warm);
        ASSERT(json_is_true(json_object_get(f, "tkm_no_fx_miss")));
        ASSERT(json_is_true(json_object_get(f, "tkm_no_triton_compile")));
        ASSERT(json_is_true(json_object_get(f, "store_unchanged")));
        json_decref(s);
        free(t.text);
    }
}
