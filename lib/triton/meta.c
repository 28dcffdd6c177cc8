/*
 * triton/meta.c - parsing of the files inside a Triton kernel directory:
 * <name>.json metadata, __grp__<name>.json groups, the PTX header and the
 * ELF header of a cubin or hsaco.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/triton/cache.h>
#include <tkm/util.h>

int tkm_triton_is_tmp_name(const char *name)
{
    return strncmp(name, "tmp.pid_", 8) == 0;
}

const char *tkm_ptx_version_str(struct tkm_ptx_version v, char *out, size_t size)
{
    if (v.major < 0)
        snprintf(out, size, "-");
    else
        snprintf(out, size, "%d.%d", v.major, v.minor);
    return out;
}

int tkm_ptx_version_cmp(struct tkm_ptx_version a, struct tkm_ptx_version b)
{
    if (a.major != b.major)
        return a.major < b.major ? -1 : 1;
    if (a.minor != b.minor)
        return a.minor < b.minor ? -1 : 1;
    return 0;
}

void tkm_triton_kernel_release(struct tkm_triton_kernel *k)
{
    if (!k)
        return;
    free(k->dir);
    free(k->json_name);
    free(k->hash);
    free(k->name);
    free(k->triton_version);
    free(k->group_name);
    json_decref(k->env);
    json_decref(k->meta);
    memset(k, 0, sizeof *k);
}

static int int_field(json_t *obj, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);
    *out = -1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
        return -EINVAL;
    *out = (int)json_integer_value(v);
    return 0;
}

/* A key Triton adds for a set cache-invalidating env var: upper case, digits, '_'. */
static int is_env_key(const char *k)
{
    if (!isupper((unsigned char)k[0]))
        return 0;
    for (const char *p = k; *p; p++)
        if (!isupper((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '_')
            return 0;
    return 1;
}

int tkm_triton_target_parse(json_t *t, struct tkm_triton_target *out, int *arch_is_int,
                            const char *what, struct tkm_err *err)
{
    json_t *b = json_object_get(t, "backend");
    json_t *a = json_object_get(t, "arch");
    json_t *w = json_object_get(t, "warp_size");
    if (!json_is_string(b) || json_string_length(b) == 0 ||
        json_string_length(b) >= TKM_TRITON_BACKEND_MAX)
        return tkm_err_set(err, -EINVAL, "%s.backend must be a short non-empty string", what);
    snprintf(out->backend, sizeof out->backend, "%s", json_string_value(b));
    if (json_is_integer(a) && json_integer_value(a) >= 0 && json_integer_value(a) < 100000) {
        snprintf(out->arch, sizeof out->arch, "%lld", (long long)json_integer_value(a));
        if (arch_is_int)
            *arch_is_int = 1;
    } else if (json_is_string(a) && json_string_length(a) > 0 &&
               json_string_length(a) < TKM_TRITON_ARCH_MAX) {
        const char *s = json_string_value(a);
        /* Normalise "sm_90"/"sm90" to "90" as Triton's CUDA backend does. */
        if (strncmp(s, "sm_", 3) == 0)
            s += 3;
        else if (strncmp(s, "sm", 2) == 0 && isdigit((unsigned char)s[2]))
            s += 2;
        snprintf(out->arch, sizeof out->arch, "%s", s);
    } else {
        return tkm_err_set(err, -EINVAL,
                           "%s.arch must be an integer (CUDA, e.g. 90) or a string (HIP, e.g. "
                           "\"gfx90a\")",
                           what);
    }
    if (!json_is_integer(w) || json_integer_value(w) <= 0 || json_integer_value(w) > 1024)
        return tkm_err_set(err, -EINVAL, "%s.warp_size must be a positive integer", what);
    out->warp_size = (int)json_integer_value(w);
    return 0;
}

static char *opt_strdup(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int collect_env(struct tkm_triton_kernel *k)
{
    const char *key;
    json_t *v;
    k->env = json_object();
    if (!k->env)
        return -ENOMEM;
    json_object_foreach(k->meta, key, v)
    {
        if (is_env_key(key) && json_object_set(k->env, key, v) != 0)
            return -ENOMEM;
    }
    return 0;
}

int tkm_triton_meta_parse(struct tkm_triton_kernel *k, const char *text, size_t len,
                          const char *what, struct tkm_err *err)
{
    json_error_t je;
    int rc;
    memset(k, 0, sizeof *k);
    k->ptx.major = -1;
    k->meta = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!k->meta) {
        rc = tkm_err_set(err, -EINVAL, "%s: not valid JSON: %s (line %d, column %d)", what, je.text,
                         je.line, je.column);
        goto out;
    }
    if (!json_is_object(k->meta)) {
        rc = tkm_err_set(err, -EINVAL, "%s: kernel metadata must be a JSON object", what);
        goto out;
    }
    json_t *h = json_object_get(k->meta, "hash");
    if (!h) {
        rc = -ENOENT; /* valid JSON, but not a kernel entry */
        goto out;
    }
    if (!json_is_string(h) || json_string_length(h) == 0 || json_string_length(h) > 256) {
        rc = tkm_err_set(err, -EINVAL, "%s: \"hash\" must be a non-empty string", what);
        goto out;
    }
    json_t *t = json_object_get(k->meta, "target");
    if (!json_is_object(t)) {
        rc = tkm_err_set(err, -ENOTSUP,
                         "%s: no \"target\" object; caches from Triton older than 3.0 are not "
                         "supported",
                         what);
        goto out;
    }
    char tw[300];
    snprintf(tw, sizeof tw, "%.280s: target", what);
    if ((rc = tkm_triton_target_parse(t, &k->target, &k->arch_is_int, tw, err)) != 0)
        goto out;
    if (int_field(k->meta, "num_warps", &k->num_warps) ||
        int_field(k->meta, "num_stages", &k->num_stages) ||
        int_field(k->meta, "num_ctas", &k->num_ctas) ||
        int_field(k->meta, "ptx_version", &k->meta_ptx_version)) {
        rc = tkm_err_set(err, -EINVAL,
                         "%s: num_warps, num_stages, num_ctas and ptx_version must be "
                         "non-negative integers or null",
                         what);
        goto out;
    }
    k->hash = strdup(json_string_value(h));
    k->name = opt_strdup(k->meta, "name");
    k->triton_version = opt_strdup(k->meta, "triton_version");
    if (!k->hash || (json_is_string(json_object_get(k->meta, "name")) && !k->name) ||
        (json_is_string(json_object_get(k->meta, "triton_version")) && !k->triton_version) ||
        collect_env(k)) {
        rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", what);
        goto out;
    }
    return 0;
out:
    tkm_triton_kernel_release(k);
    k->ptx.major = -1;
    return rc;
}

void tkm_triton_group_release(struct tkm_triton_group *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n; i++) {
        free(g->names[i]);
        free(g->paths[i]);
    }
    free(g->names);
    free(g->paths);
    memset(g, 0, sizeof *g);
}

static int plain_name(const char *s)
{
    return s[0] && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && !strchr(s, '/') &&
           strlen(s) < 256;
}

static int group_add(struct tkm_triton_group *g, size_t i, const char *name, const char *path)
{
    g->names[i] = strdup(name);
    g->paths[i] = path ? strdup(path) : NULL;
    if (!g->names[i] || (path && !g->paths[i]))
        return -ENOMEM;
    g->n = i + 1;
    return 0;
}

int tkm_triton_group_parse(struct tkm_triton_group *g, const char *text, size_t len,
                           const char *what, struct tkm_err *err)
{
    json_error_t je;
    json_t *root = NULL, *cp;
    int rc = 0;
    size_t n, i = 0;
    memset(g, 0, sizeof *g);
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rc = tkm_err_set(err, -EINVAL, "%s: not valid JSON: %s (line %d, column %d)", what, je.text,
                         je.line, je.column);
        goto out;
    }
    cp = json_is_object(root) ? json_object_get(root, "child_paths") : NULL;
    if (!json_is_object(cp) && !json_is_array(cp)) {
        rc = tkm_err_set(err, -EINVAL,
                         "%s: a group file needs \"child_paths\", an object of name -> "
                         "absolute path or a list of names",
                         what);
        goto out;
    }
    n = json_is_object(cp) ? json_object_size(cp) : json_array_size(cp);
    g->is_list = json_is_array(cp);
    g->names = calloc(n ? n : 1, sizeof *g->names);
    g->paths = calloc(n ? n : 1, sizeof *g->paths);
    if (!g->names || !g->paths) {
        rc = tkm_err_set(err, -ENOMEM, "%s: out of memory", what);
        goto out;
    }
    if (g->is_list) {
        json_t *v;
        json_array_foreach(cp, i, v)
        {
            if (!json_is_string(v) || !plain_name(json_string_value(v))) {
                rc = tkm_err_set(err, -EINVAL,
                                 "%s: child_paths[%zu] must be a plain file name (no '/', not "
                                 "'.' or '..')",
                                 what, i);
                goto out;
            }
            if ((rc = group_add(g, i, json_string_value(v), NULL)))
                goto out;
        }
    } else {
        const char *key;
        json_t *v;
        json_object_foreach(cp, key, v)
        {
            if (!plain_name(key) || !json_is_string(v)) {
                rc = tkm_err_set(err, -EINVAL,
                                 "%s: child_paths key \"%.64s\" must be a plain file name "
                                 "mapped to a path string",
                                 what, key);
                goto out;
            }
            if ((rc = group_add(g, i++, key, json_string_value(v))))
                goto out;
        }
    }
out:
    if (rc == -ENOMEM)
        tkm_err_set(err, rc, "%s: out of memory", what);
    if (rc)
        tkm_triton_group_release(g);
    json_decref(root);
    return rc;
}

/* Reads "X.Y" at p into v; returns 0 or -EINVAL. */
static int parse_xy(const char *p, const char *end, struct tkm_ptx_version *v)
{
    int major = 0, minor = 0, nd = 0;
    while (p < end && isdigit((unsigned char)*p) && nd < 4)
        major = major * 10 + (*p++ - '0'), nd++;
    if (nd == 0 || p >= end || *p++ != '.')
        return -EINVAL;
    nd = 0;
    while (p < end && isdigit((unsigned char)*p) && nd < 4)
        minor = minor * 10 + (*p++ - '0'), nd++;
    if (nd == 0)
        return -EINVAL;
    v->major = major;
    v->minor = minor;
    return 0;
}

int tkm_ptx_header_parse(const char *text, size_t len, struct tkm_ptx_version *v, char *target,
                         size_t target_size)
{
    const char *p = text, *end = text + (len > 65536 ? 65536 : len);
    int have_version = 0;
    v->major = v->minor = -1;
    if (target_size)
        target[0] = '\0';
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        while (p < le && (*p == ' ' || *p == '\t'))
            p++;
        if (!have_version && le - p > 9 && strncmp(p, ".version", 8) == 0 &&
            (p[8] == ' ' || p[8] == '\t')) {
            const char *q = p + 8;
            while (q < le && (*q == ' ' || *q == '\t'))
                q++;
            if (parse_xy(q, le, v) == 0)
                have_version = 1;
        } else if (le - p > 8 && strncmp(p, ".target", 7) == 0 && (p[7] == ' ' || p[7] == '\t') &&
                   target_size && !target[0]) {
            const char *q = p + 7;
            size_t n = 0;
            while (q < le && (*q == ' ' || *q == '\t'))
                q++;
            while (q + n < le && (isalnum((unsigned char)q[n]) || q[n] == '_'))
                n++;
            snprintf(target, target_size, "%.*s", (int)(n < target_size ? n : target_size - 1), q);
        }
        if (have_version && (!target_size || target[0]))
            break;
        p = eol ? eol + 1 : end;
    }
    return have_version ? 0 : -EINVAL;
}

/* EF_AMDGPU_MACH values (LLVM BinaryFormat/ELF.h) for the GPUs Triton targets. */
static const struct {
    unsigned mach;
    const char *gfx;
} amdgpu_mach[] = {
    {0x2c, "gfx900"},  {0x2f, "gfx906"}, {0x30, "gfx908"},  {0x32, "gfx90c"},  {0x36, "gfx1030"},
    {0x3f, "gfx90a"},  {0x40, "gfx940"}, {0x41, "gfx1100"}, {0x46, "gfx1101"}, {0x47, "gfx1102"},
    {0x48, "gfx1200"}, {0x4b, "gfx941"}, {0x4c, "gfx942"},  {0x4e, "gfx1201"}, {0x4f, "gfx950"},
};

int tkm_elf_gpu_arch(const unsigned char *d, size_t len, char *backend, char *arch, size_t size)
{
    unsigned machine, flags;
    if (len < 52 || memcmp(d, "\177ELF", 4) != 0 || d[5] != 1 /* little endian */)
        return -EINVAL;
    machine = (unsigned)d[18] | (unsigned)d[19] << 8;
    if (d[4] == 2) { /* ELFCLASS64: e_flags at 48 */
        if (len < 64)
            return -EINVAL;
        flags =
            (unsigned)d[48] | (unsigned)d[49] << 8 | (unsigned)d[50] << 16 | (unsigned)d[51] << 24;
    } else if (d[4] == 1) { /* ELFCLASS32: e_flags at 36 */
        flags =
            (unsigned)d[36] | (unsigned)d[37] << 8 | (unsigned)d[38] << 16 | (unsigned)d[39] << 24;
    } else {
        return -EINVAL;
    }
    if (machine == 190) { /* EM_CUDA */
        /* ABI version 7 (CUDA <= 12): SM in the low byte (0x5a0d5a -> 90).
         * ABI version 8 (CUDA 13 ptxas, seen on the inductor fixture):
         * SM in bits 8..15 (0x09005a04 -> 90). */
        unsigned sm = d[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
        snprintf(backend, 16, "cuda");
        snprintf(arch, size, "%u", sm);
        return 0;
    }
    if (machine == 224) { /* EM_AMDGPU */
        for (size_t i = 0; i < TKM_ARRAY_SIZE(amdgpu_mach); i++) {
            if (amdgpu_mach[i].mach == (flags & 0xff)) {
                snprintf(backend, 16, "hip");
                snprintf(arch, size, "%s", amdgpu_mach[i].gfx);
                return 0;
            }
        }
        return -ENOTSUP;
    }
    return -EINVAL;
}
