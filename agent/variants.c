/*
 * variants.c - a cache image that is a variant index (triton/variants.h,
 * docs/agent.md "Variants") on this node: each GPU picks its variant
 * (tkm_variant_pick: platform, then the exact target, then cuda "<arch>a"),
 * the picked variants are inspected once (cache.c) and every GPU is judged by
 * the compat judge against its own variant's summary (and Inductor part).
 * The node's used variants are the distinct variants of its compatible GPUs;
 * they must share one parts layout (the lowest GPU's wins, the others get
 * VariantLayoutConflict). agent_cache_layers() lists what the store pulls
 * and Materialize answers, for a single image too (its one layer).
 * Pure functions of the agent's state, on the loop.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>

#include "agent.h"

int agent_parts_mask(const char *list)
{
    int m = 0;
    while (list && *list) {
        size_t l = strcspn(list, ",");
        if (l == strlen(TKM_PART_TRITON_DIR) && !strncmp(list, TKM_PART_TRITON_DIR, l))
            m |= TKM_PART_TRITON;
        else if (l == strlen(TKM_PART_INDUCTOR_DIR) && !strncmp(list, TKM_PART_INDUCTOR_DIR, l))
            m |= TKM_PART_INDUCTOR;
        else if (l == strlen(TKM_PART_VLLM_DIR) && !strncmp(list, TKM_PART_VLLM_DIR, l))
            m |= TKM_PART_VLLM;
        list += l + (list[l] == ',');
    }
    return m;
}

/* Judges GPU i of a variant index's cache into vs (allocated). 1 when its
 * variant still has to be inspected. */
static int judge_gpu(struct agent_cache *ac, const struct tkm_gpu *g, struct agent_verdicts *vs,
                     size_t i)
{
    struct tkm_compat_verdict *v = &vs->v[i];
    const char *reason = NULL;
    size_t idx = 0;
    v->gpu_index = g->index;
    v->target_index = -1;
    if (tkm_variant_pick(&ac->variants, g, NULL, &idx, &reason, v->reason, sizeof v->reason) < 0) {
        vs->code[i] = reason;
        return 0;
    }
    const struct agent_variant *av = &ac->vars[idx];
    vs->variant[i] = (int)idx;
    if (av->state == 0) {
        vs->code[i] = "VariantNotInspected";
        snprintf(v->reason, sizeof v->reason,
                 "variant %s picked for GPU %d (%s) is being inspected", ac->variants.v[idx].digest,
                 g->index, g->name);
        return 1;
    }
    if (av->state < 0) {
        vs->code[i] = av->reason[0] ? av->reason : "VariantMismatch";
        snprintf(v->reason, sizeof v->reason, "%s", av->message);
        return 0;
    }
    tkm_compat_check(&av->summary, g, v);
    if (av->has_inductor)
        tkm_inductor_compat_combine(&av->inductor, g, v);
    return 0;
}

int agent_variants_judge(struct agent_cache *ac, struct agent_verdicts *vs)
{
    const struct agent *a = ac->a;
    size_t n = a->gpus.n;
    int need = 0, first = -1;
    vs->v = calloc(n ? n : 1, sizeof *vs->v);
    vs->code = calloc(n ? n : 1, sizeof *vs->code);
    vs->variant = calloc(n ? n : 1, sizeof *vs->variant);
    if (!vs->v || !vs->code || !vs->variant) {
        agent_verdicts_release(vs);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        vs->variant[i] = -1;
        need |= judge_gpu(ac, &a->gpus.gpus[i], vs, i);
    }
    /* one layout for every store dir of the volume: the lowest GPU's variant's */
    for (size_t i = 0; i < n; i++) {
        if (!vs->v[i].compatible)
            continue;
        if (first < 0) {
            first = vs->variant[i];
            continue;
        }
        const struct agent_variant *mine = &ac->vars[vs->variant[i]], *lo = &ac->vars[first];
        if (mine->parts == lo->parts)
            continue;
        char d[128], dl[128];
        tkm_variant_describe(&ac->variants.v[vs->variant[i]], d, sizeof d);
        tkm_variant_describe(&ac->variants.v[first], dl, sizeof dl);
        vs->v[i].compatible = 0;
        vs->v[i].target_index = -1;
        vs->code[i] = "VariantLayoutConflict";
        snprintf(vs->v[i].reason, sizeof vs->v[i].reason,
                 "variant %s for GPU %d (%s) holds parts %s, but the node's volume already "
                 "uses variant %s with parts %s (one layout per volume)",
                 d, a->gpus.gpus[i].index, a->gpus.gpus[i].name,
                 ac->variants.v[vs->variant[i]].parts, dl, ac->variants.v[first].parts);
    }
    /* the layout an empty volume gets: the used one, else the first variant's */
    ac->parts = first >= 0       ? ac->vars[first].parts
                : ac->variants.n ? agent_parts_mask(ac->variants.v[0].parts)
                                 : TKM_PART_TRITON;
    vs->n = n;
    return need;
}

size_t agent_cache_layers(struct agent_cache *ac, struct agent_layer *out)
{
    size_t n = 0;
    if (!ac->variants.from_index) {
        if (!ac->layer_digest)
            return 0;
        out[0] = (struct agent_layer){.layer = ac->layer_digest,
                                      .manifest = ac->digest,
                                      .summary = &ac->summary,
                                      .label_checked = &ac->label_checked,
                                      .cache_bytes = ac->cache_bytes,
                                      .layer_bytes = ac->layer_bytes,
                                      .parts = ac->parts};
        return 1;
    }
    for (size_t i = 0; i < ac->verdicts.n && ac->verdicts.variant; i++) {
        int k = ac->verdicts.variant[i];
        int seen = 0;
        if (!ac->verdicts.v[i].compatible || k < 0 || !ac->vars[k].layer_digest)
            continue;
        for (size_t j = 0; j < n; j++)
            seen |= out[j].variant == k;
        if (seen || n >= TKM_VARIANTS_MAX)
            continue;
        struct agent_variant *av = &ac->vars[k];
        out[n++] = (struct agent_layer){.layer = av->layer_digest,
                                        .manifest = ac->variants.v[k].digest,
                                        .summary = &av->summary,
                                        .label_checked = &av->label_checked,
                                        .cache_bytes = av->cache_bytes,
                                        .layer_bytes = av->layer_bytes,
                                        .parts = av->parts,
                                        .variant = k};
    }
    return n;
}

struct agent_layer *agent_cache_layer_find(struct agent_cache *ac, const char *layer,
                                           struct agent_layer *buf)
{
    size_t n = agent_cache_layers(ac, buf);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(buf[i].layer, layer))
            return &buf[i];
    return NULL;
}

const struct tkm_triton_summary *agent_verdict_summary(const struct agent_cache *ac, size_t i)
{
    if (!ac->verdicts.variant)
        return &ac->summary;
    int k = ac->verdicts.variant[i];
    return k >= 0 ? &ac->vars[k].summary : NULL;
}
