/* image.c - see image.h. */
#include <tkm/oci/image.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/buf.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/layout.h>
#include <tkm/triton/cache.h>
#include <tkm/util.h>

#define IMG_PATH_MAX 4096

void tkm_oci_pull_result_release(struct tkm_oci_pull_result *res)
{
    if (!res)
        return;
    tkm_oci_manifest_release(&res->parsed);
    tkm_oci_config_release(&res->config);
    memset(res, 0, sizeof *res);
}

/* GET + verify + parse the manifest at reference (a digest or tag). */
static int get_parsed(struct tkm_oci_registry *r, const struct tkm_oci_ref *ref,
                      const char *reference, struct tkm_buf *body, struct tkm_oci_manifest *m,
                      struct tkm_err *err)
{
    char ct[256], dg[TKM_OCI_DIGEST_LEN + 1], what[700];
    int rc = tkm_oci_registry_get_manifest(r, ref->repo, reference, body, ct, sizeof ct, dg, err);
    if (rc)
        return rc;
    snprintf(what, sizeof what, "%s/%s@%s", ref->host, ref->repo, dg);
    return tkm_oci_manifest_parse(m, ct, body->data, body->len, what, err);
}

static int fetch_layers(struct tkm_oci_registry *r, const struct tkm_oci_ref *ref,
                        const char *layout, struct tkm_oci_pull_result *res, struct tkm_err *err)
{
    char path[IMG_PATH_MAX], tmp[IMG_PATH_MAX];
    int rc = 0;
    for (size_t i = 0; i < res->parsed.n_descs && rc == 0; i++) {
        const struct tkm_oci_desc *d = &res->parsed.descs[i];
        struct tkm_err ignore = {0};
        if (tkm_oci_layout_blob_path(layout, d->digest, path, sizeof path) != 0)
            return tkm_err_set(err, -ENAMETOOLONG, "layout path too long: %.200s", layout);
        if (access(path, F_OK) == 0 && tkm_oci_layout_verify_blob(layout, d, &ignore) == 0)
            continue; /* already here and intact */
        snprintf(tmp, sizeof tmp, "%s/blobs/.pull-%d-%.16s.tmp", layout, (int)getpid(),
                 tkm_oci_digest_hex(d->digest));
        unlink(tmp);
        if ((rc = tkm_oci_registry_fetch_blob(r, ref->repo, d, tmp, err)) != 0)
            break;
        if ((rc = tkm_oci_layout_take_blob(layout, tmp, d->digest, err)) != 0)
            unlink(tmp);
        res->bytes_fetched += d->size;
    }
    return rc;
}

/* Resolves ref, follows an index, fetches and verifies manifest and config
 * (their bytes are left in body and cfg). res is filled; the caller
 * releases it in every case. */
static int inspect_with(struct tkm_oci_registry *r, const struct tkm_oci_ref *ref,
                        struct tkm_oci_pull_result *res, struct tkm_buf *body, struct tkm_buf *cfg,
                        struct tkm_err *err)
{
    char digest[TKM_OCI_DIGEST_LEN + 1], what[700];
    struct tkm_oci_manifest top = {0};
    int rc;
    if ((rc = tkm_oci_registry_resolve(r, ref->repo, tkm_oci_ref_reference(ref), digest, err)))
        goto out;
    if ((rc = get_parsed(r, ref, digest, body, &top, err)) != 0)
        goto out;
    if (top.kind == TKM_OCI_KIND_INDEX) {
        const struct tkm_oci_desc *d;
        memcpy(res->index_digest, top.digest, sizeof res->index_digest);
        if ((rc = tkm_oci_index_select(&top, "linux", tkm_oci_host_arch(), NULL, &d, err)) != 0)
            goto out;
        res->manifest = *d;
        if ((rc = get_parsed(r, ref, d->digest, body, &res->parsed, err)) != 0)
            goto out;
        if (res->parsed.kind != TKM_OCI_KIND_MANIFEST) {
            rc = tkm_err_set(err, -EINVAL, "%s: index entry %s is not an image manifest", ref->repo,
                             d->digest);
            goto out;
        }
    } else {
        res->parsed = top;
        memset(&top, 0, sizeof top);
        memset(&res->manifest, 0, sizeof res->manifest);
        snprintf(res->manifest.media_type, sizeof res->manifest.media_type, "%s",
                 res->parsed.media_type);
        memcpy(res->manifest.digest, res->parsed.digest, sizeof res->manifest.digest);
        res->manifest.size = res->parsed.size;
    }
    if ((rc = tkm_oci_registry_fetch_blob_mem(r, ref->repo, &res->parsed.config, cfg, err)))
        goto out;
    snprintf(what, sizeof what, "config %s", res->parsed.config.digest);
    rc = tkm_oci_config_parse(&res->config, cfg->data, cfg->len, what, err);
out:
    tkm_oci_manifest_release(&top);
    return rc;
}

int tkm_oci_inspect(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    struct tkm_oci_pull_result *res, struct tkm_err *err)
{
    struct tkm_oci_registry *r = NULL;
    struct tkm_buf body = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX),
                   cfg = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    int rc;
    memset(res, 0, sizeof *res);
    if ((rc = tkm_oci_registry_new(ref->host, ro, &r, err)) == 0)
        rc = inspect_with(r, ref, res, &body, &cfg, err);
    if (rc)
        tkm_oci_pull_result_release(res);
    tkm_oci_registry_free(r);
    tkm_buf_release(&body);
    tkm_buf_release(&cfg);
    return rc;
}

int tkm_oci_pull(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                 const char *layout_dir, const char *tag, int layers,
                 struct tkm_oci_pull_result *res, struct tkm_err *err)
{
    struct tkm_oci_registry *r = NULL;
    struct tkm_buf body = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX),
                   cfg = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    char dg[TKM_OCI_DIGEST_LEN + 1];
    int rc;
    memset(res, 0, sizeof *res);
    if ((rc = tkm_oci_registry_new(ref->host, ro, &r, err)) != 0 ||
        (rc = inspect_with(r, ref, res, &body, &cfg, err)) != 0)
        goto out;
    if ((rc = tkm_oci_layout_init(layout_dir, err)) != 0 ||
        (rc = tkm_oci_layout_put_blob(layout_dir, cfg.data, cfg.len, dg, err)) != 0 ||
        (rc = tkm_oci_layout_put_blob(layout_dir, body.data, body.len, dg, err)) != 0)
        goto out;
    if (layers && (rc = fetch_layers(r, ref, layout_dir, res, err)) != 0)
        goto out;
    rc = tkm_oci_layout_add_manifest(layout_dir, &res->manifest,
                                     tag           ? tag
                                     : ref->tag[0] ? ref->tag
                                                   : "latest",
                                     err);
out:
    if (rc)
        tkm_oci_pull_result_release(res);
    tkm_oci_registry_free(r);
    tkm_buf_release(&body);
    tkm_buf_release(&cfg);
    return rc;
}

int tkm_oci_layout_load(const char *layout_dir, const char *tag, struct tkm_oci_pull_result *res,
                        struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    char what[IMG_PATH_MAX + 80];
    int rc;
    memset(res, 0, sizeof *res);
    if ((rc = tkm_oci_layout_find(layout_dir, tag, &res->manifest, err)) != 0 ||
        (rc = tkm_oci_layout_read_blob(layout_dir, &res->manifest, &b, err)) != 0)
        goto out;
    snprintf(what, sizeof what, "layout %s manifest %s", layout_dir, res->manifest.digest);
    if ((rc = tkm_oci_manifest_parse(&res->parsed, res->manifest.media_type, b.data, b.len, what,
                                     err)) != 0)
        goto out;
    if (res->parsed.kind != TKM_OCI_KIND_MANIFEST) {
        rc = tkm_err_set(err, -ENOTSUP, "%s: an index; tkm layouts hold image manifests", what);
        goto out;
    }
    if ((rc = tkm_oci_layout_read_blob(layout_dir, &res->parsed.config, &b, err)) != 0)
        goto out;
    snprintf(what, sizeof what, "layout %s config %s", layout_dir, res->parsed.config.digest);
    rc = tkm_oci_config_parse(&res->config, b.data, b.len, what, err);
out:
    if (rc)
        tkm_oci_pull_result_release(res);
    tkm_buf_release(&b);
    return rc;
}

int tkm_oci_push(const char *layout_dir, const char *tag, const struct tkm_oci_ref *ref,
                 const struct tkm_oci_registry_opts *ro, char digest[TKM_OCI_DIGEST_LEN + 1],
                 int *uploaded, struct tkm_err *err)
{
    struct tkm_oci_pull_result img;
    struct tkm_oci_registry *r = NULL;
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    char path[IMG_PATH_MAX];
    int rc, skipped = 0, up = 0;
    if ((rc = tkm_oci_layout_load(layout_dir, tag, &img, err)) != 0)
        return rc;
    if (ref->digest[0] && strcmp(ref->digest, img.manifest.digest) != 0) {
        rc = tkm_err_set(err, -EINVAL,
                         "push: the reference names %s but the layout's manifest is %s",
                         ref->digest, img.manifest.digest);
        goto out;
    }
    if ((rc = tkm_oci_registry_new(ref->host, ro, &r, err)) != 0)
        goto out;
    if ((rc = tkm_oci_layout_read_blob(layout_dir, &img.parsed.config, &b, err)) != 0 ||
        (rc = tkm_oci_registry_push_blob_mem(r, ref->repo, b.data, b.len, img.parsed.config.digest,
                                             &skipped, err)) != 0)
        goto out;
    up += !skipped;
    for (size_t i = 0; i < img.parsed.n_descs; i++) {
        const struct tkm_oci_desc *d = &img.parsed.descs[i];
        if ((rc = tkm_oci_layout_verify_blob(layout_dir, d, err)) != 0)
            goto out;
        tkm_oci_layout_blob_path(layout_dir, d->digest, path, sizeof path);
        if ((rc = tkm_oci_registry_push_blob_file(r, ref->repo, path, d->digest, d->size, &skipped,
                                                  err)) != 0)
            goto out;
        up += !skipped;
    }
    if ((rc = tkm_oci_layout_read_blob(layout_dir, &img.manifest, &b, err)) != 0)
        goto out;
    rc = tkm_oci_registry_put_manifest(r, ref->repo, ref->tag[0] ? ref->tag : img.manifest.digest,
                                       img.manifest.media_type, b.data, b.len, err);
    if (rc == 0 && digest)
        memcpy(digest, img.manifest.digest, TKM_OCI_DIGEST_LEN + 1);
    if (rc == 0 && uploaded)
        *uploaded = up;
out:
    tkm_oci_registry_free(r);
    tkm_oci_pull_result_release(&img);
    tkm_buf_release(&b);
    return rc;
}

static int pick_layer(const struct tkm_oci_pull_result *img, const char *layout,
                      struct tkm_archive_opts *ao, struct tkm_err *err)
{
    const char *comp = NULL;
    if (img->parsed.n_descs != 1)
        return tkm_err_set(err, -ENOTSUP,
                           "image %s has %zu layers; a Triton cache image has exactly one",
                           img->manifest.digest, img->parsed.n_descs);
    const struct tkm_oci_desc *d = &img->parsed.descs[0];
    if (!tkm_oci_layer_supported(d->media_type, &comp))
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
    char parent[IMG_PATH_MAX], staging[IMG_PATH_MAX], abs_dest[IMG_PATH_MAX], d[IMG_PATH_MAX];
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
    const char *slash = strrchr(d, '/');
    const char *base = slash ? slash + 1 : d;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return tkm_err_set(err, -EINVAL, "extract: '%s' does not name a new directory", dest);
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == d)
        snprintf(parent, sizeof parent, "/");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - d), d);
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
        (rc = tkm_triton_groups_rewrite(staging, mount_path ? mount_path : abs_dest, st, err)))
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

int tkm_oci_extract_layout(const char *layout_dir, const char *tag, const char *dest,
                           const char *mount_path, struct tkm_oci_extract_result *res,
                           struct tkm_err *err)
{
    return tkm_oci_extract_layout_with(layout_dir, tag, dest, mount_path, NULL, res, err);
}

int tkm_oci_extract_layout_with(const char *layout_dir, const char *tag, const char *dest,
                                const char *mount_path, const struct tkm_archive_opts *base,
                                struct tkm_oci_extract_result *res, struct tkm_err *err)
{
    static const char *const include[] = {"io.triton.cache/", NULL};
    struct tkm_oci_pull_result img;
    struct tkm_oci_extract_result r;
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
    ao.include = include;
    ao.strip = "io.triton.cache/";
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
    const char *lb = tkm_oci_config_label(&img.config, "cache.triton.image/cache-size-bytes");
    if (lb)
        tkm_parse_u64(lb, UINT64_MAX, &r.label_bytes);
    r.groups = st.groups;
    r.children = st.children;
    r.missing_children = st.missing_children;
    if (res)
        *res = r;
out:
    tkm_oci_pull_result_release(&img);
    return rc;
}
