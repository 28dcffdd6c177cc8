/*
 * fallback.c - what Materialize answers on a node where no GPU can use a
 * cache (docs/agent.md "The Empty fallback"): the cache's policy
 * (spec.whenIncompatible, else tkm-config's whenIncompatible, else Empty),
 * whether the node's verdicts are compatibility verdicts only (the only case
 * Empty applies to), and the parts layout an empty volume gets.
 * Pure functions of the agent's state: no I/O, on the loop.
 */
#include <stdio.h>
#include <string.h>

#include "agent.h"

/* tkm-config's whenIncompatible. The API's decoder (struct tkm_api_config's
 * when_incompatible) comes with the API change of issue 24; until it is
 * merged no default is known here, which means the built-in one (Empty).
 * TODO(merge #24): return cfg->when_incompatible. */
static enum tkm_api_fallback config_fallback(const struct tkm_api_config *cfg)
{
    (void)cfg;
    return TKM_API_FALLBACK_UNSET;
}

enum tkm_api_fallback agent_cache_fallback(const struct agent *a, const struct agent_cache *ac)
{
    enum tkm_api_fallback f = ac->c.spec.when_incompatible;
    if (f == TKM_API_FALLBACK_UNSET)
        f = config_fallback(&a->cfg);
    return f == TKM_API_FALLBACK_FAIL ? TKM_API_FALLBACK_FAIL : TKM_API_FALLBACK_EMPTY;
}

/* A GPU's reason that is about the cache's integrity (or a variant not judged
 * yet), never its fit: the Empty fallback never hides it. */
static int integrity_reason(const char *reason)
{
    static const char *const bad[] = {"CorruptCache", "LabelMismatch", "VariantMismatch",
                                      "InvalidImage", "VariantNotInspected"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!strcmp(reason, bad[i]))
            return 1;
    return 0;
}

int agent_cache_fits(const struct agent *a, const struct agent_cache *ac, const char **reason,
                     int *compat, char *msg, size_t n)
{
    const struct agent_verdicts *vs = &ac->verdicts;
    *compat = 1;
    for (size_t i = 0; i < vs->n; i++)
        if (vs->v[i].compatible)
            return 1;
    if (!vs->n) {
        *reason = "NoGPU";
        snprintf(msg, n, "NoGPU: no GPU on node %s can use cache %s: this node has no GPU",
                 a->o.node_name, ac->key);
        return 0;
    }
    for (size_t i = 0; i < vs->n; i++)
        if (integrity_reason(agent_verdict_reason(vs, i)))
            *compat = 0;
    *reason = agent_verdict_reason(vs, 0);
    snprintf(msg, n, "%s: no GPU on node %s can use cache %s: %s", *reason, a->o.node_name, ac->key,
             vs->v[0].reason);
    return 0;
}

size_t agent_parts_names(int parts, const char **out)
{
    static const struct {
        int bit;
        const char *name;
    } order[] = {{TKM_PART_INDUCTOR, TKM_PART_INDUCTOR_DIR},
                 {TKM_PART_TRITON, TKM_PART_TRITON_DIR},
                 {TKM_PART_VLLM, TKM_PART_VLLM_DIR}};
    size_t n = 0;
    if (!(parts & (TKM_PART_INDUCTOR | TKM_PART_VLLM))) {
        out[0] = TKM_PART_TRITON_DIR; /* the Triton cache at the root */
        return 1;
    }
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (parts & order[i].bit)
            out[n++] = order[i].name;
    return n;
}

int agent_cache_serves_empty(const struct agent *a, const struct agent_cache *ac)
{
    const char *reason = NULL;
    int compat = 0;
    char msg[8];
    return ac->live && ac->digest[0] && agent_cache_usable(ac) && ac->verdicts.judged &&
           !agent_cache_fits(a, ac, &reason, &compat, msg, sizeof msg) && compat &&
           agent_cache_fallback(a, ac) == TKM_API_FALLBACK_EMPTY;
}
