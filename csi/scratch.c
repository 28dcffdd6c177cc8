/*
 * scratch.c - what a pod compiled: tkm-csi counts a volume's scratch layer
 * (the overlay's upper dir, or a private copy) at NodeUnpublishVolume, before
 * deleting it, per part of the store's layout (docs/csi.md, "What each pod
 * compiled"). BLOCKING: runs on the thread pool. See csi.h.
 *
 * Everything in the scratch layer is the pod's own writing: untrusted. The
 * walk never follows a symlink (openat/fstatat relative to open dirs, every
 * open O_NOFOLLOW), never crosses into another filesystem, stops at caps on
 * entries and depth (truncated), reads kernel JSONs only up to a size and
 * keeps only names of a safe charset.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <tkm/fs.h>
#include <tkm/triton/parts.h>
#include <tkm/util.h>

#include "csi.h"

/* Where a directory sits in the store's layout. */
enum lvl {
    L_OTHER,  /* anything else: only files and bytes */
    L_VOLUME, /* a multi-part volume's root: triton/, inductor/, vllm/ */
    L_TRITON, /* a Triton cache root: <hash>/ dirs */
    L_KDIR,   /* a Triton <hash>/ dir: the kernel JSON */
    L_IND,    /* Inductor's root: fxgraph/, aotautograd/ */
    L_FX,     /* fxgraph/: <xx>/ */
    L_FX_XX,  /* fxgraph/<xx>/: <key>/ entries */
    L_AOT,    /* aotautograd/: <key>/ entries */
    L_VLLM,   /* vLLM's root: torch_compile_cache/ */
    L_VTC,    /* torch_compile_cache/: <hash>/ entries */
};

#define LOWERS_MAX (CSI_MAX_STORES + 1) /* groups + the stores */

struct walk {
    struct csi_scratch *s;
    uint64_t max_entries;
    unsigned max_depth;
    int all_files;
    int stop; /* the entry cap was hit */
    dev_t dev;
    char *json; /* CSI_SCRATCH_JSON_MAX + 1 bytes: one kernel JSON */
};

static enum lvl child_lvl(enum lvl l, const char *name)
{
    switch (l) {
    case L_VOLUME:
        return strcmp(name, TKM_PART_TRITON_DIR) == 0     ? L_TRITON
               : strcmp(name, TKM_PART_INDUCTOR_DIR) == 0 ? L_IND
               : strcmp(name, TKM_PART_VLLM_DIR) == 0     ? L_VLLM
                                                          : L_OTHER;
    case L_TRITON:
        return L_KDIR;
    case L_IND:
        return strcmp(name, "fxgraph") == 0       ? L_FX
               : strcmp(name, "aotautograd") == 0 ? L_AOT
                                                  : L_OTHER;
    case L_FX:
        return L_FX_XX;
    case L_VLLM:
        return strcmp(name, "torch_compile_cache") == 0 ? L_VTC : L_OTHER;
    default:
        return L_OTHER;
    }
}

/* 1 when the len bytes at n are one of s's names. */
static int name_known(const struct csi_scratch *s, const char *n, size_t len)
{
    for (size_t i = 0; i < s->n_names; i++)
        if (strlen(s->names[i]) == len && memcmp(s->names[i], n, len) == 0)
            return 1;
    return 0;
}

static void name_add(struct csi_scratch *s, const char *n, size_t len)
{
    if (!tkm_kernel_name_ok(n, len)) {
        s->truncated = 1; /* skipped: counted as truncated (agent.proto) */
        return;
    }
    if (name_known(s, n, len))
        return;
    if (s->n_names == CSI_SCRATCH_NAMES_MAX) {
        s->truncated = 1;
        return;
    }
    memcpy(s->names[s->n_names], n, len);
    s->names[s->n_names++][len] = '\0';
}

/* A kernel JSON of a Triton <hash>/ dir (dfd): <name>.json, not a group file
 * (__grp__*), at most CSI_SCRATCH_JSON_MAX bytes, an object with a string
 * "name". 1 (its name added when valid), else 0. */
static int kernel_json(struct walk *w, int dfd, const char *fname)
{
    size_t fl = strlen(fname), got = 0;
    struct stat st;
    int fd, found = 0;
    if (fl <= 5 || strcmp(fname + fl - 5, ".json") != 0 || strncmp(fname, "__grp__", 7) == 0)
        return 0;
    fd = openat(dfd, fname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* The size from the open file, never trusted: the read is capped too. */
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CSI_SCRATCH_JSON_MAX)
        goto out;
    /* Until EOF, the cap, or the size fstat said (a file that grew meanwhile
     * is read as it was: never past the cap). */
    while (got <= CSI_SCRATCH_JSON_MAX && got < (size_t)st.st_size) {
        ssize_t r = read(fd, w->json + got, CSI_SCRATCH_JSON_MAX + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == 0 || got > CSI_SCRATCH_JSON_MAX)
        goto out;
    /* No second parse for a name already read (the same kernel at another
     * specialization: most new kernel dirs), nor once the names are full:
     * Triton's <stem>.json with its "name": "<stem>" (json.dumps' spelling)
     * and a valid stem is enough; anything else is parsed. At most 32 names
     * are parsed for, so the count stays cheap with many distinct kernels. */
    int known = name_known(w->s, fname, fl - 5);
    if ((known || w->s->n_names == CSI_SCRATCH_NAMES_MAX) && tkm_kernel_name_ok(fname, fl - 5)) {
        char needle[CSI_SCRATCH_NAME_MAX + 16];
        int n = snprintf(needle, sizeof(needle), "\"name\": \"%.*s\"", (int)(fl - 5), fname);
        if (memmem(w->json, got, needle, (size_t)n)) {
            if (!known)
                w->s->truncated = 1; /* a name left out: the list is full */
            found = 1;
            goto out;
        }
    }
    json_t *j = json_loadb(w->json, got, JSON_REJECT_DUPLICATES, NULL);
    json_t *name = json_object_get(j, "name");
    if (json_is_string(name)) {
        found = 1;
        name_add(w->s, json_string_value(name), json_string_length(name));
    }
    json_decref(j);
out:
    close(fd);
    return found;
}

/* 1 when name is in one of the lower dirs (fds; -1: none there). */
static int in_lower(const int *lfd, size_t nl, const char *name)
{
    struct stat st;
    for (size_t i = 0; i < nl; i++)
        if (lfd[i] >= 0 && fstatat(lfd[i], name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            return 1;
    return 0;
}

/* Walks the dir fd (owned: closed here); lfd[0..nl) are the same dir in the
 * lower layers (-1: not there). */
static int walk_dir(struct walk *w, int fd, const int *lfd, size_t nl, unsigned depth, enum lvl lvl,
                    int is_new, int *kernel);

/* Descends into the dir name of dfd; counts it when it is a new entry. */
static int walk_sub(struct walk *w, int dfd, const int *lfd, size_t nl, unsigned depth,
                    enum lvl lvl, const char *name, int lower)
{
    int sub, clfd[LOWERS_MAX], kernel = 0, rc;
    enum lvl cl = child_lvl(lvl, name);
    size_t cn = lower ? nl : 0;
    if (depth + 1 > w->max_depth) {
        w->s->truncated = 1;
        return 0;
    }
    if ((sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return errno == ENOENT ? 0 : -errno;
    for (size_t i = 0; i < cn; i++)
        clfd[i] =
            lfd[i] < 0 ? -1 : openat(lfd[i], name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    rc = walk_dir(w, sub, clfd, cn, depth + 1, cl, !lower, &kernel);
    for (size_t i = 0; i < cn; i++)
        if (clfd[i] >= 0)
            close(clfd[i]);
    if (rc < 0 || lower)
        return rc;
    /* A new entry of the layout (never one that hides or copies up a lower one). */
    if (cl == L_KDIR && kernel)
        w->s->triton_kernels++;
    else if (lvl == L_FX_XX)
        w->s->inductor_fxgraph++;
    else if (lvl == L_AOT)
        w->s->inductor_aotautograd++;
    else if (lvl == L_VTC)
        w->s->vllm_entries++;
    return 0;
}

static int walk_dir(struct walk *w, int fd, const int *lfd, size_t nl, unsigned depth, enum lvl lvl,
                    int is_new, int *kernel)
{
    struct dirent *e;
    int dfd, rc = 0;
    DIR *d;
    if (!(d = fdopendir(fd))) {
        rc = -errno;
        close(fd);
        return rc;
    }
    dfd = dirfd(d); /* the stream's own fd: the *at calls below use it */
    while (!w->stop && (errno = 0, e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++w->s->entries > w->max_entries) {
            w->s->truncated = 1;
            w->stop = 1;
            break;
        }
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;
            rc = -errno;
            break;
        }
        if (S_ISREG(st.st_mode)) {
            if (w->all_files || !in_lower(lfd, nl, e->d_name)) {
                w->s->files++;
                w->s->bytes += (uint64_t)st.st_size;
            }
            if (lvl == L_KDIR && is_new && !*kernel)
                *kernel = kernel_json(w, dfd, e->d_name);
        } else if (S_ISDIR(st.st_mode) && st.st_dev == w->dev) {
            if ((rc = walk_sub(w, dfd, lfd, nl, depth, lvl, e->d_name,
                               in_lower(lfd, nl, e->d_name))) < 0)
                break;
        } /* whiteouts (0/0 char devices), other special files, symlinks: not the pod's cache */
    }
    if (rc == 0 && !w->stop && errno != 0)
        rc = -errno;
    closedir(d);
    return rc;
}

int csi_scratch_walk(struct csi_scratch *s, const char *upper, const char *const *lowers, size_t n,
                     int root, int all_files, const struct csi_scratch_caps *caps,
                     struct tkm_err *err)
{
    struct walk w = {.s = s,
                     .max_entries = caps ? caps->max_entries : CSI_SCRATCH_ENTRIES_MAX,
                     .max_depth = caps ? caps->max_depth : CSI_SCRATCH_DEPTH_MAX,
                     .all_files = all_files};
    int ufd, lfd[LOWERS_MAX] = {0}, rc, kernel = 0;
    size_t nl = 0;
    struct stat st;
    memset(s, 0, sizeof(*s));
    if (n > LOWERS_MAX)
        return tkm_err_set(err, -E2BIG, "%zu lower dirs (at most %d)", n, LOWERS_MAX);
    if ((ufd = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return tkm_err_set(err, -errno, "%s: %s", upper, strerror(errno));
    if (fstat(ufd, &st) < 0 || !(w.json = malloc(CSI_SCRATCH_JSON_MAX + 1))) {
        rc = tkm_err_set(err, errno ? -errno : -ENOMEM, "%s: %s", upper, strerror(errno));
        close(ufd);
        free(w.json);
        return rc;
    }
    w.dev = st.st_dev;
    rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!lowers[i])
            continue;
        /* A lower that is gone would make all of a copy new: no count rather than a wrong one. */
        if ((lfd[nl] = open(lowers[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            rc = tkm_err_set(err, -errno, "the lower dir %s: %s", lowers[i], strerror(errno));
        else
            nl++;
    }
    if (rc < 0)
        close(ufd);
    else if ((rc = walk_dir(&w, ufd, lfd, nl, 0, root ? L_TRITON : L_VOLUME, 0, &kernel)) < 0)
        rc = tkm_err_set(err, rc, "counting the scratch layer %s: %s", upper, strerror(-rc));
    for (size_t i = 0; i < nl; i++)
        if (lfd[i] >= 0)
            close(lfd[i]);
    free(w.json);
    return rc;
}

/* ---- the volume's state (an xattr of its dir) --------------------------------- */

#define STATE_MAX ((CSI_MAX_STORES + 2) * (PATH_MAX + 16))

int csi_scratch_state_write(const char *vol_dir, const char *mode, int root,
                            const char *const *stores, size_t n, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(STATE_MAX);
    int rc = tkm_buf_printf(&b, "tkm-csi scratch 1\nmode %s\nlayout %s\n", mode,
                            root ? "root" : "parts");
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = tkm_buf_printf(&b, "lower %s\n", stores[i]);
    if (rc < 0)
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
    else if (lsetxattr(vol_dir, CSI_SCRATCH_XATTR, b.data, b.len, XATTR_CREATE) < 0)
        rc = tkm_err_set(err, -errno, "setting %s on %s: %s", CSI_SCRATCH_XATTR, vol_dir,
                         strerror(errno));
    tkm_buf_release(&b);
    return rc;
}

int csi_scratch_volume(const char *vol_dir, struct csi_scratch *s, struct tkm_err *err)
{
    const char *lowers[LOWERS_MAX];
    char groups[PATH_MAX], upper[PATH_MAX];
    size_t n = 0;
    int rc, root = -1, all_files = -1, line = 0;
    char *b = malloc(STATE_MAX + 1);
    if (!b)
        return tkm_err_set(err, -ENOMEM, "out of memory");
    ssize_t len = lgetxattr(vol_dir, CSI_SCRATCH_XATTR, b, STATE_MAX);
    if (len < 0) {
        rc = errno == ENODATA ? 0
                              : tkm_err_set(err, -errno, "reading %s of %s: %s", CSI_SCRATCH_XATTR,
                                            vol_dir, strerror(errno));
        free(b);
        return rc;
    }
    b[len] = '\0';
    snprintf(groups, sizeof(groups), "%s/groups", vol_dir);
    snprintf(upper, sizeof(upper), "%s/upper", vol_dir);
    lowers[n++] = groups;
    for (char *l = b, *nl; l && *l; l = nl) {
        if ((nl = strchr(l, '\n')))
            *nl++ = '\0';
        line++;
        if (line == 1 && strcmp(l, "tkm-csi scratch 1") == 0)
            continue;
        else if (line == 1)
            break;
        if (strcmp(l, "mode overlay") == 0 || strcmp(l, "mode empty") == 0)
            all_files = 1;
        else if (strcmp(l, "mode copy") == 0)
            all_files = 0;
        else if (strcmp(l, "layout root") == 0 || strcmp(l, "layout parts") == 0)
            root = l[7] == 'r';
        else if (strncmp(l, "lower ", 6) == 0 && n < LOWERS_MAX &&
                 csi_check_option_path(l + 6, "lower", NULL) == 0)
            lowers[n++] = l + 6;
        else {
            root = -1;
            break;
        }
    }
    if (root < 0 || all_files < 0) {
        free(b);
        return tkm_err_set(err, -EINVAL, "%s of %s is not a scratch state of this tkm-csi",
                           CSI_SCRATCH_XATTR, vol_dir);
    }
    rc = csi_scratch_walk(s, upper, lowers, n, root, all_files, NULL, err);
    free(b);
    return rc < 0 ? rc : 1;
}

int csi_scratch_summary(const struct csi_scratch *s, struct tkm_buf *out)
{
    char esc[4 * CSI_SCRATCH_NAME_MAX + 8];
    int rc;
    tkm_buf_reset(out);
    rc = tkm_buf_printf(out, "triton %u kernel%s", s->triton_kernels,
                        s->triton_kernels == 1 ? "" : "s");
    for (size_t i = 0; i < s->n_names && rc == 0; i++)
        rc = tkm_buf_printf(out, "%s%s", i ? ", " : " (",
                            tkm_escape(s->names[i], strlen(s->names[i]), esc, sizeof(esc)));
    if (rc == 0 && s->n_names)
        rc = tkm_buf_putc(out, ')');
    if (rc == 0)
        rc = tkm_buf_printf(out,
                            ", inductor %u fxgraph %u aotautograd, vllm %u, %llu files %llu "
                            "bytes%s",
                            s->inductor_fxgraph, s->inductor_aotautograd, s->vllm_entries,
                            (unsigned long long)s->files, (unsigned long long)s->bytes,
                            s->truncated ? " (truncated)" : "");
    return rc;
}
