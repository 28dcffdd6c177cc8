/*
 * driver.c - the tkm-csi driver object: its servers (CSI, plugin
 * registration), the agent client, releases that must reach the agent even
 * after a failure or a crash, and the orderly close. See csi.h, csi-int.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/log.h>

#include "csi-int.h"

void csi_reply(struct tkm_grpc_call *call, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        tkm_grpc_call_fail(call, TKM_GRPC_RESOURCE_EXHAUSTED, "tkm-csi: out of memory");
        return;
    }
    protobuf_c_message_pack(m, b);
    tkm_grpc_call_reply(call, b, n);
    free(b);
}

int csi_agent_code(int code)
{
    switch (code) {
    case TKM_GRPC_OK:
    case TKM_GRPC_INVALID_ARGUMENT:
    case TKM_GRPC_PERMISSION_DENIED:
    case TKM_GRPC_FAILED_PRECONDITION:
    case TKM_GRPC_RESOURCE_EXHAUSTED:
    case TKM_GRPC_UNAVAILABLE:
    case TKM_GRPC_DEADLINE_EXCEEDED:
    case TKM_GRPC_NOT_FOUND:
        return code;
    case TKM_GRPC_CANCELLED: /* our client is closing */
        return TKM_GRPC_UNAVAILABLE;
    default:
        return TKM_GRPC_INTERNAL;
    }
}

/* ---- releases ------------------------------------------------------------ */

struct rel {
    struct csi_driver *d;
    void (*done)(void *data, int released);
    void *data;
    int released;
    uv_fs_t fs;
    char vol[CSI_VOLUME_ID_MAX + 1];
    char marker[PATH_MAX];
};

static void rel_end(struct rel *r)
{
    struct csi_driver *d = r->d;
    if (r->done)
        r->done(r->data, r->released);
    free(r);
    d->n_pending--;
    csi_driver_maybe_done(d);
}

static void rel_unlinked(uv_fs_t *req)
{
    struct rel *r = req->data;
    if (req->result < 0 && req->result != UV_ENOENT)
        tkm_warn("removing %s: %s", r->marker, uv_strerror((int)req->result));
    uv_fs_req_cleanup(req);
    rel_end(r);
}

static void rel_answered(int code, const char *message, const void *resp, size_t len, void *data)
{
    struct rel *r = data;
    (void)resp;
    (void)len;
    if (code == TKM_GRPC_OK || code == TKM_GRPC_NOT_FOUND) {
        tkm_dbg("volume %s released in the agent (%s)", r->vol, tkm_grpc_code_name(code));
        r->released = 1;
        r->fs.data = r;
        if (uv_fs_unlink(r->d->loop, &r->fs, r->marker, rel_unlinked) == 0)
            return;
    } else {
        tkm_warn("volume %s: tkm-agent Release failed (%s: %s); retrying later", r->vol,
                 tkm_grpc_code_name(code), message);
        csi_retry_kick(r->d);
    }
    rel_end(r);
}

/* The proto form of sc into m; names borrowed from sc (names: room for all). */
static void scratch_msg(Tkm__Agent__V1__ScratchCount *m, char **names, const struct csi_scratch *sc)
{
    m->triton_kernels = sc->triton_kernels;
    m->inductor_fxgraph = sc->inductor_fxgraph;
    m->inductor_aotautograd = sc->inductor_aotautograd;
    m->vllm_entries = sc->vllm_entries;
    m->files = sc->files;
    m->bytes = sc->bytes;
    for (size_t i = 0; i < sc->n_names; i++)
        names[i] = (char *)sc->names[i];
    m->n_kernel_names = sc->n_names;
    m->kernel_names = names;
    m->truncated = sc->truncated;
}

void csi_release_volume(struct csi_driver *d, const char *vol, const struct csi_scratch *sc,
                        void (*done)(void *data, int released), void *data)
{
    Tkm__Agent__V1__ReleaseRequest req = TKM__AGENT__V1__RELEASE_REQUEST__INIT;
    Tkm__Agent__V1__ScratchCount scm = TKM__AGENT__V1__SCRATCH_COUNT__INIT;
    char *names[CSI_SCRATCH_NAMES_MAX];
    struct tkm_err err = {0};
    /* volume id + the counts + 32 names of 128 bytes, with their tags */
    uint8_t buf[CSI_VOLUME_ID_MAX + 128 + CSI_SCRATCH_NAMES_MAX * (CSI_SCRATCH_NAME_MAX + 3)];
    struct rel *r = calloc(1, sizeof(*r));
    if (!r) {
        if (done)
            done(data, 0);
        csi_retry_kick(d);
        return;
    }
    r->d = d;
    r->done = done;
    r->data = data;
    snprintf(r->vol, sizeof(r->vol), "%s", vol);
    snprintf(r->marker, sizeof(r->marker), "%s/.release/%s", d->cfg->state_dir, vol);
    d->n_pending++;
    req.volume_id = r->vol;
    if (sc) {
        scratch_msg(&scm, names, sc);
        req.scratch = &scm;
        if (tkm__agent__v1__release_request__get_packed_size(&req) > sizeof(buf))
            req.scratch = NULL; /* cannot happen with checked names; never overflow */
    }
    size_t n = tkm__agent__v1__release_request__pack(&req, buf);
    if (!d->agent)
        tkm_err_set(&err, -ESHUTDOWN, "tkm-csi is shutting down");
    else if (tkm_grpc_client_call(d->agent, "/tkm.agent.v1.Agent/Release", buf, n,
                                  d->cfg->agent_timeout_ms, rel_answered, r, &err) == 0)
        return;
    tkm_warn("volume %s: Release not sent: %s", vol, tkm_err_str(&err));
    csi_retry_kick(d);
    rel_end(r);
}

struct round {
    struct csi_driver *d;
    uv_fs_t scan;
    size_t left;
};

static void round_item_done(void *data, int released)
{
    struct round *rd = data;
    (void)released;
    if (--rd->left == 0) {
        struct csi_driver *d = rd->d;
        free(rd);
        d->retry_running = 0;
        d->n_pending--;
        csi_driver_maybe_done(d); /* may free d */
    }
}

static void round_scanned(uv_fs_t *req)
{
    struct round *rd = req->data;
    struct csi_driver *d = rd->d;
    uv_dirent_t ent;
    size_t found = 0;
    rd->left = 1; /* held while starting the items */
    if (req->result > 0 && !d->closing)
        while (uv_fs_scandir_next(req, &ent) != UV_EOF)
            if (ent.type != UV_DIRENT_DIR && csi_check_volume_id(ent.name, NULL) == 0) {
                rd->left++;
                found++;
                csi_release_volume(d, ent.name, NULL, round_item_done, rd);
            }
    uv_fs_req_cleanup(req);
    if (found == 0 && !d->closing)
        uv_timer_stop(&d->retry); /* nothing pending: csi_retry_kick() restarts it */
    round_item_done(rd, 0);
}

static void retry_tick(uv_timer_t *t)
{
    struct csi_driver *d = t->data;
    char dir[PATH_MAX];
    struct round *rd;
    if (d->retry_running || d->closing)
        return;
    if (!(rd = calloc(1, sizeof(*rd))))
        return;
    rd->d = d;
    rd->scan.data = rd;
    snprintf(dir, sizeof(dir), "%s/.release", d->cfg->state_dir);
    if (uv_fs_scandir(d->loop, &rd->scan, dir, 0, round_scanned) < 0) {
        free(rd);
        return;
    }
    d->retry_running = 1;
    d->n_pending++;
}

void csi_retry_kick(struct csi_driver *d)
{
    if (!d->closing && !uv_is_active((uv_handle_t *)&d->retry))
        uv_timer_start(&d->retry, retry_tick, d->cfg->retry_release_ms, d->cfg->retry_release_ms);
}

/* ---- lifecycle ------------------------------------------------------------ */

int csi_driver_new(uv_loop_t *loop, const struct csi_config *cfg, struct csi_driver **out,
                   struct tkm_err *err)
{
    struct tkm_grpc_server_opts so = {.socket_path = cfg->endpoint,
                                      .max_connections = cfg->socket_max_conns,
                                      .idle_timeout_ms = cfg->socket_idle_ms};
    struct csi_driver *d = NULL;
    size_t removed = 0;
    int rc;
    *out = NULL;
    if ((rc = csi_check_option_path(cfg->state_dir, "--state-dir", err)) < 0)
        return rc;
    if ((rc = csi_recover(cfg->state_dir, &removed, err)) < 0) {
        tkm_err_prefix(err, "recovering %s", cfg->state_dir);
        return rc;
    }
    if (removed)
        tkm_info("recovery: removed %zu stale volume dir(s) without a mount under %s", removed,
                 cfg->state_dir);
    if (!(d = calloc(1, sizeof(*d))))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    d->loop = loop;
    d->cfg = cfg;
    for (size_t i = 0; i < cfg->n_target_roots; i++) {
        char *r = realpath(cfg->target_roots[i], NULL);
        d->real_roots[i] = r ? r : strdup(cfg->target_roots[i]);
        if (!d->real_roots[i]) {
            while (i > 0)
                free(d->real_roots[--i]);
            free(d);
            return tkm_err_set(err, -ENOMEM, "out of memory");
        }
        if (strcmp(d->real_roots[i], cfg->target_roots[i]) != 0)
            tkm_info("target root %s is %s", cfg->target_roots[i], d->real_roots[i]);
    }
    uv_timer_init(loop, &d->retry);
    d->retry.data = d;
    d->handles_open = 1;
    if ((rc = tkm_grpc_client_new(loop, cfg->agent_socket, &d->agent, err)) < 0)
        goto fail;
    d->handles_open++;
    if ((rc = tkm_grpc_server_new(loop, &so, &d->srv, err)) < 0)
        goto fail;
    d->handles_open++;
    if (cfg->registration_dir && cfg->registration_dir[0]) {
        struct tkm_grpc_server_opts ro = so;
        ro.socket_path = d->reg_path;
        int n = snprintf(d->reg_path, sizeof(d->reg_path), "%s/" CSI_DRIVER_NAME "-reg.sock",
                         cfg->registration_dir);
        if (n < 0 || (size_t)n >= sizeof(d->reg_path)) {
            rc = tkm_err_set(err, -ENAMETOOLONG, "--registration-dir %s: socket path too long",
                             cfg->registration_dir);
            goto fail;
        }
        if ((rc = tkm_grpc_server_new(loop, &ro, &d->reg, err)) < 0)
            goto fail;
        d->handles_open++;
    }
    if ((rc = csi_identity_register(d, err)) < 0 || (rc = csi_node_register(d, err)) < 0)
        goto fail;
    /* Releases a crash or an unreachable agent left behind: try now. */
    retry_tick(&d->retry);
    *out = d;
    return 0;
fail:
    csi_driver_close(d, NULL, NULL);
    return rc;
}

void csi_driver_maybe_done(struct csi_driver *d)
{
    if (!d->closing || d->handles_open || d->n_ops || d->n_pending)
        return;
    while (d->locks) {
        struct csi_lock *l = d->locks;
        d->locks = l->next;
        free(l->vol);
        free(l);
    }
    void (*cb)(void *) = d->closed_cb;
    void *data = d->closed_data;
    for (size_t i = 0; i < CSI_MAX_TARGET_ROOTS; i++)
        free(d->real_roots[i]);
    free(d);
    if (cb)
        cb(data);
}

static void handle_closed(void *data)
{
    struct csi_driver *d = data;
    d->handles_open--;
    csi_driver_maybe_done(d);
}

static void timer_closed(uv_handle_t *h)
{
    handle_closed(h->data);
}

void csi_driver_close(struct csi_driver *d, void (*closed_cb)(void *data), void *data)
{
    if (!d)
        return;
    d->closing = 1;
    d->closed_cb = closed_cb;
    d->closed_data = data;
    uv_close((uv_handle_t *)&d->retry, timer_closed);
    if (d->srv)
        tkm_grpc_server_close(d->srv, handle_closed, d);
    if (d->reg)
        tkm_grpc_server_close(d->reg, handle_closed, d);
    if (d->agent)
        tkm_grpc_client_close(d->agent, handle_closed, d);
    d->srv = d->reg = NULL;
    d->agent = NULL;
}
