/*
 * compiles.c - the per-cache summary of what pods compiled (compiles.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiles.h"

void agent_compiles_release(struct agent_compiles *c)
{
    free(c->names);
    memset(c, 0, sizeof *c);
}

static void kname_add(struct agent_compiles *c, const char *name)
{
    struct agent_kname *k = NULL;
    for (size_t i = 0; i < c->n_names && !k; i++)
        if (!strcmp(c->names[i].name, name))
            k = &c->names[i];
    if (!k && !c->names && !(c->names = calloc(AGENT_COMPILES_NAMES, sizeof *c->names)))
        return; /* out of memory: the names are a hint, the counters stay right */
    if (!k && c->n_names < AGENT_COMPILES_NAMES) {
        k = &c->names[c->n_names++];
    } else if (!k) { /* full: the least seen name, the oldest of those, makes room */
        k = &c->names[0];
        for (size_t i = 1; i < c->n_names; i++)
            if (c->names[i].pods < k->pods ||
                (c->names[i].pods == k->pods && c->names[i].seen < k->seen))
                k = &c->names[i];
    }
    if (strcmp(k->name, name) != 0) {
        snprintf(k->name, sizeof k->name, "%s", name);
        k->pods = 0;
    }
    k->pods++;
    k->seen = c->adds;
}

void agent_compiles_add(struct agent_compiles *c, const char *digest, const char *now,
                        const struct agent_scratch *s)
{
    if (!s->present)
        return;
    if (strcmp(c->digest, digest) != 0 || !c->since[0]) {
        agent_compiles_release(c);
        snprintf(c->digest, sizeof c->digest, "%s", digest);
        snprintf(c->since, sizeof c->since, "%s", now);
    }
    uint64_t inductor = (uint64_t)s->inductor_fxgraph + s->inductor_aotautograd;
    c->adds++;
    c->pods_served++;
    c->pods_compiled += s->triton_kernels || inductor || s->vllm_entries;
    c->triton_kernels += s->triton_kernels;
    c->inductor_entries += (int64_t)inductor;
    c->vllm_entries += s->vllm_entries;
    /* untrusted sums saturate */
    c->bytes =
        s->bytes > (uint64_t)(INT64_MAX - c->bytes) ? INT64_MAX : c->bytes + (int64_t)s->bytes;
    for (size_t i = 0; i < s->n_names; i++) {
        int dup = 0; /* one pod counts a name once */
        for (size_t j = 0; j < i && !dup; j++)
            dup = !strcmp(s->names[i], s->names[j]);
        if (!dup)
            kname_add(c, s->names[i]);
    }
}

static int top_cmp(const void *x, const void *y)
{
    const struct tkm_api_kernel_count *a = x, *b = y;
    if (a->pods != b->pods)
        return a->pods > b->pods ? -1 : 1;
    return strcmp(a->name, b->name);
}

int agent_compiles_fill(const struct agent_compiles *c, const char *digest,
                        struct tkm_api_compiles *out)
{
    memset(out, 0, sizeof *out);
    if (!c->pods_served || strcmp(c->digest, digest) != 0)
        return 0;
    out->present = 1;
    out->pods_served = c->pods_served;
    out->pods_compiled = c->pods_compiled;
    out->triton_kernels = c->triton_kernels;
    out->inductor_entries = c->inductor_entries;
    out->vllm_entries = c->vllm_entries;
    out->bytes = c->bytes;
    out->since = (char *)c->since;
    if (!c->n_names)
        return 0;
    struct tkm_api_kernel_count *all = calloc(c->n_names, sizeof *all);
    if (!all)
        return -ENOMEM;
    for (size_t i = 0; i < c->n_names; i++)
        all[i] = (struct tkm_api_kernel_count){(char *)c->names[i].name, c->names[i].pods};
    qsort(all, c->n_names, sizeof *all, top_cmp);
    out->top = all;
    out->n_top = c->n_names < AGENT_COMPILES_TOP ? c->n_names : AGENT_COMPILES_TOP;
    return 0;
}

struct agent_compiles *agent_compiles_get(struct agent_cache_compiles **list, const char *key,
                                          int create)
{
    for (struct agent_cache_compiles *p = *list; p; p = p->next)
        if (!strcmp(p->key, key))
            return &p->c;
    if (!create)
        return NULL;
    struct agent_cache_compiles *p = calloc(1, sizeof *p);
    if (!p || !(p->key = strdup(key))) {
        free(p);
        return NULL;
    }
    p->next = *list;
    *list = p;
    return &p->c;
}

void agent_compiles_drop(struct agent_cache_compiles **list, const char *key)
{
    for (struct agent_cache_compiles **pp = list; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->key, key)) {
            struct agent_cache_compiles *p = *pp;
            *pp = p->next;
            agent_compiles_release(&p->c);
            free(p->key);
            free(p);
            return;
        }
}

void agent_compiles_free_all(struct agent_cache_compiles **list)
{
    while (*list)
        agent_compiles_drop(list, (*list)->key);
}
