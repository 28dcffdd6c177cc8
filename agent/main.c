/*
 * main.c - tkm-agent: flags, the loop, signals, start and graceful stop.
 * agent/README.md says how to run it; docs/agent.md how it works.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/http.h>
#include <tkm/log.h>
#include <k8s/config.h>

#include "agent.h"

static void on_hup(struct tkm_daemon *d, void *data)
{
    struct agent *a = data;
    (void)d;
    tkm_info("SIGHUP: probing the GPUs again");
    agent_gpu_probe(a);
}

static int handles_init(struct agent *a, struct tkm_err *err)
{
    uv_timer_init(a->loop, &a->probe_timer);
    uv_timer_init(a->loop, &a->flush_timer);
    uv_timer_init(a->loop, &a->node_timer);
    uv_timer_init(a->loop, &a->gc_timer);
    uv_timer_init(a->loop, &a->once_timer);
    a->gc_timer.data = a->once_timer.data = a;
    a->flush_timer.data = a->node_timer.data = a->probe_timer.data = a;
    struct tkm_daemon_opts o = {.on_stop = agent_on_stop, .on_hup = on_hup, .data = a};
    return tkm_daemon_init(&a->d, a->loop, &o, err);
}

static int k8s_start(struct agent *a, struct tkm_err *err)
{
    struct k8s_config cfg;
    int rc;
    k8s_config_init(&cfg);
    rc = k8s_config_load_default(&cfg, a->o.kubeconfig, err);
    if (rc == 0)
        rc = k8s_client_new(a->loop, &cfg, NULL, &a->kc, err);
    k8s_config_release(&cfg);
    return rc;
}

static void on_once_timeout(uv_timer_t *t)
{
    struct agent *a = t->data;
    size_t pending = agent_caches_pending(a);
    fprintf(stderr,
            "tkm-agent: --once: no answer after %.1f s (%s; %zu cache(s) still being verified)\n",
            (double)a->o.once_timeout_ms / 1000,
            !a->probed                                            ? "the GPU probe did not finish"
            : a->o.image                                          ? "the registry did not answer"
            : !a->inf_tkc || !k8s_informer_has_synced(a->inf_tkc) ? "the apiserver did not answer"
                                                                  : "verification did not finish",
            pending);
    agent_stop(a, 1);
}

static int agent_start(struct agent *a)
{
    struct tkm_err e = {0};
    int rc;
    if ((rc = tkm_http_new(a->loop, NULL, &a->http, &e)) < 0)
        goto fail;
    if (a->o.once) /* --once never waits forever for an apiserver or registry */
        uv_timer_start(&a->once_timer, on_once_timeout, a->o.once_timeout_ms, 0);
    if (a->o.once && a->o.image) {
        if (agent_gpu_start(a) < 0 || agent_once_image(a) != 0)
            return 1;
        return 0;
    }
    if ((rc = k8s_start(a, &e)) < 0)
        goto fail;
    if ((rc = agent_gpu_start(a)) < 0)
        goto fail;
    if (!a->o.once && (rc = agent_status_start(a, &e)) < 0)
        goto fail;
    if (!a->o.once) {
        struct k8s_recorder_opts ro = {.component = "tkm-agent", .host = a->o.node_name};
        if ((rc = k8s_recorder_new(a->kc, &ro, &a->rec, &e)) < 0)
            goto fail;
        if ((rc = agent_store_start(a, &e)) < 0)
            goto fail;
        if ((rc = agent_metrics_start(a, &e)) < 0)
            goto fail;
    }
    if ((rc = agent_caches_start(a, &e)) < 0)
        goto fail;
    if (!a->o.once)
        tkm_info("tkm-agent %s on node %s: namespace %s, store %s, socket %s", TKM_VERSION,
                 a->o.node_name, a->o.ns, a->o.store_dir, a->o.socket);
    return 0;
fail:
    fprintf(stderr, "tkm-agent: %s\n", e.code ? tkm_err_str(&e) : strerror(-rc));
    return 1;
}

int main(int argc, char **argv)
{
    struct agent a;
    struct tkm_err e = {0};
    uv_loop_t loop;
    memset(&a, 0, sizeof a);
    int rc = agent_opts_parse(&a.o, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (!a.o.node_name || !a.o.node_name[0]) {
        /* --once --image on a machine without a control plane: the host name */
        if (gethostname(a.hostname, sizeof a.hostname - 1) < 0)
            snprintf(a.hostname, sizeof a.hostname, "localhost");
        a.o.node_name = a.hostname;
    }
    tkm_flags_log_init(&a.o.flags, a.o.once ? TKM_LOG_WARN : TKM_LOG_INFO);
    if (tkm_threadpool_init(0, &e) < 0 || tkm_http_global_init(&e) < 0) {
        fprintf(stderr, "tkm-agent: %s\n", tkm_err_str(&e));
        return 1;
    }
    if (uv_loop_init(&loop) < 0)
        return 1;
    a.loop = &loop;
    if (handles_init(&a, &e) < 0) {
        fprintf(stderr, "tkm-agent: %s\n", tkm_err_str(&e));
        return 1;
    }
    if (agent_start(&a) != 0)
        agent_stop(&a, 1);
    int code = tkm_daemon_run(&a.d);
    uv_loop_close(&loop);
    agent_nsobjs_free(&a);
    agent_store_close(&a);
    agent_metrics_free(&a);
    agent_gpus_release(&a);
    tkm_api_config_release(&a.cfg);
    free(a.cfg_inputs);
    return code;
}
