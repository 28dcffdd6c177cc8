/*
 * fs.h - reading small files whole, with a size cap and an error that names them;
 * listing a directory; mkdir -p.
 */
#ifndef TKM_FS_H
#define TKM_FS_H

#include <stddef.h>
#include <sys/types.h>

struct tkm_buf;
struct tkm_err;

/* Reads the regular file at path (borrowed) into out (reset first), at most
 * max bytes (and never past out->max). what (borrowed, may be NULL) names the
 * file's role in errors: `kubeconfig "/x/config": No such file or directory`.
 * Returns 0; -errno when it cannot be opened or read; -EINVAL when it is not a
 * regular file (a FIFO or a device would block or never end); -E2BIG when it is
 * larger than max. */
int tkm_read_file(const char *path, size_t max, struct tkm_buf *out, const char *what,
                  struct tkm_err *err);

/* Which entries tkm_list_dir returns ("." and ".." never). Links are not
 * followed: a symlink to a directory counts as a non-directory. */
enum tkm_list_filter { TKM_LIST_ALL, TKM_LIST_DIRS, TKM_LIST_NONDIRS };

/* The names in the directory dirfd (borrowed; its offset is not moved),
 * sorted bytewise. *names is owned by the caller: free with tkm_names_free.
 * Returns 0, -errno, or -E2BIG when there are more than max entries. */
int tkm_list_dir(int dirfd, enum tkm_list_filter filter, size_t max, char ***names, size_t *n);
void tkm_names_free(char **names, size_t n);

/* mkdir -p: creates each missing directory of path (borrowed), the last one
 * included, with mode (less the umask); existing directories are left as they
 * are. Returns 0; -ENAMETOOLONG; -ENOTDIR when path exists and is not a
 * directory; or -errno of the mkdir that failed, with err (optional) naming
 * that directory: "cannot create directory /a/b: Permission denied". */
int tkm_mkdir_p(const char *path, mode_t mode, struct tkm_err *err);

#endif
