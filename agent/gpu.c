/*
 * gpu.c - the node's GPU facts: lib/gpu's probe on the thread pool (NVML's
 * init can take seconds on a real node) at start, every 5 minutes and on
 * SIGHUP. A change re-judges every cache and rewrites the node status.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>

#include "agent.h"

struct probe_work {
    uv_work_t w;
    struct agent *a;
    struct tkm_gpu_probe_opts o;
    struct tkm_gpu_list l;
    struct tkm_err err;
    int rc;
};

static void probe_run(uv_work_t *w)
{
    struct probe_work *p = w->data;
    p->rc = tkm_gpu_probe(&p->l, &p->o, &p->err);
}

static void api_gpus_free(struct tkm_api_gpu *g, size_t n)
{
    for (size_t i = 0; g && i < n; i++) {
        free(g[i].gpu_type);
        free(g[i].vendor);
        free(g[i].product_name);
        free(g[i].arch);
        free(g[i].compute_capability);
        free(g[i].driver_version);
        free(g[i].cuda_driver_version);
        free(g[i].uuid);
        free(g[i].pci_bus_id);
    }
    free(g);
}

static char *dup_or_null(const char *s)
{
    return s && s[0] ? strdup(s) : NULL;
}

static struct tkm_api_gpu *api_gpus(const struct tkm_gpu_list *l)
{
    struct tkm_api_gpu *out = calloc(l->n + 1, sizeof *out);
    for (size_t i = 0; out && i < l->n; i++) {
        const struct tkm_gpu *g = &l->gpus[i];
        struct tkm_api_gpu *o = &out[i];
        char cc[32] = "";
        if (g->cc_major >= 0)
            snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        o->id = g->index;
        o->gpu_type = strdup(g->gpu_type[0] ? g->gpu_type : "unknown");
        o->vendor = strdup(g->vendor[0] ? g->vendor : "unknown");
        o->product_name = dup_or_null(g->name);
        o->arch = dup_or_null(g->arch);
        o->compute_capability = dup_or_null(cc);
        o->warp_size = g->warp_size;
        o->driver_version = dup_or_null(g->driver_version);
        o->cuda_driver_version = dup_or_null(g->cuda_version);
        o->memory_bytes = (int64_t)g->memory_bytes;
        o->uuid = dup_or_null(g->uuid);
        o->pci_bus_id = dup_or_null(g->pci_bus_id);
        o->mig_mode = g->mig_mode == 1;
        if (!o->gpu_type || !o->vendor) {
            api_gpus_free(out, l->n);
            return NULL;
        }
    }
    return out;
}

static char *gpus_json(const struct tkm_gpu_list *l)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < l->n; i++)
        json_array_append_new(arr, tkm_gpu_to_json(&l->gpus[i]));
    char *s = arr ? json_dumps(arr, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(arr);
    return s;
}

static void probe_done(uv_work_t *w, int status)
{
    struct probe_work *p = w->data;
    struct agent *a = p->a;
    a->probing = 0;
    if (status < 0 || p->rc < 0) {
        tkm_err("GPU probe failed: %s", status < 0 ? uv_strerror(status) : tkm_err_str(&p->err));
        goto out;
    }
    char *js = gpus_json(&p->l);
    struct tkm_api_gpu *ag = api_gpus(&p->l);
    if (!js || !ag) {
        free(js);
        api_gpus_free(ag, p->l.n);
        tkm_err("GPU probe: out of memory");
        goto out;
    }
    int changed = !a->gpus_json || strcmp(js, a->gpus_json) != 0;
    if (changed) {
        api_gpus_free(a->api_gpus, a->gpus.n);
        tkm_gpu_list_release(&a->gpus);
        a->gpus = p->l;
        memset(&p->l, 0, sizeof p->l);
        a->api_gpus = ag;
        free(a->gpus_json);
        a->gpus_json = js;
        tkm_info("GPUs: %zu found%s%s", a->gpus.n, a->gpus.nvml_error[0] ? "; NVML: " : "",
                 a->gpus.nvml_error);
        for (size_t i = 0; i < a->gpus.n; i++) {
            const struct tkm_gpu *g = &a->gpus.gpus[i];
            tkm_info("GPU %d: %s (%s) arch %s warp %d%s%s", g->index, g->name, g->gpu_type,
                     g->arch[0] ? g->arch : "unknown", g->warp_size, g->usable ? "" : ": ",
                     g->reason);
        }
    } else {
        free(js);
        api_gpus_free(ag, p->l.n);
    }
    a->probed = 1;
    if (changed)
        agent_caches_rejudge_all(a);
out:
    tkm_gpu_list_release(&p->l);
    free(p);
    if (a->reprobe && !a->stopping) {
        a->reprobe = 0;
        agent_gpu_probe(a);
    } else if (!a->stopping && a->o.once && a->probed) {
        agent_once_check(a); /* --once finishes once everything is judged */
    }
    if (!a->probed && !a->stopping && a->o.once)
        agent_stop(a, 1);
}

void agent_gpu_probe(struct agent *a)
{
    if (a->stopping)
        return;
    if (a->probing) {
        a->reprobe = 1;
        return;
    }
    struct probe_work *p = calloc(1, sizeof *p);
    if (!p)
        return;
    p->a = a;
    p->o = a->o.probe;
    p->w.data = p;
    if (uv_queue_work(a->loop, &p->w, probe_run, probe_done) < 0) {
        free(p);
        return;
    }
    a->probing = 1;
}

static void on_probe_timer(uv_timer_t *t)
{
    agent_gpu_probe(t->data);
}

int agent_gpu_start(struct agent *a)
{
    agent_gpu_probe(a);
    if (a->o.once)
        return 0;
    return uv_timer_start(&a->probe_timer, on_probe_timer, AGENT_PROBE_PERIOD_MS,
                          AGENT_PROBE_PERIOD_MS);
}

void agent_gpus_release(struct agent *a)
{
    api_gpus_free(a->api_gpus, a->gpus.n);
    a->api_gpus = NULL;
    tkm_gpu_list_release(&a->gpus);
    free(a->gpus_json);
    a->gpus_json = NULL;
}
