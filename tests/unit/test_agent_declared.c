/*
 * test_agent_declared.c - agent/declared.c: the declaration check for
 * Materialize over canned TritonKernelCache / TritonKernelCacheCluster
 * objects (an array source behind struct agent_objsrc; the e2e
 * tests/e2e/agent_rpc.sh runs it over real informers).
 */
#include "test.h"

#include <stdio.h>

#include <tkm/grpc.h>

#include "declared.h"

#define IMG_A  "registry.example.com:5000/kernels/vector-add:v1"
#define IMG_B  "registry.example.com:5000/kernels/vector-add:v2"
#define IMG_CL "registry.example.com:5000/kernels/shared:v1"

/* ---- a canned store -------------------------------------------------------------------- */

#define MAX_OBJS 16

struct canned {
    struct k8s_obj objs[MAX_OBJS];
    char json[MAX_OBJS][512];
    char key[MAX_OBJS][128];
    size_t n;
    int gets, visits;
};

/* Adds an object; ns NULL: a TritonKernelCacheCluster. image NULL: a spec
 * without cacheImage (does not decode). */
static void add(struct canned *c, const char *ns, const char *name, const char *image,
                const char *mount)
{
    struct k8s_obj *o = &c->objs[c->n];
    char spec[300];
    ASSERT(c->n < MAX_OBJS);
    if (image)
        snprintf(spec, sizeof spec, "{\"cacheImage\":\"%s\"%s%s%s}", image,
                 mount ? ",\"mountPath\":\"" : "", mount ? mount : "", mount ? "\"" : "");
    else
        snprintf(spec, sizeof spec, "{\"mountPath\":\"/x\"}");
    snprintf(
        c->json[c->n], sizeof c->json[0],
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"%s\",\"metadata\":{\"name\":\"%s\"%s%s%s,"
        "\"uid\":\"uid-%zu\",\"resourceVersion\":\"%zu\"},\"spec\":%s}",
        ns ? "TritonKernelCache" : "TritonKernelCacheCluster", name, ns ? ",\"namespace\":\"" : "",
        ns ? ns : "", ns ? "\"" : "", c->n, c->n + 1, spec);
    snprintf(c->key[c->n], sizeof c->key[0], "%s%s%s", ns ? ns : "", ns ? "/" : "", name);
    o->key = c->key[c->n];
    o->ns = ns ? ns : "";
    o->name = name;
    o->resource_version = "1";
    o->uid = "uid";
    o->json = c->json[c->n];
    o->json_len = strlen(c->json[c->n]);
    c->n++;
}

static const struct k8s_obj *c_get(void *ctx, const char *ns, const char *name)
{
    struct canned *c = ctx;
    char key[300];
    c->gets++;
    snprintf(key, sizeof key, "%s%s%s", ns && *ns ? ns : "", ns && *ns ? "/" : "", name);
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->objs[i].key, key) == 0)
            return &c->objs[i];
    return NULL;
}

static int c_foreach(void *ctx, int (*fn)(const struct k8s_obj *, void *), void *data)
{
    struct canned *c = ctx;
    for (size_t i = 0; i < c->n; i++) {
        int rc;
        c->visits++;
        if ((rc = fn(&c->objs[i], data)) != 0)
            return rc;
    }
    return 0;
}

struct world {
    struct canned tkc, tkcc;
    struct agent_objsrc src_tkc, src_tkcc;
};

static void world_init(struct world *w)
{
    memset(w, 0, sizeof *w);
    w->src_tkc = (struct agent_objsrc){c_get, c_foreach, &w->tkc};
    w->src_tkcc = (struct agent_objsrc){c_get, c_foreach, &w->tkcc};
    add(&w->tkc, "team-a", "vec", IMG_A, "/home/a/.triton/cache");
    add(&w->tkc, "team-a", "other", IMG_B, NULL);
    add(&w->tkc, "team-b", "mine", IMG_B, NULL);
    add(&w->tkcc, NULL, "shared", IMG_CL, "/cl");
    add(&w->tkcc, NULL, "vec", IMG_CL, NULL); /* same name as team-a's tkc */
}

/* Runs the lookup; fills *d (released by the caller) and err. */
static int find(struct world *w, const char *ns, const char *name, const char *image,
                struct agent_declared *d, struct tkm_err *err)
{
    struct agent_materialize_req req = {.cache_name = (char *)name, .cache_image = (char *)image};
    memset(err, 0, sizeof *err);
    return agent_declared_find(&w->src_tkc, &w->src_tkcc, ns, &req, d, err);
}

/* ---- by name ---------------------------------------------------------------------------- */

TEST(name_namespaced)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_OK(find(&w, "team-a", "vec", NULL, &d, &err));
    ASSERT_EQ(d.cluster, 0);
    ASSERT_STREQ(d.ns, "team-a");
    ASSERT_STREQ(d.name, "vec");
    ASSERT(d.obj == &w.tkc.objs[0]);
    ASSERT_STREQ(d.cache.spec.cache_image, IMG_A);
    ASSERT_STREQ(d.cache.spec.mount_path, "/home/a/.triton/cache");
    ASSERT_EQ(w.tkcc.gets, 0); /* the namespaced one shadows the cluster "vec" */
    agent_declared_release(&d);
    agent_declared_release(&d); /* twice: harmless */
}

TEST(name_cluster_from_any_namespace)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    const char *nss[] = {"team-a", "team-b", "nobody-declares-here"};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_OK(find(&w, nss[i], "shared", NULL, &d, &err));
        ASSERT_EQ(d.cluster, 1);
        ASSERT_STREQ(d.ns, "");
        ASSERT_STREQ(d.name, "shared");
        ASSERT_STREQ(d.cache.spec.mount_path, "/cl");
        agent_declared_release(&d);
    }
    /* team-b has no tkc "vec": the cluster "vec" answers, never team-a's */
    ASSERT_OK(find(&w, "team-b", "vec", NULL, &d, &err));
    ASSERT_EQ(d.cluster, 1);
    ASSERT_STREQ(d.cache.spec.cache_image, IMG_CL);
    agent_declared_release(&d);
}

TEST(name_of_another_namespace_denied)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_EQ(find(&w, "team-b", "other", NULL, &d, &err), -EACCES);
    ASSERT_STREQ(err.msg, "cache \"other\" is not declared for namespace \"team-b\": no "
                          "TritonKernelCache team-b/other and no TritonKernelCacheCluster other");
    ASSERT_NULL(d.obj);
    ASSERT_NULL(d.cache.spec.cache_image);
    ASSERT_EQ(agent_declared_grpc_code(-EACCES), TKM_GRPC_PERMISSION_DENIED);
    ASSERT_EQ(find(&w, "team-a", "mine", NULL, &d, &err), -EACCES);
    ASSERT_STRCONTAINS(err.msg, "no TritonKernelCache team-a/mine");
}

TEST(name_undecodable_is_failed_precondition)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    add(&w.tkc, "team-b", "broken", NULL, NULL);
    ASSERT_EQ(find(&w, "team-b", "broken", NULL, &d, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "TritonKernelCache team-b/broken cannot be used");
    ASSERT_STRCONTAINS(err.msg, "spec.cacheImage: missing");
    ASSERT_EQ(agent_declared_grpc_code(-EPROTO), TKM_GRPC_FAILED_PRECONDITION);
    ASSERT_NULL(d.obj);
}

/* ---- by image --------------------------------------------------------------------------- */

TEST(image_namespaced_and_cluster)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_EQ(d.cluster, 0);
    ASSERT_STREQ(d.name, "vec");
    agent_declared_release(&d);
    ASSERT_OK(find(&w, "team-b", NULL, IMG_B, &d, &err));
    ASSERT_STREQ(d.ns, "team-b");
    ASSERT_STREQ(d.name, "mine");
    agent_declared_release(&d);
    /* the cluster image: "shared" and "vec" both declare it: the smaller name */
    ASSERT_OK(find(&w, "anywhere", NULL, IMG_CL, &d, &err));
    ASSERT_EQ(d.cluster, 1);
    ASSERT_STREQ(d.name, "shared");
    agent_declared_release(&d);
}

TEST(image_of_another_namespace_denied)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_EQ(find(&w, "team-b", NULL, IMG_A, &d, &err), -EACCES);
    ASSERT_STREQ(err.msg, "image \"" IMG_A "\" is not declared for namespace \"team-b\": no "
                          "cache in namespace team-b or cluster-wide declares image " IMG_A);
    ASSERT_NULL(d.obj);
}

TEST(image_exact_match_only)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    const char *near[] = {
        "registry.example.com:5000/kernels/vector-add",         /* no tag */
        "registry.example.com:5000/kernels/vector-add:v1 ",     /* trailing space */
        "registry.example.com:5000/kernels/vector-add:v",       /* prefix */
        "registry.example.com:5000/kernels/vector-add:v10",     /* longer */
        "REGISTRY.example.com:5000/kernels/vector-add:v1",      /* case */
        "registry.example.com/kernels/vector-add:v1",           /* no port */
        ("registry.example.com:5000/kernels/vector-add@sha256:" /* digest form */
         "1111111111111111111111111111111111111111111111111111111111111111"),
    };
    world_init(&w);
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        ASSERT_EQ(find(&w, "team-a", NULL, near[i], &d, &err), -EACCES);
        ASSERT_STRCONTAINS(err.msg, "declares image");
    }
}

TEST(image_namespaced_before_cluster)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    add(&w.tkcc, NULL, "aaa-first-by-name", IMG_A, NULL);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_EQ(d.cluster, 0);
    ASSERT_STREQ(d.name, "vec");
    agent_declared_release(&d);
    /* another namespace with no tkc for it gets the cluster one */
    ASSERT_OK(find(&w, "team-b", NULL, IMG_A, &d, &err));
    ASSERT_EQ(d.cluster, 1);
    ASSERT_STREQ(d.name, "aaa-first-by-name");
    agent_declared_release(&d);
}

TEST(image_several_matches_smallest_name)
{
    const char *names[] = {"zeta", "mid", "alpha", "beta"};
    for (int order = 0; order < 2; order++) {
        struct world w;
        struct agent_declared d;
        struct tkm_err err;
        world_init(&w);
        for (size_t i = 0; i < 4; i++)
            add(&w.tkc, "team-c", names[order ? 3 - i : i], IMG_A, NULL);
        add(&w.tkc, "team-a", "aaaa", IMG_B, NULL); /* other namespace, smaller name */
        add(&w.tkc, "team-d", "a", IMG_A, NULL);    /* other namespace, same image */
        ASSERT_OK(find(&w, "team-c", NULL, IMG_A, &d, &err));
        ASSERT_STREQ(d.ns, "team-c");
        ASSERT_STREQ(d.name, "alpha");
        agent_declared_release(&d);
    }
}

TEST(image_skips_undecodable)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    add(&w.tkc, "team-a", "aaa-broken", NULL, NULL);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_STREQ(d.name, "vec");
    agent_declared_release(&d);
}

TEST(empty_stores_and_bad_requests)
{
    struct world w;
    struct agent_declared d;
    struct tkm_err err;
    world_init(&w);
    w.tkc.n = w.tkcc.n = 0;
    ASSERT_EQ(find(&w, "team-a", "vec", NULL, &d, &err), -EACCES);
    ASSERT_EQ(find(&w, "team-a", NULL, IMG_A, &d, &err), -EACCES);
    ASSERT_EQ(find(&w, "team-a", "vec", IMG_A, &d, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "exactly one of cacheName and cacheImage");
    ASSERT_EQ(find(&w, "team-a", NULL, NULL, &d, &err), -EINVAL);
    ASSERT_EQ(find(&w, "", "vec", NULL, &d, &err), -EINVAL);
    ASSERT_EQ(agent_declared_grpc_code(-EINVAL), TKM_GRPC_INVALID_ARGUMENT);
    ASSERT_EQ(agent_declared_grpc_code(-ENOMEM), TKM_GRPC_INTERNAL);
    ASSERT_EQ(agent_declared_grpc_code(0), TKM_GRPC_OK);
}
