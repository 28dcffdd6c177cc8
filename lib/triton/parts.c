/* triton/parts.c - see triton/parts.h. */
#include <tkm/triton/parts.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/fs.h>
#include <tkm/gpu/compat.h>
#include <tkm/util.h>

#include "pathf-int.h"

#define PARTS_MAX_DEPTH   16
#define PARTS_SNIFF_BYTES (64u << 20) /* the biggest file read to find a version */

/* ---- a walk over regular files ----------------------------------------------- */

struct walk_file {
    const char *rel;  /* path relative to the walked root */
    const char *path; /* absolute-ish path: root/rel */
    const struct stat *st;
    int depth; /* 1 for a file directly under the root */
};
typedef int (*walk_cb)(void *ud, const struct walk_file *f, struct tkm_err *err);

static int walk(const char *root, const char *rel, int depth, walk_cb cb, void *ud,
                struct tkm_err *err)
{
    char dir[PATH_MAX], **names = NULL;
    size_t n = 0;
    int rc, fd = -1;
    if (depth > PARTS_MAX_DEPTH)
        return tkm_err_set(err, -ELOOP, "%s/%s: deeper than %d levels", root, rel, PARTS_MAX_DEPTH);
    if (tkm_pathf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", root, rel);
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return tkm_err_set(err, -errno, "open directory %s: %s", dir, strerror(errno));
    if ((rc = tkm_list_dir(fd, TKM_LIST_ALL, SIZE_MAX, &names, &n)) != 0) {
        rc = tkm_err_set(err, rc, "read directory %s: %s", dir, strerror(-rc));
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char r[PATH_MAX], p[PATH_MAX];
        struct stat st;
        if (tkm_pathf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", names[i]) != 0 ||
            tkm_pathf(p, sizeof p, "%s/%s", dir, names[i]) != 0) {
            rc = tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", dir, names[i]);
            break;
        }
        if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = tkm_err_set(err, -errno, "stat %s: %s", p, strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            if (!tkm_triton_is_tmp_name(names[i]))
                rc = walk(root, r, depth + 1, cb, ud, err);
        } else if (S_ISREG(st.st_mode)) {
            struct walk_file wf = {.rel = r, .path = p, .st = &st, .depth = depth + 1};
            rc = cb(ud, &wf, err);
        } else {
            rc = tkm_err_set(err, -EINVAL,
                             "%s is a %s: a cache holds only directories and regular files", p,
                             S_ISLNK(st.st_mode) ? "symbolic link" : "special file");
        }
    }
out:
    tkm_names_free(names, n);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* ---- Inductor ------------------------------------------------------------------ */

/* Copies the text after key up to the end of the line (or a quote) into out. */
static int grab_after(const char *data, size_t len, const char *key, const char *stops, char *out,
                      size_t size)
{
    const char *p = memmem(data, len, key, strlen(key));
    size_t i = 0;
    if (!p)
        return 0;
    p += strlen(key);
    while (p < data + len && !strchr(stops, *p) && i + 1 < size && (unsigned char)*p >= 0x20)
        out[i++] = *p++;
    while (i > 0 && out[i - 1] == ' ')
        i--;
    out[i] = '\0';
    return i > 0;
}

static void set_fact(char *dst, size_t size, char *from, const char *value)
{
    snprintf(dst, size, "%s", value);
    snprintf(from, 8, "cache");
}

/* "# torch version: 2.11.0+cu130" and "# torch cuda version: 13.0" (FX graph
 * entries carry the repro header of the generated code). */
static void sniff_torch(struct tkm_inductor_facts *f, const char *d, size_t n)
{
    char v[64];
    if (!f->torch_version[0] && grab_after(d, n, "# torch version: ", "\n", v, sizeof v))
        set_fact(f->torch_version, sizeof f->torch_version, f->torch_from, v);
    if (!f->cuda_version[0] &&
        (grab_after(d, n, "# torch cuda version: ", "\n", v, sizeof v) ||
         grab_after(d, n, "# torch hip version: ", "\n", v, sizeof v)) &&
        strcmp(v, "None") != 0)
        set_fact(f->cuda_version, sizeof f->cuda_version, f->cuda_from, v);
}

/* AOTAutograd's key details: system_info[version]: {'triton': '<triton_key>'},
 * triton_key = __version__ + 64 hex + '-' + ...: the version is the first
 * '-' segment less its 64 hex digits. */
static void sniff_triton_key(struct tkm_inductor_facts *f, const char *d, size_t n)
{
    char v[128];
    if (f->triton_version[0] || !grab_after(d, n, "{'triton': '", "-'\n", v, sizeof v))
        return;
    size_t l = strlen(v);
    if (l <= 64)
        return;
    for (size_t i = l - 64; i < l; i++)
        if (!strchr("0123456789abcdef", v[i]))
            return;
    v[l - 64] = '\0';
    set_fact(f->triton_version, sizeof f->triton_version, f->triton_from, v);
}

/* Generated code: DeviceProperties(type='cuda', ..., cc=90, ..., warp_size=32). */
static void sniff_device(struct tkm_inductor_facts *f, const char *d, size_t n)
{
    const char *p = memmem(d, n, "DeviceProperties(type='", 23);
    char v[32];
    if (f->arch[0] || !p)
        return;
    size_t left = (size_t)(d + n - p);
    const char *end = memchr(p, ')', left);
    if (!end)
        return;
    left = (size_t)(end - p);
    if (!grab_after(p, left, "type='", "'", v, sizeof v))
        return;
    snprintf(f->backend, sizeof f->backend, "%s", v);
    if (grab_after(p, left, "cc=", ",)", v, sizeof v)) {
        char *q = v;
        size_t l = strlen(q);
        if (l >= 2 && q[0] == '\'' && q[l - 1] == '\'') { /* ROCm: cc='gfx942' */
            q[l - 1] = '\0';
            q++;
        }
        set_fact(f->arch, sizeof f->arch, f->arch_from, q);
    }
    if (grab_after(p, left, "warp_size=", ",)", v, sizeof v)) {
        int64_t w;
        if (tkm_parse_i64(v, 1, 1024, &w) == 0)
            f->warp_size = (int)w;
    }
}

static int sniff_file(struct tkm_inductor_facts *f, const char *path, int kind, struct tkm_err *err)
{
    struct tkm_buf b = TKM_BUF_INIT(PARTS_SNIFF_BYTES);
    int rc = tkm_read_file(path, PARTS_SNIFF_BYTES, &b, "Inductor cache file", err);
    if (rc == -E2BIG) /* too big to look into: not an error, the facts stay unknown */
        rc = 0;
    else if (rc == 0 && kind == 0)
        sniff_torch(f, b.data, b.len);
    else if (rc == 0 && kind == 1)
        sniff_triton_key(f, b.data, b.len);
    else if (rc == 0)
        sniff_device(f, b.data, b.len);
    tkm_buf_release(&b);
    return rc;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int inductor_file(void *ud, const struct walk_file *wf, struct tkm_err *err)
{
    struct tkm_inductor_info *in = ud;
    struct tkm_inductor_facts *f = &in->facts;
    in->files++;
    in->size_bytes += (uint64_t)wf->st->st_size;
    if (strncmp(wf->rel, "triton/", 7) == 0)
        return 0; /* scanned as Triton caches */
    if (strncmp(wf->rel, "fxgraph/", 8) == 0 && wf->depth == 4) {
        in->fxgraph++;
        if (!f->torch_version[0] || !f->cuda_version[0])
            return sniff_file(f, wf->path, 0, err);
    } else if (strncmp(wf->rel, "aotautograd/", 12) == 0 && wf->depth == 3) {
        in->aotautograd++;
        if (!f->triton_version[0])
            return sniff_file(f, wf->path, 1, err);
    } else if (wf->depth == 2 && has_suffix(wf->rel, ".py")) {
        in->code_files++;
        if (!f->arch[0])
            return sniff_file(f, wf->path, 2, err);
    } else if (has_suffix(wf->rel, ".best_config")) {
        in->best_configs++;
    }
    return 0;
}

/* The subdirectories of the directory t (no symlink followed), at most max:
 * 0 with *n = 0 when t does not exist, else as tkm_list_dir with err naming t. */
static int subdirs(const char *t, size_t max, char ***names, size_t *n, struct tkm_err *err)
{
    int rc, fd;
    *names = NULL;
    *n = 0;
    if ((fd = open(t, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return errno == ENOENT ? 0 : tkm_err_set(err, -errno, "open %s: %s", t, strerror(errno));
    rc = tkm_list_dir(fd, TKM_LIST_DIRS, max, names, n);
    close(fd);
    return rc ? tkm_err_set(err, rc, "read directory %s: %s", t, strerror(-rc)) : 0;
}

/* Calls cb(ud, rel/<name>) for each subdirectory of root/rel (at most 4096;
 * none when it does not exist). */
static int each_subdir(const char *root, const char *rel,
                       int (*cb)(void *ud, const char *rel, struct tkm_err *err), void *ud,
                       struct tkm_err *err)
{
    char t[PATH_MAX], r[PATH_MAX], **names = NULL;
    size_t n = 0;
    int rc;
    if (tkm_pathf(t, sizeof t, "%s/%s", root, rel) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", root, rel);
    if ((rc = subdirs(t, 4096, &names, &n, err)) != 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = tkm_pathf(r, sizeof r, "%s/%s", rel, names[i]) != 0
                 ? tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", t, names[i])
                 : cb(ud, r, err);
    tkm_names_free(names, n);
    return rc;
}

struct inductor_tc {
    const char *dir;
    struct tkm_inductor_info *in;
};

/* One of Inductor's own triton/<device>/ caches: its kernel count, and the
 * Triton version and target where the code did not say. */
static int inductor_triton_cache(void *ud, const char *rel, struct tkm_err *err)
{
    struct inductor_tc *x = ud;
    struct tkm_inductor_facts *f = &x->in->facts;
    struct tkm_triton_cache c = {0};
    char d[PATH_MAX];
    int rc;
    if (tkm_pathf(d, sizeof d, "%s/%s", x->dir, rel) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", x->dir, rel);
    if ((rc = tkm_triton_cache_scan(&c, d, err)) == 0) {
        x->in->triton_kernels += c.n_kernels;
        if (c.summary.n_triton_versions > 0 && !f->triton_version[0])
            set_fact(f->triton_version, sizeof f->triton_version, f->triton_from,
                     c.summary.triton_versions[0]);
        if (c.summary.n_targets > 0 && !f->arch[0]) {
            const struct tkm_triton_target *tg = &c.summary.targets[0].target;
            snprintf(f->backend, sizeof f->backend, "%s", tg->backend);
            set_fact(f->arch, sizeof f->arch, f->arch_from, tg->arch);
            f->warp_size = tg->warp_size;
        }
    }
    tkm_triton_cache_release(&c);
    return rc;
}

int tkm_inductor_scan(struct tkm_inductor_info *in, const char *dir, struct tkm_err *err)
{
    int rc;
    memset(in, 0, sizeof *in);
    struct inductor_tc tc = {.dir = dir, .in = in};
    if ((rc = walk(dir, "", 0, inductor_file, in, err)) != 0 ||
        (rc = each_subdir(dir, "triton", inductor_triton_cache, &tc, err)) != 0) {
        memset(in, 0, sizeof *in);
        return rc;
    }
    if (in->fxgraph + in->aotautograd + in->code_files == 0) {
        memset(in, 0, sizeof *in);
        return tkm_err_set(err, -ENOENT,
                           "%s holds no FX graph, AOTAutograd or generated-code entry: is it a "
                           "TORCHINDUCTOR_CACHE_DIR?",
                           dir);
    }
    return 0;
}

static int apply_one(char *dst, size_t size, char *from, const char *flag, const char *what,
                     struct tkm_err *err)
{
    if (!flag || !*flag)
        return 0;
    if (dst[0] && strcmp(dst, flag) != 0)
        return tkm_err_set(err, -EINVAL,
                           "--%s %s contradicts the Inductor cache, which records %s %s", what,
                           flag, what, dst);
    if (!dst[0]) {
        snprintf(dst, size, "%s", flag);
        snprintf(from, 8, "flag");
    }
    return 0;
}

int tkm_inductor_facts_apply_flags(struct tkm_inductor_facts *f, const char *torch_version,
                                   const char *cuda_version, const char *triton_version,
                                   const char *arch, struct tkm_err *err)
{
    int rc;
    if ((rc = apply_one(f->torch_version, sizeof f->torch_version, f->torch_from, torch_version,
                        "torch-version", err)) ||
        (rc = apply_one(f->cuda_version, sizeof f->cuda_version, f->cuda_from, cuda_version,
                        "cuda-version", err)) ||
        (rc = apply_one(f->triton_version, sizeof f->triton_version, f->triton_from, triton_version,
                        "triton-version", err)))
        return rc;
    if (arch && *arch && !f->arch[0]) {
        /* "90" -> cuda, warp 32; "gfx942" -> hip, warp 64 */
        int hip = strncmp(arch, "gfx", 3) == 0;
        snprintf(f->backend, sizeof f->backend, "%s", hip ? "hip" : "cuda");
        f->warp_size = hip ? 64 : 32;
    }
    return apply_one(f->arch, sizeof f->arch, f->arch_from, arch, "arch", err);
}

int tkm_inductor_summary_label(const struct tkm_inductor_info *in, char **out, struct tkm_err *err)
{
    const struct tkm_inductor_facts *f = &in->facts;
    json_t *targets = json_array(), *root;
    *out = NULL;
    if (targets && f->arch[0])
        json_array_append_new(targets, json_pack("{s:s,s:s,s:i}", "backend", f->backend, "arch",
                                                 f->arch, "warp_size", f->warp_size));
    root = json_pack("{s:s,s:s,s:s,s:o,s:{s:s,s:s,s:s,s:s},s:I,s:I,s:I,s:I}", "torch_version",
                     f->torch_version, "cuda_version", f->cuda_version, "triton_version",
                     f->triton_version, "targets", targets, "sources", "torch_version",
                     f->torch_from, "cuda_version", f->cuda_from, "triton_version", f->triton_from,
                     "arch", f->arch_from, "fxgraph", (json_int_t)in->fxgraph, "aotautograd",
                     (json_int_t)in->aotautograd, "code_files", (json_int_t)in->code_files,
                     "triton_kernels", (json_int_t)in->triton_kernels);
    if (root)
        *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    return *out ? 0 : tkm_err_set(err, -ENOMEM, "out of memory");
}

static int copy_str(json_t *o, const char *key, char *dst, size_t size, const char *label,
                    struct tkm_err *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_string(v) || strlen(json_string_value(v)) >= size)
        return tkm_err_set(err, -EINVAL, "%s: \"%s\" is not a string of at most %zu bytes", label,
                           key, size - 1);
    snprintf(dst, size, "%s", json_string_value(v));
    return 0;
}

int tkm_inductor_summary_parse(struct tkm_inductor_info *in, const char *label, struct tkm_err *err)
{
    static const char *const L = TKM_INDUCTOR_LABEL_SUMMARY;
    struct tkm_inductor_facts *f = &in->facts;
    json_error_t je;
    json_t *root = json_loads(label, JSON_REJECT_DUPLICATES, &je), *t, *src;
    int rc = 0;
    memset(in, 0, sizeof *in);
    if (!json_is_object(root)) {
        rc = tkm_err_set(err, -EINVAL, "%s: not a JSON object%s%s", L, root ? "" : ": ",
                         root ? "" : je.text);
        goto out;
    }
    if ((rc = copy_str(root, "torch_version", f->torch_version, sizeof f->torch_version, L, err)) ||
        (rc = copy_str(root, "cuda_version", f->cuda_version, sizeof f->cuda_version, L, err)) ||
        (rc =
             copy_str(root, "triton_version", f->triton_version, sizeof f->triton_version, L, err)))
        goto out;
    t = json_object_get(root, "targets");
    if (t && (!json_is_array(t) || json_array_size(t) > 1)) {
        rc = tkm_err_set(err, -EINVAL, "%s: \"targets\" must be an array of at most one target", L);
        goto out;
    }
    if (json_array_size(t) == 1) {
        json_t *o = json_array_get(t, 0), *w = json_object_get(o, "warp_size");
        if ((rc = copy_str(o, "backend", f->backend, sizeof f->backend, L, err)) ||
            (rc = copy_str(o, "arch", f->arch, sizeof f->arch, L, err)))
            goto out;
        if (w &&
            (!json_is_integer(w) || json_integer_value(w) < 0 || json_integer_value(w) > 1024)) {
            rc = tkm_err_set(err, -EINVAL, "%s: \"warp_size\" is not a small integer", L);
            goto out;
        }
        f->warp_size = (int)json_integer_value(w);
    }
    if ((src = json_object_get(root, "sources")) != NULL &&
        ((rc = copy_str(src, "torch_version", f->torch_from, sizeof f->torch_from, L, err)) ||
         (rc = copy_str(src, "cuda_version", f->cuda_from, sizeof f->cuda_from, L, err)) ||
         (rc = copy_str(src, "triton_version", f->triton_from, sizeof f->triton_from, L, err)) ||
         (rc = copy_str(src, "arch", f->arch_from, sizeof f->arch_from, L, err))))
        goto out;
    in->fxgraph = (uint64_t)json_integer_value(json_object_get(root, "fxgraph"));
    in->aotautograd = (uint64_t)json_integer_value(json_object_get(root, "aotautograd"));
    in->code_files = (uint64_t)json_integer_value(json_object_get(root, "code_files"));
    in->triton_kernels = (uint64_t)json_integer_value(json_object_get(root, "triton_kernels"));
out:
    json_decref(root);
    return rc;
}

static int major_of(const char *v)
{
    int64_t m = -1;
    char buf[16];
    size_t i = 0;
    while (v[i] && v[i] != '.' && i + 1 < sizeof buf) {
        buf[i] = v[i];
        i++;
    }
    buf[i] = '\0';
    if (i == 0 || tkm_parse_i64(buf, 0, 1000, &m) != 0)
        return -1;
    return (int)m;
}

int tkm_inductor_compat_check(const struct tkm_inductor_facts *f, const struct tkm_gpu *g,
                              char *reason, size_t rs)
{
    if (!g->usable) {
        snprintf(reason, rs, "GPU %d cannot be used: %s", g->index,
                 g->reason[0] ? g->reason : "no driver reported it");
        return 0;
    }
    if (!f->arch[0] || !f->backend[0]) {
        snprintf(reason, rs,
                 "the Inductor part records no GPU arch (no DeviceProperties in its code, no "
                 "Triton kernel; tkmctl build --arch)");
        return 0;
    }
    if (!f->torch_version[0]) {
        snprintf(reason, rs,
                 "the Inductor part records no torch version (its FX graph entries carry none; "
                 "tkmctl build --torch-version)");
        return 0;
    }
    if (strcmp(f->backend, g->backend) != 0) {
        snprintf(reason, rs, "backend mismatch: Inductor part built for %s, GPU %d is %s",
                 f->backend, g->index, g->backend[0] ? g->backend : "unknown");
        return 0;
    }
    if (strcmp(f->arch, g->arch) != 0) {
        snprintf(reason, rs, "arch mismatch: Inductor part built for %s%s, GPU %d is %s%s",
                 strcmp(f->backend, "cuda") == 0 ? "sm" : "", f->arch, g->index,
                 strcmp(g->backend, "cuda") == 0 ? "sm" : "", g->arch[0] ? g->arch : "unknown");
        return 0;
    }
    if (f->warp_size > 0 && g->warp_size > 0 && f->warp_size != g->warp_size) {
        snprintf(reason, rs, "warp size mismatch: Inductor part built for %d, GPU %d has %d",
                 f->warp_size, g->index, g->warp_size);
        return 0;
    }
    if (strcmp(f->backend, "cuda") == 0) {
        int need = f->cuda_version[0] ? major_of(f->cuda_version) : -1;
        int have = g->cuda_version[0] ? major_of(g->cuda_version) : -1;
        if (need < 0) {
            snprintf(reason, rs,
                     "the Inductor part records no CUDA version (tkmctl build --cuda-version)");
            return 0;
        }
        if (have < 0) {
            snprintf(reason, rs, "GPU %d: the driver's CUDA version is unknown", g->index);
            return 0;
        }
        if (have < need) {
            snprintf(
                reason, rs, "torch %s was built for CUDA %s; GPU %d's driver %s supports CUDA %s",
                f->torch_version, f->cuda_version, g->index, g->driver_version, g->cuda_version);
            return 0;
        }
    }
    snprintf(reason, rs, "compatible: Inductor part of torch %s (%s %s, Triton %s) for %s%s",
             f->torch_version, strcmp(f->backend, "cuda") == 0 ? "CUDA" : "ROCm",
             f->cuda_version[0] ? f->cuda_version : "?",
             f->triton_version[0] ? f->triton_version : "unknown",
             strcmp(f->backend, "cuda") == 0 ? "sm" : "", f->arch);
    return 1;
}

void tkm_inductor_compat_combine(const struct tkm_inductor_facts *f, const struct tkm_gpu *g,
                                 struct tkm_compat_verdict *v)
{
    char why[512];
    size_t l = strlen(v->reason);
    if (!v->compatible)
        return;
    if (!tkm_inductor_compat_check(f, g, why, sizeof why)) {
        v->compatible = 0;
        snprintf(v->reason, sizeof v->reason, "Inductor part: %s", why);
    } else if (l + 20 < sizeof v->reason) {
        snprintf(v->reason + l, sizeof v->reason - l, "; Inductor part %s", why);
    }
}

/* ---- vLLM --------------------------------------------------------------------- */

struct vllm_walk {
    struct tkm_vllm_info *v;
    int binary;
};

static int vllm_file(void *ud, const struct walk_file *wf, struct tkm_err *err)
{
    struct vllm_walk *w = ud;
    (void)err;
    w->v->files++;
    w->v->size_bytes += (uint64_t)wf->st->st_size;
    const char *b = strrchr(wf->rel, '/');
    if (strcmp(b ? b + 1 : wf->rel, "cache_key_factors.json") == 0)
        w->binary = 1;
    return 0;
}

static int add_target(json_t *targets, const struct tkm_triton_target *t)
{
    size_t i;
    json_t *o;
    json_array_foreach(targets, i, o)
    {
        if (!strcmp(json_string_value(json_object_get(o, "backend")), t->backend) &&
            !strcmp(json_string_value(json_object_get(o, "arch")), t->arch) &&
            json_integer_value(json_object_get(o, "warp_size")) == t->warp_size)
            return 0;
    }
    return json_array_append_new(targets, json_pack("{s:s,s:s,s:i}", "backend", t->backend, "arch",
                                                    t->arch, "warp_size", t->warp_size));
}

/* Every dir named triton_cache under dir (relative paths, depth-limited). */
static int find_triton_caches(const char *root, const char *rel, int depth,
                              int (*cb)(void *ud, const char *rel, struct tkm_err *err), void *ud,
                              struct tkm_err *err)
{
    char d[PATH_MAX], **names = NULL;
    size_t n = 0;
    int rc = 0;
    if (depth > 6)
        return 0;
    if (tkm_pathf(d, sizeof d, "%s%s%s", root, *rel ? "/" : "", rel) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", root, rel);
    if ((rc = subdirs(d, 100000, &names, &n, err)) != 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char r[PATH_MAX];
        if (tkm_triton_is_tmp_name(names[i]))
            continue;
        if (tkm_pathf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", names[i]) != 0) {
            rc = tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", d, names[i]);
            break;
        }
        rc = strcmp(names[i], "triton_cache") == 0
                 ? cb(ud, r, err)
                 : find_triton_caches(root, r, depth + 1, cb, ud, err);
    }
    tkm_names_free(names, n);
    return rc;
}

struct vllm_tc {
    const char *root;
    struct tkm_vllm_info *v;
    json_t *targets;
};

static int vllm_triton_cache(void *ud, const char *rel, struct tkm_err *err)
{
    struct vllm_tc *t = ud;
    struct tkm_triton_cache c = {0};
    char d[PATH_MAX];
    int rc;
    if (tkm_pathf(d, sizeof d, "%s/%s", t->root, rel) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", t->root, rel);
    if ((rc = tkm_triton_cache_scan(&c, d, err)) == 0) {
        t->v->triton_kernels += c.n_kernels;
        for (size_t i = 0; i < c.summary.n_targets && rc == 0; i++)
            if (add_target(t->targets, &c.summary.targets[i].target) != 0)
                rc = -ENOMEM;
    }
    tkm_triton_cache_release(&c);
    return rc;
}

static int vllm_hashes(struct tkm_vllm_info *v, const char *dir, struct tkm_err *err)
{
    char t[PATH_MAX], **names = NULL;
    size_t n = 0, used = 0;
    int rc, fd;
    if (tkm_pathf(t, sizeof t, "%s/torch_compile_cache", dir) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    if ((fd = open(t, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return tkm_err_set(err, errno == ENOENT ? -ENOENT : -errno,
                           "%s has no torch_compile_cache/ directory: is it a VLLM_CACHE_ROOT?",
                           dir);
    rc = tkm_list_dir(fd, TKM_LIST_DIRS, 100000, &names, &n);
    close(fd);
    if (rc)
        return tkm_err_set(err, rc, "read directory %s: %s", t, strerror(-rc));
    for (size_t i = 0; i < n; i++) {
        if (tkm_triton_is_tmp_name(names[i]))
            continue;
        v->entries++;
        int w =
            snprintf(v->hashes + used, sizeof v->hashes - used, "%s%s", used ? "," : "", names[i]);
        if (w < 0 || (size_t)w >= sizeof v->hashes - used) {
            v->hashes[used] = '\0'; /* the label lists the hashes that fit */
            used = sizeof v->hashes - 1;
        } else {
            used += (size_t)w;
        }
    }
    tkm_names_free(names, n);
    if (v->entries == 0)
        return tkm_err_set(err, -ENOENT, "%s: no cache hash directory in it", t);
    return 0;
}

int tkm_vllm_scan(struct tkm_vllm_info *v, const char *dir, struct tkm_err *err)
{
    struct vllm_walk w = {.v = v};
    json_t *targets = json_array(), *root = NULL;
    struct vllm_tc tc = {.root = dir, .v = v, .targets = targets};
    int rc;
    memset(v, 0, sizeof *v);
    if (!targets)
        return -ENOMEM;
    if ((rc = vllm_hashes(v, dir, err)) != 0 || (rc = walk(dir, "", 0, vllm_file, &w, err)) != 0 ||
        (rc = find_triton_caches(dir, "", 0, vllm_triton_cache, &tc, err)) != 0)
        goto out;
    snprintf(v->format, sizeof v->format, "%s",
             w.binary            ? "binary"
             : v->triton_kernels ? "triton"
                                 : "unpacked");
    root = json_pack("{s:O}", "targets", targets);
    if (!root || !(v->summary = json_dumps(root, JSON_COMPACT)))
        rc = -ENOMEM;
out:
    json_decref(root);
    json_decref(targets);
    if (rc)
        tkm_vllm_info_release(v);
    return rc;
}

void tkm_vllm_info_release(struct tkm_vllm_info *v)
{
    if (!v)
        return;
    free(v->summary);
    memset(v, 0, sizeof *v);
}

/* ---- layout ------------------------------------------------------------------ */

int tkm_parts_from_config(const struct tkm_oci_config *config)
{
    int p = 0;
    if (tkm_oci_config_label(config, "cache.triton.image/summary"))
        p |= TKM_PART_TRITON;
    if (tkm_oci_config_label(config, TKM_INDUCTOR_LABEL_SUMMARY))
        p |= TKM_PART_INDUCTOR;
    if (tkm_oci_config_label(config, TKM_VLLM_LABEL_ENTRY_COUNT))
        p |= TKM_PART_VLLM;
    return p;
}

const char *const *tkm_parts_rename_pairs(void)
{
    static const char *const pairs[] = {TKM_PART_TRITON_PREFIX "/",
                                        TKM_PART_TRITON_DIR "/",
                                        TKM_PART_INDUCTOR_PREFIX "/",
                                        TKM_PART_INDUCTOR_DIR "/",
                                        TKM_PART_VLLM_PREFIX "/",
                                        TKM_PART_VLLM_DIR "/",
                                        NULL};
    return pairs;
}

int tkm_parts_is_root(const char *dir)
{
    static const char *const subs[] = {TKM_PART_TRITON_DIR, TKM_PART_INDUCTOR_DIR,
                                       TKM_PART_VLLM_DIR};
    for (size_t i = 0; i < 3; i++) {
        char p[PATH_MAX];
        struct stat st;
        if (tkm_pathf(p, sizeof p, "%s/%s", dir, subs[i]) == 0 && lstat(p, &st) == 0 &&
            S_ISDIR(st.st_mode))
            return 1;
    }
    return 0;
}

struct rw {
    const char *root, *out, *new_root;
    struct tkm_triton_rewrite_stats sum;
};

/* Rewrites root/rel into out/rel for new_root/rel. */
static int rewrite_rel(void *ud, const char *rel, struct tkm_err *err)
{
    struct rw *r = ud;
    struct tkm_triton_rewrite_stats st = {0};
    char c[PATH_MAX], o[PATH_MAX], n[PATH_MAX];
    int rc;
    if (tkm_pathf(c, sizeof c, "%s/%s", r->root, rel) != 0 ||
        tkm_pathf(o, sizeof o, "%s/%s", r->out, rel) != 0 ||
        tkm_pathf(n, sizeof n, "%s/%s", strcmp(r->new_root, "/") ? r->new_root : "", rel) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", r->out, rel);
    if (strcmp(r->out, r->root) != 0 && (rc = tkm_mkdir_p(o, 0755, err)) != 0)
        return rc;
    if ((rc = tkm_triton_groups_rewrite_to(c, o, n, &st, err)) != 0)
        return rc;
    r->sum.groups += st.groups;
    r->sum.children += st.children;
    r->sum.missing_children += st.missing_children;
    return 0;
}

int tkm_parts_groups_rewrite_to(const char *root, const char *out_dir, const char *new_root,
                                struct tkm_triton_rewrite_stats *stats, struct tkm_err *err)
{
    struct rw r = {.root = root, .out = out_dir};
    char p[PATH_MAX], nr[PATH_MAX];
    struct stat st;
    int rc;
    if (!tkm_parts_is_root(root))
        return tkm_triton_groups_rewrite_to(root, out_dir, new_root, stats, err);
    if (new_root[0] != '/')
        return tkm_err_set(err, -EINVAL, "new cache root \"%s\" must be an absolute path",
                           new_root);
    size_t nl = strlen(new_root);
    while (nl > 1 && new_root[nl - 1] == '/')
        nl--;
    if (nl >= sizeof nr)
        return tkm_err_set(err, -ENAMETOOLONG, "new cache root: path too long");
    memcpy(nr, new_root, nl);
    nr[nl] = '\0';
    r.new_root = nr;
    if (tkm_pathf(p, sizeof p, "%s/" TKM_PART_TRITON_DIR, root) == 0 && lstat(p, &st) == 0 &&
        S_ISDIR(st.st_mode) && (rc = rewrite_rel(&r, TKM_PART_TRITON_DIR, err)) != 0)
        return rc;
    if ((rc = each_subdir(root, TKM_PART_INDUCTOR_DIR "/triton", rewrite_rel, &r, err)) != 0 ||
        (rc = find_triton_caches(root, TKM_PART_VLLM_DIR, 1, rewrite_rel, &r, err)) != 0)
        return rc;
    if (stats)
        *stats = r.sum;
    return 0;
}
