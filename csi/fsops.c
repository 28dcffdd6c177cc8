/*
 * fsops.c - tkm-csi's blocking filesystem work: opening a target without
 * following symlinks, removing and copying trees, recovery at start. Called
 * from the libuv thread pool (or before the loop serves). See csi.h.
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

#include <tkm/util.h>

#include "csi.h"

#define TREE_DEPTH_MAX 64

int csi_open_target(const char *root, const char *target, int create, int *fd, struct tkm_err *err)
{
    char comp[NAME_MAX + 1];
    size_t rl = strlen(root);
    int cur = -1, rc = 0;
    *fd = -1;
    if (rl == 1)
        rl = 0; /* root "/" */
    cur = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return tkm_err_set(err, -errno, "target root %s: %s", root, strerror(errno));
    for (const char *p = target + rl; *p == '/';) {
        const char *c = p + 1, *end = strchr(c, '/');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == 0 || len > NAME_MAX) {
            rc = tkm_err_set(err, -EINVAL, "target path %s: bad component", target);
            goto out;
        }
        memcpy(comp, c, len);
        comp[len] = '\0';
        int next = openat(cur, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && !end && create) {
            if (mkdirat(cur, comp, 0750) < 0 && errno != EEXIST) {
                rc = tkm_err_set(err, -errno, "creating target path %s: %s", target,
                                 strerror(errno));
                goto out;
            }
            next = openat(cur, comp, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
        }
        if (next < 0) {
            struct stat st;
            rc = -errno;
            if (rc == -ENOTDIR && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISLNK(st.st_mode))
                rc = tkm_err_set(err, -ELOOP,
                                 "target path %s: component \"%s\" is a symbolic link (refused)",
                                 target, comp);
            else
                rc = tkm_err_set(err, rc, "target path %s: component \"%s\": %s", target, comp,
                                 strerror(-rc));
            goto out;
        }
        close(cur);
        cur = next;
        if (!end)
            break;
        p = end;
    }
    *fd = cur;
    cur = -1;
out:
    if (cur >= 0)
        close(cur);
    return rc;
}

/* A directory stream of its own on dfd (borrowed; its offset is not moved),
 * refused past TREE_DEPTH_MAX levels: 0, -ELOOP or -errno. closedir() it. */
static int dir_open(int depth, int dfd, DIR **out)
{
    int fd, rc;
    *out = NULL;
    if (depth > TREE_DEPTH_MAX)
        return -ELOOP;
    if ((fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -errno;
    if (!(*out = fdopendir(fd))) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return 0;
}

/* The next entry other than "." and "..", or NULL with errno 0 at the end. */
static struct dirent *dir_next(DIR *d)
{
    struct dirent *e;
    while ((errno = 0, e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            break;
    return e;
}

/* Removes everything in the directory dfd (borrowed), depth-first, never
 * following a symlink and never crossing into another filesystem. */
static int remove_in(int dfd, dev_t dev, int depth)
{
    DIR *d = NULL;
    struct dirent *e;
    int rc = dir_open(depth, dfd, &d);
    if (rc < 0)
        return rc;
    while ((e = dir_next(d))) {
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;
            rc = -errno;
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            if (st.st_dev != dev) {
                rc = -EXDEV; /* a mount below: never remove through it */
                break;
            }
            int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                rc = -errno;
                break;
            }
            rc = remove_in(sub, dev, depth + 1);
            close(sub);
            if (rc < 0)
                break;
            if (unlinkat(dfd, e->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
                rc = -errno;
                break;
            }
        } else if (unlinkat(dfd, e->d_name, 0) < 0 && errno != ENOENT) {
            rc = -errno;
            break;
        }
    }
    if (rc == 0 && errno != 0)
        rc = -errno;
    closedir(d);
    return rc;
}

int csi_remove_tree(const char *path, struct tkm_err *err)
{
    struct stat st;
    int rc = 0, fd = -1;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : tkm_err_set(err, -errno, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) < 0 && errno != ENOENT)
            return tkm_err_set(err, -errno, "removing %s: %s", path, strerror(errno));
        return 0;
    }
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return tkm_err_set(err, -errno, "%s: %s", path, strerror(errno));
    rc = remove_in(fd, st.st_dev, 0);
    close(fd);
    if (rc == 0 && rmdir(path) < 0 && errno != ENOENT)
        rc = -errno;
    if (rc < 0)
        return tkm_err_set(err, rc, "removing %s: %s", path,
                           rc == -EXDEV ? "a filesystem is mounted below it" : strerror(-rc));
    return 0;
}

static int copy_file(int sfd, int dfd, const char *name, const struct stat *st, uint64_t *bytes)
{
    int in = -1, out = -1, rc = 0;
    char chunk[65536];
    in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return -errno;
    out =
        openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st->st_mode & 0777);
    if (out < 0) {
        rc = -errno;
        goto out;
    }
    for (;;) {
        ssize_t n = read(in, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            goto out;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, chunk + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                rc = -errno;
                goto out;
            }
            off += w;
            *bytes += (uint64_t)w;
        }
    }
out:
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

static int copy_in(int sfd, int dfd, uint64_t *bytes, int depth)
{
    DIR *d = NULL;
    struct dirent *e;
    int rc = dir_open(depth, sfd, &d);
    if (rc < 0)
        return rc;
    while ((e = dir_next(d))) {
        struct stat st;
        if (fstatat(sfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -errno;
            break;
        }
        if (S_ISREG(st.st_mode)) {
            /* An entry already there came from an earlier source: it wins. */
            if ((rc = copy_file(sfd, dfd, e->d_name, &st, bytes)) == -EEXIST)
                rc = 0;
            if (rc < 0)
                break;
        } else if (S_ISDIR(st.st_mode)) {
            int s = -1, t = -1;
            struct stat dst;
            if (mkdirat(dfd, e->d_name, (st.st_mode & 0777) | 0700) < 0) {
                if (errno != EEXIST || fstatat(dfd, e->d_name, &dst, AT_SYMLINK_NOFOLLOW) < 0) {
                    rc = -errno;
                    break;
                }
                if (!S_ISDIR(dst.st_mode))
                    continue; /* an earlier source's file hides this dir, as in an overlay */
            }
            s = openat(sfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            t = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            rc = (s < 0 || t < 0) ? -errno : copy_in(s, t, bytes, depth + 1);
            if (s >= 0)
                close(s);
            if (t >= 0)
                close(t);
            if (rc < 0)
                break;
        } /* symlinks, devices, fifos: never copied into a pod */
    }
    if (rc == 0 && errno != 0)
        rc = -errno;
    closedir(d);
    return rc;
}

int csi_copy_tree(const char *src, const char *dst, uint64_t *bytes, struct tkm_err *err)
{
    int s = -1, t = -1, rc = 0;
    uint64_t n = 0;
    if (mkdir(dst, 0755) < 0 && errno != EEXIST)
        return tkm_err_set(err, -errno, "creating %s: %s", dst, strerror(errno));
    s = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    t = open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s < 0 || t < 0)
        rc = -errno;
    else
        rc = copy_in(s, t, &n, 0);
    if (s >= 0)
        close(s);
    if (t >= 0)
        close(t);
    if (bytes)
        *bytes = n;
    if (rc < 0)
        return tkm_err_set(err, rc, "copying %s to %s: %s", src, dst, strerror(-rc));
    return 0;
}

/* Writes the marker <state>/.release/<vol> (empty file). */
static int mark_release(const char *state_dir, const char *vol)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/.release", state_dir);
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return -errno;
    snprintf(path, sizeof(path), "%s/.release/%s", state_dir, vol);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    close(fd);
    return 0;
}

static int recover_pod(const char *state_dir, const char *pod_dir, const char *mountinfo,
                       size_t *removed, struct tkm_err *err)
{
    DIR *d = opendir(pod_dir);
    struct dirent *e;
    char path[PATH_MAX], src[sizeof(CSI_MOUNT_SOURCE) + CSI_VOLUME_ID_MAX];
    int rc = 0;
    if (!d)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || csi_check_volume_id(e->d_name, NULL) < 0)
            continue;
        snprintf(src, sizeof(src), CSI_MOUNT_SOURCE "%s", e->d_name);
        if (csi_mountinfo_has_source(mountinfo, src))
            continue; /* still mounted: NodeUnpublishVolume will come */
        snprintf(path, sizeof(path), "%s/%s", pod_dir, e->d_name);
        if ((rc = mark_release(state_dir, e->d_name)) < 0) {
            rc = tkm_err_set(err, rc, "writing the release marker for %s: %s", e->d_name,
                             strerror(-rc));
            break;
        }
        if ((rc = csi_remove_tree(path, err)) < 0)
            break;
        (*removed)++;
    }
    closedir(d);
    return rc;
}

int csi_recover(const char *state_dir, size_t *removed, struct tkm_err *err)
{
    struct tkm_buf mi = TKM_BUF_INIT(64u << 20);
    char ns_dir[PATH_MAX], pod_dir[PATH_MAX];
    DIR *sd = NULL, *nd = NULL;
    struct dirent *ns, *pod;
    size_t n = 0;
    int rc = 0;
    if ((rc = csi_mountinfo_read(&mi, err)) < 0)
        goto out;
    if (!(sd = opendir(state_dir))) {
        rc = errno == ENOENT ? 0 : tkm_err_set(err, -errno, "%s: %s", state_dir, strerror(errno));
        goto out;
    }
    while ((ns = readdir(sd))) {
        if (ns->d_name[0] == '.')
            continue;
        snprintf(ns_dir, sizeof(ns_dir), "%s/%s", state_dir, ns->d_name);
        if (!(nd = opendir(ns_dir)))
            continue;
        while ((pod = readdir(nd))) {
            if (pod->d_name[0] == '.')
                continue;
            snprintf(pod_dir, sizeof(pod_dir), "%s/%s", ns_dir, pod->d_name);
            if ((rc = recover_pod(state_dir, pod_dir, mi.data, &n, err)) < 0)
                goto out;
            (void)rmdir(pod_dir); /* only when empty */
        }
        closedir(nd);
        nd = NULL;
        (void)rmdir(ns_dir);
    }
out:
    if (nd)
        closedir(nd);
    if (sd)
        closedir(sd);
    tkm_buf_release(&mi);
    if (removed)
        *removed = n;
    return rc;
}
