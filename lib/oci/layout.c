/* layout.c - see layout.h. */
#include <tkm/oci/layout.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/fs.h>
#include <tkm/oci/digest.h>

#define LAYOUT_INDEX_MAX (4u << 20)
#define PATH_MAX_LEN     4096

/* Writes p (n bytes) to path atomically: path.tmp-XXXXXX, fsync, rename. */
static int write_file_atomic(const char *path, const void *p, size_t n, struct tkm_err *err)
{
    char tmp[PATH_MAX_LEN];
    int fd, rc = 0;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= sizeof tmp)
        return tkm_err_set(err, -ENAMETOOLONG, "path too long: %.200s", path);
    if ((fd = mkstemp(tmp)) < 0)
        return tkm_err_set(err, -errno, "create %s: %s", tmp, strerror(errno));
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, (const char *)p + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = tkm_err_set(err, -errno, "write %s: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)w;
    }
    if (rc == 0 && fchmod(fd, 0644) != 0)
        rc = tkm_err_set(err, -errno, "chmod %s: %s", tmp, strerror(errno));
    if (rc == 0 && fsync(fd) != 0)
        rc = tkm_err_set(err, -errno, "fsync %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0)
        rc = tkm_err_set(err, -errno, "close %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = tkm_err_set(err, -errno, "rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

static int mkdir_p1(const char *path, struct tkm_err *err)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return tkm_err_set(err, -errno, "mkdir %s: %s", path, strerror(errno));
    return 0;
}

int tkm_oci_layout_is(const char *dir)
{
    char p[PATH_MAX_LEN];
    struct stat st;
    snprintf(p, sizeof p, "%s/oci-layout", dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int tkm_oci_layout_init(const char *dir, struct tkm_err *err)
{
    char p[PATH_MAX_LEN];
    static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
    int rc;
    if (strlen(dir) > PATH_MAX_LEN - 80)
        return tkm_err_set(err, -ENAMETOOLONG, "layout path too long: %.200s", dir);
    if ((rc = mkdir_p1(dir, err)) != 0)
        return rc;
    snprintf(p, sizeof p, "%s/blobs", dir);
    if ((rc = mkdir_p1(p, err)) != 0)
        return rc;
    snprintf(p, sizeof p, "%s/blobs/sha256", dir);
    if ((rc = mkdir_p1(p, err)) != 0)
        return rc;
    if (tkm_oci_layout_is(dir))
        return 0;
    snprintf(p, sizeof p, "%s/oci-layout", dir);
    return write_file_atomic(p, layout, sizeof layout - 1, err);
}

int tkm_oci_layout_blob_path(const char *dir, const char *digest, char *out, size_t n)
{
    if (!tkm_oci_digest_valid(digest))
        return -EINVAL;
    int w = snprintf(out, n, "%s/blobs/sha256/%s", dir, tkm_oci_digest_hex(digest));
    return w < 0 || (size_t)w >= n ? -ENOSPC : 0;
}

int tkm_oci_layout_put_blob(const char *dir, const void *p, size_t n,
                            char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err)
{
    char path[PATH_MAX_LEN];
    int rc = tkm_oci_digest_bytes(p, n, digest);
    if (rc)
        return rc;
    if (tkm_oci_layout_blob_path(dir, digest, path, sizeof path) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "layout path too long: %.200s", dir);
    return write_file_atomic(path, p, n, err);
}

int tkm_oci_layout_take_blob(const char *dir, const char *src, const char *digest,
                             struct tkm_err *err)
{
    char path[PATH_MAX_LEN];
    if (tkm_oci_layout_blob_path(dir, digest, path, sizeof path) != 0)
        return tkm_err_set(err, -EINVAL, "layout %s: bad blob digest '%.80s'", dir, digest);
    if (rename(src, path) != 0)
        return tkm_err_set(err, -errno, "rename %s to %s: %s", src, path, strerror(errno));
    return 0;
}

int tkm_oci_layout_verify_blob(const char *dir, const struct tkm_oci_desc *d, struct tkm_err *err)
{
    char path[PATH_MAX_LEN], got[TKM_OCI_DIGEST_LEN + 1];
    uint64_t size = 0;
    int rc;
    if (tkm_oci_layout_blob_path(dir, d->digest, path, sizeof path) != 0)
        return tkm_err_set(err, -EINVAL, "layout %s: bad blob digest '%.80s'", dir, d->digest);
    if ((rc = tkm_oci_digest_file(path, got, &size, err)) != 0)
        return rc;
    if (size != d->size)
        return tkm_err_set(err, -EBADMSG, "layout blob %s: %llu bytes, the descriptor says %llu",
                           d->digest, (unsigned long long)size, (unsigned long long)d->size);
    if (strcmp(got, d->digest) != 0)
        return tkm_err_set(err, -EBADMSG, "layout blob %s: digest mismatch: %s hashes to %s",
                           d->digest, path, got);
    return 0;
}

int tkm_oci_layout_read_blob(const char *dir, const struct tkm_oci_desc *d, struct tkm_buf *out,
                             struct tkm_err *err)
{
    char path[PATH_MAX_LEN], got[TKM_OCI_DIGEST_LEN + 1];
    int rc;
    if (tkm_oci_layout_blob_path(dir, d->digest, path, sizeof path) != 0)
        return tkm_err_set(err, -EINVAL, "layout %s: bad blob digest '%.80s'", dir, d->digest);
    if (d->size > out->max)
        return tkm_err_set(err, -E2BIG, "layout blob %s: %llu bytes exceed the %zu byte limit",
                           d->digest, (unsigned long long)d->size, out->max);
    if ((rc = tkm_read_file(path, SIZE_MAX, out, "layout file", err)) != 0)
        return rc;
    if ((rc = tkm_oci_digest_bytes(out->data, out->len, got)) != 0)
        return rc;
    if (out->len != d->size || strcmp(got, d->digest) != 0) {
        rc = tkm_err_set(err, -EBADMSG,
                         "layout blob %s: %s holds %zu bytes hashing to %s (expected %llu bytes)",
                         d->digest, path, out->len, got, (unsigned long long)d->size);
        tkm_buf_reset(out);
    }
    return rc;
}

static int load_index(const char *dir, json_t **out, struct tkm_err *err)
{
    char path[PATH_MAX_LEN];
    struct tkm_buf b = TKM_BUF_INIT(LAYOUT_INDEX_MAX);
    json_error_t je;
    int rc;
    snprintf(path, sizeof path, "%s/index.json", dir);
    rc = tkm_read_file(path, SIZE_MAX, &b, "layout file", err);
    if (rc == -ENOENT) {
        tkm_err_clear(err);
        *out = json_pack("{s:i,s:s,s:[]}", "schemaVersion", 2, "mediaType", TKM_OCI_MT_INDEX,
                         "manifests");
        rc = *out ? 0 : -ENOMEM;
        goto out;
    }
    if (rc)
        goto out;
    *out = json_loadb(b.data, b.len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(*out) || !json_is_array(json_object_get(*out, "manifests"))) {
        json_decref(*out);
        *out = NULL;
        rc = tkm_err_set(err, -EINVAL, "%s: not an image index: %s", path, je.text);
    }
out:
    tkm_buf_release(&b);
    return rc;
}

int tkm_oci_layout_add_manifest(const char *dir, const struct tkm_oci_desc *d, const char *tag,
                                struct tkm_err *err)
{
    json_t *idx = NULL, *desc = NULL;
    char path[PATH_MAX_LEN], *text = NULL;
    int rc = load_index(dir, &idx, err);
    if (rc)
        return rc;
    json_t *arr = json_object_get(idx, "manifests");
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e)
    {
        const char *rn = json_string_value(json_object_get(json_object_get(e, "annotations"),
                                                           "org.opencontainers.image.ref.name"));
        if (rn && tag && strcmp(rn, tag) == 0) {
            json_array_remove(arr, i);
            break;
        }
    }
    desc = json_pack("{s:s,s:s,s:I}", "mediaType", d->media_type, "digest", d->digest, "size",
                     (json_int_t)d->size);
    if (desc && tag)
        json_object_set_new(desc, "annotations",
                            json_pack("{s:s}", "org.opencontainers.image.ref.name", tag));
    if (!desc || json_array_append_new(arr, desc) != 0) {
        rc = -ENOMEM;
        goto out;
    }
    if (!(text = json_dumps(idx, JSON_COMPACT))) {
        rc = -ENOMEM;
        goto out;
    }
    snprintf(path, sizeof path, "%s/index.json", dir);
    rc = write_file_atomic(path, text, strlen(text), err);
out:
    free(text);
    json_decref(idx);
    return rc;
}

/* A manifest blob named by its digest (an image index's entry): its
 * descriptor from the verified blob (size, media type). */
static int find_by_digest(const char *dir, const char *digest, struct tkm_oci_desc *out,
                          struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    struct tkm_oci_manifest m = {0};
    struct tkm_oci_desc d = {0};
    char path[PATH_MAX_LEN];
    struct stat st;
    int rc;
    if (tkm_oci_layout_blob_path(dir, digest, path, sizeof path) != 0 || stat(path, &st) != 0)
        return tkm_err_set(err, -ENOENT, "layout %s: no blob %s", dir, digest);
    memcpy(d.digest, digest, sizeof d.digest);
    d.size = (uint64_t)st.st_size;
    if ((rc = tkm_oci_layout_read_blob(dir, &d, &b, err)) == 0 &&
        (rc = tkm_oci_manifest_parse(&m, NULL, b.data, b.len, path, err)) == 0) {
        snprintf(d.media_type, sizeof d.media_type, "%s", m.media_type);
        *out = d;
    }
    tkm_oci_manifest_release(&m);
    tkm_buf_release(&b);
    return rc;
}

int tkm_oci_layout_find(const char *dir, const char *tag, struct tkm_oci_desc *out,
                        struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(LAYOUT_INDEX_MAX);
    struct tkm_oci_manifest idx = {0};
    char path[PATH_MAX_LEN];
    int rc;
    if (!tkm_oci_layout_is(dir))
        return tkm_err_set(err, -ENOENT, "%s is not an OCI image layout (no oci-layout file)", dir);
    if (tag && tkm_oci_digest_valid(tag))
        return find_by_digest(dir, tag, out, err);
    snprintf(path, sizeof path, "%s/index.json", dir);
    if ((rc = tkm_read_file(path, SIZE_MAX, &b, "layout file", err)) != 0)
        goto out;
    if ((rc = tkm_oci_manifest_parse(&idx, NULL, b.data, b.len, path, err)) != 0)
        goto out;
    if (idx.kind != TKM_OCI_KIND_INDEX) {
        rc = tkm_err_set(err, -EINVAL, "%s: not an image index", path);
        goto out;
    }
    rc = -ENOENT;
    for (size_t i = 0; i < idx.n_descs; i++) {
        if (tag ? strcmp(idx.descs[i].ref_name, tag) == 0 : idx.n_descs == 1) {
            *out = idx.descs[i];
            rc = 0;
            break;
        }
    }
    if (rc)
        rc = tkm_err_set(err, -ENOENT,
                         tag ? "%s: no manifest tagged '%s'"
                             : "%s: %s%zu manifests: name one with --tag",
                         path, tag ? tag : "", idx.n_descs);
out:
    tkm_oci_manifest_release(&idx);
    tkm_buf_release(&b);
    return rc;
}
