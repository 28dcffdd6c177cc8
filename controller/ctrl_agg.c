/*
 * ctrl_agg.c - a cache's status from what its nodes report (pure: no I/O).
 *
 * A node's entry counts for the pinned digest only: an entry for another
 * digest is a node that has not caught up yet (Progressing). Of the entries
 * at the pinned digest, an error is "failed", a compatible GPU "compatible"
 * (the node has extracted the cache or can), incompatible GPUs only
 * "incompatible". Ready = the digest may be used (verified, or the policy
 * is Audit/Disabled) and at least one node is compatible without error.
 * The compiles summaries (issue 25) of the entries at the pinned digest are
 * summed into status.compiles, with the top kernel names across nodes.
 * A node names the variants it uses by digest only: their targets come from
 * the verdict (the index the controller read); an entry naming a digest the
 * index does not list is pending, never counted (struct ctrl_verdict).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>

#include "ctrl-int.h"

enum tkm_api_cond_status ctrl_cond_get(const struct tkm_api_condition *c, size_t n,
                                       const char *type, const char **reason)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].type && strcmp(c[i].type, type) == 0) {
            if (reason)
                *reason = c[i].reason;
            return c[i].status;
        }
    if (reason)
        *reason = NULL;
    return TKM_API_COND_UNKNOWN;
}

int ctrl_summary_copy(struct tkm_api_summary *dst, const struct tkm_api_summary *src)
{
    memset(dst, 0, sizeof *dst);
    dst->entry_count = src->entry_count;
    dst->cache_size_bytes = src->cache_size_bytes;
    if (!src->n_targets)
        return 0;
    dst->targets = calloc(src->n_targets, sizeof *dst->targets);
    if (!dst->targets)
        return -ENOMEM;
    dst->n_targets = src->n_targets;
    for (size_t i = 0; i < src->n_targets; i++) {
        const struct tkm_api_target *s = &src->targets[i];
        struct tkm_api_target *d = &dst->targets[i];
        d->warp_size = s->warp_size;
        if ((s->backend && !(d->backend = strdup(s->backend))) ||
            (s->arch && !(d->arch = strdup(s->arch))) ||
            (s->triton_version && !(d->triton_version = strdup(s->triton_version))) ||
            (s->ptx_version && !(d->ptx_version = strdup(s->ptx_version))))
            return -ENOMEM;
    }
    return 0;
}

/* A node listed in a message or failedNodes (borrowed from the index for
 * the duration of ctrl_agg_build). */
struct bad_node {
    const char *node;
    const char *why; /* "Reason\0message\0", or NULL */
};

static const char *why_reason(const struct bad_node *b)
{
    return b->why && *b->why ? b->why : "Unknown";
}

static const char *why_msg(const struct bad_node *b)
{
    return b->why ? b->why + strlen(b->why) + 1 : "";
}

static int cmp_bad_node(const void *a, const void *b)
{
    return strcmp(((const struct bad_node *)a)->node, ((const struct bad_node *)b)->node);
}

/* A distinct variant profile (ctrl_why_profile) and how many nodes report
 * it: nodes of one GPU type share one interned string, so the profiles are
 * parsed once per distinct string, not once per node. */
struct prof {
    const char *p;  /* borrowed from the index */
    int32_t nodes;  /* nodes using its variants (compatible, at the pin, no error) */
    int32_t listed; /* nodes at the pin listing it (for the GPU types without a variant) */
    int stray;      /* 1: it names a variant digest the index does not list */
};

struct tally {
    int32_t nodes, compatible, incompatible, failed, in_use, pending;
    struct bad_node *bad; /* failed, then incompatible; sorted by node each */
    size_t n_bad, n_failed, cap;
    uint32_t pin;
    struct prof *prof; /* distinct profiles (owned) */
    size_t n_prof, cap_prof;
    const struct ctrl_verdict *vd; /* the index's variants */
    int oom;
};

/* The index's variant of digest d (len bytes), or NULL. */
static const struct ctrl_variant *variant_of(const struct ctrl_verdict *vd, const char *d,
                                             size_t len)
{
    for (size_t i = 0; i < vd->n_variants; i++)
        if (strlen(vd->variants[i].digest) == len && !memcmp(vd->variants[i].digest, d, len))
            return &vd->variants[i];
    return NULL;
}

/* 1 when a "V<digest>\t..." line of profile p names a digest the index does not list. */
static int prof_stray(const struct ctrl_verdict *vd, const char *p)
{
    for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (*p == 'V' && !variant_of(vd, p + 1, strcspn(p + 1, "\t\n")))
            return 1;
    return 0;
}

/* The distinct profile of why (made on first sight), or NULL (none, or no memory). */
static struct prof *prof_get(struct tally *t, const char *why)
{
    const char *p = ctrl_why_profile(why);
    if (!*p)
        return NULL;
    for (size_t i = 0; i < t->n_prof; i++)
        if (t->prof[i].p == p) /* interned: one pointer per distinct string */
            return &t->prof[i];
    if (t->n_prof == t->cap_prof) {
        size_t nc = t->cap_prof ? t->cap_prof * 2 : 8;
        struct prof *v = realloc(t->prof, nc * sizeof *v);
        if (!v) {
            t->oom = 1;
            return NULL;
        }
        t->prof = v;
        t->cap_prof = nc;
    }
    t->prof[t->n_prof] = (struct prof){.p = p, .stray = prof_stray(t->vd, p)};
    if (t->prof[t->n_prof].stray && t->vd->unknown)
        *t->vd->unknown = 1;
    return &t->prof[t->n_prof++];
}

/* One walk: the failed fill bad from the front, the incompatible from the
 * back (cap = the cache's entry count bounds both). */
static int tally_entry(const struct ctrl_entry *e, const struct ctrl_nsobj *o, const char *why,
                       void *data)
{
    struct tally *t = data;
    struct prof *p = NULL;
    t->nodes++;
    if (e->flags & CTRL_E_PODS)
        t->in_use++;
    if (t->pin && e->digest == t->pin && why && (p = prof_get(t, why)) && !p->stray) {
        p->nodes += (e->flags & (CTRL_E_ERROR | CTRL_E_COMPAT)) == CTRL_E_COMPAT;
        p->listed++;
    }
    if (!t->pin || e->digest != t->pin || (p && p->stray)) {
        t->pending++;
    } else if (e->flags & CTRL_E_ERROR) {
        t->failed++;
        t->bad[t->n_failed++] = (struct bad_node){o->node, why};
    } else if (e->flags & CTRL_E_COMPAT) {
        t->compatible++;
    } else if (e->flags & CTRL_E_INCOMPAT) {
        t->incompatible++;
        t->bad[t->cap - (size_t)t->incompatible] = (struct bad_node){o->node, why};
    } else {
        t->pending++;
    }
    return 0;
}

static int tally(const struct ctrl_cidx *c, const struct ctrl_verdict *vd, struct tally *t)
{
    memset(t, 0, sizeof *t);
    t->pin = ctrl_digest_id(vd->digest);
    t->vd = vd;
    t->cap = c ? c->n : 0;
    t->bad = t->cap ? calloc(t->cap, sizeof *t->bad) : NULL;
    if (t->cap && !t->bad)
        return -ENOMEM;
    ctrl_cidx_foreach(c, tally_entry, t);
    if (t->oom) {
        free(t->bad);
        free(t->prof);
        return -ENOMEM;
    }
    if (t->incompatible)
        memmove(t->bad + t->n_failed, t->bad + t->cap - (size_t)t->incompatible,
                (size_t)t->incompatible * sizeof *t->bad);
    t->n_bad = t->n_failed + (size_t)t->incompatible;
    if (!t->n_bad)
        return 0;
    qsort(t->bad, t->n_failed, sizeof *t->bad, cmp_bad_node);
    qsort(t->bad + t->n_failed, t->n_bad - t->n_failed, sizeof *t->bad, cmp_bad_node);
    return 0;
}

/* Appends "node: Reason: message; ..." for list[0..n) (at most 3, then "and N more"). */
static void list_nodes(struct tkm_buf *b, const struct bad_node *list, size_t n)
{
    for (size_t i = 0; i < n && i < 3; i++)
        tkm_buf_printf(b, "%s%s: %s%s%.160s", i ? "; " : "", list[i].node, why_reason(&list[i]),
                       *why_msg(&list[i]) ? ": " : "", why_msg(&list[i]));
    if (n > 3)
        tkm_buf_printf(b, "; and %zu more", n - 3);
}

/* ---- variants ------------------------------------------------------------------------------ */

/* One "V<digest>\t<gpus>" line of a profile into v: the target is the
 * index's (strings borrowed from vd). 0, or -1 for a line not in the grammar
 * or a digest the index does not list (prof_stray keeps those out). */
static int vline(const char *line, const struct ctrl_verdict *vd, struct tkm_api_variant_count *v,
                 long *gpus)
{
    size_t len = strcspn(line, "\t");
    const struct ctrl_variant *x = variant_of(vd, line, len);
    if (!x || line[len] != '\t')
        return -1;
    v->digest = (char *)x->digest;
    v->platform = (char *)x->platform;
    v->backend = (char *)x->backend;
    v->arch = (char *)x->arch;
    v->warp_size = x->warp_size;
    *gpus = strtol(line + len + 1, NULL, 10);
    return 0;
}

static int str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static int cmp_variant(const void *a, const void *b)
{
    const struct tkm_api_variant_count *x = a, *y = b;
    if (x->nodes != y->nodes)
        return x->nodes > y->nodes ? -1 : 1;
    return strcmp(x->digest, y->digest);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int variant_add(struct tkm_api_cache_status *st, const struct tkm_api_variant_count *v)
{
    for (size_t i = 0; i < st->n_variants; i++) {
        struct tkm_api_variant_count *w = &st->variants[i];
        if (str_eq(w->digest, v->digest) && str_eq(w->platform, v->platform) &&
            str_eq(w->backend, v->backend) && str_eq(w->arch, v->arch) &&
            w->warp_size == v->warp_size) {
            w->nodes += v->nodes;
            w->gpus += v->gpus;
            return 0;
        }
    }
    if (st->n_variants >= 64) /* the CRD's bound: the rest is left out */
        return 0;
    struct tkm_api_variant_count *nv =
        realloc(st->variants, (st->n_variants + 1) * sizeof *st->variants);
    if (!nv)
        return -ENOMEM;
    st->variants = nv;
    struct tkm_api_variant_count *w = &nv[st->n_variants++];
    *w = (struct tkm_api_variant_count){
        .warp_size = v->warp_size, .nodes = v->nodes, .gpus = v->gpus};
    if (!(w->digest = strdup(v->digest)) || !(w->platform = strdup(v->platform)) ||
        !(w->backend = strdup(v->backend)) || !(w->arch = strdup(v->arch)))
        return -ENOMEM;
    return 0;
}

static int type_add(struct tkm_api_cache_status *st, const char *t)
{
    for (size_t i = 0; i < st->n_gpu_types_without_variant; i++)
        if (strcmp(st->gpu_types_without_variant[i], t) == 0)
            return 0;
    if (st->n_gpu_types_without_variant >= 64 || !*t)
        return 0;
    char **nv =
        realloc(st->gpu_types_without_variant, (st->n_gpu_types_without_variant + 1) * sizeof *nv);
    if (!nv)
        return -ENOMEM;
    st->gpu_types_without_variant = nv;
    if (!(nv[st->n_gpu_types_without_variant] = strdup(t)))
        return -ENOMEM;
    st->n_gpu_types_without_variant++;
    return 0;
}

/* compiles (issue 25): a profile's "C..." line (the node's counts, times the
 * nodes listing it) added to st->compiles; since: the earliest (the agents
 * write UTC "...Z", which sorts as text). */
static int compiles_line(struct tkm_api_compiles *c, char *line, int32_t nodes)
{
    int64_t *sum[] = {&c->pods_served,      &c->pods_compiled, &c->triton_kernels,
                      &c->inductor_entries, &c->vllm_entries,  &c->bytes};
    char *p = line;
    for (size_t k = 0; k < 6; k++) {
        long long v = strtoll(p, &p, 10);
        if (*p++ != '\t')
            return 0; /* not in the grammar: ignored */
        *sum[k] += v * nodes;
    }
    c->present = 1;
    c->nodes += nodes;
    if (*p && (!c->since || strcmp(p, c->since) < 0)) {
        free(c->since);
        if (!(c->since = strdup(p)))
            return -ENOMEM;
    }
    return 0;
}

/* A "K<name>\t<pods>" line: pods (times nodes) added to the name's count;
 * the list keeps every name until compiles_finish cuts it to the top 10. */
static int kernel_line(struct tkm_api_compiles *c, size_t *cap, char *line, int32_t nodes)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        return 0;
    *tab = 0;
    int64_t pods = strtoll(tab + 1, NULL, 10) * nodes;
    for (size_t i = 0; i < c->n_top; i++)
        if (strcmp(c->top[i].name, line) == 0) {
            c->top[i].pods += pods;
            return 0;
        }
    if (c->n_top == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        struct tkm_api_kernel_count *v = realloc(c->top, nc * sizeof *v);
        if (!v)
            return -ENOMEM;
        c->top = v;
        *cap = nc;
    }
    if (!(c->top[c->n_top].name = strdup(line)))
        return -ENOMEM;
    c->top[c->n_top++].pods = pods;
    return 0;
}

static int cmp_kernel(const void *a, const void *b)
{
    const struct tkm_api_kernel_count *x = a, *y = b;
    if (x->pods != y->pods)
        return x->pods > y->pods ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The top TKM_API_COMPILES_TOP kernels by pods (then name), and hit: "<pods that
 * compiled nothing>/<pods served>". */
static int compiles_finish(struct tkm_api_compiles *c)
{
    char hit[48];
    if (!c->present)
        return 0;
    if (c->n_top > 1)
        qsort(c->top, c->n_top, sizeof *c->top, cmp_kernel);
    while (c->n_top > TKM_API_COMPILES_TOP)
        free(c->top[--c->n_top].name);
    if (!c->n_top) {
        free(c->top);
        c->top = NULL;
    }
    int64_t hits = c->pods_served - c->pods_compiled;
    snprintf(hit, sizeof hit, "%lld/%lld", (long long)(hits < 0 ? 0 : hits),
             (long long)c->pods_served);
    return (c->hit = strdup(hit)) ? 0 : -ENOMEM;
}

/* One profile, reported by p->listed nodes (p->nodes of them using it). */
static int prof_apply(struct tkm_api_cache_status *st, const struct ctrl_verdict *vd,
                      const struct prof *p, struct tkm_buf *tmp, size_t *top_cap)
{
    int rc = 0;
    tkm_buf_reset(tmp);
    if (tkm_buf_puts(tmp, p->p) < 0)
        return -ENOMEM;
    for (char *line = tmp->data, *nl; rc == 0 && line && *line; line = nl) {
        if ((nl = strchr(line, '\n')))
            *nl++ = 0;
        if (line[0] == 'N') {
            rc = type_add(st, line + 1);
        } else if (line[0] == 'C') {
            rc = compiles_line(&st->compiles, line + 1, p->listed);
        } else if (line[0] == 'K') {
            rc = kernel_line(&st->compiles, top_cap, line + 1, p->listed);
        } else if (line[0] == 'V' && p->nodes) {
            struct tkm_api_variant_count v;
            long gpus;
            if (vline(line + 1, vd, &v, &gpus) == 0) {
                v.nodes = p->nodes;
                v.gpus = (int32_t)(gpus * p->nodes);
                rc = variant_add(st, &v);
            }
        }
    }
    return rc;
}

/* "cuda/90: 3 nodes; cuda/80 linux/arm64: 1 node; none for: nvidia-a100" (at most 1024 bytes). */
static int variant_summary(struct tkm_api_cache_status *st, struct tkm_buf *b)
{
    int bad = 0;
    tkm_buf_reset(b);
    for (size_t i = 0; i < st->n_variants; i++) {
        const struct tkm_api_variant_count *v = &st->variants[i];
        size_t at = b->len;
        bad |= tkm_buf_printf(b, "%s%s/%s%s%s: %d node%s", i ? "; " : "", v->backend, v->arch,
                              strcmp(v->platform, "linux/amd64") && *v->platform ? " " : "",
                              strcmp(v->platform, "linux/amd64") ? v->platform : "", (int)v->nodes,
                              v->nodes == 1 ? "" : "s") < 0;
        if (b->len > 960) {
            b->len = at;
            bad |= tkm_buf_printf(b, "; and %zu more", st->n_variants - i) < 0;
            break;
        }
    }
    if (st->n_gpu_types_without_variant) {
        bad |= tkm_buf_printf(b, "%snone for: ", b->len ? "; " : "") < 0;
        for (size_t i = 0; i < st->n_gpu_types_without_variant; i++) {
            size_t at = b->len;
            bad |= tkm_buf_printf(b, "%s%s", i ? ", " : "", st->gpu_types_without_variant[i]) < 0;
            if (b->len > 1000) {
                b->len = at;
                bad |= tkm_buf_printf(b, ", and %zu more", st->n_gpu_types_without_variant - i) < 0;
                break;
            }
        }
    }
    if (bad)
        return -ENOMEM;
    if (b->len && !(st->variant_summary = strndup(b->data, b->len)))
        return -ENOMEM;
    return 0;
}

static int variants_build(struct tkm_api_cache_status *st, const struct tally *t)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 20);
    size_t top_cap = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < t->n_prof; i++)
        if (!t->prof[i].stray) /* not trusted: its nodes are pending */
            rc = prof_apply(st, t->vd, &t->prof[i], &b, &top_cap);
    if (rc == 0)
        rc = compiles_finish(&st->compiles);
    if (rc == 0 && st->n_variants > 1)
        qsort(st->variants, st->n_variants, sizeof *st->variants, cmp_variant);
    if (rc == 0 && st->n_gpu_types_without_variant > 1)
        qsort(st->gpu_types_without_variant, st->n_gpu_types_without_variant, sizeof(char *),
              cmp_str);
    if (rc == 0)
        rc = variant_summary(st, &b);
    tkm_buf_release(&b);
    return rc;
}

static int set_cond(struct tkm_api_condition *c, const char *type, enum tkm_api_cond_status s,
                    const char *reason, const char *msg, int64_t gen,
                    const struct tkm_api_condition *prev, size_t n_prev, const char *now)
{
    const char *ltt = now;
    for (size_t i = 0; i < n_prev; i++)
        if (prev[i].type && strcmp(prev[i].type, type) == 0 && prev[i].status == s &&
            prev[i].last_transition_time)
            ltt = prev[i].last_transition_time;
    c->type = strdup(type);
    c->status = s;
    c->observed_generation = gen;
    c->last_transition_time = strdup(ltt);
    c->reason = strdup(reason);
    c->message = strdup(msg ? msg : "");
    return c->type && c->last_transition_time && c->reason && c->message ? 0 : -ENOMEM;
}

static int failed_nodes(struct tkm_api_cache_status *st, const struct tally *t)
{
    size_t n = t->n_bad < CTRL_MAX_FAILED ? t->n_bad : CTRL_MAX_FAILED;
    if (!n)
        return 0;
    st->failed_nodes = calloc(n, sizeof *st->failed_nodes);
    if (!st->failed_nodes)
        return -ENOMEM;
    st->n_failed_nodes = n;
    for (size_t i = 0; i < n; i++) {
        struct tkm_api_failed_node *f = &st->failed_nodes[i];
        f->node = strdup(t->bad[i].node);
        f->reason = strdup(why_reason(&t->bad[i]));
        f->message = strdup(why_msg(&t->bad[i]));
        if (!f->node || !f->reason || !f->message)
            return -ENOMEM;
    }
    return 0;
}

static int ready_cond(struct tkm_api_condition *c, const struct ctrl_verdict *v,
                      const struct tally *t, int64_t gen, const struct tkm_api_condition *prev,
                      size_t n_prev, const char *now, struct tkm_buf *m)
{
    enum tkm_api_cond_status s = TKM_API_COND_FALSE;
    const char *reason;
    tkm_buf_reset(m);
    if (!v->usable) {
        reason = v->in_progress ? v->reason : "NotVerified";
        tkm_buf_printf(m, "%s: %s", v->reason, v->message);
    } else if (t->compatible > 0) {
        s = TKM_API_COND_TRUE;
        reason = "CompatibleNodes";
        tkm_buf_printf(m, "usable on %d of %d nodes", t->compatible, t->nodes);
        if (t->incompatible) {
            tkm_buf_printf(m, "; %d incompatible (", t->incompatible);
            list_nodes(m, t->bad + t->n_failed, t->n_bad - t->n_failed);
            tkm_buf_puts(m, ")");
        }
        if (t->failed) {
            tkm_buf_printf(m, "; %d failed (", t->failed);
            list_nodes(m, t->bad, t->n_failed);
            tkm_buf_puts(m, ")");
        }
        if (t->pending)
            tkm_buf_printf(m, "; %d not reported yet", t->pending);
    } else if (t->nodes == 0) {
        reason = "NoNodeReports";
        tkm_buf_puts(m, "no node has reported this cache yet");
    } else if (t->incompatible && !t->failed && !t->pending) {
        reason = "NoCompatibleNode";
        tkm_buf_printf(m, "none of %d nodes has a compatible GPU: ", t->nodes);
        list_nodes(m, t->bad + t->n_failed, t->n_bad - t->n_failed);
    } else if (t->failed && !t->pending) {
        reason = "NodesFailed";
        tkm_buf_printf(m, "no node can use it: %d failed (", t->failed);
        list_nodes(m, t->bad, t->n_failed);
        tkm_buf_puts(m, ")");
        if (t->incompatible) {
            tkm_buf_printf(m, "; %d incompatible (", t->incompatible);
            list_nodes(m, t->bad + t->n_failed, t->n_bad - t->n_failed);
            tkm_buf_puts(m, ")");
        }
    } else {
        reason = "WaitingForNodes";
        tkm_buf_printf(m, "%d of %d nodes have not reported the pinned digest yet", t->pending,
                       t->nodes);
        if (t->n_bad) {
            tkm_buf_puts(m, "; ");
            list_nodes(m, t->bad, t->n_bad);
        }
    }
    if (t->n_bad > CTRL_MAX_FAILED)
        tkm_buf_printf(m, " (failedNodes lists %d, and %zu more)", CTRL_MAX_FAILED,
                       t->n_bad - CTRL_MAX_FAILED);
    return set_cond(c, "Ready", s, reason, m->data ? m->data : "", gen, prev, n_prev, now);
}

int ctrl_agg_build(const struct ctrl_cidx *c, const struct ctrl_verdict *v, int64_t gen,
                   const struct tkm_api_condition *prev, size_t n_prev, const char *now,
                   struct tkm_api_cache_status *st)
{
    struct tally t;
    struct tkm_buf m = TKM_BUF_INIT(1200);
    int rc;
    if ((rc = tally(c, v, &t)) < 0)
        return rc;
    st->observed_generation = gen;
    st->has_counts = 1;
    st->counts = (struct tkm_api_counts){.nodes = t.nodes,
                                         .compatible = t.compatible,
                                         .incompatible = t.incompatible,
                                         .failed = t.failed,
                                         .in_use = t.in_use};
    if ((rc = failed_nodes(st, &t)) < 0 || (rc = variants_build(st, &t)) < 0)
        goto out;
    st->conditions = calloc(4, sizeof *st->conditions);
    rc = -ENOMEM;
    if (!st->conditions)
        goto out;
    st->n_conditions = 4;
    if ((rc = set_cond(&st->conditions[0], "Verified", v->verified, v->reason, v->message, gen,
                       prev, n_prev, now)) < 0)
        goto out;
    if ((rc = ready_cond(&st->conditions[1], v, &t, gen, prev, n_prev, now, &m)) < 0)
        goto out;
    tkm_buf_reset(&m);
    if (v->in_progress)
        tkm_buf_printf(&m, "%s", v->message);
    else if (t.pending)
        tkm_buf_printf(&m, "%d of %d nodes have not reported the pinned digest yet", t.pending,
                       t.nodes);
    else
        tkm_buf_printf(&m, "every node that reports this cache is at the pinned digest");
    rc = set_cond(&st->conditions[2], "Progressing",
                  v->in_progress || t.pending ? TKM_API_COND_TRUE : TKM_API_COND_FALSE,
                  v->in_progress ? v->reason
                  : t.pending    ? "RollingOut"
                                 : "Complete",
                  m.data ? m.data : "", gen, prev, n_prev, now);
    if (rc < 0)
        goto out;
    tkm_buf_reset(&m);
    if (t.failed) {
        tkm_buf_printf(&m, "%d node%s report%s errors: ", t.failed, t.failed == 1 ? "" : "s",
                       t.failed == 1 ? "s" : "");
        list_nodes(&m, t.bad, t.n_failed);
        if (t.n_bad > CTRL_MAX_FAILED)
            tkm_buf_printf(&m, " (failedNodes lists %d, and %zu more)", CTRL_MAX_FAILED,
                           t.n_bad - CTRL_MAX_FAILED);
    } else {
        tkm_buf_puts(&m, "no node reports an error");
    }
    rc = set_cond(&st->conditions[3], "Degraded", t.failed ? TKM_API_COND_TRUE : TKM_API_COND_FALSE,
                  t.failed ? "NodeErrors" : "AsExpected", m.data ? m.data : "", gen, prev, n_prev,
                  now);
out:
    free(t.bad);
    free(t.prof);
    tkm_buf_release(&m);
    return rc;
}

uint64_t ctrl_settle_wait(uint64_t settle_ms, uint64_t max_delay_ms, uint64_t changed_ms,
                          uint64_t *dirty_since, uint64_t now)
{
    if (!settle_ms || !changed_ms || now - changed_ms >= settle_ms)
        return 0;
    if (!*dirty_since)
        *dirty_since = now;
    if (now - *dirty_since >= max_delay_ms)
        return 0;
    uint64_t w = settle_ms - (now - changed_ms);
    uint64_t left = max_delay_ms - (now - *dirty_since);
    return w < left ? w : left;
}
