/*
 * paths.c - tkm-csi's pure checks: volume ids, names, paths, overlay options,
 * the volume attributes and /proc/self/mountinfo. See csi.h.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/fs.h>
#include <tkm/triton/parts.h>
#include <tkm/util.h>

#include "csi.h"

int csi_check_volume_id(const char *id, struct tkm_err *err)
{
    char esc[64];
    size_t n = id ? strlen(id) : 0;
    if (n == 0)
        return tkm_err_set(err, -EINVAL, "volume_id is empty");
    if (n > CSI_VOLUME_ID_MAX)
        return tkm_err_set(err, -EINVAL, "volume_id is %zu characters (at most %d)", n,
                           CSI_VOLUME_ID_MAX);
    if (strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
        return tkm_err_set(err, -EINVAL, "volume_id \"%s\" is not allowed", id);
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return tkm_err_set(err, -EINVAL,
                               "volume_id \"%s\" has a character other than A-Z a-z 0-9 . _ -",
                               tkm_escape(id, n, esc, sizeof(esc)));
    }
    return 0;
}

int csi_check_k8s_name(const char *name, size_t max, const char *what, struct tkm_err *err)
{
    char esc[96];
    size_t n = name ? strlen(name) : 0;
    if (n == 0)
        return tkm_err_set(err, -EINVAL, "%s is empty", what);
    if (n > max)
        return tkm_err_set(err, -EINVAL, "%s is %zu characters (at most %zu)", what, n, max);
    if (max <= 63 ? tkm_dns1123_label(name, n) : tkm_dns1123_subdomain(name, n))
        return 0;
    return tkm_err_set(err, -EINVAL, "%s \"%s\" is not a Kubernetes name (a-z 0-9 - .)", what,
                       tkm_escape(name, n, esc, sizeof(esc)));
}

int csi_check_abs_path(const char *path, const char *what, struct tkm_err *err)
{
    char esc[128];
    size_t n = path ? strlen(path) : 0;
    if (n == 0)
        return tkm_err_set(err, -EINVAL, "%s is empty", what);
    const char *e = tkm_escape(path, n, esc, sizeof(esc));
    if (path[0] != '/')
        return tkm_err_set(err, -EINVAL, "%s \"%s\" is not an absolute path", what, e);
    if (n >= PATH_MAX)
        return tkm_err_set(err, -EINVAL, "%s is %zu bytes long (PATH_MAX is %d)", what, n,
                           PATH_MAX);
    if (n > 1 && path[n - 1] == '/')
        return tkm_err_set(err, -EINVAL, "%s \"%s\" ends in '/'", what, e);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c < 0x20 || c == 0x7f)
            return tkm_err_set(err, -EINVAL, "%s \"%s\" has a control character", what, e);
    }
    for (const char *p = path; *p;) {
        const char *c = p + 1, *end = strchr(c, '/');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (n > 1 &&
            (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.')))
            return tkm_err_set(err, -EINVAL,
                               "%s \"%s\" is not canonical (an empty, \".\" or \"..\" component)",
                               what, e);
        if (!end)
            break;
        p = end;
    }
    return 0;
}

int csi_check_option_path(const char *path, const char *what, struct tkm_err *err)
{
    char esc[128];
    int rc = csi_check_abs_path(path, what, err);
    if (rc < 0)
        return rc;
    if (strpbrk(path, ",:\\="))
        return tkm_err_set(err, -EINVAL,
                           "%s \"%s\" has one of , : \\ = (overlayfs option separators; such "
                           "paths are refused)",
                           what, tkm_escape(path, strlen(path), esc, sizeof(esc)));
    return 0;
}

const char *csi_target_root(const char *target, const char *const *roots, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t rl = strlen(roots[i]);
        if (rl == 1 && roots[i][0] == '/')
            rl = 0; /* "/" itself: everything below it */
        if (strncmp(target, roots[i], rl) == 0 && target[rl] == '/' && target[rl + 1] != '\0')
            return roots[i];
    }
    return NULL;
}

int csi_overlay_opts(struct tkm_buf *out, enum csi_mode mode, const char *vol_dir,
                     const char *const *stores, size_t n, struct tkm_err *err)
{
    int rc;
    tkm_buf_reset(out);
    if ((rc = csi_check_option_path(vol_dir, "volume directory", err)) < 0)
        return rc;
    if (mode != CSI_MODE_COPY && (n == 0 || n > CSI_MAX_STORES))
        return tkm_err_set(err, -EINVAL, "overlay options for %s: %zu store paths (1 to %d)",
                           vol_dir, n, CSI_MAX_STORES);
    rc = tkm_buf_printf(out, "lowerdir=%s/groups", vol_dir);
    for (size_t i = 0; rc == 0 && mode != CSI_MODE_COPY && i < n; i++) {
        if ((rc = csi_check_option_path(stores[i], "store path", err)) < 0)
            return rc;
        rc = tkm_buf_printf(out, ":%s", stores[i]);
    }
    if (rc == 0 && mode != CSI_MODE_STRICT)
        rc = tkm_buf_printf(out, ",upperdir=%s/upper,workdir=%s/work", vol_dir, vol_dir);
    if (rc == 0 && out->len >= 4096)
        rc = -E2BIG;
    if (rc < 0)
        return tkm_err_set(err, rc, "overlay options for %s: %s", vol_dir,
                           rc == -E2BIG ? "longer than a page (4096 bytes)" : strerror(-rc));
    return 0;
}

int csi_answer_check(struct csi_answer *a, const char *store_path, char *const *store_paths,
                     size_t n_store_paths, int empty, char *const *parts, size_t n_parts,
                     struct tkm_err *err)
{
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {{TKM_PART_TRITON_DIR, TKM_PART_TRITON},
                 {TKM_PART_INDUCTOR_DIR, TKM_PART_INDUCTOR},
                 {TKM_PART_VLLM_DIR, TKM_PART_VLLM}};
    char esc[128], what[64];
    unsigned seen = 0;
    int has_one = store_path && store_path[0];
    memset(a, 0, sizeof(*a));
    for (size_t i = 0; i < n_parts; i++) {
        size_t k = 0;
        while (k < TKM_ARRAY_SIZE(known) && strcmp(parts[i], known[k].name) != 0)
            k++;
        if (k == TKM_ARRAY_SIZE(known))
            return tkm_err_set(err, -EPROTO,
                               "tkm-agent answered the part \"%s\" (known: triton, inductor, vllm)",
                               tkm_escape(parts[i], strlen(parts[i]), esc, sizeof(esc)));
        if (seen & known[k].bit)
            return tkm_err_set(err, -EPROTO, "tkm-agent answered the part %s twice", known[k].name);
        seen |= known[k].bit;
    }
    if (empty) {
        if (has_one || n_store_paths > 0)
            return tkm_err_set(err, -EPROTO,
                               "tkm-agent answered Materialize with both empty and a store path");
        a->empty = 1;
        a->parts = seen == TKM_PART_TRITON ? 0 : seen;
        return 0;
    }
    if (n_store_paths == 0) { /* an agent that predates store_paths */
        if (!has_one)
            return tkm_err_set(err, -EPROTO, "tkm-agent answered Materialize without a store path");
        store_paths = (char *const *)&store_path;
        n_store_paths = 1;
    }
    if (n_store_paths > CSI_MAX_STORES)
        return tkm_err_set(err, -EPROTO,
                           "tkm-agent answered %zu store directories; a volume mounts at most %d",
                           n_store_paths, CSI_MAX_STORES);
    if (has_one && strcmp(store_paths[0], store_path) != 0)
        return tkm_err_set(err, -EPROTO,
                           "tkm-agent answered a store path that is not its first store directory");
    for (size_t i = 0; i < n_store_paths; i++) {
        snprintf(what, sizeof(what), i ? "the agent's store path %zu" : "the agent's store path",
                 i + 1);
        int rc = csi_check_option_path(store_paths[i], what, err);
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(store_paths[j], store_paths[i]) == 0)
                return tkm_err_set(err, -EPROTO, "tkm-agent answered the store path %s twice",
                                   store_paths[i]);
        a->stores[i] = store_paths[i];
    }
    a->n_stores = n_store_paths;
    return 0;
}

static int parse_one(struct csi_attrs *a, const char *k, const char *v, const char **ro,
                     const char **eph, struct tkm_err *err)
{
    char esc[96];
    if (strcmp(k, "cacheName") == 0)
        a->cache_name = v;
    else if (strcmp(k, "cacheImage") == 0)
        a->cache_image = v;
    else if (strcmp(k, "mountPath") == 0)
        a->mount_path = v;
    else if (strcmp(k, "readOnly") == 0)
        *ro = v;
    else if (strcmp(k, "csi.storage.k8s.io/pod.namespace") == 0)
        a->pod_namespace = v;
    else if (strcmp(k, "csi.storage.k8s.io/pod.name") == 0)
        a->pod_name = v;
    else if (strcmp(k, "csi.storage.k8s.io/pod.uid") == 0)
        a->pod_uid = v;
    else if (strcmp(k, "csi.storage.k8s.io/ephemeral") == 0)
        *eph = v;
    else if (strncmp(k, "csi.storage.k8s.io/", 19) == 0)
        ; /* other pod info kubelet may add (serviceAccount.name, ...) */
    else
        return tkm_err_set(err, -EINVAL,
                           "unknown volume attribute \"%s\" (known: cacheName, cacheImage, "
                           "readOnly, mountPath)",
                           tkm_escape(k, strlen(k), esc, sizeof(esc)));
    return 0;
}

int csi_attrs_parse(struct csi_attrs *a, const char *const *keys, const char *const *values,
                    size_t n, int readonly, struct tkm_err *err)
{
    const char *ro = NULL, *eph = NULL;
    char esc[96];
    int rc;
    memset(a, 0, sizeof(*a));
    for (size_t i = 0; i < n; i++)
        if ((rc = parse_one(a, keys[i], values[i], &ro, &eph, err)) < 0)
            return rc;
    if (!a->pod_namespace || !a->pod_name || !a->pod_uid)
        return tkm_err_set(err, -EINVAL,
                           "no pod info in the volume context (csi.storage.k8s.io/pod.namespace, "
                           "pod.name, pod.uid): the CSIDriver object must set podInfoOnMount: "
                           "true");
    if (!eph || strcmp(eph, "true") != 0)
        return tkm_err_set(err, -EINVAL,
                           "csi.tkm.io serves only ephemeral inline volumes (csi: in the pod's "
                           "volumes), not PersistentVolumes");
    if ((rc = csi_check_k8s_name(a->pod_namespace, 63, "pod namespace", err)) < 0 ||
        (rc = csi_check_k8s_name(a->pod_name, 253, "pod name", err)) < 0)
        return rc;
    if (a->pod_uid[0] == '\0')
        return tkm_err_set(err, -EINVAL, "csi.storage.k8s.io/pod.uid is empty");
    if (a->cache_name && a->cache_image)
        return tkm_err_set(err, -EINVAL,
                           "volume attributes cacheName and cacheImage are both "
                           "set: name the cache by one of them");
    if (!a->cache_name && !a->cache_image)
        return tkm_err_set(err, -EINVAL, "volume attribute cacheName (or cacheImage) is required");
    if (a->cache_name && (rc = csi_check_k8s_name(a->cache_name, 253, "cacheName", err)) < 0)
        return rc;
    if (a->cache_image && (a->cache_image[0] == '\0' || strlen(a->cache_image) > 512))
        return tkm_err_set(err, -EINVAL, "volume attribute cacheImage must be 1-512 characters");
    if (a->mount_path && (rc = csi_check_abs_path(a->mount_path, "mountPath", err)) < 0)
        return rc;
    a->mode = readonly ? CSI_MODE_STRICT : CSI_MODE_OVERLAY;
    if (ro && strcmp(ro, "true") == 0)
        a->mode = CSI_MODE_STRICT;
    else if (ro && strcmp(ro, "false") == 0) {
        if (readonly)
            return tkm_err_set(err, -EINVAL,
                               "readOnly: \"false\" asks for a writable copy, but the pod's volume "
                               "is readOnly: true");
        a->mode = CSI_MODE_COPY;
    } else if (ro)
        return tkm_err_set(err, -EINVAL,
                           "volume attribute readOnly is \"%s\" (\"true\" or \"false\")",
                           tkm_escape(ro, strlen(ro), esc, sizeof(esc)));
    return 0;
}

/* Undoes mountinfo's octal escapes (\040 space, \011 tab, \012 newline,
 * \134 backslash) of the n bytes at s into a new string. */
static char *unescape(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    size_t j = 0;
    if (!o)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 3 < n + 1 && s[i + 1] >= '0' && s[i + 1] <= '3' &&
            s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
            o[j++] = (char)((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            o[j++] = s[i];
        }
    }
    o[j] = '\0';
    return o;
}

/* Splits one mountinfo line (len bytes) into the mount point (field 5), and
 * after the " - " separator the fstype and source. 0 or -EINVAL. */
static int split_line(const char *line, size_t len, const char *f[3], size_t fl[3])
{
    const char *p = line, *end = line + len;
    int field = 0, after = 0;
    while (p < end) {
        while (p < end && *p == ' ')
            p++;
        const char *s = p;
        while (p < end && *p != ' ')
            p++;
        if (p == s)
            break;
        size_t l = (size_t)(p - s);
        field++;
        if (!after && field == 5) {
            f[0] = s;
            fl[0] = l;
        } else if (!after && field > 6 && l == 1 && s[0] == '-') {
            after = 1;
            field = 0;
        } else if (after && field == 1) {
            f[1] = s;
            fl[1] = l;
        } else if (after && field == 2) {
            f[2] = s;
            fl[2] = l;
            return 0;
        }
    }
    return -EINVAL;
}

void csi_mount_release(struct csi_mount *m)
{
    if (!m)
        return;
    free(m->mount_point);
    free(m->fstype);
    free(m->source);
    memset(m, 0, sizeof(*m));
}

int csi_mountinfo_find(const char *text, const char *mount_point, struct csi_mount *m)
{
    const char *found[3] = {NULL, NULL, NULL};
    size_t flen[3] = {0, 0, 0};
    memset(m, 0, sizeof(*m));
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *f[3] = {NULL, NULL, NULL};
        size_t fl[3] = {0, 0, 0};
        if (split_line(p, len, f, fl) == 0) {
            char *mp = unescape(f[0], fl[0]);
            if (!mp)
                return -ENOMEM;
            if (strcmp(mp, mount_point) == 0) {
                memcpy(found, f, sizeof(found));
                memcpy(flen, fl, sizeof(flen));
            }
            free(mp);
        }
        if (!nl)
            break;
        p = nl + 1;
    }
    if (!found[0])
        return 0;
    m->mount_point = unescape(found[0], flen[0]);
    m->fstype = unescape(found[1], flen[1]);
    m->source = unescape(found[2], flen[2]);
    if (!m->mount_point || !m->fstype || !m->source) {
        csi_mount_release(m);
        return -ENOMEM;
    }
    return 1;
}

int csi_mountinfo_has_source(const char *text, const char *src)
{
    size_t sl = strlen(src);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *f[3] = {NULL, NULL, NULL};
        size_t fl[3] = {0, 0, 0};
        /* Our sources are plain [A-Za-z0-9._:-]: no escapes to undo. */
        if (split_line(p, len, f, fl) == 0 && fl[2] == sl && memcmp(f[2], src, sl) == 0)
            return 1;
        if (!nl)
            break;
        p = nl + 1;
    }
    return 0;
}

int csi_mountinfo_read(struct tkm_buf *out, struct tkm_err *err)
{
    /* /proc files report size 0: tkm_read_file reads to EOF, capped. */
    return tkm_read_file("/proc/self/mountinfo", 64u << 20, out, "mountinfo", err);
}
