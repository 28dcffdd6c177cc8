/*
 * test_gpu_proof.c - runs tkm's own code on the committed outputs of
 * bench/gpu/csi-proof.sh (bench/gpu/results/<run>/, see bench/gpu/README.md):
 * for every run directory and part, the group files the pod saw
 * (published-groups/) are exactly what tkm_triton_groups_rewrite_to() makes of
 * the store's (store-groups/) for the mountPath in meta.txt, every child path
 * names mountPath/<kernel dir>/<file> and that file is in the store
 * (store-before.sha256). A missing file or directory fails the test.
 * What the recorded files say of each other (the store unchanged, the runs'
 * verdicts, summary.json) is a results check, not a test:
 * bench/gpu/check-results.sh.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <tkm/triton/cache.h>

#include "test.h"

#define MAX_RUNS  16
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
