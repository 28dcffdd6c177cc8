/* fs.c - see fs.h. */
#include <tkm/fs.h>
#include <tkm/archive.h>

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
#include <tkm/err.h>

int tkm_read_file(const char *path, size_t max, struct tkm_buf *out, const char *what,
                  struct tkm_err *err)
{
    const char *w = what ? what : "file";
    struct stat st;
    char chunk[16384];
    int rc = 0;
    tkm_buf_reset(out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return tkm_err_set(err, -errno, "%s \"%s\": %s", w, path, strerror(errno));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        rc = tkm_err_set(err, -EINVAL, "%s \"%s\": not a regular file", w, path);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = tkm_err_set(err, -errno, "%s \"%s\": %s", w, path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        if (out->len + (size_t)n > max || out->len + (size_t)n > out->max) {
            rc = tkm_err_set(err, -E2BIG, "%s \"%s\": larger than %zu bytes", w, path,
                             max < out->max ? max : out->max);
            break;
        }
        if ((rc = tkm_buf_append(out, chunk, (size_t)n))) {
            tkm_err_set(err, rc, "%s \"%s\": %s", w, path, strerror(-rc));
            break;
        }
    }
out:
    close(fd);
    return rc;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void tkm_names_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

static int keep(int dirfd, const char *name, enum tkm_list_filter filter)
{
    if (filter == TKM_LIST_ALL)
        return 1;
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0; /* vanished meanwhile */
    return !!S_ISDIR(st.st_mode) == (filter == TKM_LIST_DIRS);
}

int tkm_list_dir(int dirfd, enum tkm_list_filter filter, size_t max, char ***names, size_t *n)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0;
    *names = NULL;
    *n = 0;
    if (!d) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        return rc;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (!keep(dirfd, de->d_name, filter))
            continue;
        if (cnt >= max) {
            rc = -E2BIG;
            break;
        }
        if (cnt == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            char **nv = reallocarray(NULL, ncap, sizeof *nv);
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            if (cnt)
                memcpy(nv, v, cnt * sizeof *nv);
            free(v);
            v = nv;
            cap = ncap;
        }
        if (!(v[cnt] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        cnt++;
    }
    closedir(d);
    if (rc) {
        tkm_names_free(v, cnt);
        return rc;
    }
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, name_cmp);
    *names = v;
    *n = cnt;
    return 0;
}

/* Declared in <tkm/archive.h>; here so that a program that removes trees but
 * extracts nothing (tkm-controller) links no libarchive. */
int tkm_rmtree_at(int dirfd, const char *name)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int r = tkm_rmtree_at(fd, de->d_name);
        if (r < 0 && rc == 0)
            rc = r;
    }
    closedir(d);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && rc == 0)
        rc = -errno;
    return rc;
}

int tkm_mkdir_p(const char *path, mode_t mode, struct tkm_err *err)
{
    char p[PATH_MAX];
    int n = snprintf(p, sizeof p, "%s", path);
    if (n <= 0 || (size_t)n >= sizeof p)
        return tkm_err_set(err, -ENAMETOOLONG, "cannot create directory %.200s...: %s", path,
                           strerror(ENAMETOOLONG));
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        struct stat st;
        if (mkdir(p, mode) != 0) {
            int e = errno;
            if (e != EEXIST)
                return tkm_err_set(err, -e, "cannot create directory %s: %s", p, strerror(e));
            if (!c && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)))
                return tkm_err_set(err, -ENOTDIR, "cannot create directory %s: %s", p,
                                   strerror(ENOTDIR));
        }
        if (!c)
            return 0;
        *s = c;
    }
}
