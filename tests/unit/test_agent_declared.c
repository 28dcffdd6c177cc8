/*
 * test_agent_declared.c - agent/declared.c: the agent's index of caches,
 * fed as the informer handlers feed it (agent_index_apply with canned
 * TritonKernelCache / TritonKernelCacheCluster objects), and the declaration
 * check for Materialize on it (the e2e tests/e2e/agent_rpc.sh runs it over
 * real informers).
 */
#include "test.h"

#include <stdio.h>

#include <tkm/grpc.h>

#include "declared.h"

#define IMG_A  "registry.example.com:5000/kernels/vector-add:v1"
#define IMG_B  "registry.example.com:5000/kernels/vector-add:v2"
#define IMG_CL "registry.example.com:5000/kernels/shared:v1"

/* ---- a canned informer ------------------------------------------------------------------ */

struct world {
    struct agent_index x;
    struct agent_cache *live;
    size_t n;
};

/* The object JSON of a cache; ns NULL: a TritonKernelCacheCluster. image
 * NULL: a spec without cacheImage (does not decode). extra: more metadata. */
static void obj_json(char *buf, size_t n, size_t uid, const char *ns, const char *name,
                     const char *image, const char *mount, const char *extra)
{
    char spec[300];
    if (image)
        snprintf(spec, sizeof spec, "{\"cacheImage\":\"%s\"%s%s%s}", image,
                 mount ? ",\"mountPath\":\"" : "", mount ? mount : "", mount ? "\"" : "");
    else
        snprintf(spec, sizeof spec, "{\"mountPath\":\"/x\"}");
    snprintf(
        buf, n,
        "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"%s\",\"metadata\":{\"name\":\"%s\"%s%s%s,"
        "\"uid\":\"uid-%zu\",\"resourceVersion\":\"%zu\"%s},\"spec\":%s}",
        ns ? "TritonKernelCache" : "TritonKernelCacheCluster", name, ns ? ",\"namespace\":\"" : "",
        ns ? ns : "", ns ? "\"" : "", uid, uid + 1, extra ? extra : "", spec);
}

/* One informer event (add or update) for the object; returns what
 * agent_index_apply returned. */
static int event(struct world *w, const char *ns, const char *name, const char *image,
                 const char *mount, const char *extra)
{
    char json[1024], key[300];
    struct tkm_err err = {0};
    obj_json(json, sizeof json, w->n++, ns, name, image, mount, extra);
    snprintf(key, sizeof key, "%s%s%s", ns ? ns : "", ns ? "/" : "", name);
    struct k8s_obj o = {.key = key,
                        .ns = ns ? ns : "",
                        .name = name,
                        .resource_version = "1",
                        .uid = "uid",
                        .json = json,
                        .json_len = strlen(json)};
    struct agent_cache *ac = NULL;
    int rc = agent_index_apply(&w->x, &o, &ac, &err);
    ASSERT(ac == agent_index_get(&w->x, key));
    return rc;
}

static void add(struct world *w, const char *ns, const char *name, const char *image,
                const char *mount)
{
    event(w, ns, name, image, mount, NULL);
}

static void world_init(struct world *w)
{
    memset(w, 0, sizeof *w);
    agent_index_init(&w->x, &w->live);
    add(w, "team-a", "vec", IMG_A, "/home/a/.triton/cache");
    add(w, "team-a", "other", IMG_B, NULL);
    add(w, "team-b", "mine", IMG_B, NULL);
    add(w, NULL, "shared", IMG_CL, "/cl");
    add(w, NULL, "vec", IMG_CL, NULL); /* same name as team-a's tkc */
}

static void world_empty(struct world *w)
{
    agent_index_release(&w->x);
    ASSERT_NULL(w->live);
}

static const char *ns_of(const struct agent_cache *d)
{
    return d->c.cluster ? "" : d->c.meta.ns;
}

/* Runs the lookup; fills *d and err. */
static int find(struct world *w, const char *ns, const char *name, const char *image,
                struct agent_cache **d, struct tkm_err *err)
{
    struct agent_materialize_req req = {.cache_name = (char *)name, .cache_image = (char *)image};
    memset(err, 0, sizeof *err);
    return agent_declared_find(&w->x, ns, &req, d, err);
}

/* ---- by name ---------------------------------------------------------------------------- */

TEST(name_namespaced)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_OK(find(&w, "team-a", "vec", NULL, &d, &err));
    ASSERT_EQ(d->c.cluster, 0);
    ASSERT_STREQ(ns_of(d), "team-a");
    ASSERT_STREQ(d->c.meta.name, "vec");
    ASSERT(d == agent_index_get(&w.x, "team-a/vec"));
    ASSERT_STREQ(d->c.spec.cache_image, IMG_A);
    ASSERT_STREQ(d->c.spec.mount_path, "/home/a/.triton/cache");
    ASSERT(d != agent_index_get(&w.x, "vec")); /* the namespaced one shadows the cluster "vec" */
    world_empty(&w);
}

TEST(name_cluster_from_any_namespace)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    const char *nss[] = {"team-a", "team-b", "nobody-declares-here"};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_OK(find(&w, nss[i], "shared", NULL, &d, &err));
        ASSERT_EQ(d->c.cluster, 1);
        ASSERT_STREQ(ns_of(d), "");
        ASSERT_STREQ(d->c.meta.name, "shared");
        ASSERT_STREQ(d->c.spec.mount_path, "/cl");
    }
    /* team-b has no tkc "vec": the cluster "vec" answers, never team-a's */
    ASSERT_OK(find(&w, "team-b", "vec", NULL, &d, &err));
    ASSERT_EQ(d->c.cluster, 1);
    ASSERT_STREQ(d->c.spec.cache_image, IMG_CL);
    world_empty(&w);
}

TEST(name_of_another_namespace_denied)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_EQ(find(&w, "team-b", "other", NULL, &d, &err), -EACCES);
    ASSERT_STREQ(err.msg, "cache \"other\" is not declared for namespace \"team-b\": no "
                          "TritonKernelCache team-b/other and no TritonKernelCacheCluster other");
    ASSERT_NULL(d);
    ASSERT_EQ(agent_declared_grpc_code(-EACCES), TKM_GRPC_PERMISSION_DENIED);
    ASSERT_EQ(find(&w, "team-a", "mine", NULL, &d, &err), -EACCES);
    ASSERT_STRCONTAINS(err.msg, "no TritonKernelCache team-a/mine");
    world_empty(&w);
}

TEST(name_undecodable_is_failed_precondition)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    add(&w, "team-b", "broken", NULL, NULL);
    ASSERT_EQ(find(&w, "team-b", "broken", NULL, &d, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "TritonKernelCache team-b/broken cannot be used");
    ASSERT_STRCONTAINS(err.msg, "spec.cacheImage: missing");
    ASSERT_EQ(agent_declared_grpc_code(-EPROTO), TKM_GRPC_FAILED_PRECONDITION);
    ASSERT_NULL(d);
    world_empty(&w);
}

/* ---- by image --------------------------------------------------------------------------- */

TEST(image_namespaced_and_cluster)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_EQ(d->c.cluster, 0);
    ASSERT_STREQ(d->c.meta.name, "vec");
    ASSERT_OK(find(&w, "team-b", NULL, IMG_B, &d, &err));
    ASSERT_STREQ(ns_of(d), "team-b");
    ASSERT_STREQ(d->c.meta.name, "mine");
    /* the cluster image: "shared" and "vec" both declare it: the smaller name */
    ASSERT_OK(find(&w, "anywhere", NULL, IMG_CL, &d, &err));
    ASSERT_EQ(d->c.cluster, 1);
    ASSERT_STREQ(d->c.meta.name, "shared");
    world_empty(&w);
}

TEST(image_of_another_namespace_denied)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_EQ(find(&w, "team-b", NULL, IMG_A, &d, &err), -EACCES);
    ASSERT_STREQ(err.msg, "image \"" IMG_A "\" is not declared for namespace \"team-b\": no "
                          "cache in namespace team-b or cluster-wide declares image " IMG_A);
    ASSERT_NULL(d);
    world_empty(&w);
}

TEST(image_exact_match_only)
{
    struct world w;
    struct agent_cache *d;
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
    world_empty(&w);
}

TEST(image_namespaced_before_cluster)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    add(&w, NULL, "aaa-first-by-name", IMG_A, NULL);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_EQ(d->c.cluster, 0);
    ASSERT_STREQ(d->c.meta.name, "vec");
    /* another namespace with no tkc for it gets the cluster one */
    ASSERT_OK(find(&w, "team-b", NULL, IMG_A, &d, &err));
    ASSERT_EQ(d->c.cluster, 1);
    ASSERT_STREQ(d->c.meta.name, "aaa-first-by-name");
    world_empty(&w);
}

TEST(image_several_matches_smallest_name)
{
    const char *names[] = {"zeta", "mid", "alpha", "beta"};
    for (int order = 0; order < 2; order++) {
        struct world w;
        struct agent_cache *d;
        struct tkm_err err;
        world_init(&w);
        for (size_t i = 0; i < 4; i++)
            add(&w, "team-c", names[order ? 3 - i : i], IMG_A, NULL);
        add(&w, "team-a", "aaaa", IMG_B, NULL); /* other namespace, smaller name */
        add(&w, "team-d", "a", IMG_A, NULL);    /* other namespace, same image */
        ASSERT_OK(find(&w, "team-c", NULL, IMG_A, &d, &err));
        ASSERT_STREQ(ns_of(d), "team-c");
        ASSERT_STREQ(d->c.meta.name, "alpha");
        world_empty(&w);
    }
}

TEST(image_skips_undecodable)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    add(&w, "team-a", "aaa-broken", NULL, NULL);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "vec");
    world_empty(&w);
}

TEST(empty_stores_and_bad_requests)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    world_empty(&w);
    agent_index_init(&w.x, &w.live);
    ASSERT_EQ(find(&w, "team-a", "vec", NULL, &d, &err), -EACCES);
    ASSERT_EQ(find(&w, "team-a", NULL, IMG_A, &d, &err), -EACCES);
    ASSERT_EQ(find(&w, "team-a", "vec", IMG_A, &d, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "exactly one of cacheName and cacheImage");
    ASSERT_EQ(find(&w, "team-a", NULL, NULL, &d, &err), -EINVAL);
    ASSERT_EQ(find(&w, "", "vec", NULL, &d, &err), -EINVAL);
    ASSERT_EQ(agent_declared_grpc_code(-EINVAL), TKM_GRPC_INVALID_ARGUMENT);
    ASSERT_EQ(agent_declared_grpc_code(-ENOMEM), TKM_GRPC_INTERNAL);
    ASSERT_EQ(agent_declared_grpc_code(0), TKM_GRPC_OK);
    world_empty(&w);
}

/* ---- the index follows the informer's events ------------------------------------------------ */

static size_t live_count(const struct world *w)
{
    size_t n = 0;
    for (const struct agent_cache *ac = w->live; ac; ac = ac->next)
        n++;
    ASSERT_EQ(n, w->x.n_live);
    return n;
}

TEST(index_updates_follow_inputs_and_image)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_EQ(live_count(&w), 5);
    /* the same spec again (another resourceVersion): the inputs did not move */
    ASSERT_EQ(event(&w, "team-a", "vec", IMG_A, "/home/a/.triton/cache", NULL), AGENT_INDEX_SAME);
    /* a new image: its inputs changed, and the lookups by image follow at once */
    ASSERT_EQ(event(&w, "team-a", "vec", IMG_B, NULL, NULL), AGENT_INDEX_INPUTS);
    ASSERT_EQ(find(&w, "team-a", NULL, IMG_A, &d, &err), -EACCES);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_B, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "other"); /* "other" < "vec" */
    ASSERT_OK(find(&w, "team-b", NULL, IMG_B, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "mine");
    ASSERT_OK(find(&w, "team-a", "vec", NULL, &d, &err));
    ASSERT_STREQ(d->c.spec.cache_image, IMG_B);
    ASSERT_NULL(d->c.spec.mount_path);
    ASSERT_EQ(live_count(&w), 5);
    /* the head of a chain moves away and comes back */
    ASSERT_EQ(event(&w, "team-a", "other", IMG_A, NULL, NULL), AGENT_INDEX_INPUTS);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_B, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "vec");
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "other");
    world_empty(&w);
}

TEST(index_deleting_then_deleted)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    /* a deletionTimestamp: out of the live list (its node status entry goes),
     * still declared (Materialize answers UNAVAILABLE until it is gone) */
    ASSERT_EQ(event(&w, "team-a", "vec", IMG_A, NULL,
                    ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\",\"finalizers\":[\"x\"]"),
              AGENT_INDEX_GONE);
    ASSERT_EQ(live_count(&w), 4);
    ASSERT_OK(find(&w, "team-a", "vec", NULL, &d, &err));
    ASSERT(d->deleting && !d->live);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "vec");
    ASSERT_EQ(event(&w, "team-a", "vec", IMG_A, NULL,
                    ",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\",\"finalizers\":[\"x\"]"),
              AGENT_INDEX_SAME);
    /* the informer's delete: gone from every lookup */
    d = agent_index_take(&w.x, "team-a/vec");
    ASSERT(d != NULL);
    agent_cache_destroy(d);
    ASSERT_NULL(agent_index_take(&w.x, "team-a/vec"));
    ASSERT_EQ(find(&w, "team-a", NULL, IMG_A, &d, &err), -EACCES);
    /* team-a has no "vec" now: the cluster one answers */
    ASSERT_OK(find(&w, "team-a", "vec", NULL, &d, &err));
    ASSERT_EQ(d->c.cluster, 1);
    /* a cluster cache deleted: the namespaced caches of its image stay */
    d = agent_index_take(&w.x, "shared");
    agent_cache_destroy(d);
    ASSERT_OK(find(&w, "team-b", NULL, IMG_CL, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "vec");
    ASSERT_EQ(live_count(&w), 3);
    world_empty(&w);
}

TEST(index_undecodable_update_keeps_the_last_good_object)
{
    struct world w;
    struct agent_cache *d;
    struct tkm_err err;
    world_init(&w);
    ASSERT_EQ(event(&w, "team-a", "vec", NULL, NULL, NULL), -EPROTO);
    /* still in the live list with what it was (its result stays) ... */
    ASSERT_EQ(live_count(&w), 5);
    ASSERT_STREQ(agent_index_get(&w.x, "team-a/vec")->c.spec.cache_image, IMG_A);
    /* ... but Materialize answers from the current object */
    ASSERT_EQ(find(&w, "team-a", "vec", NULL, &d, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "TritonKernelCache team-a/vec cannot be used");
    ASSERT_NULL(d);
    ASSERT_EQ(find(&w, "team-a", NULL, IMG_A, &d, &err), -EACCES);
    /* decodes again: found again; the inputs did not move */
    ASSERT_EQ(event(&w, "team-a", "vec", IMG_A, "/home/a/.triton/cache", NULL), AGENT_INDEX_SAME);
    ASSERT_OK(find(&w, "team-a", NULL, IMG_A, &d, &err));
    ASSERT_STREQ(d->c.meta.name, "vec");
    /* a cluster object that never decoded: refused by name, not live */
    ASSERT_EQ(event(&w, NULL, "nope", NULL, NULL, NULL), -EPROTO);
    ASSERT_EQ(find(&w, "team-a", "nope", NULL, &d, &err), -EPROTO);
    ASSERT_STRCONTAINS(err.msg, "TritonKernelCacheCluster nope cannot be used");
    ASSERT_EQ(live_count(&w), 5);
    world_empty(&w);
}
