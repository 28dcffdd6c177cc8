/*
 * test_gpu_full_proof.c - runs tkm's own code on the committed outputs of
 * `bench/gpu/csi-proof.sh --parts full` (bench/gpu/results-full/<run>/: a
 * torch.compile'd model with Triton's AND Inductor's caches carried by one tkm
 * volume, see bench/gpu/README.md and docs/inductor.md): for every run
 * directory, full/published-groups/ is exactly what
 * tkm_parts_groups_rewrite_to() makes of full/store-groups/ for the mount_path
 * in full/meta.txt, file for file, each under triton/ or inductor/ and naming
 * the mount path. A missing file fails the test.
 * What the recorded files say of each other (the store unchanged, fx.tsv's
 * counters, summary.json) is a results check, not a test:
 * bench/gpu/check-results.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <tkm/triton/cache.h>
#include <tkm/triton/parts.h>

#include "test.h"

#define MAX_RUNS 8

static size_t runs(char out[][1024])
{
    char dir[900];
    snprintf(dir, sizeof dir, "%s/bench/gpu/results-full", tkm_test_source_dir());
    size_t k = tkm_test_subdirs(dir, out, MAX_RUNS);
    ASSERT(k >= 1);
    return k;
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
