/*
 * probe.c - `tkm-csi probe`: the container's liveness and readiness check (an exec
 * probe: the image has no shell, and kubelet's own probes cannot reach a unix
 * socket). Asks the driver's CSI socket for Identity/GetPluginInfo and exits 0 when
 * it answers csi.tkm.io, else 1 with the reason on stderr. It does not ask Probe: a
 * driver whose agent is down is alive and must not be restarted for it (docs/csi.md).
 */
#include <stdio.h>
#include <string.h>

#include <tkm/flags.h>
#include <tkm/grpc.h>
#include <tkm/util.h>

#include "csi.h"
#include "csi.pb-c.h"

struct probe {
    int done, ok;
    char msg[512];
};

static void on_info(int code, const char *message, const void *resp, size_t len, void *data)
{
    struct probe *p = data;
    Csi__V1__GetPluginInfoResponse *r = NULL;
    p->done = 1;
    if (code != 0) {
        snprintf(p->msg, sizeof(p->msg), "GetPluginInfo failed (gRPC code %d): %s", code, message);
        return;
    }
    r = csi__v1__get_plugin_info_response__unpack(NULL, len, resp);
    if (!r)
        snprintf(p->msg, sizeof(p->msg), "GetPluginInfo: the response does not decode");
    else if (!r->name || strcmp(r->name, CSI_DRIVER_NAME) != 0)
        snprintf(p->msg, sizeof(p->msg), "GetPluginInfo: driver \"%.64s\", not " CSI_DRIVER_NAME,
                 r->name ? r->name : "");
    else {
        p->ok = 1;
        snprintf(p->msg, sizeof(p->msg), "%s %.64s", r->name,
                 r->vendor_version ? r->vendor_version : "");
    }
    if (r)
        csi__v1__get_plugin_info_response__free_unpacked(r, NULL);
}

static int probe_args(int argc, char **argv, const char **endpoint, uint64_t *timeout_ms)
{
    const struct tkm_flag flags[] = {
        {.name = "endpoint",
         .type = TKM_FLAG_STRING,
         .dst = endpoint,
         .arg = "PATH",
         .def = "/var/lib/kubelet/plugins/" CSI_DRIVER_NAME "/csi.sock",
         .help = "the driver's CSI socket (a unix:// prefix is allowed)"},
        {.name = "timeout",
         .type = TKM_FLAG_DURATION,
         .dst = timeout_ms,
         .arg = "DURATION",
         .def = "5s",
         .min = 1,
         .max = 60000,
         .bare_ms = 1000,
         .help = "how long to wait for the answer"},
    };
    struct tkm_flagset fs = {
        .prog = "tkm-csi probe",
        .synopsis = "tkm-csi probe [flags]",
        .about = "Exit 0 when tkm-csi answers GetPluginInfo on its CSI socket, else 1 with the\n"
                 "reason (the DaemonSet's exec liveness/readiness probe).\n",
        .flags = flags,
        .n_flags = TKM_ARRAY_SIZE(flags),
        .epilogue = "Example: tkm-csi probe --endpoint /var/lib/kubelet/plugins/" CSI_DRIVER_NAME
                    "/csi.sock --timeout 2s\n"};
    int rc = tkm_flags_parse(&fs, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (strncmp(*endpoint, "unix://", 7) == 0)
        *endpoint += 7;
    /* a deprecated spelling (a bare number of seconds) is said on stderr: no log here */
    for (unsigned i = 0; i < fs.n_notes; i++)
        fprintf(stderr, "tkm-csi probe: %s\n", fs.notes[i]);
    return -1;
}

int csi_probe_main(int argc, char **argv)
{
    const char *endpoint = "/var/lib/kubelet/plugins/" CSI_DRIVER_NAME "/csi.sock";
    uint64_t timeout_ms = 5000;
    struct tkm_grpc_client *cli = NULL;
    struct probe p = {0};
    struct tkm_err err = {0};
    static const uint8_t empty[1];
    uv_loop_t loop;
    int rc = probe_args(argc, argv, &endpoint, &timeout_ms);
    if (rc >= 0)
        return rc;
    if (uv_loop_init(&loop) != 0) {
        fputs("tkm-csi probe: cannot create an event loop\n", stderr);
        return 1;
    }
    if (tkm_grpc_client_new(&loop, endpoint, &cli, &err) < 0 ||
        tkm_grpc_client_call(cli, "/csi.v1.Identity/GetPluginInfo", empty, 0, timeout_ms, on_info,
                             &p, &err) < 0)
        snprintf(p.msg, sizeof(p.msg), "%s", tkm_err_str(&err));
    else
        while (!p.done && uv_run(&loop, UV_RUN_ONCE))
            ;
    tkm_grpc_client_close(cli, NULL, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (!p.ok) {
        fprintf(stderr, "tkm-csi probe: %s: %s\n", endpoint, p.msg[0] ? p.msg : "no answer");
        return 1;
    }
    printf("%s\n", p.msg);
    return 0;
}
