/* sup_archive.c - see sup_archive.h. */
#include "sup_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sup_extract_path(const char *blob_path, const char *dest_path, const struct tkm_archive_opts *o,
                     struct tkm_archive_result *res, struct tkm_err *err)
{
    int bfd = open(blob_path, O_RDONLY | O_CLOEXEC), dfd = -1, rc;
    if (bfd < 0)
        return tkm_err_set(err, -errno, "cannot open layer blob %s: %s", blob_path,
                           strerror(errno));
    if (mkdir(dest_path, 0755) < 0) {
        rc = errno == EEXIST ? tkm_err_set(err, -EEXIST, "destination %s already exists", dest_path)
                             : tkm_err_set(err, -errno, "mkdir %s: %s", dest_path, strerror(errno));
        close(bfd);
        return rc;
    }
    if ((dfd = open(dest_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = tkm_err_set(err, -errno, "open %s: %s", dest_path, strerror(errno));
    else
        rc = tkm_archive_extract_fd(bfd, dfd, o, res, err);
    if (dfd >= 0)
        close(dfd);
    close(bfd);
    if (rc < 0)
        rmdir(dest_path);
    return rc;
}
