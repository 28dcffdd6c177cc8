/*
 * test_agent_rpc.c - agent/rpc.c: request decoding and validation (every bad
 * field and attribute -> -EINVAL, i.e. INVALID_ARGUMENT, with its message),
 * and the server on a real unix socket driven by lib/grpc's client: socket
 * and directory modes, asynchronous replies, errors the layer answers by
 * itself, Release's NOT_FOUND, cancellation by deadline and by server close
 * with late replies. grpcio (Python) drives it in tests/e2e/agent_rpc.sh.
 */
#include "test.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include <tkm/grpc.h>

#include "agent.pb-c.h"
#include "rpc.h"

#define UID1 "0f8e7d6c-1111-4222-8333-944455556666"
#define VOL1 "csi-0123456789abcdef"
#define IMG  "registry.example.com:5000/kernels/vector-add:v1"

struct kv {
    const char *k, *v;
};

/* Encodes a MaterializeRequest; *out owned (free()). */
static size_t pack_mat(uint8_t **out, const char *ns, const char *name, const char *uid,
                       const char *vol, const struct kv *attrs, size_t n)
{
    Tkm__Agent__V1__MaterializeRequest m = TKM__AGENT__V1__MATERIALIZE_REQUEST__INIT;
    Tkm__Agent__V1__MaterializeRequest__VolumeAttributesEntry e[64], *ep[64];
    size_t len;
    ASSERT(n <= 64);
    m.pod_namespace = (char *)ns;
    m.pod_name = (char *)name;
    m.pod_uid = (char *)uid;
    m.volume_id = (char *)vol;
    for (size_t i = 0; i < n; i++) {
        tkm__agent__v1__materialize_request__volume_attributes_entry__init(&e[i]);
        e[i].key = (char *)attrs[i].k;
        e[i].value = (char *)attrs[i].v;
        ep[i] = &e[i];
    }
    m.n_volume_attributes = n;
    m.volume_attributes = ep;
    len = tkm__agent__v1__materialize_request__get_packed_size(&m);
    *out = malloc(len + 1);
    ASSERT_NOT_NULL(*out);
    tkm__agent__v1__materialize_request__pack(&m, *out);
    return len;
}

/* Decodes attrs for a well-formed pod; returns the rc, err filled. */
static int dec_attrs(const struct kv *attrs, size_t n, struct agent_materialize_req *req,
                     struct tkm_err *err)
{
    uint8_t *b;
    size_t len = pack_mat(&b, "team-a", "trainer-0", UID1, VOL1, attrs, n);
    memset(err, 0, sizeof *err);
    int rc = agent_materialize_req_decode(b, len, req, err);
    free(b);
    return rc;
}

static int dec_pod(const char *ns, const char *name, const char *uid, const char *vol,
                   struct tkm_err *err)
{
    struct kv a[] = {{"cacheName", "vec"}};
    struct agent_materialize_req req;
    uint8_t *b;
    size_t len = pack_mat(&b, ns, name, uid, vol, a, 1);
    memset(err, 0, sizeof *err);
    int rc = agent_materialize_req_decode(b, len, &req, err);
    free(b);
    if (rc == 0)
        agent_materialize_req_release(&req);
    return rc;
}

/* The request with attrs must be refused with a message containing want. */
#define BAD_ATTRS(want, ...)                                                                       \
    do {                                                                                           \
        struct kv a_[] = {__VA_ARGS__};                                                            \
        struct agent_materialize_req r_;                                                           \
        struct tkm_err e_;                                                                         \
        ASSERT_EQ(dec_attrs(a_, sizeof a_ / sizeof a_[0], &r_, &e_), -EINVAL);                     \
        ASSERT_STRCONTAINS(e_.msg, want);                                                          \
        ASSERT_NULL(r_.cache_name);                                                                \
        ASSERT_NULL(r_.pod_ns);                                                                    \
    } while (0)

#define BAD_POD(want, ns, name, uid, vol)                                                          \
    do {                                                                                           \
        struct tkm_err e_;                                                                         \
        ASSERT_EQ(dec_pod(ns, name, uid, vol, &e_), -EINVAL);                                      \
        ASSERT_STRCONTAINS(e_.msg, want);                                                          \
    } while (0)

/* ---- decoding: good requests --------------------------------------------------------- */

TEST(decode_minimal)
{
    struct kv a[] = {{"cacheName", "vec"}};
    struct agent_materialize_req r;
    struct tkm_err e;
    ASSERT_OK(dec_attrs(a, 1, &r, &e));
    ASSERT_STREQ(r.pod_ns, "team-a");
    ASSERT_STREQ(r.pod_name, "trainer-0");
    ASSERT_STREQ(r.pod_uid, UID1);
    ASSERT_STREQ(r.volume_id, VOL1);
    ASSERT_STREQ(r.cache_name, "vec");
    ASSERT_NULL(r.cache_image);
    ASSERT_NULL(r.mount_path);
    ASSERT_EQ(r.read_only, AGENT_READ_ONLY_DEFAULT);
    agent_materialize_req_release(&r);
    agent_materialize_req_release(&r); /* twice: harmless */
}

TEST(decode_full)
{
    struct kv a[] = {{"csi.storage.k8s.io/pod.name", "trainer-0"},
                     {"csi.storage.k8s.io/pod.namespace", "team-a"},
                     {"csi.storage.k8s.io/pod.uid", UID1},
                     {"csi.storage.k8s.io/serviceAccount.name", "default"},
                     {"csi.storage.k8s.io/ephemeral", "true"},
                     {"cacheImage", IMG},
                     {"readOnly", "true"},
                     {"mountPath", "/home/ml/.triton/cache"}};
    struct kv b[] = {{"cacheName", "a.b-c"}, {"readOnly", "false"}, {"mountPath", "/a/..b/c.."}};
    struct agent_materialize_req r;
    struct tkm_err e;
    ASSERT_OK(dec_attrs(a, 8, &r, &e));
    ASSERT_STREQ(r.cache_image, IMG);
    ASSERT_NULL(r.cache_name);
    ASSERT_EQ(r.read_only, AGENT_READ_ONLY_TRUE);
    ASSERT_STREQ(r.mount_path, "/home/ml/.triton/cache");
    agent_materialize_req_release(&r);
    ASSERT_OK(dec_attrs(b, 3, &r, &e));
    ASSERT_STREQ(r.cache_name, "a.b-c");
    ASSERT_EQ(r.read_only, AGENT_READ_ONLY_FALSE);
    ASSERT_STREQ(r.mount_path, "/a/..b/c.."); /* ".." only as a whole component is refused */
    agent_materialize_req_release(&r);
}

TEST(decode_pod_fields_good)
{
    struct tkm_err e;
    char ns63[64], name253[254], uid128[129], vol128[129];
    memset(ns63, 'n', 63), ns63[63] = 0;
    memset(name253, 'p', 253), name253[253] = 0;
    memset(uid128, 'U', 128), uid128[128] = 0;
    memset(vol128, '~', 128), vol128[128] = 0;
    ASSERT_OK(dec_pod(ns63, name253, uid128, vol128, &e));
    ASSERT_OK(dec_pod("a", "web-0.x", "6d1f0e7a3c9b4a0e8f1d2c3b4a5e6f70", "v:1_2.3", &e));
}

/* ---- decoding: bad pod fields ---------------------------------------------------------- */

TEST(decode_bad_pod_fields)
{
    char long_ns[65], long_name[255], long_uid[130], long_vol[130];
    memset(long_ns, 'n', 64), long_ns[64] = 0;
    memset(long_name, 'p', 254), long_name[254] = 0;
    memset(long_uid, 'u', 129), long_uid[129] = 0;
    memset(long_vol, 'v', 129), long_vol[129] = 0;
    BAD_POD("pod_namespace is missing", "", "p", UID1, VOL1);
    BAD_POD("podInfoOnMount: true", "", "p", UID1, VOL1);
    BAD_POD("pod_namespace \"Team-A\" is not a namespace name", "Team-A", "p", UID1, VOL1);
    BAD_POD("pod_namespace \"a_b\" is not a namespace name", "a_b", "p", UID1, VOL1);
    BAD_POD("pod_namespace \"-a\" is not", "-a", "p", UID1, VOL1);
    BAD_POD("is not a namespace name", long_ns, "p", UID1, VOL1);
    BAD_POD("is not a namespace name", "a.b", "p", UID1, VOL1);
    BAD_POD("pod_name is missing", "a", "", UID1, VOL1);
    BAD_POD("pod_name \"Web\" is not a pod name", "a", "Web", UID1, VOL1);
    BAD_POD("pod_name \"a..b\" is not a pod name", "a", "a..b", UID1, VOL1);
    BAD_POD("pod_name \"a.\" is not a pod name", "a", "a.", UID1, VOL1);
    BAD_POD("is not a pod name", "a", long_name, UID1, VOL1);
    BAD_POD("pod_uid is missing", "a", "p", "", VOL1);
    BAD_POD("pod_uid \"a b\" is not a pod uid", "a", "p", "a b", VOL1);
    BAD_POD("pod_uid \"a/b\" is not a pod uid", "a", "p", "a/b", VOL1);
    BAD_POD("is not a pod uid", "a", "p", long_uid, VOL1);
    BAD_POD("volume_id is missing", "a", "p", UID1, "");
    BAD_POD("volume_id \"a/b\" is not valid", "a", "p", UID1, "a/b");
    BAD_POD("volume_id \"a\\b\" is not valid", "a", "p", UID1, "a\\b");
    BAD_POD("volume_id \"..\" is not valid", "a", "p", UID1, "..");
    BAD_POD("volume_id \".\" is not valid", "a", "p", UID1, ".");
    BAD_POD("volume_id \"a b\" is not valid", "a", "p", UID1, "a b");
    BAD_POD("volume_id \"a\xc3\xa9\" is not valid", "a", "p", UID1, "a\xc3\xa9");
    BAD_POD("is not valid: 1 to 128 printable", "a", "p", UID1, long_vol);
}

/* ---- decoding: bad attributes ---------------------------------------------------------- */

TEST(decode_cache_choice)
{
    BAD_ATTRS("volume attributes cacheName and cacheImage are both set: give exactly one",
              {"cacheName", "vec"}, {"cacheImage", IMG});
    BAD_ATTRS("no cache named: set the volume attribute cacheName", {"readOnly", "true"});
    BAD_ATTRS("no cache named", {"csi.storage.k8s.io/ephemeral", "true"});
    {
        struct agent_materialize_req r;
        struct tkm_err e;
        ASSERT_EQ(dec_attrs(NULL, 0, &r, &e), -EINVAL);
        ASSERT_STRCONTAINS(e.msg, "no cache named");
    }
    BAD_ATTRS("volume attribute cacheName \"Vec\" is not a cache name", {"cacheName", "Vec"});
    BAD_ATTRS("volume attribute cacheName \"a b\" is not a cache name", {"cacheName", "a b"});
    BAD_ATTRS("volume attribute cacheName \"\" is not a cache name", {"cacheName", ""});
    BAD_ATTRS("volume attribute cacheName \"../x\" is not a cache name", {"cacheName", "../x"});
    BAD_ATTRS("volume attribute cacheImage \"a b\" is not an image reference",
              {"cacheImage", "a b"});
    BAD_ATTRS("volume attribute cacheImage \"\" is not an image reference", {"cacheImage", ""});
    BAD_ATTRS("volume attribute cacheImage \"r\tx\" is not", {"cacheImage", "r\tx"});
    {
        char img[514];
        memset(img, 'r', 513), img[513] = 0;
        BAD_ATTRS("is not an image reference (1 to 512 printable", {"cacheImage", img});
    }
}

TEST(decode_bad_read_only)
{
    BAD_ATTRS("volume attribute readOnly is \"yes\": it must be \"true\" or \"false\"",
              {"cacheName", "vec"}, {"readOnly", "yes"});
    BAD_ATTRS("readOnly is \"TRUE\"", {"cacheName", "vec"}, {"readOnly", "TRUE"});
    BAD_ATTRS("readOnly is \"\"", {"cacheName", "vec"}, {"readOnly", ""});
    BAD_ATTRS("readOnly is \"1\"", {"cacheName", "vec"}, {"readOnly", "1"});
}

TEST(decode_bad_mount_path)
{
    char big[4100];
    BAD_ATTRS("volume attribute mountPath \"relative/cache\" is not an absolute path",
              {"cacheName", "vec"}, {"mountPath", "relative/cache"});
    BAD_ATTRS("mountPath \"\" is not an absolute path", {"cacheName", "vec"}, {"mountPath", ""});
    BAD_ATTRS("volume attribute mountPath \"/a/../etc\" has a \"..\" component",
              {"cacheName", "vec"}, {"mountPath", "/a/../etc"});
    BAD_ATTRS("has a \"..\" component", {"cacheName", "vec"}, {"mountPath", "/.."});
    BAD_ATTRS("has a \"..\" component", {"cacheName", "vec"}, {"mountPath", "/a/.."});
    BAD_ATTRS("has a \"..\" component", {"cacheName", "vec"}, {"mountPath", "/../a"});
    memset(big, 'm', 4097), big[0] = '/', big[4097] = 0;
    BAD_ATTRS("volume attribute mountPath is 4097 bytes long (at most 4096)", {"cacheName", "vec"},
              {"mountPath", big});
    big[4096] = 0; /* exactly 4096: accepted */
    {
        struct kv a[] = {{"cacheName", "vec"}, {"mountPath", big}};
        struct agent_materialize_req r;
        struct tkm_err e;
        ASSERT_OK(dec_attrs(a, 2, &r, &e));
        ASSERT_EQ(strlen(r.mount_path), 4096);
        agent_materialize_req_release(&r);
    }
}

TEST(decode_unknown_and_duplicate_keys)
{
    BAD_ATTRS("unknown volume attribute \"foo\" (known: cacheName, cacheImage, readOnly, "
              "mountPath",
              {"cacheName", "vec"}, {"foo", "bar"});
    BAD_ATTRS("unknown volume attribute \"CacheName\"", {"CacheName", "vec"});
    BAD_ATTRS("unknown volume attribute \"kernel-name\"", {"kernel-name", "vec"});
    BAD_ATTRS("unknown volume attribute \"csi.storage.k8s.io\"", {"cacheName", "vec"},
              {"csi.storage.k8s.io", "x"});
    BAD_ATTRS("unknown volume attribute \"\"", {"cacheName", "vec"}, {"", "x"});
    BAD_ATTRS("volume attribute \"cacheName\" is given twice", {"cacheName", "vec"},
              {"cacheName", "vec"});
    BAD_ATTRS("volume attribute \"readOnly\" is given twice", {"cacheName", "vec"},
              {"readOnly", "true"}, {"readOnly", "false"});
}

TEST(decode_csi_identity_must_agree)
{
    BAD_ATTRS("volume attribute csi.storage.k8s.io/pod.namespace is \"team-b\" but the request "
              "is for \"team-a\"",
              {"cacheName", "vec"}, {"csi.storage.k8s.io/pod.namespace", "team-b"});
    BAD_ATTRS("csi.storage.k8s.io/pod.name is \"x\"", {"cacheName", "vec"},
              {"csi.storage.k8s.io/pod.name", "x"});
    BAD_ATTRS("csi.storage.k8s.io/pod.uid is \"x\"", {"cacheName", "vec"},
              {"csi.storage.k8s.io/pod.uid", "x"});
}

TEST(decode_too_many_attributes)
{
    struct kv a[33];
    char keys[33][48];
    struct agent_materialize_req r;
    struct tkm_err e;
    a[0] = (struct kv){"cacheName", "vec"};
    for (int i = 1; i < 33; i++) {
        snprintf(keys[i], sizeof keys[i], "csi.storage.k8s.io/extra-%d", i);
        a[i] = (struct kv){keys[i], "x"};
    }
    ASSERT_EQ(dec_attrs(a, 33, &r, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "33 volume attributes (at most 32)");
    ASSERT_OK(dec_attrs(a, 32, &r, &e));
    agent_materialize_req_release(&r);
}

/* Raw protobuf: a length-delimited field. */
static void put_ld(uint8_t *b, size_t *n, unsigned field, const void *p, size_t len)
{
    b[(*n)++] = (uint8_t)(field << 3 | 2);
    ASSERT(len < 128);
    b[(*n)++] = (uint8_t)len;
    memcpy(b + *n, p, len);
    *n += len;
}

static void put_entry(uint8_t *b, size_t *n, const char *k, size_t kl, const char *v, size_t vl)
{
    uint8_t e[128];
    size_t en = 0;
    put_ld(e, &en, 1, k, kl);
    put_ld(e, &en, 2, v, vl);
    put_ld(b, n, 5, e, en);
}

/* A request whose field `which` (1-4 pod/volume, 5 an attribute value, 6 an
 * attribute key, 7 a value sent before its key) holds a NUL byte. */
static int dec_nul(int which, struct tkm_err *e)
{
    uint8_t b[512];
    size_t n = 0;
    struct agent_materialize_req r;
    put_ld(b, &n, 1, which == 1 ? "a\0b" : "a", which == 1 ? 3 : 1);
    put_ld(b, &n, 2, which == 2 ? "p\0q" : "p", which == 2 ? 3 : 1);
    put_ld(b, &n, 3, which == 3 ? "u\0v" : "u", which == 3 ? 3 : 1);
    put_ld(b, &n, 4, which == 4 ? "v\0w" : "v", which == 4 ? 3 : 1);
    put_entry(b, &n, "cacheName", 9, "vec", 3);
    if (which == 5)
        put_entry(b, &n, "mountPath", 9, "/a\0/b", 5);
    if (which == 6)
        put_entry(b, &n, "mount\0Path", 10, "/a", 2);
    if (which == 7) { /* an entry with its value before its key */
        uint8_t e7[64];
        size_t n7 = 0;
        put_ld(e7, &n7, 2, "/a\0", 3);
        put_ld(e7, &n7, 1, "mountPath", 9);
        put_ld(b, &n, 5, e7, n7);
    }
    memset(e, 0, sizeof *e);
    int rc = agent_materialize_req_decode(b, n, &r, e);
    if (rc == 0)
        agent_materialize_req_release(&r);
    return rc;
}

TEST(decode_nul_bytes)
{
    struct tkm_err e;
    ASSERT_OK(dec_nul(0, &e)); /* the raw encoder itself is right */
    ASSERT_EQ(dec_nul(1, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "pod_namespace contains a NUL byte");
    ASSERT_EQ(dec_nul(2, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "pod_name contains a NUL byte");
    ASSERT_EQ(dec_nul(3, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "pod_uid contains a NUL byte");
    ASSERT_EQ(dec_nul(4, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "volume_id contains a NUL byte");
    ASSERT_EQ(dec_nul(5, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "volume attribute \"mountPath\" contains a NUL byte");
    ASSERT_EQ(dec_nul(6, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "a volume attribute key contains a NUL byte");
    ASSERT_EQ(dec_nul(7, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "a volume attribute value contains a NUL byte");
}

TEST(decode_garbage_and_release)
{
    struct agent_materialize_req r;
    struct agent_release_req rr;
    struct tkm_err e = {0};
    const uint8_t junk[] = {0x0a, 0x7f, 'x'}; /* field 1, length 127, 1 byte */
    uint8_t b[300];
    size_t n = 0;
    ASSERT_EQ(agent_materialize_req_decode(junk, sizeof junk, &r, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "cannot decode the MaterializeRequest (3 bytes)");
    memset(&e, 0, sizeof e);
    ASSERT_EQ(agent_release_req_decode(junk, sizeof junk, &rr, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "cannot decode the ReleaseRequest (3 bytes)");
    memset(&e, 0, sizeof e);
    ASSERT_EQ(agent_release_req_decode(b, 0, &rr, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "volume_id is missing");
    put_ld(b, &n, 1, VOL1, strlen(VOL1));
    ASSERT_OK(agent_release_req_decode(b, n, &rr, &e));
    ASSERT_STREQ(rr.volume_id, VOL1);
    agent_release_req_release(&rr);
    n = 0;
    put_ld(b, &n, 1, "x/y", 3);
    memset(&e, 0, sizeof e);
    ASSERT_EQ(agent_release_req_decode(b, n, &rr, &e), -EINVAL);
    ASSERT_STRCONTAINS(e.msg, "volume_id \"x/y\" is not valid");
    n = 0;
    put_ld(b, &n, 1, "x\0y", 3);
    memset(&e, 0, sizeof e);
    ASSERT_EQ(agent_release_req_decode(b, n, &rr, &e), -EINVAL);
    ASSERT_STREQ(e.msg, "volume_id contains a NUL byte");
}

TEST(decode_release_scratch_bounds)
{
    Tkm__Agent__V1__ReleaseRequest m = TKM__AGENT__V1__RELEASE_REQUEST__INIT;
    Tkm__Agent__V1__ScratchCount sc = TKM__AGENT__V1__SCRATCH_COUNT__INIT;
    char long_name[200], *names[40], nb[40][16];
    struct agent_release_req rr;
    struct tkm_err e = {0};
    uint8_t b[8192];
    size_t n;
    memset(long_name, 'k', 129);
    long_name[129] = 0;
    for (size_t i = 0; i < 40; i++) {
        snprintf(nb[i], sizeof nb[i], "kern_%zu.v-1", i);
        names[i] = nb[i];
    }
    names[1] = "bad name"; /* a space */
    names[2] = long_name;  /* 129 bytes */
    names[3] = "";         /* empty */
    names[4] = "\x1b[31m"; /* escape */
    m.volume_id = VOL1;
    ASSERT((n = tkm__agent__v1__release_request__pack(&m, b)) > 0);
    ASSERT_OK(agent_release_req_decode(b, n, &rr, &e));
    ASSERT_EQ(rr.scratch.present, 0); /* absent: nothing counted */
    agent_release_req_release(&rr);
    sc.triton_kernels = 7;
    sc.inductor_fxgraph = 4294967295u;
    sc.inductor_aotautograd = 2;
    sc.vllm_entries = 1;
    sc.files = 1000;
    sc.bytes = 18446744073709551615ull;
    sc.kernel_names = names;
    sc.n_kernel_names = 40;
    m.scratch = &sc;
    ASSERT(tkm__agent__v1__release_request__get_packed_size(&m) <= sizeof b);
    n = tkm__agent__v1__release_request__pack(&m, b);
    ASSERT_OK(agent_release_req_decode(b, n, &rr, &e));
    ASSERT_STREQ(rr.volume_id, VOL1);
    ASSERT_EQ(rr.scratch.present, 1);
    ASSERT_EQ(rr.scratch.triton_kernels, 7);
    ASSERT_EQ(rr.scratch.inductor_fxgraph, 4294967295u);
    ASSERT_EQ(rr.scratch.inductor_aotautograd, 2);
    ASSERT_EQ(rr.scratch.vllm_entries, 1);
    ASSERT_EQ(rr.scratch.files, 1000);
    ASSERT(rr.scratch.bytes == 18446744073709551615ull);
    /* 4 invalid dropped; of the 36 valid the first 32 kept; truncated */
    ASSERT_EQ(rr.scratch.n_names, AGENT_SCRATCH_NAMES);
    ASSERT_EQ(rr.scratch.truncated, 1);
    ASSERT_STREQ(rr.scratch.names[0], "kern_0.v-1");
    ASSERT_STREQ(rr.scratch.names[1], "kern_5.v-1");
    ASSERT_STREQ(rr.scratch.names[31], "kern_35.v-1");
    agent_release_req_release(&rr);
    /* 32 valid names: kept, not truncated unless the sender said so */
    sc.kernel_names = names + 5;
    sc.n_kernel_names = 32;
    n = tkm__agent__v1__release_request__pack(&m, b);
    ASSERT_OK(agent_release_req_decode(b, n, &rr, &e));
    ASSERT_EQ(rr.scratch.n_names, 32);
    ASSERT_EQ(rr.scratch.truncated, 0);
    agent_release_req_release(&rr);
    sc.truncated = 1;
    n = tkm__agent__v1__release_request__pack(&m, b);
    ASSERT_OK(agent_release_req_decode(b, n, &rr, &e));
    ASSERT_EQ(rr.scratch.truncated, 1);
    agent_release_req_release(&rr);
    /* the names the decoder keeps are tkm_kernel_name_ok()'s: exactly 128 bytes kept,
     * a slash dropped (truncated) */
    long_name[128] = 0;
    names[0] = long_name;
    names[1] = "a/b";
    sc.kernel_names = names;
    sc.n_kernel_names = 2;
    sc.truncated = 0;
    n = tkm__agent__v1__release_request__pack(&m, b);
    ASSERT_OK(agent_release_req_decode(b, n, &rr, &e));
    ASSERT_EQ(rr.scratch.n_names, 1);
    ASSERT_STREQ(rr.scratch.names[0], long_name);
    ASSERT_EQ(rr.scratch.truncated, 1);
    agent_release_req_release(&rr);
}

/* ---- the server over a real socket ------------------------------------------------------- */

enum mode { REPLY_NOW, REPLY_LATER, HOLD, FAIL_DENIED, WRONG_TYPE, REPLY_EMPTY, REPLY_TWO };

struct fx {
    uv_loop_t loop;
    struct agent_rpc_server *srv;
    struct tkm_grpc_client *cli;
    char dir[200], path[220];
    enum mode mode;
    int materialize, release, status, cancels, closed, late_rc, wrong_rc, finish_in_cancel;
    struct agent_rpc_call *held;
    uv_timer_t timer;
    struct tkm_grpc_peer peer;
    char last_mount[64];
};

struct res {
    int done, code;
    char msg[1024];
    uint8_t *resp;
    size_t len;
};

static const struct agent_materialize_result RESULT = {
    .store_path = "/var/lib/tkm/store/sha256-ab/cache",
    .target_arch = "90",
    .mount_path = "/home/ml/.triton/cache",
    .cache_namespace = "team-a",
    .cache_name = "vec",
    .digest = "sha256:abab",
};

static const char *const PARTS[] = {"inductor", "triton"};
static const struct agent_materialize_result RESULT_EMPTY = {
    .mount_path = "/m",
    .cache_name = "vec",
    .digest = "sha256:abab",
    .empty = 1,
    .empty_reason = "NoVariant",
    .empty_message = "NoVariant: no GPU on node n can use cache vec",
    .parts = PARTS,
    .n_parts = 2,
};
static const char *const PATHS[] = {"/store/sha256-90", "/store/sha256-80"};
static const struct agent_materialize_result RESULT_TWO = {
    .store_path = "/store/sha256-90",
    .target_arch = "90",
    .store_paths = PATHS,
    .n_store_paths = 2,
};

static void timer_fire(uv_timer_t *t)
{
    struct fx *f = t->data;
    struct agent_rpc_call *c = f->held;
    f->held = NULL;
    ASSERT_OK(agent_rpc_reply_materialize(c, &RESULT));
}

static void op_materialize(struct agent_rpc_call *call, const struct agent_materialize_req *req,
                           void *data)
{
    struct fx *f = data;
    struct agent_status_result st = {.ready = 1};
    f->materialize++;
    f->peer = req->peer;
    snprintf(f->last_mount, sizeof f->last_mount, "%s", req->mount_path ? req->mount_path : "");
    switch (f->mode) {
    case REPLY_NOW:
        ASSERT_OK(agent_rpc_reply_materialize(call, &RESULT));
        break;
    case REPLY_LATER:
        f->held = call;
        uv_timer_start(&f->timer, timer_fire, 30, 0);
        break;
    case HOLD:
        f->held = call;
        break;
    case FAIL_DENIED:
        ASSERT_OK(agent_rpc_fail(call, TKM_GRPC_PERMISSION_DENIED, "not declared: x"));
        break;
    case WRONG_TYPE:
        f->wrong_rc = agent_rpc_reply_status(call, &st);
        break;
    case REPLY_EMPTY:
        ASSERT_OK(agent_rpc_reply_materialize(call, &RESULT_EMPTY));
        break;
    case REPLY_TWO:
        ASSERT_OK(agent_rpc_reply_materialize(call, &RESULT_TWO));
        break;
    }
}

static void op_release(struct agent_rpc_call *call, const struct agent_release_req *req, void *data)
{
    struct fx *f = data;
    f->release++;
    ASSERT_OK(agent_rpc_reply_release(call, strcmp(req->volume_id, VOL1) == 0));
}

static void op_status(struct agent_rpc_call *call, void *data)
{
    struct fx *f = data;
    struct agent_status_result st = {.ready = 1, .message = "ok", .node_name = "node-1"};
    f->status++;
    ASSERT_OK(agent_rpc_reply_status(call, &st));
}

static void op_cancel(struct agent_rpc_call *call, void *data)
{
    struct fx *f = data;
    f->cancels++;
    ASSERT(call == f->held);
    if (f->finish_in_cancel) { /* the daemon drops its work and finishes right here */
        f->late_rc = agent_rpc_fail(call, TKM_GRPC_ABORTED, "dropped");
        f->held = NULL;
    }
}

static const struct agent_rpc_ops OPS = {op_materialize, op_release, op_status, op_cancel};

static void on_closed(void *data)
{
    (*(int *)data)++;
}

static void on_result(int code, const char *message, const void *resp, size_t len, void *data)
{
    struct res *r = data;
    ASSERT_EQ(r->done, 0);
    r->done = 1;
    r->code = code;
    snprintf(r->msg, sizeof r->msg, "%s", message);
    r->len = len;
    r->resp = malloc(len + 1);
    ASSERT_NOT_NULL(r->resp);
    if (len)
        memcpy(r->resp, resp, len);
}

static void fx_init(struct fx *f)
{
    struct tkm_err err = {0};
    memset(f, 0, sizeof *f);
    ASSERT_OK(uv_loop_init(&f->loop));
    uv_timer_init(&f->loop, &f->timer);
    f->timer.data = f;
    snprintf(f->dir, sizeof f->dir, "%s/run/tkm", tkm_test_tmpdir());
    snprintf(f->path, sizeof f->path, "%s/agent.sock", f->dir);
    if (agent_rpc_server_new(&f->loop, f->path, &OPS, f, NULL, &f->srv, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "agent_rpc_server_new: %s", tkm_err_str(&err));
    ASSERT_OK(tkm_grpc_client_new(&f->loop, f->path, &f->cli, &err));
}

static void fx_finish(struct fx *f)
{
    int want = 1;
    uv_close((uv_handle_t *)&f->timer, NULL);
    tkm_grpc_client_close(f->cli, on_closed, &f->closed);
    if (f->srv) {
        agent_rpc_server_close(f->srv, on_closed, &f->closed);
        want++;
    }
    while (f->closed < want)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&f->loop), 0);
}

static void start(struct fx *f, const char *method, const void *b, size_t n, uint64_t timeout,
                  struct res *r)
{
    struct tkm_err err = {0};
    char m[128];
    snprintf(m, sizeof m, "/tkm.agent.v1.Agent/%s", method);
    memset(r, 0, sizeof *r);
    if (tkm_grpc_client_call(f->cli, m, b, n, timeout, on_result, r, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "call: %s", tkm_err_str(&err));
}

static void wait_res(struct fx *f, struct res *r)
{
    while (!r->done)
        uv_run(&f->loop, UV_RUN_ONCE);
}

static void call_mat(struct fx *f, const struct kv *a, size_t n, uint64_t timeout, struct res *r)
{
    uint8_t *b;
    size_t len = pack_mat(&b, "team-a", "trainer-0", UID1, VOL1, a, n);
    start(f, "Materialize", b, len, timeout, r);
    free(b);
}

static void call_release(struct fx *f, const char *vol, struct res *r)
{
    uint8_t b[200];
    size_t n = 0;
    put_ld(b, &n, 1, vol, strlen(vol));
    start(f, "Release", b, n, 5000, r);
    wait_res(f, r);
}

TEST(server_socket_modes)
{
    struct fx f;
    struct stat st;
    fx_init(&f);
    ASSERT_OK(stat(f.dir, &st));
    ASSERT_EQ(st.st_mode & 07777, 0700);
    ASSERT_OK(stat(f.path, &st));
    ASSERT(S_ISSOCK(st.st_mode));
    ASSERT_EQ(st.st_mode & 07777, 0600);
    fx_finish(&f);
    ASSERT_EQ(stat(f.path, &st), -1); /* unlinked on close */
}

TEST(server_refuses_bad_places)
{
    uv_loop_t loop;
    struct agent_rpc_server *srv = (void *)1;
    struct tkm_err err = {0};
    char dir[200], path[220];
    struct agent_rpc_ops no_status = {op_materialize, op_release, NULL, NULL};
    int fd;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ASSERT_OK(uv_loop_init(&loop));
    snprintf(dir, sizeof dir, "%s/open", tkm_test_tmpdir());
    ASSERT_OK(mkdir(dir, 0755));
    ASSERT_OK(chmod(dir, 0755));
    snprintf(path, sizeof path, "%s/agent.sock", dir);
    ASSERT_EQ(agent_rpc_server_new(&loop, path, &OPS, NULL, NULL, &srv, &err), -EPERM);
    ASSERT_NULL(srv);
    ASSERT_STRCONTAINS(err.msg, "has mode 0755: it must be 0700");
    /* 0700: accepted, and a stale socket there (nobody listening) is replaced */
    ASSERT_OK(chmod(dir, 0700));
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT(fd >= 0);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof sa));
    close(fd);
    memset(&err, 0, sizeof err);
    ASSERT_OK(agent_rpc_server_new(&loop, path, &OPS, NULL, NULL, &srv, &err));
    /* a second server on a live socket: refused */
    struct agent_rpc_server *srv2 = NULL;
    ASSERT_EQ(agent_rpc_server_new(&loop, path, &OPS, NULL, NULL, &srv2, &err), -EADDRINUSE);
    agent_rpc_server_close(srv, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    /* a regular file at the path is never removed */
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    ASSERT(fd >= 0);
    close(fd);
    memset(&err, 0, sizeof err);
    ASSERT_EQ(agent_rpc_server_new(&loop, path, &OPS, NULL, NULL, &srv, &err), -EEXIST);
    memset(&err, 0, sizeof err);
    ASSERT_EQ(agent_rpc_server_new(&loop, "rel/agent.sock", &OPS, NULL, NULL, &srv, &err), -EINVAL);
    ASSERT_EQ(agent_rpc_server_new(&loop, path, &no_status, NULL, NULL, &srv, &err), -EINVAL);
    ASSERT_NULL(srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    ASSERT_EQ(uv_loop_close(&loop), 0);
}

TEST(server_materialize_now_and_later)
{
    struct fx f;
    struct res r;
    struct kv a[] = {{"cacheName", "vec"}, {"mountPath", "/m"}};
    fx_init(&f);
    for (int later = 0; later < 2; later++) {
        f.mode = later ? REPLY_LATER : REPLY_NOW;
        call_mat(&f, a, 2, 5000, &r);
        wait_res(&f, &r);
        ASSERT_EQ(r.code, TKM_GRPC_OK);
        Tkm__Agent__V1__MaterializeResponse *m =
            tkm__agent__v1__materialize_response__unpack(NULL, r.len, r.resp);
        ASSERT_NOT_NULL(m);
        ASSERT_STREQ(m->store_path, RESULT.store_path);
        ASSERT_STREQ(m->target_arch, "90");
        ASSERT_STREQ(m->mount_path, RESULT.mount_path);
        ASSERT_STREQ(m->cache_namespace, "team-a");
        ASSERT_STREQ(m->cache_name, "vec");
        ASSERT_STREQ(m->digest, "sha256:abab");
        /* one store dir: store_paths names it too; the layout defaults to the Triton root */
        ASSERT_EQ(m->n_store_paths, 1);
        ASSERT_STREQ(m->store_paths[0], RESULT.store_path);
        ASSERT_EQ(m->empty, 0);
        ASSERT_STREQ(m->empty_reason, "");
        ASSERT_EQ(m->n_parts, 1);
        ASSERT_STREQ(m->parts[0], "triton");
        tkm__agent__v1__materialize_response__free_unpacked(m, NULL);
        free(r.resp);
    }
    ASSERT_EQ(f.materialize, 2);
    ASSERT_EQ(f.cancels, 0);
    ASSERT_EQ(f.peer.pid, getpid());
    ASSERT_EQ(f.peer.uid, geteuid());
    ASSERT_STREQ(f.last_mount, "/m");
    fx_finish(&f);
}

/* The issue-24 fields: an empty volume (no store path, its reason and parts) and two
 * store dirs (one per variant). */
TEST(server_materialize_empty_and_several_paths)
{
    struct fx f;
    struct res r;
    struct kv a[] = {{"cacheName", "vec"}};
    fx_init(&f);
    f.mode = REPLY_EMPTY;
    call_mat(&f, a, 1, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_OK);
    Tkm__Agent__V1__MaterializeResponse *m =
        tkm__agent__v1__materialize_response__unpack(NULL, r.len, r.resp);
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(m->empty, 1);
    ASSERT_STREQ(m->store_path, "");
    ASSERT_EQ(m->n_store_paths, 0);
    ASSERT_STREQ(m->empty_reason, "NoVariant");
    ASSERT_STREQ(m->empty_message, "NoVariant: no GPU on node n can use cache vec");
    ASSERT_EQ(m->n_parts, 2);
    ASSERT_STREQ(m->parts[0], "inductor");
    ASSERT_STREQ(m->parts[1], "triton");
    ASSERT_STREQ(m->mount_path, "/m");
    tkm__agent__v1__materialize_response__free_unpacked(m, NULL);
    free(r.resp);
    f.mode = REPLY_TWO;
    call_mat(&f, a, 1, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_OK);
    m = tkm__agent__v1__materialize_response__unpack(NULL, r.len, r.resp);
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(m->empty, 0);
    ASSERT_STREQ(m->store_path, "/store/sha256-90");
    ASSERT_EQ(m->n_store_paths, 2);
    ASSERT_STREQ(m->store_paths[0], "/store/sha256-90");
    ASSERT_STREQ(m->store_paths[1], "/store/sha256-80");
    tkm__agent__v1__materialize_response__free_unpacked(m, NULL);
    free(r.resp);
    fx_finish(&f);
}

TEST(server_errors)
{
    struct fx f;
    struct res r;
    struct kv bad[] = {{"cacheName", "vec"}, {"readOnly", "yes"}};
    struct kv ok[] = {{"cacheName", "vec"}};
    fx_init(&f);
    /* validation: answered by the layer, the op never sees it */
    call_mat(&f, bad, 2, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_INVALID_ARGUMENT);
    ASSERT_STREQ(r.msg, "volume attribute readOnly is \"yes\": it must be \"true\" or \"false\"");
    free(r.resp);
    start(&f, "Materialize", "\x0a\x7f", 2, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_INVALID_ARGUMENT);
    ASSERT_STRCONTAINS(r.msg, "cannot decode the MaterializeRequest");
    free(r.resp);
    ASSERT_EQ(f.materialize, 0);
    /* the op's own failure crosses as it was given */
    f.mode = FAIL_DENIED;
    call_mat(&f, ok, 1, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_PERMISSION_DENIED);
    ASSERT_STREQ(r.msg, "not declared: x");
    free(r.resp);
    /* a reply of the wrong type: INTERNAL, and the op learns -EINVAL */
    f.mode = WRONG_TYPE;
    call_mat(&f, ok, 1, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_INTERNAL);
    ASSERT_EQ(f.wrong_rc, -EINVAL);
    free(r.resp);
    /* an unknown method of the service */
    start(&f, "Mount", "", 0, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_UNIMPLEMENTED);
    free(r.resp);
    fx_finish(&f);
}

TEST(server_release_and_status)
{
    struct fx f;
    struct res r;
    fx_init(&f);
    call_release(&f, VOL1, &r);
    ASSERT_EQ(r.code, TKM_GRPC_OK);
    Tkm__Agent__V1__ReleaseResponse *rel =
        tkm__agent__v1__release_response__unpack(NULL, r.len, r.resp);
    ASSERT_NOT_NULL(rel);
    ASSERT_EQ(rel->released, 1);
    tkm__agent__v1__release_response__free_unpacked(rel, NULL);
    free(r.resp);
    call_release(&f, "csi-unknown", &r);
    ASSERT_EQ(r.code, TKM_GRPC_NOT_FOUND);
    ASSERT_STREQ(r.msg, "volume \"csi-unknown\" is not known to this agent (nothing to release)");
    free(r.resp);
    call_release(&f, "../etc", &r);
    ASSERT_EQ(r.code, TKM_GRPC_INVALID_ARGUMENT);
    ASSERT_STRCONTAINS(r.msg, "volume_id \"../etc\" is not valid");
    free(r.resp);
    ASSERT_EQ(f.release, 2);
    start(&f, "Status", "", 0, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_OK);
    Tkm__Agent__V1__StatusResponse *st =
        tkm__agent__v1__status_response__unpack(NULL, r.len, r.resp);
    ASSERT_NOT_NULL(st);
    ASSERT_EQ(st->ready, 1);
    ASSERT_STREQ(st->message, "ok");
    ASSERT_STREQ(st->node_name, "node-1");
    ASSERT_STREQ(st->version, TKM_VERSION);
    tkm__agent__v1__status_response__free_unpacked(st, NULL);
    free(r.resp);
    fx_finish(&f);
}

TEST(server_deadline_cancels)
{
    struct fx f;
    struct res r;
    struct kv a[] = {{"cacheName", "vec"}};
    /* 200 ms, 2 s under valgrind: the server must have read the call before the client's
     * deadline, and a starved process (valgrind in CI's background phases, nice 19) runs the
     * client's timer before the server's read */
    uint64_t deadline = 200u * (uint64_t)tkm_test_timeout_scale();
    fx_init(&f);
    f.mode = HOLD;
    call_mat(&f, a, 1, deadline, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_DEADLINE_EXCEEDED);
    free(r.resp);
    while (f.cancels < 1) /* the server's side of the deadline */
        uv_run(&f.loop, UV_RUN_ONCE);
    ASSERT_EQ(f.cancels, 1);
    ASSERT_NOT_NULL(f.held);
    /* the daemon's work finishes later: the reply only frees the handle */
    ASSERT_EQ(agent_rpc_reply_materialize(f.held, &RESULT), -ECANCELED);
    f.held = NULL;
    /* the server still serves */
    f.mode = REPLY_NOW;
    call_mat(&f, a, 1, 5000, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_OK);
    free(r.resp);
    ASSERT_EQ(f.cancels, 1);
    /* a cancel op that finishes the call itself */
    f.mode = HOLD;
    f.finish_in_cancel = 1;
    call_mat(&f, a, 1, deadline, &r);
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_DEADLINE_EXCEEDED);
    free(r.resp);
    while (f.cancels < 2)
        uv_run(&f.loop, UV_RUN_ONCE);
    ASSERT_EQ(f.late_rc, -ECANCELED);
    ASSERT_NULL(f.held);
    fx_finish(&f);
}

TEST(server_close_with_call_in_flight)
{
    struct fx f;
    struct res r;
    struct kv a[] = {{"cacheName", "vec"}};
    fx_init(&f);
    f.mode = HOLD;
    call_mat(&f, a, 1, 0, &r);
    while (!f.held)
        uv_run(&f.loop, UV_RUN_ONCE);
    agent_rpc_server_close(f.srv, on_closed, &f.closed);
    f.srv = NULL;
    ASSERT_EQ(f.cancels, 1); /* at once, from inside close */
    wait_res(&f, &r);
    ASSERT_EQ(r.code, TKM_GRPC_UNAVAILABLE);
    free(r.resp);
    while (f.closed < 1)
        uv_run(&f.loop, UV_RUN_ONCE);
    /* the handle outlived the server: finishing it only frees it */
    ASSERT_EQ(agent_rpc_fail(f.held, TKM_GRPC_INTERNAL, "too late"), -ECANCELED);
    f.held = NULL;
    f.closed = 0;
    fx_finish(&f);
}
