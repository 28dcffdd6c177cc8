/* triton/extract.c - see triton/extract.h. */
#include <tkm/triton/extract.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/oci/image.h>
#include <tkm/oci/layout.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/parts.h>
#include <tkm/util.h>

#define IMG_PATH_MAX 4096

static int pick_layer(const struct tkm_oci_pull_result *img, const char *layout,
                      struct tkm_archive_opts *ao, struct tkm_err *err)
{
    const char *comp = NULL;
    if (img->parsed.n_descs != 1)
        return tkm_err_set(err, -ENOTSUP,
                           "image %s has %zu layers; a Triton cache image has exactly one",
                           img->manifest.digest, img->parsed.n_descs);
    const struct tkm_oci_desc *d = &img->parsed.descs[0];
    if (strcmp(d->media_type, TKM_TRITON_MT_LEGACY_LAYER) == 0 ||
        strcmp(d->media_type, TKM_VLLM_MT_LEGACY_LAYER) == 0)
        comp = "gzip";
    else if (!tkm_oci_layer_supported(d->media_type, &comp))
        return tkm_err_set(err, -ENOTSUP, "image %s: layer %s has media type '%s', not a tar layer",
                           img->manifest.digest, d->digest, d->media_type);
    ao->compression = strcmp(comp, "gzip") == 0   ? TKM_COMPRESSION_GZIP
                      : strcmp(comp, "zstd") == 0 ? TKM_COMPRESSION_ZSTD
                                                  : TKM_COMPRESSION_NONE;
    ao->blob_digest = d->digest;
    ao->blob_size = d->size; /* the exact size, as the registry path enforces it */
    if (d->size == 0)
        return tkm_err_set(err, -EINVAL, "image %s: layer %s has size 0 in its descriptor",
                           img->manifest.digest, d->digest);
    if (img->config.n_diff_ids != 1) /* none is not "unchecked": it is refused */
        return tkm_err_set(err, -EINVAL,
                           "layout %s: config %s lists %zu rootfs.diff_ids for 1 layer (the "
                           "uncompressed layer cannot be verified)",
                           layout, img->parsed.config.digest, img->config.n_diff_ids);
    ao->diff_id = img->config.diff_ids[0];
    return 0;
}

/* Extracts blob into a staging dir beside dest, rewrites the group files
 * there for mount_path, flushes the whole tree with one syncfs() (instead
 * of an fsync per file) and renames it to dest (which must not exist). A
 * crash leaves either no dest or a complete one. */
static int extract_staged(const char *blob, const char *dest, struct tkm_archive_opts *ao,
                          const char *mount_path, struct tkm_archive_result *ar,
                          struct tkm_triton_rewrite_stats *st, struct tkm_err *err)
{
    char staging[IMG_PATH_MAX], abs_dest[IMG_PATH_MAX], d[IMG_PATH_MAX];
    char stgname[TKM_STAGING_NAME_MAX];
    char *pabs = NULL;
    int rc = 0, dirfd = -1, blobfd = -1, pfd = -1, made = 0;
    size_t n = strlen(dest);
    while (n > 1 && dest[n - 1] == '/') /* "out/" names "out" */
        n--;
    if (n >= sizeof d)
        return tkm_err_set(err, -ENAMETOOLONG, "extract: path too long: %.200s", dest);
    memcpy(d, dest, n);
    d[n] = '\0';
    char *slash = strrchr(d, '/');
    const char *base = slash ? slash + 1 : d, *parent = slash == d ? "/" : slash ? d : ".";
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return tkm_err_set(err, -EINVAL, "extract: '%s' does not name a new directory", dest);
    if (slash && slash != d)
        *slash = '\0'; /* d is the parent now, base still the last name */
    if (!(pabs = realpath(parent, NULL)))
        return tkm_err_set(err, -errno, "extract: %s: %s", parent, strerror(errno));
    snprintf(abs_dest, sizeof abs_dest, "%s/%s", strcmp(pabs, "/") == 0 ? "" : pabs, base);
    if ((pfd = open(pabs, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        (blobfd = open(blob, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = tkm_err_set(err, -errno, "extract: open %s: %s", pfd < 0 ? pabs : blob,
                         strerror(errno));
        goto out;
    }
    tkm_staging_purge(pfd, pabs); /* what killed extractions left here */
    if ((dirfd = tkm_staging_create(pfd, stgname, sizeof stgname, err)) < 0) {
        rc = dirfd;
        tkm_err_prefix(err, "extract: beside %s", abs_dest);
        goto out;
    }
    snprintf(staging, sizeof staging, "%s/%s", strcmp(pabs, "/") == 0 ? "" : pabs, stgname);
    made = 1;
    ao->fsync = 0; /* one syncfs() below covers every file */
    if ((rc = tkm_archive_extract_fd(blobfd, dirfd, ao, ar, err)) != 0 ||
        (rc = tkm_parts_groups_rewrite_to(staging, staging, mount_path ? mount_path : abs_dest, st,
                                          err)))
        goto out;
    if (fchmod(dirfd, 0755) != 0 || syncfs(dirfd) != 0) {
        rc = tkm_err_set(err, -errno, "extract: sync %s: %s", staging, strerror(errno));
        goto out;
    }
    if (renameat2(AT_FDCWD, staging, AT_FDCWD, abs_dest, RENAME_NOREPLACE) != 0) {
        rc = tkm_err_set(err, -errno, "extract: rename %s to %s: %s", staging, abs_dest,
                         strerror(errno));
        goto out;
    }
    made = 0;
    if (fsync(pfd) != 0)
        rc = tkm_err_set(err, -errno, "extract: fsync %s: %s", pabs, strerror(errno));
out:
    if (made)
        tkm_rmtree_at(AT_FDCWD, staging);
    if (dirfd >= 0)
        close(dirfd);
    if (blobfd >= 0)
        close(blobfd);
    if (pfd >= 0)
        close(pfd);
    free(pabs);
    return rc;
}

int tkm_triton_extract_layout_with(const char *layout_dir, const char *tag, const char *dest,
                                   const char *mount_path, const struct tkm_archive_opts *base,
                                   struct tkm_triton_extract_result *res, struct tkm_err *err)
{
    static const char *const include[] = {"io.triton.cache/", NULL};
    struct tkm_oci_pull_result img;
    struct tkm_triton_extract_result r;
    struct tkm_archive_opts ao;
    struct tkm_archive_result ar;
    struct tkm_triton_rewrite_stats st = {0};
    char blob[IMG_PATH_MAX];
    int rc;
    memset(&r, 0, sizeof r);
    if ((rc = tkm_oci_layout_load(layout_dir, tag, &img, err)) != 0)
        return rc;
    tkm_archive_opts_init(&ao);
    if (base) {
        ao.limits = base->limits;
        ao.cancel = base->cancel;
        ao.progress = base->progress;
        ao.progress_ud = base->progress_ud;
    }
    r.parts = tkm_parts_from_config(&img.config);
    if (r.parts & (TKM_PART_INDUCTOR | TKM_PART_VLLM)) {
        ao.rename = tkm_parts_rename_pairs(); /* triton/, inductor/, vllm/ */
    } else {
        ao.include = include;
        ao.strip = "io.triton.cache/";
    }
    if ((rc = pick_layer(&img, layout_dir, &ao, err)) != 0)
        goto out;
    memcpy(r.layer, img.parsed.descs[0].digest, sizeof r.layer);
    if ((rc = tkm_oci_layout_blob_path(layout_dir, r.layer, blob, sizeof blob)) != 0)
        goto out;
    if ((rc = extract_staged(blob, dest, &ao, mount_path, &ar, &st, err)) != 0) {
        if (!strstr(err ? err->msg : "", r.layer))
            tkm_err_prefix(err, "layer %s", r.layer);
        goto out;
    }
    r.files = ar.files;
    r.dirs = ar.dirs;
    r.file_bytes = ar.file_bytes;
    /* A multi-part image: the parts' cache-size-bytes labels add up. */
    static const char *const sizes[] = {"cache.triton.image/cache-size-bytes",
                                        TKM_INDUCTOR_LABEL_SIZE, TKM_VLLM_LABEL_SIZE};
    for (size_t i = 0; i < 3; i++) {
        const char *lb = tkm_oci_config_label(&img.config, sizes[i]);
        uint64_t v = 0;
        if (lb && tkm_parse_u64(lb, UINT64_MAX, &v) == 0)
            r.label_bytes += v;
    }
    r.groups = st.groups;
    r.children = st.children;
    r.missing_children = st.missing_children;
    if (res)
        *res = r;
out:
    tkm_oci_pull_result_release(&img);
    return rc;
}
