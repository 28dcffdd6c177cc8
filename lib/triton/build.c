/* build.c - see build.h. */
#include <tkm/triton/build.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <tkm/fs.h>
#include <tkm/buf.h>
#include <tkm/oci/digest.h>
#include <tkm/oci/layout.h>
#include <tkm/triton/cache.h>
#include <tkm/triton/parts.h>
#include <tkm/triton/variants.h>

#define BUILD_OUT_CHUNK (256u << 10)
#define BUILD_MAX_DEPTH 32
#define BUILD_PATH_MAX  4096

/* The tar stream: hashed (diff_id), gzipped, hashed again (digest), written. */
struct layer_writer {
    int fd;
    z_stream z;
    int z_ready;
    struct tkm_oci_hasher diff, blob;
    unsigned char *out;
    uint64_t tar_bytes, blob_bytes, files;
    int io_errno;
    const char *path;
};

static int lw_drain(struct layer_writer *w, int flush)
{
    do {
        w->z.next_out = w->out;
        w->z.avail_out = BUILD_OUT_CHUNK;
        int zr = deflate(&w->z, flush);
        if (zr == Z_STREAM_ERROR)
            return -EIO;
        size_t have = BUILD_OUT_CHUNK - w->z.avail_out;
        if (tkm_oci_hasher_update(&w->blob, w->out, have) != 0)
            return -EIO;
        for (size_t off = 0; off < have;) {
            ssize_t n = write(w->fd, w->out + off, have - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                w->io_errno = errno;
                return -errno;
            }
            off += (size_t)n;
        }
        w->blob_bytes += have;
        if (flush == Z_FINISH && zr == Z_STREAM_END)
            return 0;
    } while (w->z.avail_out == 0 || flush == Z_FINISH);
    return 0;
}

static la_ssize_t lw_write(struct archive *a, void *ud, const void *buf, size_t n)
{
    struct layer_writer *w = ud;
    (void)a;
    if (tkm_oci_hasher_update(&w->diff, buf, n) != 0)
        return -1;
    w->tar_bytes += n;
    w->z.next_in = (Bytef *)(uintptr_t)buf;
    w->z.avail_in = (uInt)n;
    if (lw_drain(w, Z_NO_FLUSH) != 0)
        return -1;
    return (la_ssize_t)n;
}

static int write_header(struct archive *a, const char *name, mode_t type, int mode, uint64_t size,
                        struct tkm_err *err)
{
    struct archive_entry *e = archive_entry_new();
    int rc = 0;
    if (!e)
        return -ENOMEM;
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, (mode_t)mode);
    archive_entry_set_size(e, (la_int64_t)size);
    archive_entry_set_mtime(e, 0, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    if (archive_write_header(a, e) != ARCHIVE_OK)
        rc = tkm_err_set(err, -EIO, "tar header for %s: %s", name, archive_error_string(a));
    archive_entry_free(e);
    return rc;
}

static int write_file(struct archive *a, struct layer_writer *w, int dirfd, const char *name,
                      const char *tarname, const struct stat *st, struct tkm_err *err)
{
    char buf[65536];
    uint64_t left = (uint64_t)st->st_size;
    int rc, fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return tkm_err_set(err, -errno, "open %s: %s", tarname, strerror(errno));
    rc = write_header(a, tarname, AE_IFREG, (st->st_mode & 0111) ? 0755 : 0644, left, err);
    while (rc == 0 && left > 0) {
        ssize_t r = read(fd, buf, left < sizeof buf ? (size_t)left : sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = tkm_err_set(err, r < 0 ? -errno : -EIO, "read %s: %s", tarname,
                             r < 0 ? strerror(errno) : "file shrank while packing");
            break;
        }
        if (archive_write_data(a, buf, (size_t)r) != r)
            rc = tkm_err_set(err, -EIO, "tar data for %s: %s", tarname,
                             w->io_errno ? strerror(w->io_errno) : archive_error_string(a));
        left -= (uint64_t)r;
    }
    w->files++;
    close(fd);
    return rc;
}

/* Packs the directory dirfd as tar directory prefix (no trailing '/'). */
static int walk(struct archive *a, struct layer_writer *w, int dirfd, const char *prefix, int depth,
                struct tkm_err *err)
{
    char **names = NULL, path[BUILD_PATH_MAX];
    size_t n = 0;
    int rc;
    if (depth > BUILD_MAX_DEPTH)
        return tkm_err_set(err, -ELOOP, "%s: deeper than %d levels", prefix, BUILD_MAX_DEPTH);
    if ((rc = tkm_list_dir(dirfd, TKM_LIST_ALL, SIZE_MAX, &names, &n)) != 0) /* sorted */
        return tkm_err_set(err, rc, "read directory %s: %s", prefix, strerror(-rc));
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", prefix, names[i]) >= sizeof path) {
            rc = tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", prefix, names[i]);
            break;
        }
        if (fstatat(dirfd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = tkm_err_set(err, -errno, "stat %s: %s", path, strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            if (tkm_triton_is_tmp_name(names[i]))
                continue;
            int sub = openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                rc = tkm_err_set(err, -errno, "open %s: %s", path, strerror(errno));
                break;
            }
            rc = write_header(a, path, AE_IFDIR, 0755, 0, err);
            if (rc == 0)
                rc = walk(a, w, sub, path, depth + 1, err);
            close(sub);
        } else if (S_ISREG(st.st_mode)) {
            rc = write_file(a, w, dirfd, names[i], path, &st, err);
        } else {
            rc = tkm_err_set(err, -EINVAL,
                             "%s is a %s: a Triton cache holds only directories and regular files",
                             path, S_ISLNK(st.st_mode) ? "symbolic link" : "special file");
        }
    }
    tkm_names_free(names, n);
    return rc;
}

/* io.triton.manifest/manifest.json: one entry per kernel. */
/* A field the kernel's JSON may lack (-1): NULL, which json_pack's o* leaves out. */
static json_t *opt_int(int v)
{
    return v >= 0 ? json_integer(v) : NULL;
}

static int triton_manifest_json(const struct tkm_triton_cache *c, char **out)
{
    json_t *arr = json_array(), *root;
    int bad = !arr;
    for (size_t i = 0; !bad && i < c->n_kernels; i++) {
        const struct tkm_triton_kernel *k = &c->kernels[i];
        json_t *arch = k->arch_is_int ? json_integer(strtol(k->target.arch, NULL, 10))
                                      : json_string(k->target.arch);
        json_t *e = json_pack("{s:s,s:o*,s:o*,s:b,s:s,s:o,s:i,s:o*}", "hash", k->hash, "num_stages",
                              opt_int(k->num_stages), "num_warps", opt_int(k->num_warps), "debug",
                              json_is_true(json_object_get(k->meta, "debug")), "backend",
                              k->target.backend, "arch", arch, "warp_size", k->target.warp_size,
                              "ptx_version", opt_int(k->meta_ptx_version));
        bad = json_array_append_new(arr, e) != 0;
    }
    root = json_pack("{s:o}", "triton", arr); /* steals arr, released on failure */
    *out = root && !bad ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return *out ? 0 : -ENOMEM;
}

/* One part of the layer: a directory packed under prefix, and its manifest. */
struct part {
    const char *dir;      /* NULL: the part is absent */
    const char *prefix;   /* "io.inductor.cache" */
    const char *man_dir;  /* "io.inductor.manifest" */
    const char *manifest; /* the manifest.json text */
};

static int pack_part(struct archive *a, struct layer_writer *w, const struct part *p,
                     struct tkm_err *err)
{
    char name[BUILD_PATH_MAX];
    size_t mlen = strlen(p->manifest);
    int rc, dirfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return tkm_err_set(err, -errno, "open cache directory %s: %s", p->dir, strerror(errno));
    snprintf(name, sizeof name, "%s/manifest.json", p->man_dir);
    if ((rc = write_header(a, p->prefix, AE_IFDIR, 0755, 0, err)) != 0 ||
        (rc = walk(a, w, dirfd, p->prefix, 1, err)) != 0 ||
        (rc = write_header(a, p->man_dir, AE_IFDIR, 0755, 0, err)) != 0 ||
        (rc = write_header(a, name, AE_IFREG, 0644, mlen, err)) != 0)
        goto out;
    if (archive_write_data(a, p->manifest, mlen) != (la_ssize_t)mlen)
        rc = tkm_err_set(err, -EIO, "tar data for %s: %s", name,
                         w->io_errno ? strerror(w->io_errno) : archive_error_string(a));
out:
    close(dirfd);
    return rc;
}

/* Writes the layer blob file into tmp_path; fills w's counters and digests.
 * parts: the Inductor part, the Triton part (manifest filled here), the vLLM
 * part, in this (bytewise) order. */
static int write_layer(const char *cache_dir, const struct tkm_triton_cache *c, struct part *parts,
                       int level, const char *tmp_path, struct layer_writer *w, struct tkm_err *err)
{
    struct archive *a = NULL;
    char *manifest = NULL;
    int rc;
    w->fd = -1;
    if ((rc = triton_manifest_json(c, &manifest)) != 0)
        goto out;
    parts[1].dir = cache_dir;
    parts[1].manifest = manifest;
    if ((rc = tkm_oci_hasher_init(&w->diff)) || (rc = tkm_oci_hasher_init(&w->blob)))
        goto out;
    if (!(w->out = malloc(BUILD_OUT_CHUNK))) {
        rc = -ENOMEM;
        goto out;
    }
    /* windowBits 31: gzip wrapper; zlib writes no name and mtime 0. */
    if (deflateInit2(&w->z, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        rc = -ENOMEM;
        goto out;
    }
    w->z_ready = 1;
    if ((w->fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0) {
        rc = tkm_err_set(err, -errno, "create %s: %s", tmp_path, strerror(errno));
        goto out;
    }
    if (!(a = archive_write_new()) || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_open(a, w, NULL, lw_write, NULL) != ARCHIVE_OK) {
        rc = tkm_err_set(err, -EIO, "tar writer: %s", a ? archive_error_string(a) : "no memory");
        goto out;
    }
    for (int i = 0; i < 3; i++)
        if (parts[i].dir && (rc = pack_part(a, w, &parts[i], err)) != 0)
            goto out;
    if (archive_write_close(a) != ARCHIVE_OK) {
        rc = tkm_err_set(err, -EIO, "tar writer: %s",
                         w->io_errno ? strerror(w->io_errno) : archive_error_string(a));
        goto out;
    }
    w->z.avail_in = 0;
    if ((rc = lw_drain(w, Z_FINISH)) != 0) {
        rc = tkm_err_set(err, rc, "write %s: %s", tmp_path, strerror(-rc));
        goto out;
    }
    if (fsync(w->fd) != 0)
        rc = tkm_err_set(err, -errno, "fsync %s: %s", tmp_path, strerror(errno));
out:
    if (a)
        archive_write_free(a);
    if (w->z_ready)
        deflateEnd(&w->z);
    w->z_ready = 0;
    if (w->fd >= 0 && close(w->fd) != 0 && rc == 0)
        rc = tkm_err_set(err, -errno, "close %s: %s", tmp_path, strerror(errno));
    w->fd = -1;
    free(w->out);
    w->out = NULL;
    free(manifest);
    if (rc)
        unlink(tmp_path);
    return rc;
}

static json_t *config_json(const struct tkm_triton_cache *c, const char *summary, const char *title,
                           const char *created, const char *diff_id, const char *os,
                           const char *arch, json_t *extra)
{
    char count[32], size[32];
    json_t *cfg;
    snprintf(count, sizeof count, "%zu", c->n_kernels);
    snprintf(size, sizeof size, "%llu", (unsigned long long)c->size_bytes);
    cfg = json_pack("{s:s,s:s,s:s,s:{s:s,s:{s:s,s:s,s:s,s:s}},s:{s:s,s:[s]},s:[{s:s,s:s}]}",
                    "created", created, "architecture", arch, "os", os, "config", "WorkingDir", "/",
                    "Labels", "cache.triton.image/cache-size-bytes", size,
                    "cache.triton.image/entry-count", count, "cache.triton.image/summary", summary,
                    "org.opencontainers.image.title", title, "rootfs", "type", "layers", "diff_ids",
                    diff_id, "history", "created", created, "created_by", "tkmctl build");
    if (cfg && extra &&
        json_object_update(json_object_get(json_object_get(cfg, "config"), "Labels"), extra) != 0) {
        json_decref(cfg);
        return NULL;
    }
    return cfg;
}

/* The Inductor and vLLM parts: scans, manifests (owned by the caller: free
 * parts[0].manifest and parts[2].manifest) and their labels into labels. */
static int scan_parts(const struct tkm_triton_build_opts *o, struct part *parts, json_t *labels,
                      struct tkm_triton_build_result *r, struct tkm_err *err)
{
    struct tkm_inductor_info in;
    struct tkm_vllm_info v = {0};
    char *sum = NULL, *abs = NULL;
    json_t *m = NULL;
    int rc = 0;
    if (o->inductor_dir) {
        if ((rc = tkm_inductor_scan(&in, o->inductor_dir, err)) != 0 ||
            (rc = tkm_inductor_facts_apply_flags(&in.facts, o->torch_version, o->cuda_version,
                                                 o->triton_version, o->arch, err)) != 0 ||
            (rc = tkm_inductor_summary_label(&in, &sum, err)) != 0)
            goto out;
        r->inductor_entries = in.fxgraph + in.aotautograd;
        r->inductor_bytes = in.size_bytes;
        /* json_object_set_new fails on a NULL value: no memory, or not UTF-8 */
        if (json_object_set_new(labels, TKM_INDUCTOR_LABEL_SUMMARY, json_string(sum)) ||
            json_object_set_new(labels, TKM_INDUCTOR_LABEL_ENTRY_COUNT,
                                json_sprintf("%llu", (unsigned long long)r->inductor_entries)) ||
            json_object_set_new(labels, TKM_INDUCTOR_LABEL_SIZE,
                                json_sprintf("%llu", (unsigned long long)in.size_bytes))) {
            rc = -ENOMEM;
            goto out;
        }
        struct tkm_buf b = TKM_BUF_INIT(1u << 20);
        if ((rc = tkm_buf_printf(&b, "{\"inductor\":%s}", sum)) == 0 &&
            !(parts[0].manifest = strdup(b.data)))
            rc = -ENOMEM;
        tkm_buf_release(&b);
        if (rc)
            goto out;
        parts[0].dir = o->inductor_dir;
    }
    if (o->vllm_dir) {
        if ((rc = tkm_vllm_scan(&v, o->vllm_dir, err)) != 0)
            goto out;
        if (!(abs = realpath(o->vllm_dir, NULL))) {
            rc = tkm_err_set(err, -errno, "%s: %s", o->vllm_dir, strerror(errno));
            goto out;
        }
        r->vllm_entries = v.entries;
        r->vllm_bytes = v.size_bytes;
        if (json_object_set_new(labels, TKM_VLLM_LABEL_ENTRY_COUNT,
                                json_sprintf("%llu", (unsigned long long)v.entries)) ||
            json_object_set_new(labels, TKM_VLLM_LABEL_SIZE,
                                json_sprintf("%llu", (unsigned long long)v.size_bytes)) ||
            json_object_set_new(labels, TKM_VLLM_LABEL_FORMAT, json_string(v.format)) ||
            json_object_set_new(labels, TKM_VLLM_LABEL_SUMMARY, json_string(v.summary)) ||
            json_object_set_new(labels, TKM_KSERVE_LABEL_CACHE_HASH, json_string(v.hashes)) ||
            json_object_set_new(labels, TKM_KSERVE_LABEL_MOUNT_SUBPATH,
                                json_string("torch_compile_cache")) ||
            json_object_set_new(labels, TKM_KSERVE_LABEL_CACHE_TYPE,
                                json_string("torch-compile")) ||
            json_object_set_new(labels, TKM_KSERVE_LABEL_FRAMEWORK, json_string("vllm")) ||
            json_object_set_new(labels, TKM_KSERVE_LABEL_ROOT_ENV,
                                o->vllm_root_env ? json_string(o->vllm_root_env)
                                                 : json_sprintf("VLLM_CACHE_ROOT=%s", abs))) {
            rc = -ENOMEM;
            goto out;
        }
        json_t *arr = json_array();
        m = json_pack("{s:o}", "vllm", arr);
        for (const char *h = v.hashes; m && *h;) {
            size_t l = strcspn(h, ",");
            json_array_append_new(
                arr, json_pack("{s:s%,s:s}", "vllmHash", h, l, "cacheFormat", v.format));
            h += l + (h[l] == ',');
        }
        if (!m || !(parts[2].manifest = json_dumps(m, JSON_COMPACT))) {
            rc = -ENOMEM;
            goto out;
        }
        parts[2].dir = o->vllm_dir;
    }
out:
    json_decref(m);
    free(sum);
    free(abs);
    tkm_vllm_info_release(&v);
    return rc;
}

static int put_json(const char *layout, json_t *j, const char *mt, struct tkm_oci_desc *d,
                    struct tkm_err *err)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    int rc;
    if (!text)
        return -ENOMEM;
    memset(d, 0, sizeof *d);
    snprintf(d->media_type, sizeof d->media_type, "%s", mt);
    d->size = strlen(text);
    rc = tkm_oci_layout_put_blob(layout, text, strlen(text), d->digest, err);
    free(text);
    return rc;
}

static int platform_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 31)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

/* The variant facts of a one-target cache into v, and its annotations into
 * the manifest man (the index entry gets the same). */
static int variant_of(const struct tkm_triton_cache *c, const struct tkm_triton_build_opts *o,
                      const char *os, const char *arch, struct tkm_variant *v, json_t *man)
{
    const struct tkm_triton_target *t = &c->summary.targets[0].target;
    json_t *ann = json_object_get(man, "annotations");
    int mask = TKM_PART_TRITON | (o->inductor_dir ? TKM_PART_INDUCTOR : 0) |
               (o->vllm_dir ? TKM_PART_VLLM : 0);
    memset(v, 0, sizeof *v);
    snprintf(v->os, sizeof v->os, "%s", os);
    snprintf(v->architecture, sizeof v->architecture, "%s", arch);
    snprintf(v->backend, sizeof v->backend, "%s", t->backend);
    snprintf(v->arch, sizeof v->arch, "%s", t->arch);
    v->warp_size = t->warp_size;
    v->n_targets = 1;
    if (c->summary.n_triton_versions == 1)
        snprintf(v->triton_version, sizeof v->triton_version, "%s", c->summary.triton_versions[0]);
    tkm_variant_parts_str(mask, v->parts, sizeof v->parts);
    return tkm_variant_annotate(v, ann);
}

int tkm_triton_build_cache_image(const char *cache_dir, const char *layout_dir, const char *tag,
                                 const struct tkm_triton_build_opts *opts,
                                 struct tkm_triton_build_result *res, struct tkm_err *err)
{
    struct tkm_triton_build_opts none = {0};
    const struct tkm_triton_build_opts *o = opts ? opts : &none;
    struct tkm_triton_cache cache = {0};
    struct layer_writer w;
    struct tkm_triton_build_result r;
    const char *os = o->os ? o->os : "linux";
    const char *arch = o->architecture ? o->architecture : tkm_oci_host_arch();
    char tmp[BUILD_PATH_MAX], *summary = NULL;
    json_t *cfg = NULL, *man = NULL, *labels = json_object();
    struct part parts[3] = {
        {NULL, TKM_PART_INDUCTOR_PREFIX, TKM_PART_INDUCTOR_MANIFEST, NULL},
        {NULL, TKM_PART_TRITON_PREFIX, TKM_PART_TRITON_MANIFEST, NULL},
        {NULL, TKM_PART_VLLM_PREFIX, TKM_PART_VLLM_MANIFEST, NULL},
    };
    int rc;
    memset(&w, 0, sizeof w);
    memset(&r, 0, sizeof r);
    if ((rc = tkm_triton_cache_scan(&cache, cache_dir, err)) != 0)
        goto out;
    if (cache.n_kernels == 0) {
        rc = tkm_err_set(err, -ENOENT,
                         "%s holds no Triton kernel (no <name>.json with a \"hash\"): is it a "
                         "TRITON_CACHE_DIR?",
                         cache_dir);
        goto out;
    }
    if ((rc = tkm_triton_summary_label(&cache.summary, &summary, err)) != 0)
        goto out;
    if (!platform_valid(os) || !platform_valid(arch)) {
        rc = tkm_err_set(err, -EINVAL,
                         "the platform must be OS/ARCH in OCI spelling "
                         "([a-z0-9_]{1,31} each, e.g. linux/arm64)");
        goto out;
    }
    if (o->variant && cache.summary.n_targets != 1) {
        rc = tkm_err_set(err, -EINVAL,
                         "%s holds kernels for %zu targets; a variant is built for exactly one "
                         "(one TRITON_CACHE_DIR per GPU type): build each target's cache as its "
                         "own variant",
                         cache_dir, cache.summary.n_targets);
        goto out;
    }
    if (!labels) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = scan_parts(o, parts, labels, &r, err)) != 0)
        goto out;
    if ((rc = tkm_oci_layout_init(layout_dir, err)) != 0)
        goto out;
    snprintf(tmp, sizeof tmp, "%s/blobs/.layer-%d.tmp", layout_dir, (int)getpid());
    int level = o->gzip_level >= 1 && o->gzip_level <= 9 ? o->gzip_level : 6;
    if ((rc = write_layer(cache_dir, &cache, parts, level, tmp, &w, err)) != 0)
        goto out;
    snprintf(r.layer.media_type, sizeof r.layer.media_type, "%s", TKM_OCI_MT_LAYER_GZIP);
    r.layer.size = w.blob_bytes;
    if ((rc = tkm_oci_hasher_final(&w.blob, r.layer.digest)) != 0 ||
        (rc = tkm_oci_hasher_final(&w.diff, r.diff_id)) != 0)
        goto out;
    if ((rc = tkm_oci_layout_take_blob(layout_dir, tmp, r.layer.digest, err)) != 0) {
        unlink(tmp);
        goto out;
    }
    cfg =
        config_json(&cache, summary, o->title ? o->title : "triton-kernel-cache",
                    o->created ? o->created : "1970-01-01T00:00:00Z", r.diff_id, os, arch, labels);
    if ((rc = put_json(layout_dir, cfg, TKM_OCI_MT_CONFIG, &r.config, err)) != 0)
        goto out;
    man = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:[{s:s,s:s,s:I}],s:{s:s,s:s}}", "schemaVersion", 2,
                    "mediaType", TKM_OCI_MT_MANIFEST, "config", "mediaType", r.config.media_type,
                    "digest", r.config.digest, "size", (json_int_t)r.config.size, "layers",
                    "mediaType", r.layer.media_type, "digest", r.layer.digest, "size",
                    (json_int_t)r.layer.size, "annotations", "cache.triton.image/variant", "compat",
                    "org.opencontainers.image.title", o->title ? o->title : "triton-kernel-cache");
    if (o->variant && (rc = variant_of(&cache, o, os, arch, &r.variant, man)) != 0)
        goto out;
    if ((rc = put_json(layout_dir, man, TKM_OCI_MT_MANIFEST, &r.manifest, err)) != 0)
        goto out;
    if (!o->untagged && (rc = tkm_oci_layout_add_manifest(layout_dir, &r.manifest, tag, err)) != 0)
        goto out;
    if (o->variant) {
        memcpy(r.variant.digest, r.manifest.digest, sizeof r.variant.digest);
        memcpy(r.variant.media_type, r.manifest.media_type, sizeof r.variant.media_type);
        r.variant.size = r.manifest.size;
    }
    r.entries = cache.n_kernels;
    r.cache_bytes = cache.size_bytes;
    r.tar_bytes = w.tar_bytes;
    r.files = w.files;
    if (res)
        *res = r;
out:
    tkm_oci_hasher_release(&w.diff);
    tkm_oci_hasher_release(&w.blob);
    json_decref(cfg);
    json_decref(man);
    json_decref(labels);
    free((char *)parts[0].manifest);
    free((char *)parts[2].manifest);
    free(summary);
    tkm_triton_cache_release(&cache);
    return rc;
}
