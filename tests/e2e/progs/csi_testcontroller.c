/*
 * csi_testcontroller.c - a STAND-IN for the CSI Controller service, only so that
 * csi-sanity can run the two Node tests that call Controller.CreateVolume before
 * they publish (csi-test v5.6.0 pkg/sanity/node.go: "should remove target path" and
 * "should fail when volume does not exist on the specified path" call createVolume()
 * -> Resources.MustCreateVolume -> ControllerClient.CreateVolume unconditionally,
 * on --csi.controllerendpoint, else on the node driver's own socket).
 *
 * tkm-csi has no Controller service (ephemeral inline volumes: kubelet makes up the
 * volume id and passes the pod's volumeAttributes as the volume context). This
 * program plays that part of kubelet for csi-sanity: CreateVolume answers
 * volume_id = the request's name and volume_context = the request's parameters
 * (csi-sanity's --csi.testvolumeparameters file: cacheName, the pod info, ephemeral);
 * the Node calls that follow go to the real tkm-csi. It allocates nothing.
 *
 * Usage: e2e_csi_testcontroller --socket PATH
 * Serves on lib/grpc, without generated code (the few messages are encoded and
 * decoded by hand below):
 *   CreateVolume               -> Volume{volume_id, volume_context}; a name that is not
 *                                 1-128 of [A-Za-z0-9._-] -> INVALID_ARGUMENT
 *   DeleteVolume               -> OK (nothing to delete)
 *   ControllerGetCapabilities  -> CREATE_DELETE_VOLUME
 *   Identity (csi-sanity asks both endpoints): GetPluginInfo csi.tkm.io/test-controller,
 *   GetPluginCapabilities CONTROLLER_SERVICE, Probe ready
 * Logs one line per call on stdout ("CreateVolume <id> params=<n>", "DeleteVolume
 * <id>"). Ends on SIGINT/SIGTERM.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tkm/grpc.h>

#define MAX_PARAMS 32
#define MAX_STR    512

/* ---- a minimal protobuf reader and writer --------------------------------- */

struct rd {
    const uint8_t *p, *end;
};

static int rd_varint(struct rd *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* The next field: its number, wire type; for LEN fields the bytes (borrowed). */
static int rd_field(struct rd *r, uint32_t *num, const uint8_t **b, size_t *n)
{
    uint64_t tag, v;
    if (rd_varint(r, &tag) < 0)
        return -1;
    *num = (uint32_t)(tag >> 3);
    *b = NULL;
    *n = 0;
    switch (tag & 7) {
    case 0:
        return rd_varint(r, &v);
    case 1:
        if (r->end - r->p < 8)
            return -1;
        r->p += 8;
        return 0;
    case 5:
        if (r->end - r->p < 4)
            return -1;
        r->p += 4;
        return 0;
    case 2:
        if (rd_varint(r, &v) < 0 || v > (uint64_t)(r->end - r->p))
            return -1;
        *b = r->p;
        *n = (size_t)v;
        r->p += v;
        return 0;
    default:
        return -1;
    }
}

static int copy_str(char *dst, const uint8_t *b, size_t n)
{
    if (n >= MAX_STR || memchr(b, '\0', n))
        return -1;
    memcpy(dst, b, n);
    dst[n] = '\0';
    return 0;
}

struct wr {
    uint8_t buf[64 * 1024];
    size_t len;
    int overflow;
};

static void wr_varint(struct wr *w, uint64_t v)
{
    do {
        if (w->len >= sizeof(w->buf)) {
            w->overflow = 1;
            return;
        }
        w->buf[w->len++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static void wr_bytes(struct wr *w, uint32_t num, const void *b, size_t n)
{
    wr_varint(w, ((uint64_t)num << 3) | 2);
    wr_varint(w, n);
    if (n > sizeof(w->buf) - w->len) {
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->len, b, n);
    w->len += n;
}

/* ---- the service ------------------------------------------------------------- */

struct create_req {
    char name[MAX_STR];
    char keys[MAX_PARAMS][MAX_STR], vals[MAX_PARAMS][MAX_STR];
    size_t n;
};

/* CreateVolumeRequest: name = 1, parameters = 4 (map entries: key 1, value 2). */
static int create_parse(const uint8_t *b, size_t n, struct create_req *q)
{
    struct rd r = {b, b + n};
    while (r.p < r.end) {
        uint32_t num, en;
        const uint8_t *f, *ef;
        size_t fn, efn;
        if (rd_field(&r, &num, &f, &fn) < 0)
            return -1;
        if (num == 1 && f && copy_str(q->name, f, fn) < 0)
            return -1;
        if (num != 4 || !f)
            continue;
        if (q->n == MAX_PARAMS)
            return -1;
        struct rd e = {f, f + fn};
        q->keys[q->n][0] = q->vals[q->n][0] = '\0';
        while (e.p < e.end) {
            if (rd_field(&e, &en, &ef, &efn) < 0)
                return -1;
            if (en == 1 && ef && copy_str(q->keys[q->n], ef, efn) < 0)
                return -1;
            if (en == 2 && ef && copy_str(q->vals[q->n], ef, efn) < 0)
                return -1;
        }
        q->n++;
    }
    return 0;
}

/* main's own (big buffers, loop thread only): reset per call. */
struct tc {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    struct tkm_grpc_server *srv;
    struct create_req q;
    struct wr vol, entry, resp;
};

static int valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static void create_volume(struct tkm_grpc_call *call, void *data)
{
    struct tc *t = data;
    struct create_req *q = &t->q;
    struct wr *vol = &t->vol, *entry = &t->entry, *resp = &t->resp;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    memset(q, 0, sizeof *q);
    if (create_parse(b, n, q) < 0) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad CreateVolumeRequest");
        return;
    }
    printf("CreateVolume %s params=%zu\n", q->name, q->n);
    fflush(stdout);
    if (!valid_id(q->name)) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT,
                           "name must be 1-128 of [A-Za-z0-9._-] (it becomes the volume id)");
        return;
    }
    /* Volume: volume_id = 2, volume_context = 3 (map entries). */
    vol->len = resp->len = 0;
    vol->overflow = resp->overflow = 0;
    wr_bytes(vol, 2, q->name, strlen(q->name));
    for (size_t i = 0; i < q->n; i++) {
        entry->len = 0;
        entry->overflow = 0;
        wr_bytes(entry, 1, q->keys[i], strlen(q->keys[i]));
        wr_bytes(entry, 2, q->vals[i], strlen(q->vals[i]));
        wr_bytes(vol, 3, entry->buf, entry->len);
        vol->overflow |= entry->overflow;
    }
    wr_bytes(resp, 1, vol->buf, vol->len); /* CreateVolumeResponse.volume = 1 */
    if (vol->overflow || resp->overflow) {
        tkm_grpc_call_fail(call, TKM_GRPC_RESOURCE_EXHAUSTED, "volume context too large");
        return;
    }
    tkm_grpc_call_reply(call, resp->buf, resp->len);
}

static void delete_volume(struct tkm_grpc_call *call, void *data)
{
    char id[MAX_STR] = "";
    size_t n;
    const uint8_t *b = tkm_grpc_call_request(call, &n);
    struct rd r = {b, b + n};
    (void)data;
    while (r.p < r.end) {
        uint32_t num;
        const uint8_t *f;
        size_t fn;
        if (rd_field(&r, &num, &f, &fn) < 0 || (num == 1 && f && copy_str(id, f, fn) < 0)) {
            tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad DeleteVolumeRequest");
            return;
        }
    }
    printf("DeleteVolume %s\n", id);
    fflush(stdout);
    if (!id[0]) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    tkm_grpc_call_reply(call, "", 0);
}

static void get_caps(struct tkm_grpc_call *call, void *data)
{
    /* capabilities[0] = {rpc = {type = CREATE_DELETE_VOLUME (1)}} */
    static const uint8_t resp[] = {0x0a, 0x04, 0x0a, 0x02, 0x08, 0x01};
    (void)data;
    tkm_grpc_call_reply(call, resp, sizeof resp);
}

/* csi-sanity also asks the controller endpoint's Identity service (identity.go: "Controller
 * Service" beside "Node Service" when the endpoints differ). */
static void identity_info(struct tkm_grpc_call *call, void *data)
{
    /* name = 1 "csi.tkm.io", vendor_version = 2 "test-controller" */
    static const uint8_t resp[] = {0x0a, 10,  'c',  's', 'i', '.', 't', 'k', 'm', '.',
                                   'i',  'o', 0x12, 15,  't', 'e', 's', 't', '-', 'c',
                                   'o',  'n', 't',  'r', 'o', 'l', 'l', 'e', 'r'};
    (void)data;
    tkm_grpc_call_reply(call, resp, sizeof resp);
}

static void identity_caps(struct tkm_grpc_call *call, void *data)
{
    /* capabilities[0] = {service = {type = CONTROLLER_SERVICE (1)}} */
    static const uint8_t resp[] = {0x0a, 0x04, 0x0a, 0x02, 0x08, 0x01};
    (void)data;
    tkm_grpc_call_reply(call, resp, sizeof resp);
}

static void identity_probe(struct tkm_grpc_call *call, void *data)
{
    static const uint8_t resp[] = {0x0a, 0x02, 0x08, 0x01}; /* ready = {value: true} */
    (void)data;
    tkm_grpc_call_reply(call, resp, sizeof resp);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct tc *t = s->data;
    (void)signum;
    uv_close((uv_handle_t *)&t->sigint, NULL);
    uv_close((uv_handle_t *)&t->sigterm, NULL);
    tkm_grpc_server_close(t->srv, NULL, NULL);
}

int main(int argc, char **argv)
{
    static struct tc t; /* big (buffers); main's own, not shared */
    struct tkm_err err = {0};
    memset(&t, 0, sizeof t);
    if (argc != 3 || strcmp(argv[1], "--socket") != 0) {
        fprintf(stderr, "usage: e2e_csi_testcontroller --socket PATH\n");
        return 2;
    }
    struct tkm_grpc_server_opts o = {.socket_path = argv[2]};
    uv_loop_init(&t.loop);
    if (tkm_grpc_server_new(&t.loop, &o, &t.srv, &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/csi.v1.Controller/CreateVolume", create_volume, &t,
                                 &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/csi.v1.Controller/DeleteVolume", delete_volume, &t,
                                 &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/csi.v1.Controller/ControllerGetCapabilities", get_caps,
                                 &t, &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/csi.v1.Identity/GetPluginInfo", identity_info, &t, &err) <
            0 ||
        tkm_grpc_server_register(t.srv, "/csi.v1.Identity/GetPluginCapabilities", identity_caps, &t,
                                 &err) < 0 ||
        tkm_grpc_server_register(t.srv, "/csi.v1.Identity/Probe", identity_probe, &t, &err) < 0) {
        fprintf(stderr, "csi_testcontroller: %s\n", tkm_err_str(&err));
        return 1;
    }
    uv_signal_init(&t.loop, &t.sigint);
    uv_signal_init(&t.loop, &t.sigterm);
    t.sigint.data = t.sigterm.data = &t;
    uv_signal_start(&t.sigint, on_signal, SIGINT);
    uv_signal_start(&t.sigterm, on_signal, SIGTERM);
    printf("Serving %s\n", argv[2]);
    fflush(stdout);
    uv_run(&t.loop, UV_RUN_DEFAULT);
    uv_loop_close(&t.loop);
    return 0;
}
