/* stop.c - the graceful stop (agent.h: agent_stop, agent_on_stop), by close
 * callbacks (tkm/daemon.h): the servers, informers and registry sessions are
 * closed first (a session reports once its jobs have reported -ECANCELED and
 * its thread-pool work has finished: a cancelled pull removes its staging
 * directory, a cancelled ingest leaves nothing visible); once the last of
 * them has reported nothing uses the clients, which close next (a status
 * write in flight completes). The daemon exits when the last close reports
 * and the loop ends; no timer decides it. */
#include <stdlib.h>

#include <tkm/httpd.h>
#include <tkm/log.h>

#include "agent.h"

static void closed_nop(uv_handle_t *h)
{
    (void)h;
}

static void clients_close(void *data)
{
    struct agent *a = data;
    TKM_DAEMON_CLOSE(&a->d, k8s_client_close, a->kc);
    a->kc = NULL;
    TKM_DAEMON_CLOSE(&a->d, tkm_http_close, a->http);
    a->http = NULL;
    tkm_daemon_closed(&a->d);
}

void agent_stop(struct agent *a, int code)
{
    tkm_daemon_stop(&a->d, code);
}

/* agent_caches_close()'s callback: the queue has drained and the verify context closed. */
static void caches_closed(struct agent *a)
{
    tkm_closer_done(&a->users);
}

void agent_on_stop(struct tkm_daemon *d, int signum, void *data)
{
    struct agent *a = data;
    (void)signum;
    a->stopping = 1;
    tkm_dbg("stopping (exit %d)", d->exit_code);
    /* the clients close when everything that uses them has */
    tkm_daemon_closing(d);
    tkm_closer_init(&a->users, clients_close, a);
    agent_store_stop(a);
    TKM_DAEMON_CLOSE(d, tkm_httpd_close, a->httpd_metrics);
    TKM_DAEMON_CLOSE(d, tkm_httpd_close, a->httpd_health);
    a->httpd_metrics = a->httpd_health = NULL;
    k8s_recorder_free(a->rec);
    a->rec = NULL;
    struct k8s_informer **infs[] = {&a->inf_tkc, &a->inf_tkcc, &a->inf_cfg, &a->inf_ns,
                                    &a->inf_nsc};
    for (size_t i = 0; i < sizeof infs / sizeof infs[0]; i++) {
        if (*infs[i])
            k8s_informer_close(*infs[i], tkm_closer_done, tkm_closer_add(&a->users));
        *infs[i] = NULL;
    }
    tkm_closer_add(&a->users);
    agent_caches_close(a, caches_closed);
    if (a->once_session)
        tkm_oci_session_close(a->once_session, tkm_closer_done, tkm_closer_add(&a->users));
    a->once_session = NULL;
    agent_mirrors_close(a, &a->users);
    uv_handle_t *hs[] = {(uv_handle_t *)&a->probe_timer, (uv_handle_t *)&a->flush_timer,
                         (uv_handle_t *)&a->node_timer, (uv_handle_t *)&a->gc_timer,
                         (uv_handle_t *)&a->once_timer};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
        if (!uv_is_closing(hs[i]))
            uv_close(hs[i], closed_nop);
    tkm_closer_done(&a->users);
}
