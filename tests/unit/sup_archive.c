/* sup_archive.c - see sup_archive.h. */
#include "sup_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/store.h>

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

struct sup_ingest {
    int rc;
    char *path;
    struct tkm_store_ingest_info info;
    struct tkm_err err;
};

static void sup_ingested(int rc, const char *path, const struct tkm_store_ingest_info *info,
                         const struct tkm_err *err, void *data)
{
    struct sup_ingest *r = data;
    r->rc = rc;
    r->info = *info;
    r->err = *err;
    r->path = rc == 0 ? strdup(path) : NULL;
}

int sup_store_ingest(struct tkm_store *s, const char *digest, const char *blob_path,
                     const struct tkm_archive_opts *o, char **path,
                     struct tkm_store_ingest_info *info, struct tkm_err *err)
{
    struct sup_ingest r = {0};
    struct tkm_store_job *job = NULL;
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc != 0)
        return tkm_err_set(err, rc, "uv_loop_init: %s", uv_strerror(rc));
    rc = tkm_store_ingest_start(&loop, s, digest, blob_path, o, sup_ingested, &r, &job, err);
    if (rc == 0) {
        if (o && o->cancel && atomic_load(o->cancel))
            tkm_store_job_cancel(job);
        uv_run(&loop, UV_RUN_DEFAULT);
        if ((rc = r.rc) < 0 && err)
            *err = r.err;
    }
    uv_loop_close(&loop);
    if (info)
        *info = r.info;
    if (path)
        *path = r.path;
    else
        free(r.path);
    return rc;
}
