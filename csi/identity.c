/*
 * identity.c - the CSI Identity service (GetPluginInfo, GetPluginCapabilities,
 * Probe: the agent's readiness) and kubelet's plugin-registration service
 * (GetInfo, NotifyRegistrationStatus). See csi-int.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>

#include "csi-int.h"
#include "pluginregistration.pb-c.h"

#define PROBE_TIMEOUT_MS 3000

static void plugin_info(struct tkm_grpc_call *call, void *data)
{
    Csi__V1__GetPluginInfoResponse r = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;
    (void)data;
    r.name = (char *)CSI_DRIVER_NAME;
    r.vendor_version = (char *)TKM_VERSION;
    csi_reply(call, &r.base);
}

static void plugin_caps(struct tkm_grpc_call *call, void *data)
{
    /* No CONTROLLER_SERVICE (node-only) and no topology: an empty list. */
    Csi__V1__GetPluginCapabilitiesResponse r = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
    (void)data;
    csi_reply(call, &r.base);
}

struct probe {
    struct csi_driver *d;
    struct tkm_grpc_call *call;
};

static void probe_answered(int code, const char *message, const void *resp, size_t len, void *data)
{
    struct probe *p = data;
    Csi__V1__ProbeResponse r = CSI__V1__PROBE_RESPONSE__INIT;
    Csi__V1__BoolValue ready = CSI__V1__BOOL_VALUE__INIT;
    Tkm__Agent__V1__StatusResponse *st = NULL;
    if (code == TKM_GRPC_OK)
        st = tkm__agent__v1__status_response__unpack(NULL, len, resp);
    ready.value = st && st->ready;
    if (!ready.value)
        tkm_dbg("probe: not ready: %s", code != TKM_GRPC_OK ? message
                                        : st                ? (st->message ? st->message : "")
                                                            : "bad StatusResponse from tkm-agent");
    /* Not ready is an answer, not an error: the plugin itself is healthy and
     * a liveness probe must not restart it because the agent is starting. */
    r.ready = &ready;
    csi_reply(p->call, &r.base);
    if (st)
        tkm__agent__v1__status_response__free_unpacked(st, NULL);
    p->d->n_pending--;
    csi_driver_maybe_done(p->d);
    free(p);
}

static void probe(struct tkm_grpc_call *call, void *data)
{
    struct csi_driver *d = data;
    struct tkm_err err = {0};
    struct probe *p = calloc(1, sizeof(*p));
    if (!p) {
        tkm_grpc_call_fail(call, TKM_GRPC_RESOURCE_EXHAUSTED, "tkm-csi: out of memory");
        return;
    }
    p->d = d;
    p->call = call;
    d->n_pending++;
    /* StatusRequest is empty: zero bytes. */
    if (!d->agent || tkm_grpc_client_call(d->agent, "/tkm.agent.v1.Agent/Status", "", 0,
                                          PROBE_TIMEOUT_MS, probe_answered, p, &err) < 0)
        probe_answered(TKM_GRPC_UNAVAILABLE, tkm_err_str(&err), NULL, 0, p);
}

/* ---- plugin registration ------------------------------------------------- */

static void reg_info(struct tkm_grpc_call *call, void *data)
{
    struct csi_driver *d = data;
    Pluginregistration__PluginInfo r = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    char *versions[] = {(char *)"1.0.0"};
    r.type = (char *)"CSIPlugin";
    r.name = (char *)CSI_DRIVER_NAME;
    r.endpoint = (char *)d->cfg->endpoint;
    r.n_supported_versions = 1;
    r.supported_versions = versions;
    tkm_info("kubelet asked for the plugin info (endpoint %s)", d->cfg->endpoint);
    csi_reply(call, &r.base);
}

static void reg_status(struct tkm_grpc_call *call, void *data)
{
    Pluginregistration__RegistrationStatusResponse r =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    Pluginregistration__RegistrationStatus *st =
        pluginregistration__registration_status__unpack(NULL, n, b);
    (void)data;
    if (!st) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad RegistrationStatus message");
        return;
    }
    if (st->plugin_registered)
        tkm_info("kubelet registered driver " CSI_DRIVER_NAME);
    else
        tkm_err("kubelet did not register driver " CSI_DRIVER_NAME ": %s",
                st->error ? st->error : "(no reason given)");
    pluginregistration__registration_status__free_unpacked(st, NULL);
    csi_reply(call, &r.base);
}

int csi_identity_register(struct csi_driver *d, struct tkm_err *err)
{
    int rc;
    if ((rc = tkm_grpc_server_register(d->srv, "/csi.v1.Identity/GetPluginInfo", plugin_info, d,
                                       err)) < 0 ||
        (rc = tkm_grpc_server_register(d->srv, "/csi.v1.Identity/GetPluginCapabilities",
                                       plugin_caps, d, err)) < 0 ||
        (rc = tkm_grpc_server_register(d->srv, "/csi.v1.Identity/Probe", probe, d, err)) < 0)
        return rc;
    if (d->reg &&
        ((rc = tkm_grpc_server_register(d->reg, "/pluginregistration.Registration/GetInfo",
                                        reg_info, d, err)) < 0 ||
         (rc = tkm_grpc_server_register(d->reg,
                                        "/pluginregistration.Registration/NotifyRegistrationStatus",
                                        reg_status, d, err)) < 0))
        return rc;
    return 0;
}
