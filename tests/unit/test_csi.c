/* test_csi.c - tkm-csi's checks and filesystem helpers (csi/paths.c, csi/fsops.c).
 * The driver end to end: tests/e2e/csi_publish.sh and csi_sanity.sh. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <tkm/triton/parts.h>

#include "csi.h"
#include "node_manifest.h"
#include "test.h"

/* tkm-csi's --agent-socket default (main.c uses CSI_DEFAULT_AGENT_SOCKET) is what the
 * DaemonSet passes to both containers (unit.agent.socket_default_matches_manifest checks
 * the agent's side). */
TEST(agent_socket_default_matches_manifest)
{
    char agent_sock[512], csi_sock[512];
    node_manifest_arg("tkm-csi", "--agent-socket", csi_sock, sizeof csi_sock);
    node_manifest_arg("tkm-agent", "--socket", agent_sock, sizeof agent_sock);
    ASSERT_STREQ(csi_sock, CSI_DEFAULT_AGENT_SOCKET);
    ASSERT_STREQ(agent_sock, CSI_DEFAULT_AGENT_SOCKET);
}

TEST(volume_id)
{
    struct tkm_err err = {0};
    char big[CSI_VOLUME_ID_MAX + 2];
    ASSERT_OK(csi_check_volume_id("csi-0123abcdef", NULL));
    ASSERT_OK(csi_check_volume_id("sanity-node-full-ABC_1.2", NULL));
    ASSERT_EQ(csi_check_volume_id("", NULL), -EINVAL);
    ASSERT_EQ(csi_check_volume_id("..", NULL), -EINVAL);
    ASSERT_EQ(csi_check_volume_id("a/b", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "volume_id \"a/b\" has a character");
    ASSERT_EQ(csi_check_volume_id("a b", NULL), -EINVAL);
    ASSERT_EQ(csi_check_volume_id("a:b", NULL), -EINVAL);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ASSERT_EQ(csi_check_volume_id(big, NULL), -EINVAL);
    big[CSI_VOLUME_ID_MAX] = '\0';
    ASSERT_OK(csi_check_volume_id(big, NULL));
}

TEST(k8s_names)
{
    struct tkm_err err = {0};
    ASSERT_OK(csi_check_k8s_name("ml-team", 63, "namespace", NULL));
    ASSERT_OK(csi_check_k8s_name("pod.with.dots-1", 253, "pod name", NULL));
    ASSERT_EQ(csi_check_k8s_name("..", 253, "pod name", NULL), -EINVAL);
    ASSERT_EQ(csi_check_k8s_name("a..b", 253, "pod name", NULL), -EINVAL);
    ASSERT_EQ(csi_check_k8s_name("-a", 63, "namespace", NULL), -EINVAL);
    ASSERT_EQ(csi_check_k8s_name("A", 63, "namespace", NULL), -EINVAL);
    ASSERT_EQ(csi_check_k8s_name("a-.b", 253, "cacheName", NULL), -EINVAL);
    ASSERT_EQ(csi_check_k8s_name("a.b", 63, "namespace", NULL), -EINVAL); /* a label */
    ASSERT_EQ(csi_check_k8s_name("a/b", 63, "namespace", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "namespace \"a/b\" is not a Kubernetes name");
}

TEST(abs_and_option_paths)
{
    struct tkm_err err = {0};
    ASSERT_OK(csi_check_abs_path("/", "p", NULL));
    ASSERT_OK(
        csi_check_abs_path("/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/v/mount", "p", NULL));
    ASSERT_EQ(csi_check_abs_path("rel/x", "target_path", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "target_path \"rel/x\" is not an absolute path");
    ASSERT_EQ(csi_check_abs_path("/a/../b", "p", NULL), -EINVAL);
    ASSERT_EQ(csi_check_abs_path("/a/./b", "p", NULL), -EINVAL);
    ASSERT_EQ(csi_check_abs_path("/a//b", "p", NULL), -EINVAL);
    ASSERT_EQ(csi_check_abs_path("/a/b/", "p", NULL), -EINVAL);
    ASSERT_EQ(csi_check_abs_path("/a/..", "p", NULL), -EINVAL);
    ASSERT_EQ(csi_check_abs_path("/a\n/b", "p", NULL), -EINVAL);
    ASSERT_OK(csi_check_abs_path("/a/..b/c.", "p", NULL));
    /* Option paths: the overlay separators are refused. */
    ASSERT_OK(csi_check_option_path("/var/run/tkm/caches", "p", NULL));
    const char *bad[] = {"/a,b", "/a:b", "/a\\b", "/a=b", "/x/lowerdir=y"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tkm_err e = {0};
        ASSERT_EQ(csi_check_option_path(bad[i], "store path", &e), -EINVAL);
        ASSERT_STRCONTAINS(e.msg, "overlayfs option separators");
    }
}

TEST(target_root)
{
    const char *roots[] = {"/var/lib/kubelet/pods", "/tmp/t"};
    ASSERT_STREQ(csi_target_root("/var/lib/kubelet/pods/u/v/mount", roots, 2),
                 "/var/lib/kubelet/pods");
    ASSERT_STREQ(csi_target_root("/tmp/t/x", roots, 2), "/tmp/t");
    ASSERT_NULL(csi_target_root("/var/lib/kubelet/pods", roots, 2));
    ASSERT_NULL(csi_target_root("/var/lib/kubelet/podsX/a", roots, 2));
    ASSERT_NULL(csi_target_root("/tmp/tt/x", roots, 2));
    ASSERT_NULL(csi_target_root("/etc", roots, 2));
    const char *slash[] = {"/"};
    ASSERT_STREQ(csi_target_root("/a", slash, 1), "/");
}

TEST(overlay_opts)
{
    struct tkm_buf b = TKM_BUF_INIT(8192);
    struct tkm_err err = {0};
    char vol[1500]; /* three times in the options: over a page */
    const char *one[] = {"/store/sha256-ab/tcache"}, *s[] = {"/s"},
               *smuggle[] = {"/s,upperdir=/etc"}, *colon[] = {"/a:/etc"};
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_OVERLAY, "/run/c/ns/p/v", one, 1, NULL));
    ASSERT_STREQ(b.data, "lowerdir=/run/c/ns/p/v/groups:/store/sha256-ab/tcache,upperdir=/run/c/"
                         "ns/p/v/upper,workdir=/run/c/ns/p/v/work");
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_STRICT, "/run/c/ns/p/v", s, 1, NULL));
    ASSERT_STREQ(b.data, "lowerdir=/run/c/ns/p/v/groups:/s");
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_COPY, "/run/c/ns/p/v", NULL, 0, NULL));
    ASSERT_STREQ(b.data, "lowerdir=/run/c/ns/p/v/groups,upperdir=/run/c/ns/p/v/upper,workdir=/run/"
                         "c/ns/p/v/work");
    /* A store path that would smuggle options in is refused, not escaped. */
    ASSERT_EQ(csi_overlay_opts(&b, CSI_MODE_OVERLAY, "/run/v", smuggle, 1, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "store path");
    ASSERT_EQ(csi_overlay_opts(&b, CSI_MODE_STRICT, "/run/v", colon, 1, NULL), -EINVAL);
    /* Longer than a page: mount(2) would cut it. */
    memset(vol, 'a', sizeof(vol) - 1);
    vol[0] = '/';
    vol[sizeof(vol) - 1] = '\0';
    for (size_t i = 200; i < sizeof(vol) - 1; i += 200)
        vol[i] = '/';
    ASSERT_EQ(csi_overlay_opts(&b, CSI_MODE_OVERLAY, vol, s, 1, NULL), -E2BIG);
    tkm_buf_release(&b);
}

/* Several store dirs (one per variant): one overlay, groups on top, the stores in order. */
TEST(overlay_opts_stores)
{
    struct tkm_buf b = TKM_BUF_INIT(8192);
    struct tkm_err err = {0};
    const char *two[] = {"/store/sha256-aa/tcache", "/store/sha256-bb/tcache"};
    const char *bad2[] = {"/store/a", "/store/b,upperdir=/etc"};
    const char *many[CSI_MAX_STORES + 1];
    char names[CSI_MAX_STORES + 1][32];
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_OVERLAY, "/run/v", two, 2, NULL));
    ASSERT_STREQ(b.data, "lowerdir=/run/v/groups:/store/sha256-aa/tcache:/store/sha256-bb/tcache,"
                         "upperdir=/run/v/upper,workdir=/run/v/work");
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_STRICT, "/run/v", two, 2, NULL));
    ASSERT_STREQ(b.data, "lowerdir=/run/v/groups:/store/sha256-aa/tcache:/store/sha256-bb/tcache");
    /* The copy holds the union in upper: no store in the options. */
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_COPY, "/run/v", two, 2, NULL));
    ASSERT_STREQ(b.data, "lowerdir=/run/v/groups,upperdir=/run/v/upper,workdir=/run/v/work");
    /* Every store is checked, not only the first. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_overlay_opts(&b, CSI_MODE_OVERLAY, "/run/v", bad2, 2, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "/store/b,upperdir=/etc");
    /* No store, or more than the cap, in a mode that mounts stores. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_overlay_opts(&b, CSI_MODE_OVERLAY, "/run/v", NULL, 0, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "0 store paths (1 to 16)");
    for (size_t i = 0; i <= CSI_MAX_STORES; i++) {
        snprintf(names[i], sizeof(names[i]), "/store/s%zu", i);
        many[i] = names[i];
    }
    ASSERT_OK(csi_overlay_opts(&b, CSI_MODE_STRICT, "/run/v", many, CSI_MAX_STORES, NULL));
    ASSERT_STRCONTAINS(b.data, ":/store/s15");
    tkm_err_clear(&err);
    ASSERT_EQ(csi_overlay_opts(&b, CSI_MODE_STRICT, "/run/v", many, CSI_MAX_STORES + 1, &err),
              -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "17 store paths");
    tkm_buf_release(&b);
}

/* The agent's MaterializeResponse: store_paths, empty, parts. */
TEST(answer_check)
{
    struct csi_answer a;
    struct tkm_err err = {0};
    char *two[] = {"/store/a/tcache", "/store/b/tcache"}, *dup[] = {"/s/a", "/s/a"};
    char *bad[] = {"/s/a", "/s/b:/etc"}, *rel[] = {"s/a"};
    char *many[CSI_MAX_STORES + 1], names[CSI_MAX_STORES + 1][32];
    char *triton[] = {"triton"}, *three[] = {"inductor", "triton", "vllm"};
    char *inductor[] = {"inductor", "triton"}, *twice[] = {"triton", "triton"};
    char *unknown[] = {"triton", "evil\n"};
    /* An agent that predates store_paths: store_path alone. */
    ASSERT_OK(csi_answer_check(&a, "/store/a/tcache", NULL, 0, 0, NULL, 0, NULL));
    ASSERT_UEQ(a.n_stores, 1u);
    ASSERT_STREQ(a.stores[0], "/store/a/tcache");
    ASSERT_EQ(a.empty, 0);
    /* Two variants: both, in order. */
    ASSERT_OK(csi_answer_check(&a, "/store/a/tcache", two, 2, 0, triton, 1, NULL));
    ASSERT_UEQ(a.n_stores, 2u);
    ASSERT_STREQ(a.stores[0], "/store/a/tcache");
    ASSERT_STREQ(a.stores[1], "/store/b/tcache");
    ASSERT_EQ(a.empty, 0);
    ASSERT_OK(csi_answer_check(&a, "", two, 2, 0, NULL, 0, NULL)); /* store_paths alone */
    ASSERT_UEQ(a.n_stores, 2u);
    /* store_paths[0] must be store_path. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "/store/b/tcache", two, 2, 0, NULL, 0, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "not its first store directory");
    /* Each store is an option path; none twice. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "/s/a", bad, 2, 0, NULL, 0, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "the agent's store path 2 \"/s/b:/etc\" has one of");
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "s/a", rel, 1, 0, NULL, 0, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "the agent's store path \"s/a\" is not an absolute path");
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "/s/a", dup, 2, 0, NULL, 0, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "store path /s/a twice");
    /* The cap. */
    for (size_t i = 0; i <= CSI_MAX_STORES; i++) {
        snprintf(names[i], sizeof(names[i]), "/store/s%zu", i);
        many[i] = names[i];
    }
    ASSERT_OK(csi_answer_check(&a, NULL, many, CSI_MAX_STORES, 0, NULL, 0, NULL));
    ASSERT_UEQ(a.n_stores, (size_t)CSI_MAX_STORES);
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, NULL, many, CSI_MAX_STORES + 1, 0, NULL, 0, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "17 store directories; a volume mounts at most 16");
    /* Never an empty volume unless the agent says so: no store and not empty is an error. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "", NULL, 0, 0, NULL, 0, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "without a store path");
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, NULL, NULL, 0, 0, triton, 1, &err), -EPROTO);
    /* Empty: the cache's parts decide the subdirs. */
    ASSERT_OK(csi_answer_check(&a, "", NULL, 0, 1, NULL, 0, NULL));
    ASSERT_EQ(a.empty, 1);
    ASSERT_UEQ(a.n_stores, 0u);
    ASSERT_UEQ(a.parts, 0u);
    ASSERT_OK(csi_answer_check(&a, "", NULL, 0, 1, triton, 1, NULL));
    ASSERT_UEQ(a.parts, 0u); /* the Triton cache at the root: no subdir */
    ASSERT_OK(csi_answer_check(&a, "", NULL, 0, 1, inductor, 2, NULL));
    ASSERT_UEQ(a.parts, (unsigned)(TKM_PART_INDUCTOR | TKM_PART_TRITON));
    ASSERT_OK(csi_answer_check(&a, "", NULL, 0, 1, three, 3, NULL));
    ASSERT_UEQ(a.parts, (unsigned)(TKM_PART_INDUCTOR | TKM_PART_TRITON | TKM_PART_VLLM));
    /* Empty and a store at once: refused, neither is guessed. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "/s/a", NULL, 0, 1, NULL, 0, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "both empty and a store path");
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "", two, 2, 1, NULL, 0, &err), -EPROTO);
    /* Parts: known names, once each; the agent's text escaped. */
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "", NULL, 0, 1, twice, 2, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "the part triton twice");
    tkm_err_clear(&err);
    ASSERT_EQ(csi_answer_check(&a, "/s/a", NULL, 0, 0, unknown, 2, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "the part \"evil\\n\" (known: triton, inductor, vllm)");
}

/* Parses "k=v" strings through csi_attrs_parse. */
static int parse(struct csi_attrs *a, int ro, struct tkm_err *err, const char **kv, size_t n)
{
    const char *k[16], *v[16];
    char tmp[16][256];
    for (size_t i = 0; i < n; i++) {
        snprintf(tmp[i], sizeof(tmp[i]), "%s", kv[i]);
        char *eq = strchr(tmp[i], '=');
        *eq = '\0';
        k[i] = tmp[i];
        v[i] = kv[i] + (eq - tmp[i]) + 1;
    }
    return csi_attrs_parse(a, k, v, n, ro, err);
}

#define POD                                                                                        \
    "csi.storage.k8s.io/pod.namespace=ml", "csi.storage.k8s.io/pod.name=train-0",                  \
        "csi.storage.k8s.io/pod.uid=1234", "csi.storage.k8s.io/ephemeral=true"

TEST(attrs)
{
    struct csi_attrs a;
    struct tkm_err err = {0};
    const char *ok1[] = {POD, "cacheName=vadd", "mountPath=/cache",
                         "csi.storage.k8s.io/serviceAccount.name=default"};
    ASSERT_OK(parse(&a, 0, NULL, ok1, 7));
    ASSERT_STREQ(a.cache_name, "vadd");
    ASSERT_STREQ(a.mount_path, "/cache");
    ASSERT_STREQ(a.pod_namespace, "ml");
    ASSERT_STREQ(a.pod_name, "train-0");
    ASSERT_STREQ(a.pod_uid, "1234");
    ASSERT_EQ(a.mode, CSI_MODE_OVERLAY);
    const char *ro[] = {POD, "cacheName=vadd", "readOnly=true"};
    ASSERT_OK(parse(&a, 0, NULL, ro, 6));
    ASSERT_EQ(a.mode, CSI_MODE_STRICT);
    const char *cp[] = {POD, "cacheImage=r.example:5000/k/v@sha256:ab", "readOnly=false"};
    ASSERT_OK(parse(&a, 0, NULL, cp, 6));
    ASSERT_EQ(a.mode, CSI_MODE_COPY);
    ASSERT_NULL(a.cache_name);
    /* The pod's readOnly flag: strict by default, a contradiction with "false". */
    ASSERT_OK(parse(&a, 1, NULL, ok1, 5));
    ASSERT_EQ(a.mode, CSI_MODE_STRICT);
    ASSERT_EQ(parse(&a, 1, &err, cp, 6), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "the pod's volume is readOnly: true");

    struct {
        const char *kv[8];
        size_t n;
        const char *want;
    } bad[] = {
        {{POD}, 4, "cacheName (or cacheImage) is required"},
        {{POD, "cacheName=a", "cacheImage=b/c"}, 6, "both set"},
        {{POD, "cacheName=a", "readOnly=yes"}, 6, "readOnly is \"yes\""},
        {{POD, "cacheName=a", "cachename=a"}, 6, "unknown volume attribute \"cachename\""},
        {{POD, "cacheName=a", "mountPath=cache"}, 6, "mountPath \"cache\" is not an absolute"},
        {{POD, "cacheName=a", "mountPath=/a/../b"}, 6, "not canonical"},
        {{POD, "cacheName=Bad/Name"}, 5, "cacheName \"Bad/Name\""},
        /* the agent refuses it too (tkm_dns1123_subdomain): a label ends in a letter or digit */
        {{POD, "cacheName=a-.b"}, 5, "cacheName \"a-.b\" is not a Kubernetes name"},
        {{"csi.storage.k8s.io/pod.namespace=ml", "cacheName=a"}, 2, "podInfoOnMount: true"},
        {{"csi.storage.k8s.io/pod.namespace=ml", "csi.storage.k8s.io/pod.name=p",
          "csi.storage.k8s.io/pod.uid=u", "cacheName=a"},
         4,
         "only ephemeral inline volumes"},
        {{"csi.storage.k8s.io/pod.namespace=../x", "csi.storage.k8s.io/pod.name=p",
          "csi.storage.k8s.io/pod.uid=u", "csi.storage.k8s.io/ephemeral=true", "cacheName=a"},
         5,
         "pod namespace \"../x\""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tkm_err e = {0};
        ASSERT_EQ(parse(&a, 0, &e, bad[i].kv, bad[i].n), -EINVAL);
        ASSERT_STRCONTAINS(e.msg, bad[i].want);
    }
}

/* Real mountinfo lines: optional fields vary, paths are octal-escaped. */
static const char mountinfo[] =
    "22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "40 22 0:35 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/v1/mount rw,nosuid,nodev "
    "shared:20 master:3 - overlay tkm-csi:v1 rw,lowerdir=/a/groups:/s,upperdir=/a/upper\n"
    "41 22 0:36 / /tmp/with\\040space\\011tab rw - tmpfs tmpfs rw\n"
    "42 40 0:37 / /var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/v1/mount rw - tmpfs "
    "other rw\n"
    "43 22 0:38 / /mnt/x rw - overlay tkm-csi:v2 rw\n";

TEST(mountinfo)
{
    struct csi_mount m;
    ASSERT_EQ(csi_mountinfo_find(mountinfo, "/mnt/x", &m), 1);
    ASSERT_STREQ(m.fstype, "overlay");
    ASSERT_STREQ(m.source, "tkm-csi:v2");
    csi_mount_release(&m);
    /* Two mounts stacked: the last (topmost) wins. */
    ASSERT_EQ(csi_mountinfo_find(mountinfo,
                                 "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/v1/mount", &m),
              1);
    ASSERT_STREQ(m.source, "other");
    ASSERT_STREQ(m.fstype, "tmpfs");
    csi_mount_release(&m);
    ASSERT_EQ(csi_mountinfo_find(mountinfo, "/tmp/with space\ttab", &m), 1);
    ASSERT_STREQ(m.mount_point, "/tmp/with space\ttab");
    csi_mount_release(&m);
    ASSERT_EQ(csi_mountinfo_find(mountinfo, "/tmp/with", &m), 0);
    ASSERT_EQ(csi_mountinfo_find(mountinfo, "/mnt", &m), 0);
    ASSERT_EQ(csi_mountinfo_find("garbage\n\n", "/", &m), 0);
    ASSERT_EQ(csi_mountinfo_has_source(mountinfo, "tkm-csi:v1"), 1);
    ASSERT_EQ(csi_mountinfo_has_source(mountinfo, "tkm-csi:v2"), 1);
    ASSERT_EQ(csi_mountinfo_has_source(mountinfo, "tkm-csi:v"), 0);
    ASSERT_EQ(csi_mountinfo_has_source(mountinfo, "tkm-csi:v3"), 0);
    /* The live file parses and has a root mount. */
    struct tkm_buf b = TKM_BUF_INIT(64u << 20);
    ASSERT_OK(csi_mountinfo_read(&b, NULL));
    ASSERT_EQ(csi_mountinfo_find(b.data, "/", &m), 1);
    csi_mount_release(&m);
    tkm_buf_release(&b);
}

static void mk(const char *root, const char *rel, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    if (text) {
        FILE *f = fopen(p, "w");
        if (f) {
            fputs(text, f);
            fclose(f);
        }
    } else {
        mkdir(p, 0755);
    }
}

TEST(open_target)
{
    char root[PATH_MAX], t[PATH_MAX], link[PATH_MAX];
    struct tkm_err err = {0};
    struct stat st;
    int fd = -1;
    snprintf(root, sizeof(root), "%s/pods", tkm_test_tmpdir());
    mkdir(root, 0755);
    mk(root, "u1", NULL);
    mk(root, "u1/vol", NULL);
    snprintf(t, sizeof(t), "%s/u1/vol/mount", root);
    ASSERT_EQ(csi_open_target(root, t, 0, &fd, NULL), -ENOENT);
    ASSERT_OK(csi_open_target(root, t, 1, &fd, &err));
    ASSERT(fd >= 0);
    ASSERT_OK(fstat(fd, &st));
    ASSERT(S_ISDIR(st.st_mode));
    close(fd);
    ASSERT_OK(csi_open_target(root, t, 1, &fd, NULL)); /* exists: fine */
    close(fd);
    /* A symlink anywhere below the root is refused, never followed. */
    snprintf(link, sizeof(link), "%s/u2", root);
    ASSERT_OK(symlink(tkm_test_tmpdir(), link));
    snprintf(t, sizeof(t), "%s/u2/mount", root);
    memset(&err, 0, sizeof(err));
    ASSERT_EQ(csi_open_target(root, t, 1, &fd, &err), -ELOOP);
    ASSERT_STRCONTAINS(err.msg, "component \"u2\" is a symbolic link");
    snprintf(t, sizeof(t), "%s/mount", tkm_test_tmpdir());
    ASSERT_EQ(access(t, F_OK), -1); /* nothing created through it */
    /* The last component a symlink: refused too. */
    snprintf(t, sizeof(t), "%s/u2", root);
    ASSERT_EQ(csi_open_target(root, t, 1, &fd, NULL), -ELOOP);
    /* A file where a directory should be. */
    mk(root, "file", "x");
    snprintf(t, sizeof(t), "%s/file/mount", root);
    ASSERT_EQ(csi_open_target(root, t, 1, &fd, NULL), -ENOTDIR);
}

TEST(remove_and_copy_tree)
{
    char src[PATH_MAX], dst[PATH_MAX], p[PATH_MAX], outside[PATH_MAX];
    uint64_t bytes = 0;
    struct stat st;
    snprintf(src, sizeof(src), "%s/src", tkm_test_tmpdir());
    snprintf(dst, sizeof(dst), "%s/dst", tkm_test_tmpdir());
    snprintf(outside, sizeof(outside), "%s/outside", tkm_test_tmpdir());
    mkdir(src, 0755);
    mk(src, "K1", NULL);
    mk(src, "K1/a.json", "{\"hash\":\"x\"}");
    mk(src, "K1/a.cubin", "0123456789");
    mk(src, "K2", NULL);
    mk(src, "K2/deep", NULL);
    mk(src, "K2/deep/f", "ff");
    mkdir(outside, 0755);
    mk(outside, "keep", "keep");
    snprintf(p, sizeof(p), "%s/K2/link", src);
    ASSERT_OK(symlink(outside, p));
    ASSERT_OK(csi_copy_tree(src, dst, &bytes, NULL));
    ASSERT_UEQ(bytes, 12u + 10u + 2u);
    snprintf(p, sizeof(p), "%s/K2/deep/f", dst);
    ASSERT_OK(stat(p, &st));
    snprintf(p, sizeof(p), "%s/K2/link", dst);
    ASSERT_EQ(lstat(p, &st), -1); /* symlinks are not copied */
    /* remove_tree never follows the symlink into outside/. */
    ASSERT_OK(csi_remove_tree(src, NULL));
    ASSERT_EQ(lstat(src, &st), -1);
    snprintf(p, sizeof(p), "%s/keep", outside);
    ASSERT_OK(stat(p, &st));
    ASSERT_OK(csi_remove_tree(dst, NULL));
    ASSERT_OK(csi_remove_tree(dst, NULL)); /* gone: still fine */
}

/* Two stores copied in turn (readOnly "false" of a two-variant volume): their
 * union, the first winning a shared name, as in the overlay. */
TEST(copy_tree_union)
{
    char a[PATH_MAX], b[PATH_MAX], dst[PATH_MAX], p[PATH_MAX], buf[16] = {0};
    uint64_t bytes = 0;
    struct stat st;
    FILE *f;
    snprintf(a, sizeof(a), "%s/a", tkm_test_tmpdir());
    snprintf(b, sizeof(b), "%s/b", tkm_test_tmpdir());
    snprintf(dst, sizeof(dst), "%s/dst", tkm_test_tmpdir());
    mkdir(a, 0755);
    mkdir(b, 0755);
    mk(a, "triton", NULL);
    mk(a, "triton/KA", NULL);
    mk(a, "triton/KA/k.cubin", "aaaa");
    mk(a, "shared", NULL);
    mk(a, "shared/so", "from-a");
    mk(a, "x", "file-in-a");
    mk(b, "triton", NULL);
    mk(b, "triton/KB", NULL);
    mk(b, "triton/KB/k.cubin", "bbbbbb");
    mk(b, "shared", NULL);
    mk(b, "shared/so", "from-b");
    mk(b, "x", NULL); /* a dir where a has a file: hidden, as in an overlay */
    mk(b, "x/y", "yy");
    ASSERT_OK(csi_copy_tree(a, dst, &bytes, NULL));
    ASSERT_UEQ(bytes, 4u + 6u + 9u);
    ASSERT_OK(csi_copy_tree(b, dst, &bytes, NULL));
    ASSERT_UEQ(bytes, 6u); /* only KB's kernel was new */
    snprintf(p, sizeof(p), "%s/triton/KA/k.cubin", dst);
    ASSERT_OK(stat(p, &st));
    snprintf(p, sizeof(p), "%s/triton/KB/k.cubin", dst);
    ASSERT_OK(stat(p, &st));
    snprintf(p, sizeof(p), "%s/shared/so", dst);
    ASSERT_NOT_NULL(f = fopen(p, "r"));
    ASSERT_UEQ(fread(buf, 1, sizeof(buf) - 1, f), 6u);
    fclose(f);
    ASSERT_STREQ(buf, "from-a");
    snprintf(p, sizeof(p), "%s/x", dst);
    ASSERT_OK(stat(p, &st));
    ASSERT(S_ISREG(st.st_mode));
    ASSERT_OK(csi_remove_tree(dst, NULL));
}

TEST(recover)
{
    char state[PATH_MAX], p[PATH_MAX];
    size_t removed = 99;
    struct stat st;
    snprintf(state, sizeof(state), "%s/state", tkm_test_tmpdir());
    mkdir(state, 0755);
    mk(state, "ns", NULL);
    mk(state, "ns/pod", NULL);
    mk(state, "ns/pod/vol-stale", NULL);
    mk(state, "ns/pod/vol-stale/groups", NULL);
    mk(state, "ns/pod/vol-stale/groups/g.json", "{}");
    mk(state, "ns/pod2", NULL);
    mk(state, "ns/pod2/not a volume id", NULL);
    ASSERT_OK(csi_recover(state, &removed, NULL));
    ASSERT_UEQ(removed, 1u);
    snprintf(p, sizeof(p), "%s/ns/pod", state);
    ASSERT_EQ(stat(p, &st), -1); /* emptied pod dir removed */
    snprintf(p, sizeof(p), "%s/.release/vol-stale", state);
    ASSERT_OK(stat(p, &st)); /* the agent's reference will be released */
    snprintf(p, sizeof(p), "%s/ns/pod2/not a volume id", state);
    ASSERT_OK(stat(p, &st)); /* not ours: untouched */
    /* No state dir yet: nothing to do. */
    snprintf(p, sizeof(p), "%s/none", tkm_test_tmpdir());
    ASSERT_OK(csi_recover(p, &removed, NULL));
    ASSERT_UEQ(removed, 0u);
}

/* ---- the scratch count (csi/scratch.c) --------------------------------------- */

#define CROSS "triton-3.6-sm80-cross/cache"
#define K_MM  "2UIPZWRQWAPUX3GAJ74DK3LKKTDMNPNADTX33QFPMGRA27S3T7IQ" /* matmul_kernel */
#define K_ADD "C23QZYI4GH3MXBAUKWP6BNEAK4HN6NGURFQVMFJAUTTNJHPAGT3Q" /* add_kernel */
#define K_SM  "KLIMEI4IIM6RDQY436IVDU2R2BZB3K5GO75QKX2BM5BMPD5WYMVQ" /* softmax_kernel */
#define K_MM2 "ZPIVXZ6EZTL75CEMY4YV6TRUXBSA3B5MIC4QHZI6LFHNDAY7CX7A" /* matmul_kernel */

/* Copies the fixture's kernel dir K to root/rel (a real kernel dir of Triton 3.6). */
static void kdir(const char *k, const char *root, const char *rel)
{
    char s[PATH_MAX], d[PATH_MAX];
    snprintf(s, sizeof(s), "%s/" CROSS "/%s", tkm_test_fixtures(), k);
    snprintf(d, sizeof(d), "%s/%s", root, rel);
    if (csi_copy_tree(s, d, NULL, NULL) < 0)
        fprintf(stderr, "copying %s to %s failed\n", s, d);
}

/* Regular files under the fixture's kernel dir K and their bytes. */
static uint64_t kfiles(const char *k, uint64_t *bytes)
{
    char p[PATH_MAX];
    uint64_t n = 0;
    snprintf(p, sizeof(p), "%s/" CROSS "/%s", tkm_test_fixtures(), k);
    DIR *d = opendir(p);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        char f[PATH_MAX + 300];
        snprintf(f, sizeof(f), "%s/%s", p, e->d_name);
        if (lstat(f, &st) == 0 && S_ISREG(st.st_mode)) {
            n++;
            *bytes += (uint64_t)st.st_size;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* An overlay whiteout (a 0/0 char device, as overlayfs makes them); not root:
 * a FIFO, another special file the walk must skip. */
static int whiteout(const char *p)
{
    return geteuid() == 0 ? mknod(p, S_IFCHR | 0000, makedev(0, 0)) : mkfifo(p, 0600);
}

/* Open file descriptors of this process (the walk must close all it opens). */
static int nfds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static int has_name(const struct csi_scratch *s, const char *n)
{
    for (size_t i = 0; i < s->n_names; i++)
        if (strcmp(s->names[i], n) == 0)
            return 1;
    return 0;
}

static uint64_t fsize(const char *root, const char *rel)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* A Triton-only overlay volume: the cache at the upper dir's root. New kernel
 * dirs are counted with their names; copied-up, opaque, whiteout, group-only,
 * nameless, oversized and symlinked entries are not new kernels. */
TEST(scratch_triton_root)
{
    char lower[PATH_MAX], upper[PATH_MAX], p[PATH_MAX], big[CSI_SCRATCH_JSON_MAX + 64];
    const char *lowers[] = {NULL, lower}; /* NULL lowers are skipped */
    struct csi_scratch s;
    struct tkm_err err = {0};
    uint64_t bytes = 0, files = 0;
    snprintf(lower, sizeof(lower), "%s/lower", tkm_test_tmpdir());
    snprintf(upper, sizeof(upper), "%s/upper", tkm_test_tmpdir());
    mkdir(lower, 0755);
    mkdir(upper, 0755);
    kdir(K_MM, lower, K_MM);
    kdir(K_ADD, lower, K_ADD);
    /* new: two real kernel dirs */
    kdir(K_SM, upper, K_SM);
    kdir(K_MM2, upper, K_MM2);
    files += kfiles(K_SM, &bytes) + kfiles(K_MM2, &bytes);
    /* copied up: a file the pod added to a kernel dir of the store */
    mk(upper, K_MM, NULL);
    mk(upper, K_MM "/extra.json", "{\"name\":\"not_new\"}");
    /* opaque: the pod removed a store kernel dir and made it again */
    mk(upper, K_ADD, NULL);
    snprintf(p, sizeof(p), "%s/" K_ADD, upper);
    (void)setxattr(p, "trusted.overlay.opaque", "y", 1, 0);
    mk(upper, K_ADD "/add_kernel.json", "{\"name\":\"add_kernel\"}");
    /* whiteouts: a removed store kernel dir, and a removed file */
    snprintf(p, sizeof(p), "%s/WHITEOUTKERNEL", upper);
    ASSERT_OK(whiteout(p));
    snprintf(p, sizeof(p), "%s/" K_SM "/softmax_kernel.ttir.gone", upper);
    ASSERT_OK(whiteout(p));
    /* a kernel whose name has bad characters: counted, its name left out */
    mk(upper, "BADNAME", NULL);
    mk(upper, "BADNAME/k.json", "{\"name\":\"bad name\\n\\u001b[31m;rm -rf\"}");
    /* not kernels: only a group file, a JSON without a name, an oversized one */
    mk(upper, "GRPONLY", NULL);
    mk(upper, "GRPONLY/__grp__x.json", "{\"name\":\"x\",\"child_paths\":{}}");
    mk(upper, "NONAME", NULL);
    mk(upper, "NONAME/k.json", "{\"hash\":\"abc\"}");
    mk(upper, "NOTJSON", NULL);
    mk(upper, "NOTJSON/k.json", "{\"name\":\"trunc");
    memset(big, ' ', sizeof(big));
    memcpy(big, "{\"name\":\"huge\"}", 15);
    big[sizeof(big) - 1] = '\0';
    mk(upper, "BIG", NULL);
    mk(upper, "BIG/k.json", big);
    /* a symlink to a kernel dir: never followed, never counted */
    snprintf(p, sizeof(p), "%s/" CROSS "/" K_SM, tkm_test_fixtures());
    char l[PATH_MAX];
    snprintf(l, sizeof(l), "%s/LINK", upper);
    ASSERT_OK(symlink(p, l));
    files += 7; /* extra.json, add_kernel.json, BADNAME, GRPONLY, NONAME, NOTJSON, BIG */
    bytes += fsize(upper, K_MM "/extra.json") + fsize(upper, K_ADD "/add_kernel.json") +
             fsize(upper, "BADNAME/k.json") + fsize(upper, "GRPONLY/__grp__x.json") +
             fsize(upper, "NONAME/k.json") + fsize(upper, "NOTJSON/k.json") +
             fsize(upper, "BIG/k.json");

    int fds = nfds();
    ASSERT_OK(csi_scratch_walk(&s, upper, lowers, 2, 1, 1, NULL, &err));
    ASSERT_EQ(nfds(), fds);
    ASSERT_UEQ(s.triton_kernels, 3u); /* K_SM, K_MM2, BADNAME */
    ASSERT_UEQ(s.n_names, 2u);        /* matmul_kernel once */
    ASSERT(has_name(&s, "softmax_kernel"));
    ASSERT(has_name(&s, "matmul_kernel"));
    ASSERT_EQ(s.truncated, 1); /* the bad name */
    ASSERT_UEQ(s.files, files);
    ASSERT_UEQ(s.bytes, bytes);
    ASSERT_UEQ(s.inductor_fxgraph + s.inductor_aotautograd + s.vllm_entries, 0u);

    /* Without the bad name: not truncated. A missing upper is an error. */
    snprintf(p, sizeof(p), "%s/BADNAME", upper);
    ASSERT_OK(csi_remove_tree(p, NULL));
    ASSERT_OK(csi_scratch_walk(&s, upper, lowers, 2, 1, 1, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 2u);
    ASSERT_EQ(s.truncated, 0);
    snprintf(p, sizeof(p), "%s/none", tkm_test_tmpdir());
    ASSERT_EQ(csi_scratch_walk(&s, p, NULL, 0, 1, 1, NULL, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "/none");
}

/* A torch.compile volume: triton/, inductor/ (fxgraph/<xx>/<key>/,
 * aotautograd/<key>/) and vllm/ (torch_compile_cache/<hash>/) counted apart. */
TEST(scratch_parts)
{
    char lower[PATH_MAX], upper[PATH_MAX];
    const char *lowers[] = {lower};
    struct csi_scratch s;
    uint64_t bytes = 0;
    snprintf(lower, sizeof(lower), "%s/lower", tkm_test_tmpdir());
    snprintf(upper, sizeof(upper), "%s/upper", tkm_test_tmpdir());
    mkdir(lower, 0755);
    mkdir(upper, 0755);
    mk(lower, "triton", NULL);
    kdir(K_ADD, lower, "triton/" K_ADD);
    mk(lower, "inductor", NULL);
    mk(lower, "inductor/fxgraph", NULL);
    mk(lower, "inductor/fxgraph/ab", NULL);
    mk(lower, "inductor/fxgraph/ab/fabold", NULL);
    mk(lower, "inductor/fxgraph/ab/fabold/e1", "old");
    mk(lower, "inductor/aotautograd", NULL);
    mk(lower, "inductor/aotautograd/aold", NULL);
    /* the pod's writes */
    mk(upper, "triton", NULL);
    mk(upper, "triton/" K_ADD, NULL); /* copied up */
    mk(upper, "triton/" K_ADD "/more.json", "{\"name\":\"add_kernel\"}");
    kdir(K_SM, upper, "triton/" K_SM);
    mk(upper, "inductor", NULL);
    mk(upper, "inductor/fxgraph", NULL);
    mk(upper, "inductor/fxgraph/ab", NULL);
    mk(upper, "inductor/fxgraph/ab/fabold", NULL); /* copied up: a second entry of a key */
    mk(upper, "inductor/fxgraph/ab/fabold/e2", "x");
    mk(upper, "inductor/fxgraph/ab/fabnew", NULL);
    mk(upper, "inductor/fxgraph/ab/fabnew/e", "x");
    mk(upper, "inductor/fxgraph/cd", NULL);
    mk(upper, "inductor/fxgraph/cd/fcdnew", NULL);
    mk(upper, "inductor/fxgraph/cd/fcdnew/e", "x");
    mk(upper, "inductor/aotautograd", NULL);
    mk(upper, "inductor/aotautograd/anew", NULL);
    mk(upper, "inductor/aotautograd/anew/entry", "x");
    mk(upper, "inductor/aotautograd/aold", NULL); /* copied up */
    mk(upper, "inductor/ab", NULL);               /* generated code: files only */
    mk(upper, "inductor/ab/cab.py", "x");
    mk(upper, "vllm", NULL);
    mk(upper, "vllm/torch_compile_cache", NULL);
    mk(upper, "vllm/torch_compile_cache/h1", NULL);
    mk(upper, "vllm/torch_compile_cache/h1/rank_0_0", NULL);
    mk(upper, "vllm/torch_compile_cache/h1/rank_0_0/backbone", NULL);
    mk(upper, "vllm/torch_compile_cache/h1/rank_0_0/backbone/g.py", "x");
    mk(upper, "elsewhere", NULL); /* not a part: a kernel dir here is not Triton's */
    kdir(K_MM, upper, "elsewhere/" K_MM);
    ASSERT_OK(csi_scratch_walk(&s, upper, lowers, 1, 0, 1, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 1u);
    ASSERT_UEQ(s.n_names, 1u);
    ASSERT_STREQ(s.names[0], "softmax_kernel");
    ASSERT_UEQ(s.inductor_fxgraph, 2u);
    ASSERT_UEQ(s.inductor_aotautograd, 1u);
    ASSERT_UEQ(s.vllm_entries, 1u);
    ASSERT_EQ(s.truncated, 0);
    uint64_t files = kfiles(K_SM, &bytes) + kfiles(K_MM, &bytes) + 7;
    ASSERT_UEQ(s.files, files);
    ASSERT_UEQ(s.bytes, bytes + fsize(upper, "triton/" K_ADD "/more.json") + 6);
    /* The same tree read as a Triton-only volume: triton/ and the others are not kernel dirs. */
    ASSERT_OK(csi_scratch_walk(&s, upper, lowers, 1, 1, 1, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 0u);
    ASSERT_UEQ(s.inductor_fxgraph, 0u);
}

/* The caps: 32 distinct names, then truncated; entries and depth. */
TEST(scratch_caps)
{
    char upper[PATH_MAX], rel[64], json[96];
    struct csi_scratch s;
    struct csi_scratch_caps caps = {.max_entries = 10, .max_depth = 16};
    snprintf(upper, sizeof(upper), "%s/upper", tkm_test_tmpdir());
    mkdir(upper, 0755);
    for (int i = 0; i < 45; i++) {
        snprintf(rel, sizeof(rel), "K%02d", i);
        mk(upper, rel, NULL);
        snprintf(rel, sizeof(rel), "K%02d/k.json", i);
        /* 40 distinct names, 5 kernels named "dup" */
        snprintf(json, sizeof(json), "{\"name\":\"%s%d\"}", i < 40 ? "kern_" : "dup",
                 i < 40 ? i : 0);
        mk(upper, rel, json);
    }
    mk(upper, "K00/tmp.pid_1_x", NULL);
    mk(upper, "K00/tmp.pid_1_x/deep", NULL);
    mk(upper, "K00/tmp.pid_1_x/deep/f", "f");
    ASSERT_OK(csi_scratch_walk(&s, upper, NULL, 0, 1, 1, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 45u);
    ASSERT_UEQ(s.n_names, (unsigned)CSI_SCRATCH_NAMES_MAX);
    ASSERT_EQ(s.truncated, 1);
    ASSERT_UEQ(s.files, 46u);
    for (size_t i = 0; i < s.n_names; i++)
        ASSERT_EQ(strncmp(s.names[i], "kern_", 5) == 0 || strcmp(s.names[i], "dup0") == 0, 1);
    /* Entries: the walk stops after 10. */
    ASSERT_OK(csi_scratch_walk(&s, upper, NULL, 0, 1, 1, &caps, NULL));
    ASSERT_EQ(s.truncated, 1);
    ASSERT(s.triton_kernels < 10u);
    ASSERT_UEQ(s.entries, 11u);
    /* Depth: the kernel dirs (depth 1) are read, tmp.pid_1_x/deep (3) is not. */
    caps.max_entries = 1000;
    caps.max_depth = 2;
    ASSERT_OK(csi_scratch_walk(&s, upper, NULL, 0, 1, 1, &caps, NULL));
    ASSERT_UEQ(s.triton_kernels, 45u);
    ASSERT_UEQ(s.files, 45u);
    ASSERT_EQ(s.truncated, 1);
    caps.max_depth = 3;
    ASSERT_OK(csi_scratch_walk(&s, upper, NULL, 0, 1, 1, &caps, NULL));
    ASSERT_UEQ(s.files, 46u);
}

/* readOnly "false": the scratch is a private copy of the store; only what is
 * not in the store counts (a changed store file is not: docs/csi.md). */
TEST(scratch_copy)
{
    char store[PATH_MAX], upper[PATH_MAX], p[PATH_MAX];
    const char *lowers[] = {store};
    struct csi_scratch s;
    uint64_t bytes = 0, files;
    FILE *f;
    snprintf(store, sizeof(store), "%s/" CROSS, tkm_test_fixtures());
    snprintf(upper, sizeof(upper), "%s/upper", tkm_test_tmpdir());
    ASSERT_OK(csi_copy_tree(store, upper, NULL, NULL));
    ASSERT_OK(csi_scratch_walk(&s, upper, lowers, 1, 1, 0, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels + s.files + s.bytes, 0u); /* the copy alone: nothing new */
    /* The store gone: no count rather than all of the copy counted as new. */
    const char *gone[] = {"/nonexistent/store"};
    struct tkm_err err = {0};
    int fds = nfds();
    ASSERT_EQ(csi_scratch_walk(&s, upper, gone, 1, 1, 0, NULL, &err), -ENOENT);
    ASSERT_EQ(nfds(), fds);
    ASSERT_STRCONTAINS(err.msg, "the lower dir /nonexistent/store");
    kdir(K_SM, upper, "NEWKERNELDIR");
    files = kfiles(K_SM, &bytes);
    snprintf(p, sizeof(p), "%s/" K_MM "/matmul_kernel.cubin", upper);
    ASSERT_NOT_NULL(f = fopen(p, "a"));
    fputs("changed", f);
    fclose(f);
    ASSERT_OK(csi_scratch_walk(&s, upper, lowers, 1, 1, 0, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 1u);
    ASSERT_STREQ(s.names[0], "softmax_kernel");
    ASSERT_UEQ(s.files, files);
    ASSERT_UEQ(s.bytes, bytes);
}

/* The state file publish writes: what unpublish (even of a restarted
 * tkm-csi) counts from; the one-line summary. */
TEST(scratch_state)
{
    char vol[PATH_MAX], p[PATH_MAX], store[PATH_MAX];
    const char *stores[] = {store};
    struct csi_scratch s;
    struct tkm_err err = {0};
    struct tkm_buf sum = TKM_BUF_INIT(8192);
    snprintf(store, sizeof(store), "%s/store", tkm_test_tmpdir());
    mkdir(store, 0755);
    kdir(K_MM, store, K_MM);
    snprintf(vol, sizeof(vol), "%s/vol", tkm_test_tmpdir());
    mkdir(vol, 0700);
    mk(vol, "groups", NULL);
    mk(vol, "upper", NULL);
    /* No state (strict, or an older tkm-csi): nothing counted. */
    ASSERT_EQ(csi_scratch_volume(vol, &s, NULL), 0);
    if (geteuid() != 0) { /* trusted.* is root's (tkm-csi runs as root): refused, said so */
        ASSERT_EQ(csi_scratch_state_write(vol, "overlay", 1, stores, 1, &err), -EPERM);
        ASSERT_STRCONTAINS(err.msg, "setting " CSI_SCRATCH_XATTR " on ");
        return;
    }
    ASSERT_OK(csi_scratch_state_write(vol, "overlay", 1, stores, 1, &err));
    ASSERT_EQ(csi_scratch_state_write(vol, "overlay", 1, stores, 1, NULL), -EEXIST);
    kdir(K_SM, vol, "upper/" K_SM);
    kdir(K_MM, vol, "upper/" K_MM); /* in the store: copied up, not new */
    mk(vol, "groups/" K_ADD, NULL); /* group files' dirs are a lower too */
    kdir(K_ADD, vol, "upper/" K_ADD);
    ASSERT_EQ(csi_scratch_volume(vol, &s, &err), 1);
    ASSERT_UEQ(s.triton_kernels, 1u);
    ASSERT_OK(csi_scratch_summary(&s, &sum));
    ASSERT_STRCONTAINS(sum.data, "triton 1 kernel (softmax_kernel), inductor 0 fxgraph 0 "
                                 "aotautograd, vllm 0, ");
    /* An Empty volume of a torch.compile cache: parts, nothing below. */
    ASSERT_OK(lremovexattr(vol, CSI_SCRATCH_XATTR));
    ASSERT_OK(csi_scratch_state_write(vol, "empty", 0, NULL, 0, NULL));
    mk(vol, "upper/triton", NULL);
    kdir(K_SM, vol, "upper/triton/" K_SM);
    ASSERT_EQ(csi_scratch_volume(vol, &s, NULL), 1);
    ASSERT_UEQ(s.triton_kernels, 1u);
    /* A state file this tkm-csi did not write: an error, nothing counted. */
    static const char odd[] = "tkm-csi scratch 1\nmode overlay\nlayout sideways\n";
    ASSERT_OK(lsetxattr(vol, CSI_SCRATCH_XATTR, odd, strlen(odd), XATTR_REPLACE));
    ASSERT_EQ(csi_scratch_volume(vol, &s, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "is not a scratch state of this tkm-csi");
    ASSERT_OK(lsetxattr(vol, CSI_SCRATCH_XATTR, "x", 1, XATTR_REPLACE));
    ASSERT_EQ(csi_scratch_volume(vol, &s, NULL), -EINVAL);
    /* No files in the volume dir but the layers (the bytes a pod costs, docs/csi.md). */
    snprintf(p, sizeof(p), "%s/scratch-layout", vol);
    ASSERT_EQ(access(p, F_OK), -1);
    /* Names are escaped in the summary (a name can only be [A-Za-z0-9_.-] here,
     * the escape is the second line of defence). */
    memset(&s, 0, sizeof(s));
    s.n_names = 1;
    snprintf(s.names[0], sizeof(s.names[0]), "a\nb");
    s.truncated = 1;
    ASSERT_OK(csi_scratch_summary(&s, &sum));
    ASSERT_STRCONTAINS(sum.data, "(a\\nb)");
    ASSERT_STRCONTAINS(sum.data, "(truncated)");
    tkm_buf_release(&sum);
}

/* A kernel name read once: the same stem in another kernel dir is checked for
 * its "name": "<stem>" bytes; anything else is parsed as the first was. */
TEST(scratch_known_names)
{
    char upper[PATH_MAX];
    struct csi_scratch s;
    snprintf(upper, sizeof(upper), "%s/upper", tkm_test_tmpdir());
    mkdir(upper, 0755);
    kdir(K_SM, upper, "A");
    kdir(K_SM, upper, "B"); /* the same kernel again: counted, no second name */
    mk(upper, "C", NULL);   /* the stem, another name: parsed */
    mk(upper, "C/softmax_kernel.json", "{\"name\":\"other_kernel\"}");
    mk(upper, "D", NULL); /* the stem, no name at all: not a kernel */
    mk(upper, "D/softmax_kernel.json", "{\"hash\":\"x\"}");
    mk(upper, "E", NULL); /* the stem, its name without json.dumps' space: parsed */
    mk(upper, "E/softmax_kernel.json", "{\"name\":\"softmax_kernel\"}");
    ASSERT_OK(csi_scratch_walk(&s, upper, NULL, 0, 1, 1, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 4u);
    ASSERT_UEQ(s.n_names, 2u);
    ASSERT(has_name(&s, "softmax_kernel"));
    ASSERT(has_name(&s, "other_kernel"));
    ASSERT_EQ(s.truncated, 0);
    /* 40 distinct kernels as Triton writes them: 32 names, the others
     * counted (checked by their bytes once the names are full), truncated. */
    char rel[64], json[96];
    for (int i = 0; i < 40; i++) {
        snprintf(rel, sizeof(rel), "T%02d", i);
        mk(upper, rel, NULL);
        snprintf(rel, sizeof(rel), "T%02d/kern_%d.json", i, i);
        snprintf(json, sizeof(json), "{\"hash\": \"h\", \"name\": \"kern_%d\"}", i);
        mk(upper, rel, json);
    }
    mk(upper, "U", NULL); /* names full, a stem of bad characters: parsed, not a kernel */
    mk(upper, "U/a b.json", "{\"name\": \"a b\", \"x\": [}");
    ASSERT_OK(csi_scratch_walk(&s, upper, NULL, 0, 1, 1, NULL, NULL));
    ASSERT_UEQ(s.triton_kernels, 44u);
    ASSERT_UEQ(s.n_names, (unsigned)CSI_SCRATCH_NAMES_MAX);
    ASSERT_EQ(s.truncated, 1);
}
