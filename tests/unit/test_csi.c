/* test_csi.c - tkm-csi's checks and filesystem helpers (csi/paths.c, csi/fsops.c).
 * The driver end to end: tests/e2e/csi_publish.sh and csi_sanity.sh. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
