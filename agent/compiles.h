/*
 * compiles.h - what the pods served a cache on this node compiled beside it
 * (issue 25): per cache, counters summed from the scratch counts tkm-csi sends
 * at Release (rpc.h, struct agent_scratch), since the cache's pinned digest
 * last changed, and the most compiled kernel names by pods (bounded: at most
 * AGENT_COMPILES_NAMES names are remembered; when full, the least seen one is
 * evicted for a new one).
 *
 * Ownership: struct agent_compiles is caller-owned (embed it, zeroed), its
 * memory freed by agent_compiles_release. agent_compiles_fill's out->top is
 * owned by the caller (free it); its names and since are borrowed from c.
 * Pure functions; the loop's thread only.
 */
#ifndef TKM_AGENT_COMPILES_H
#define TKM_AGENT_COMPILES_H

#include <stddef.h>
#include <stdint.h>

#include <tkm/api/v1alpha1.h>

#include "rpc.h"

#define AGENT_COMPILES_NAMES 256
#define AGENT_COMPILES_TOP   10

struct agent_kname {
    char name[AGENT_SCRATCH_NAME_MAX + 1];
    int64_t pods;
    uint64_t seen; /* the add counter when last seen (eviction: the least seen, then oldest) */
};

struct agent_compiles {
    char digest[80]; /* the pinned digest counted for */
    char since[32];  /* RFC 3339: when counting started for digest */
    int64_t pods_served, pods_compiled, triton_kernels, inductor_entries, vllm_entries, bytes;
    struct agent_kname *names; /* owned, at most AGENT_COMPILES_NAMES */
    size_t n_names;
    uint64_t adds;
};

/* Adds one released volume's counts for digest (now: RFC 3339); a digest other
 * than the one counted so far starts again (since = now). */
void agent_compiles_add(struct agent_compiles *c, const char *digest, const char *now,
                        const struct agent_scratch *s);
/* Fills out (present 1 once a pod was counted for digest) with the top names,
 * most pods first, then by name. -ENOMEM. */
int agent_compiles_fill(const struct agent_compiles *c, const char *digest,
                        struct tkm_api_compiles *out);
void agent_compiles_release(struct agent_compiles *c);

/* The agent's list of summaries, one per cache key ("ns/name", "name"):
 * entries and keys owned by the list; a cache deleted drops its entry. */
struct agent_cache_compiles {
    struct agent_cache_compiles *next;
    char *key;
    struct agent_compiles c;
};
/* The summary of key, created (zeroed) when create is 1; NULL: none, or out of memory. */
struct agent_compiles *agent_compiles_get(struct agent_cache_compiles **list, const char *key,
                                          int create);
void agent_compiles_drop(struct agent_cache_compiles **list, const char *key);
void agent_compiles_free_all(struct agent_cache_compiles **list);

#endif
