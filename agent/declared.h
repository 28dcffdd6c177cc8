/*
 * agent/declared.h - is the cache a Materialize request names declared for
 * the pod's namespace? (docs/agent-socket.md)
 *
 * A pod may mount only a cache that its namespace declares: by cacheName, a
 * TritonKernelCache of that name in the pod's namespace, else a
 * TritonKernelCacheCluster of that name; by cacheImage, a cache in the pod's
 * namespace or a cluster cache whose spec.cacheImage is exactly that string.
 * Another namespace's TritonKernelCache never matches. An undeclared cache or
 * image is refused (-EACCES -> PERMISSION_DENIED) with a sentence a person
 * understands.
 *
 * The lookup runs over two object sources (struct agent_objsrc): in the
 * daemon and the e2e harness the informer stores the agent keeps
 * (TritonKernelCache in all namespaces, TritonKernelCacheCluster), through
 * agent_objsrc_informer(); in unit tests canned objects. Single-threaded, on
 * the loop that owns the informers; no I/O.
 */
#ifndef AGENT_DECLARED_H
#define AGENT_DECLARED_H

#include <stddef.h>

#include <tkm/err.h>
#include <tkm/api/v1alpha1.h>
#include <k8s/informer.h>

#include "rpc.h"

/* Read access to one store of objects. Every object returned or passed to
 * fn is borrowed from the source until control returns to the loop (the
 * informer's rule). */
struct agent_objsrc {
    /* The object ns/name (ns NULL or "" for cluster-scoped kinds), or NULL. */
    const struct k8s_obj *(*get)(void *ctx, const char *ns, const char *name);
    /* Calls fn for every object until it returns non-zero, which is returned. */
    int (*foreach)(void *ctx, int (*fn)(const struct k8s_obj *obj, void *data), void *data);
    void *ctx;
};

/* Fills src to read inf (borrowed: it must outlive every use of src). */
void agent_objsrc_informer(struct agent_objsrc *src, const struct k8s_informer *inf);

/* The declared cache a request resolves to. */
struct agent_declared {
    int cluster;               /* 1: a TritonKernelCacheCluster */
    const char *ns;            /* the cache's namespace, "" for cluster caches; borrowed from obj */
    const char *name;          /* borrowed from obj */
    const struct k8s_obj *obj; /* borrowed from its source (see above) */
    struct tkm_api_cache cache; /* decoded; owned: agent_declared_release() */
};

/* Finds the cache that req (cache_name or cache_image; borrowed) names for
 * pod_ns (borrowed) in tkc (TritonKernelCache, all namespaces) and tkcc
 * (TritonKernelCacheCluster); both borrowed.
 *   - cacheName x: tkc pod_ns/x if it exists, else tkcc x.
 *   - cacheImage R: caches whose spec.cacheImage == R (exact string
 *     equality): the TritonKernelCaches of pod_ns first, then the cluster
 *     ones; several matches of the same kind: the smallest name (strcmp),
 *     so the answer never depends on the store's order. Objects that do not
 *     decode are skipped (logged).
 * Returns 0 with *found filled (owned: agent_declared_release()), or with
 * *found zeroed: -EACCES not declared, -EPROTO the named object does not
 * decode (err names the field), -EINVAL req names no cache, -ENOMEM. err
 * gets the sentence for the client. */
int agent_declared_find(const struct agent_objsrc *tkc, const struct agent_objsrc *tkcc,
                        const char *pod_ns, const struct agent_materialize_req *req,
                        struct agent_declared *found, struct tkm_err *err);
void agent_declared_release(struct agent_declared *d);

/* The gRPC code for agent_declared_find()'s result: PERMISSION_DENIED for
 * -EACCES, FAILED_PRECONDITION for -EPROTO, INVALID_ARGUMENT for -EINVAL,
 * INTERNAL otherwise (OK for 0). */
int agent_declared_grpc_code(int rc);

#endif
