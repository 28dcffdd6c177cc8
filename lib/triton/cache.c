/*
 * triton/cache.c - scanning a Triton cache directory and its summary.
 */
#include <tkm/triton/cache.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/util.h>

#include "triton/pathf-int.h"

int tkm_kernel_name_ok(const char *s, size_t len)
{
    if (!s || len == 0 || len > TKM_KERNEL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* Reads at most n bytes from the start of a regular file (a PTX or ELF header). */
static int read_head(const char *path, size_t n, struct tkm_buf *b)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
    struct stat st;
    tkm_buf_init(b, n);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (rc = tkm_buf_grow(b, n)) != 0) {
        close(fd);
        return rc ? rc : -EINVAL;
    }
    while (b->len < n) {
        ssize_t r = read(fd, b->data + b->len, n - b->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        b->len += (size_t)r;
    }
    b->data[b->len] = '\0';
    close(fd);
    return 0;
}

/* The next entry of d (a directory at path) other than ".", ".." and
 * Triton's tmp.pid_* leftovers, with its path and lstat: 1; 0 at the end;
 * < 0 with err. */
static int next_entry(DIR *d, const char *path, struct dirent **de, char p[PATH_MAX],
                      struct stat *st, struct tkm_err *err)
{
    while ((*de = readdir(d))) {
        const char *n = (*de)->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || tkm_triton_is_tmp_name(n))
            continue;
        if (tkm_pathf(p, PATH_MAX, "%s/%s", path, n) != 0)
            return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", path, n);
        if (lstat(p, st) != 0)
            return tkm_err_set(err, -errno, "%s: %s", p, strerror(errno));
        return 1;
    }
    return 0;
}

/* Sum of regular file sizes below path (tmp.pid_* skipped, links not followed). */
static int tree_size(const char *path, int depth, uint64_t *total, struct tkm_err *err)
{
    if (depth > 16)
        return tkm_err_set(err, -ELOOP, "%s: directories nested too deep", path);
    DIR *d = opendir(path);
    struct dirent *de;
    int rc = 0;
    if (!d)
        return tkm_err_set(err, -errno, "%s: cannot open directory: %s", path, strerror(errno));
    char p[PATH_MAX];
    struct stat st;
    while ((rc = next_entry(d, path, &de, p, &st, err)) > 0) {
        if (S_ISREG(st.st_mode))
            *total += (uint64_t)st.st_size;
        else if (S_ISDIR(st.st_mode) && (rc = tree_size(p, depth + 1, total, err)) != 0)
            break;
    }
    closedir(d);
    return rc;
}

/* Fills the .ptx / binary / group facts of k from its kernel dir. */
static void kernel_stage_files(struct tkm_triton_kernel *k, const char *kdir)
{
    char p[PATH_MAX], stem[256];
    size_t sl = strlen(k->json_name) - 5; /* without ".json" */
    struct tkm_buf b;
    struct stat st;
    snprintf(stem, sizeof stem, "%.*s", (int)(sl < sizeof stem ? sl : sizeof stem - 1),
             k->json_name);
    if (tkm_pathf(p, sizeof p, "%s/%s.ptx", kdir, stem) == 0 && read_head(p, 65536, &b) == 0) {
        tkm_ptx_header_parse(b.data, b.len, &k->ptx, k->ptx_target, sizeof k->ptx_target);
        tkm_buf_release(&b);
    }
    static const char *const bins[] = {"cubin", "hsaco"};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(bins) && !k->binary_arch[0]; i++) {
        char be[16];
        if (tkm_pathf(p, sizeof p, "%s/%s.%s", kdir, stem, bins[i]) == 0 &&
            read_head(p, 64, &b) == 0) { /* the ELF header */
            tkm_elf_gpu_arch((const unsigned char *)b.data, b.len, be, k->binary_arch,
                             sizeof k->binary_arch);
            tkm_buf_release(&b);
        }
    }
    if (tkm_pathf(p, sizeof p, "%s/__grp__%s.json", kdir, stem) == 0 && lstat(p, &st) == 0 &&
        S_ISREG(st.st_mode))
        k->group_name = strdup(p + strlen(kdir) + 1);
}

static int add_kernel(struct tkm_triton_cache *c, size_t *cap, struct tkm_triton_kernel *k,
                      struct tkm_err *err)
{
    if (c->n_kernels >= TKM_TRITON_MAX_KERNELS)
        return tkm_err_set(err, -E2BIG, "%s: more than %d kernels", c->root,
                           TKM_TRITON_MAX_KERNELS);
    if (c->n_kernels == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct tkm_triton_kernel *nk = realloc(c->kernels, ncap * sizeof *nk);
        if (!nk)
            return tkm_err_set(err, -ENOMEM, "out of memory");
        c->kernels = nk;
        *cap = ncap;
    }
    c->kernels[c->n_kernels++] = *k;
    memset(k, 0, sizeof *k);
    return 0;
}

/* Parses every <name>.json of one kernel dir. */
static int scan_kernel_dir(struct tkm_triton_cache *c, size_t *cap, const char *dname,
                           struct tkm_err *err)
{
    char kdir[PATH_MAX], p[PATH_MAX];
    DIR *d = NULL;
    struct dirent *de;
    struct tkm_triton_kernel k = {0};
    struct tkm_buf b = TKM_BUF_INIT(TKM_TRITON_MAX_META_BYTES);
    int rc = 0;
    if (tkm_pathf(kdir, sizeof kdir, "%s/%s", c->root, dname) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", c->root, dname);
    if ((rc = tree_size(kdir, 1, &c->size_bytes, err)) != 0)
        return rc;
    if (!(d = opendir(kdir)))
        return tkm_err_set(err, -errno, "%s: cannot open directory: %s", kdir, strerror(errno));
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        struct stat st;
        if (nl <= 5 || strcmp(de->d_name + nl - 5, ".json") != 0 ||
            strncmp(de->d_name, "__grp__", 7) == 0)
            continue;
        if (tkm_pathf(p, sizeof p, "%s/%s", kdir, de->d_name) != 0 || lstat(p, &st) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        if ((rc = tkm_read_file(p, TKM_TRITON_MAX_META_BYTES, &b, "kernel metadata", err)) != 0)
            goto out;
        rc = tkm_triton_meta_parse(&k, b.data, b.len, p, err);
        if (rc == -ENOENT) {
            rc = 0; /* a JSON without "hash" is not a kernel entry */
            continue;
        }
        if (rc)
            goto out;
        k.dir = strdup(dname);
        k.json_name = strdup(de->d_name);
        if (!k.dir || !k.json_name) {
            rc = tkm_err_set(err, -ENOMEM, "out of memory");
            goto out;
        }
        kernel_stage_files(&k, kdir);
        if (tree_size(kdir, 1, &k.size_bytes, NULL) != 0)
            k.size_bytes = 0;
        if ((rc = add_kernel(c, cap, &k, err)) != 0)
            goto out;
    }
out:
    tkm_triton_kernel_release(&k);
    tkm_buf_release(&b);
    closedir(d);
    return rc;
}

static int kernel_cmp(const void *a, const void *b)
{
    const struct tkm_triton_kernel *x = a, *y = b;
    int r = strcmp(x->dir, y->dir);
    return r ? r : strcmp(x->json_name, y->json_name);
}

int tkm_triton_cache_scan(struct tkm_triton_cache *c, const char *root, struct tkm_err *err)
{
    DIR *d = NULL;
    struct dirent *de;
    size_t cap = 0;
    int rc = 0;
    memset(c, 0, sizeof *c);
    if (!(c->root = strdup(root)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    if (!(d = opendir(root))) {
        rc = tkm_err_set(err, -errno, "%s: cannot open the cache directory: %s", root,
                         strerror(errno));
        goto out;
    }
    char p[PATH_MAX];
    struct stat st;
    while ((rc = next_entry(d, root, &de, p, &st, err)) > 0) {
        if (S_ISREG(st.st_mode)) {
            c->size_bytes += (uint64_t)st.st_size;
        } else if (S_ISDIR(st.st_mode)) {
            c->n_dirs++;
            if ((rc = scan_kernel_dir(c, &cap, de->d_name, err)) != 0)
                goto out;
        }
    }
    if (rc < 0)
        goto out;
    if (c->n_kernels)
        qsort(c->kernels, c->n_kernels, sizeof *c->kernels, kernel_cmp);
    rc = tkm_triton_summary_build(&c->summary, c->kernels, c->n_kernels, err);
out:
    if (d)
        closedir(d);
    if (rc)
        tkm_triton_cache_release(c);
    return rc;
}

void tkm_triton_cache_release(struct tkm_triton_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_kernels; i++)
        tkm_triton_kernel_release(&c->kernels[i]);
    free(c->kernels);
    free(c->root);
    tkm_triton_summary_release(&c->summary);
    memset(c, 0, sizeof *c);
}
