/*
 * fuzz_nodestatus_scan - tkm_api_nodestatus_scan() (no tree) against
 * tkm_api_nodestatus_decode() (jansson) on arbitrary bytes.
 *
 * Checks: no crash, no leak, no out-of-bounds read; both accept or both
 * refuse; on success the same number of caches and, for every entry the
 * scan reports, the same digest, flags, counts, error and first
 * incompatible reason as the decoded cache of that name; on failure the
 * callback never ran.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/api/v1alpha1.h>

struct ctx {
    const struct tkm_api_nodestatus *d;
    size_t n;
};

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int on_entry(const struct tkm_api_nsscan_head *h, const struct tkm_api_nsscan_entry *e,
                    void *data)
{
    struct ctx *c = data;
    const struct tkm_api_node_status *st = &c->d->status;
    const struct tkm_api_node_cache *nc = NULL;
    (void)h;
    c->n++;
    for (size_t i = 0; i < st->n_caches && !nc; i++)
        if (strcmp(st->caches[i].name, e->name) == 0)
            nc = &st->caches[i];
    if (!nc)
        abort();
    const struct tkm_api_gpu_group *g = nc->n_incompatible ? &nc->incompatible[0] : NULL;
    if (!same(nc->digest, e->digest) || !same(nc->error, e->error) || nc->verified != e->verified ||
        nc->extracted != e->extracted || nc->n_compatible != e->n_compatible ||
        nc->n_incompatible != e->n_incompatible || nc->n_pods != e->n_pods ||
        !same(g ? g->reason : NULL, e->incompatible_reason) ||
        !same(g ? g->message : NULL, e->incompatible_message))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tkm_api_nodestatus d;
    struct tkm_api_nsscan sc;
    struct tkm_api_nsscan_head h;
    struct ctx c = {.d = &d};
    /* an exact-size copy: any read past the end is caught by ASan */
    char *p = malloc(size ? size : 1);
    if (!p)
        return 0;
    memcpy(p, data, size);
    tkm_api_nsscan_init(&sc);
    int rd = tkm_api_nodestatus_decode(p, size, &d, NULL);
    int rs = tkm_api_nodestatus_scan(&sc, p, size, &h, on_entry, &c, NULL);
    if ((rd == 0) != (rs == 0))
        abort();
    if (rs == 0 && (c.n != d.status.n_caches || h.n_caches != d.status.n_caches ||
                    h.cluster != d.cluster || !same(h.name, d.meta.name) ||
                    !same(h.ns, d.meta.ns) || !same(h.node_name, d.status.node_name)))
        abort();
    if (rs != 0 && c.n != 0)
        abort();
    tkm_api_nodestatus_release(&d);
    tkm_api_nsscan_release(&sc);
    free(p);
    return 0;
}
