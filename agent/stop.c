/* stop.c - the graceful stop (agent.h: agent_stop): informers stopped, work in
 * flight cancelled (registry jobs report -ECANCELED, a store ingest removes its
 * staging directory), then the clients closed once nothing is in flight. */
#include <stdlib.h>

#include <tkm/log.h>

#include "agent.h"

static void closed_nop(uv_handle_t *h)
{
    (void)h;
}

static void on_shutdown_poll(uv_timer_t *t)
{
    struct agent *a = t->data;
    /* the cancelled registry jobs report through the http client, and a
     * cancelled pull may still have its layout's flush on the thread pool
     * before it reports: close the clients only once nothing is in flight
     * there and every pull has reported (at most ~5 s) */
    if (a->http && (tkm_http_inflight(a->http) > 0 || a->pulls) && a->shutdown_polls++ < 500)
        return;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, closed_nop);
    if (a->kc)
        k8s_client_close(a->kc, NULL, NULL);
    a->kc = NULL;
    if (a->http)
        tkm_http_close(a->http, NULL, NULL);
    a->http = NULL;
}

void agent_stop(struct agent *a, int code)
{
    if (a->stopping)
        return;
    a->stopping = 1;
    a->exit_code = code;
    tkm_dbg("stopping (exit %d)", code);
    agent_store_stop(a);
    agent_metrics_stop(a);
    k8s_recorder_free(a->rec);
    a->rec = NULL;
    struct k8s_informer **infs[] = {&a->inf_tkc, &a->inf_tkcc, &a->inf_cfg, &a->inf_ns,
                                    &a->inf_nsc};
    for (size_t i = 0; i < sizeof infs / sizeof infs[0]; i++) {
        k8s_informer_stop(*infs[i], NULL, NULL);
        *infs[i] = NULL;
    }
    agent_caches_close(a, NULL);
    tkm_oci_session_free(a->once_session);
    a->once_session = NULL;
    uv_handle_t *hs[] = {(uv_handle_t *)&a->probe_timer, (uv_handle_t *)&a->flush_timer,
                         (uv_handle_t *)&a->node_timer,  (uv_handle_t *)&a->sig_term,
                         (uv_handle_t *)&a->sig_int,     (uv_handle_t *)&a->sig_hup,
                         (uv_handle_t *)&a->gc_timer,    (uv_handle_t *)&a->once_timer};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        if (!uv_is_closing(hs[i]))
            uv_close(hs[i], closed_nop);
    uv_timer_init(a->loop, &a->shutdown_timer);
    a->shutdown_timer.data = a;
    uv_timer_start(&a->shutdown_timer, on_shutdown_poll, 0, 10);
}
