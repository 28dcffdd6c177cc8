/* fs.c - see fs.h. */
#include "fs.h"

#include "buf.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
