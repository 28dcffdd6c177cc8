/*
 * triton/rewrite.c - pointing the group files of an extracted cache at the
 * path where the consumer sees it.
 *
 * Triton 3.x FileCacheManager.get_group keeps only child paths that exist, and
 * compile() treats a group without its .json as a miss, so a cache moved to a
 * new root must have its child_paths rewritten or it never hits.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/triton/cache.h>
#include <tkm/buf.h>
#include <tkm/fs.h>

#include "triton/pathf-int.h"

/* Writes text to path via path.tkm-tmp.<pid>, rename; keeps mode. No fsync: every
 * caller either flushes the whole tree once afterwards (tkmctl extract: syncfs before
 * its rename) or rebuilds it on every publish (tkm-csi's per-pod layers); an fsync per
 * group file cost seconds per pod for caches of thousands of kernels. */
static int replace_file(const char *path, const char *text, mode_t mode, struct tkm_err *err)
{
    char tmp[PATH_MAX];
    int fd, rc;
    if (tkm_pathf(tmp, sizeof tmp, "%s.tkm-tmp.%ld", path, (long)getpid()) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s: path too long", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
    if (fd < 0)
        return tkm_err_set(err, -errno, "%s: cannot create: %s", tmp, strerror(errno));
    errno = 0; /* dprintf writes all of text or fails */
    rc = dprintf(fd, "%s", text) == (int)strlen(text) ? 0 : errno ? -errno : -EIO;
    if (!rc && fchmod(fd, mode & 07777) != 0)
        rc = -errno;
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return tkm_err_set(err, rc, "%s: cannot write the rewritten group file: %s", path,
                           strerror(-rc));
    }
    return 0;
}

/* Reads kdir/gname (kdir = src/dname), writes the rewritten group to
 * odir/gname (odir = out_dir/dname, may equal kdir). */
static int rewrite_one(const char *kdir, const char *odir, const char *dname, const char *gname,
                       const char *new_root, struct tkm_triton_rewrite_stats *st,
                       struct tkm_err *err)
{
    char path[PATH_MAX], child[PATH_MAX], opath[PATH_MAX];
    struct tkm_buf b = TKM_BUF_INIT(TKM_TRITON_MAX_META_BYTES);
    struct tkm_triton_group g = {0};
    json_t *root = NULL, *cp = NULL;
    char *text = NULL;
    struct stat sb;
    int rc;
    if (tkm_pathf(path, sizeof path, "%s/%s", kdir, gname) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", kdir, gname);
    if (tkm_pathf(opath, sizeof opath, "%s/%s", odir, gname) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", odir, gname);
    rc = lstat(path, &sb) != 0 ? -errno : S_ISREG(sb.st_mode) ? 0 : -EINVAL; /* no link followed */
    if (rc)
        return tkm_err_set(err, rc, "%s: cannot read the group file", path);
    rc = tkm_read_file(path, TKM_TRITON_MAX_META_BYTES, &b, "group file", err);
    if (rc || (rc = tkm_triton_group_parse(&g, b.data, b.len, path, err)) != 0)
        goto out;
    root = json_object();
    cp = json_object();
    if (!root || !cp) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < g.n; i++) {
        struct stat cs;
        if (tkm_pathf(child, sizeof child, "%s/%s/%s", new_root, dname, g.names[i]) != 0) {
            rc = tkm_err_set(err, -ENAMETOOLONG, "%s: child path too long", path);
            goto out;
        }
        if (json_object_set_new(cp, g.names[i], json_string(child)) != 0) {
            rc = tkm_err_set(err, -ENOMEM, "out of memory");
            goto out;
        }
        if (tkm_pathf(child, sizeof child, "%s/%s", kdir, g.names[i]) != 0 ||
            lstat(child, &cs) != 0 || !S_ISREG(cs.st_mode))
            st->missing_children++;
        st->children++;
    }
    if (json_object_set(root, "child_paths", cp) != 0 ||
        !(text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = replace_file(opath, text, sb.st_mode, err)) == 0)
        st->groups++;
out:
    free(text);
    json_decref(cp);
    json_decref(root);
    tkm_triton_group_release(&g);
    tkm_buf_release(&b);
    return rc;
}

/* mkdir that accepts an existing directory. */
static int ensure_dir(const char *path, struct tkm_err *err)
{
    struct stat sb;
    if (mkdir(path, 0755) == 0)
        return 0;
    if (errno == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return 0;
    return tkm_err_set(err, errno == EEXIST ? -ENOTDIR : -errno, "%s: cannot create directory: %s",
                       path, strerror(errno == EEXIST ? ENOTDIR : errno));
}

static int rewrite_dir(const char *cache_dir, const char *out_dir, const char *dname,
                       const char *new_root, struct tkm_triton_rewrite_stats *st,
                       struct tkm_err *err)
{
    char kdir[PATH_MAX], odir[PATH_MAX];
    DIR *d;
    struct dirent *de;
    int rc = 0, made = 0;
    if (tkm_pathf(kdir, sizeof kdir, "%s/%s", cache_dir, dname) != 0 ||
        tkm_pathf(odir, sizeof odir, "%s/%s", out_dir, dname) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", out_dir, dname);
    if (!(d = opendir(kdir)))
        return tkm_err_set(err, -errno, "%s: cannot open directory: %s", kdir, strerror(errno));
    while ((de = readdir(d)) && !rc) {
        size_t nl = strlen(de->d_name);
        if (strncmp(de->d_name, "__grp__", 7) != 0 || nl < 13 ||
            strcmp(de->d_name + nl - 5, ".json") != 0)
            continue;
        /* The output tree mirrors only kernel dirs that have group files. */
        if (!made && (rc = ensure_dir(odir, err)) != 0)
            break;
        made = 1;
        rc = rewrite_one(kdir, odir, dname, de->d_name, new_root, st, err);
    }
    closedir(d);
    return rc;
}

int tkm_triton_groups_rewrite_to(const char *cache_dir, const char *out_dir, const char *new_root,
                                 struct tkm_triton_rewrite_stats *stats, struct tkm_err *err)
{
    struct tkm_triton_rewrite_stats local = {0};
    char root[PATH_MAX];
    DIR *d;
    struct dirent *de;
    int rc = 0;
    size_t rl = strlen(new_root);
    if (new_root[0] != '/')
        return tkm_err_set(err, -EINVAL, "new cache root \"%s\" must be an absolute path",
                           new_root);
    while (rl > 1 && new_root[rl - 1] == '/')
        rl--;
    snprintf(root, sizeof root, "%.*s", (int)rl, new_root);
    if (strcmp(out_dir, cache_dir) != 0 && (rc = ensure_dir(out_dir, err)) != 0)
        return rc;
    if (!(d = opendir(cache_dir)))
        return tkm_err_set(err, -errno, "%s: cannot open the cache directory: %s", cache_dir,
                           strerror(errno));
    while ((de = readdir(d)) && !rc) {
        char p[PATH_MAX];
        struct stat sb;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            tkm_triton_is_tmp_name(de->d_name))
            continue;
        if (tkm_pathf(p, sizeof p, "%s/%s", cache_dir, de->d_name) != 0 || lstat(p, &sb) != 0 ||
            !S_ISDIR(sb.st_mode))
            continue;
        rc = rewrite_dir(cache_dir, out_dir, de->d_name, strcmp(root, "/") == 0 ? "" : root, &local,
                         err);
    }
    closedir(d);
    if (stats)
        *stats = local;
    return rc;
}
