/*
 * test_gpu_proof.c - checks the committed outputs of bench/gpu/csi-proof.sh
 * (bench/gpu/results/<run>/, see bench/gpu/README.md) with tkm's own code, so a
 * recorded proof cannot say more than its files show. Every run directory:
 *   - the store's sha256 list before == after, and not empty;
 *   - the group files the pod saw (published-groups/) are exactly what
 *     tkm_triton_groups_rewrite_to() makes of the store's (store-groups/) for the
 *     mountPath in meta.txt, every child path names mountPath/<kernel dir>/<file>
 *     and that file is in the store;
 *   - runs.tsv: every run exited 0 (but the strict miss), cold runs compiled,
 *     tkm-mounted runs wrote no cubin, the miss wrote at least one into the scratch
 *     (miss-upper.txt, files that are not in the store);
 *   - summary.json's medians and verdicts are those of runs.tsv.
 * A missing file or directory fails the test.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <tkm/triton/cache.h>

#include "test.h"

#define MAX_RUNS  16
#define MAX_ROWS  256
#define MAX_PARTS 4

/* The run directories (sorted), at least one. */
static size_t runs(char out[][1024])
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/bench/gpu/results", tkm_test_source_dir());
    size_t k = tkm_test_subdirs(dir, out, MAX_RUNS);
    ASSERT(k >= 1);
    return k;
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

TEST(store_unchanged)
{
    char r[MAX_RUNS][1024], p[MAX_PARTS][64], a[1200], b[1200];
    size_t nr = runs(r);
    for (size_t i = 0; i < nr; i++) {
        size_t np = parts(r[i], p);
        for (size_t j = 0; j < np; j++) {
            size_t la, lb;
            snprintf(a, sizeof a, "%s/%s/store-before.sha256", r[i], p[j]);
            snprintf(b, sizeof b, "%s/%s/store-after.sha256", r[i], p[j]);
            char *x = tkm_test_slurp(a, &la), *y = tkm_test_slurp(b, &lb);
            ASSERT(la > 0);
            ASSERT_UEQ(la, lb);
            ASSERT_MEMEQ(x, y, la);
            ASSERT_EQ(strncmp(x + 64, "  ./", 4), 0);
            free(x);
            free(y);
        }
    }
}

/* meta.txt's "mount_path P" line. */
static void mount_path(const char *run, const char *part, char *mp, size_t cap)
{
    char p[1200], line[4096];
    snprintf(p, sizeof p, "%s/%s/meta.txt", run, part);
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

TEST(published_groups_are_the_rewrite_for_mount_path)
{
    char r[MAX_RUNS][1024], p[MAX_PARTS][64], mp[1024], sg[1200], cmd[3000], line[2048];
    size_t nr = runs(r);
    for (size_t i = 0; i < nr; i++) {
        size_t np = parts(r[i], p);
        for (size_t j = 0; j < np; j++) {
            struct tkm_triton_rewrite_stats st = {0};
            struct tkm_err e = {0};
            char out[1200], sums[1200];
            mount_path(r[i], p[j], mp, sizeof mp);
            snprintf(sg, sizeof sg, "%s/%s/store-groups", r[i], p[j]);
            snprintf(out, sizeof out, "%s/rewritten-%zu-%zu", tkm_test_tmpdir(), i, j);
            ASSERT_OK(tkm_triton_groups_rewrite_to(sg, out, mp, &st, &e));
            ASSERT(st.groups >= 1);
            snprintf(sums, sizeof sums, "%s/%s/store-before.sha256", r[i], p[j]);
            char *store = tkm_test_slurp(sums, NULL);
            snprintf(cmd, sizeof cmd, "cd '%s/%s/published-groups' && find . -type f | sort", r[i],
                     p[j]);
            FILE *f = popen(cmd, "r");
            ASSERT_NOT_NULL(f);
            size_t n = 0;
            while (fgets(line, sizeof line, f)) {
                char pub[4000], mine[4000], want[4000];
                size_t lp, lm;
                line[strcspn(line, "\n")] = '\0';
                snprintf(pub, sizeof pub, "%s/%s/published-groups/%s", r[i], p[j], line + 2);
                snprintf(mine, sizeof mine, "%s/%s", out, line + 2);
                char *x = tkm_test_slurp(pub, &lp), *y = tkm_test_slurp(mine, &lm);
                ASSERT_UEQ(lp, lm); /* the pod saw what tkm's rewrite makes of the store's */
                ASSERT_MEMEQ(x, y, lp);
                struct tkm_triton_group g;
                ASSERT_OK(tkm_triton_group_parse(&g, x, lp, pub, &e));
                ASSERT_EQ(g.is_list, 0);
                ASSERT(g.n >= 1);
                char *dir = strdup(line + 2);
                ASSERT_NOT_NULL(dir);
                *strchr(dir, '/') = '\0';
                for (size_t c = 0; c < g.n; c++) {
                    snprintf(want, sizeof want, "%s/%s/%s", mp, dir, g.names[c]);
                    ASSERT_STREQ(g.paths[c], want);
                    snprintf(want, sizeof want, "  ./%s/%s\n", dir, g.names[c]);
                    ASSERT(strstr(store, want) != NULL); /* the child is in the store */
                }
                free(dir);
                tkm_triton_group_release(&g);
                free(x);
                free(y);
                n++;
            }
            pclose(f);
            ASSERT_UEQ(n, st.groups); /* every group the store holds was published */
            free(store);
        }
    }
}

struct row {
    char part[64], mode[32];
    int rc;
    double wall;
    long new_cubins;
};

static size_t rows(const char *run, struct row *out)
{
    char p[1200], line[1024];
    snprintf(p, sizeof p, "%s/runs.tsv", run);
    FILE *f = fopen(p, "r");
    if (!f)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", p, strerror(errno));
    ASSERT_NOT_NULL(fgets(line, sizeof line, f));
    ASSERT_EQ(strncmp(line,
                      "part\tmode\trep\trc\twall_s\tstartup_s\tkernels_s\tnew_files\tnew_cubins",
                      62),
              0);
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        char *fld[12] = {0}, *save = NULL, *s = line;
        size_t k = 0;
        line[strcspn(line, "\n")] = '\0';
        for (char *t = strtok_r(s, "\t", &save); t && k < 12; t = strtok_r(NULL, "\t", &save))
            fld[k++] = t;
        ASSERT(k >= 9);
        ASSERT(n < MAX_ROWS);
        snprintf(out[n].part, sizeof out[n].part, "%s", fld[0]);
        snprintf(out[n].mode, sizeof out[n].mode, "%s", fld[1]);
        out[n].rc = (int)strtol(fld[3], NULL, 10);
        out[n].wall = strtod(fld[4], NULL);
        out[n].new_cubins = strtol(fld[8], NULL, 10);
        n++;
    }
    fclose(f);
    ASSERT(n >= 1);
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the wall times of part's mode rows (Python's statistics.median). */
static double median(const struct row *rw, size_t n, const char *part, const char *mode,
                     size_t *count)
{
    double v[MAX_ROWS];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rw[i].part, part) == 0 && strcmp(rw[i].mode, mode) == 0)
            v[k++] = rw[i].wall;
    *count = k;
    if (k == 0)
        return NAN;
    qsort(v, k, sizeof v[0], cmp_double);
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

TEST(no_kernel_compiled_and_the_miss_went_to_the_scratch)
{
    struct row *rw = calloc(MAX_ROWS, sizeof *rw);
    ASSERT_NOT_NULL(rw);
    char r[MAX_RUNS][1024], p[MAX_PARTS][64];
    size_t nr = runs(r);
    for (size_t i = 0; i < nr; i++) {
        size_t n = rows(r[i], rw), np = parts(r[i], p);
        for (size_t j = 0; j < np; j++) {
            size_t cold = 0, tkm = 0, miss = 0;
            for (size_t k = 0; k < n; k++) {
                if (strcmp(rw[k].part, p[j]) != 0)
                    continue;
                if (strcmp(rw[k].mode, "strict-miss") != 0)
                    ASSERT_EQ(rw[k].rc, 0);
                if (strcmp(rw[k].mode, "cold") == 0) {
                    ASSERT(rw[k].new_cubins >= 1);
                    cold++;
                } else if (strcmp(rw[k].mode, "tkm-mounted") == 0 ||
                           strcmp(rw[k].mode, "warm-local") == 0) {
                    ASSERT_EQ(rw[k].new_cubins, 0);
                    tkm += strcmp(rw[k].mode, "tkm-mounted") == 0;
                } else if (strcmp(rw[k].mode, "tkm-miss") == 0) {
                    ASSERT(rw[k].new_cubins >= 1);
                    miss++;
                }
            }
            ASSERT(cold >= 1);
            ASSERT(tkm >= 1);
            ASSERT_EQ(miss, 1);
            /* The miss's files: at least one cubin, none of them a store file. */
            char path[1200], line[2048];
            snprintf(path, sizeof path, "%s/%s/store-before.sha256", r[i], p[j]);
            char *store = tkm_test_slurp(path, NULL);
            snprintf(path, sizeof path, "%s/%s/miss-upper.txt", r[i], p[j]);
            FILE *f = fopen(path, "r");
            if (!f)
                tkm_test_fail(__FILE__, __LINE__, "%s: %s", path, strerror(errno));
            size_t cubins = 0;
            while (fgets(line, sizeof line, f)) {
                char want[2100];
                line[strcspn(line, "\n")] = '\0';
                size_t l = strlen(line);
                cubins += l > 6 && strcmp(line + l - 6, ".cubin") == 0;
                snprintf(want, sizeof want, "  %s\n", line);
                ASSERT(strstr(store, want) == NULL);
            }
            fclose(f);
            free(store);
            ASSERT(cubins >= 1);
        }
    }
    free(rw);
}

TEST(summary_is_what_the_runs_say)
{
    struct row *rw = calloc(MAX_ROWS, sizeof *rw);
    ASSERT_NOT_NULL(rw);
    char r[MAX_RUNS][1024];
    const char *modes[] = {"cold", "warm-local", "tkm-mounted"};
    size_t nr = runs(r);
    for (size_t i = 0; i < nr; i++) {
        size_t n = rows(r[i], rw);
        json_t *s = summary(r[i]);
        const char *part;
        json_t *pj;
        json_object_foreach(json_object_get(s, "parts"), part, pj)
        {
            double med[3];
            for (size_t m = 0; m < 3; m++) {
                size_t cnt;
                json_t *mj = json_object_get(pj, modes[m]);
                ASSERT_NOT_NULL(mj);
                med[m] = median(rw, n, part, modes[m], &cnt);
                ASSERT(cnt >= 1);
                ASSERT_EQ((long long)json_integer_value(json_object_get(mj, "n")), (long long)cnt);
                ASSERT(fabs(json_real_value(json_object_get(mj, "wall_s")) - med[m]) < 0.0006);
            }
            ASSERT_EQ(json_is_true(json_object_get(pj, "within_5pct")), med[2] <= 1.05 * med[1]);
            ASSERT(json_is_true(json_object_get(pj, "store_unchanged")));
            ASSERT(json_is_true(json_object_get(pj, "tkm_no_new_cubins")));
            ASSERT(json_is_true(json_object_get(pj, "miss_ok")));
        }
        json_decref(s);
    }
    free(rw);
}
