/*
 * rpc.c - tkm-agent's socket for the CSI driver: decoding, validation and the
 * call handles on top of lib/grpc (agent/rpc.h, docs/agent-socket.md).
 */
#include "rpc.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/buf.h>
#include <tkm/log.h>
#include <tkm/util.h>

#include "agent.pb-c.h"

#define M_MATERIALIZE "/" AGENT_RPC_SERVICE "/Materialize"
#define M_RELEASE     "/" AGENT_RPC_SERVICE "/Release"
#define M_STATUS      "/" AGENT_RPC_SERVICE "/Status"
#define CSI_PREFIX    "csi.storage.k8s.io/"

enum method { METHOD_MATERIALIZE, METHOD_RELEASE, METHOD_STATUS };

static const char *const method_names[] = {"Materialize", "Release", "Status"};

/* The method's name (static). Bounds-checked: aarch64 GCC 12 at -O2 otherwise warns
 * (-Warray-bounds) that an enum method may index past the table. */
static const char *method_name(enum method m)
{
    return (size_t)m < sizeof method_names / sizeof method_names[0] ? method_names[m] : "?";
}

struct agent_rpc_server {
    struct tkm_grpc_server *grpc;
    const struct agent_rpc_ops *ops;
    void *data;
    void (*closed_cb)(void *data);
    void *closed_data;
};

struct agent_rpc_call {
    struct tkm_grpc_call *gc;
    enum method method;
    const struct agent_rpc_ops *ops; /* for the cancel callback */
    void *data;
    struct agent_materialize_req mat;
    struct agent_release_req rel;
};

/* ---- validation ------------------------------------------------------------------------ */

static int pod_uid_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > AGENT_RPC_MAX_POD_UID)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

/* Printable ASCII without spaces (and without '/' and '\\' when no_slash). */
static int printable(const char *s, size_t max, int no_slash)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || (no_slash && (c == '/' || c == '\\')))
            return 0;
    }
    return 1;
}

static int check_volume_id(const char *v, struct tkm_err *err)
{
    if (!*v)
        return tkm_err_set(err, -EINVAL, "volume_id is missing");
    if (!printable(v, AGENT_RPC_MAX_VOLUME_ID, 1) || strcmp(v, ".") == 0 || strcmp(v, "..") == 0)
        return tkm_err_set(err, -EINVAL,
                           "volume_id \"%.*s\" is not valid: 1 to %d printable ASCII characters "
                           "without spaces, '/' or '\\', and not \".\" or \"..\"",
                           200, v, AGENT_RPC_MAX_VOLUME_ID);
    return 0;
}

static int check_pod(const Tkm__Agent__V1__MaterializeRequest *m, struct tkm_err *err)
{
    static const char hint[] = " (csi.storage.k8s.io/pod.*: the CSIDriver object must set "
                               "podInfoOnMount: true)";
    if (!*m->pod_namespace)
        return tkm_err_set(err, -EINVAL, "pod_namespace is missing%s", hint);
    if (!tkm_dns1123_label(m->pod_namespace, strlen(m->pod_namespace)))
        return tkm_err_set(err, -EINVAL,
                           "pod_namespace \"%.*s\" is not a namespace name (a DNS-1123 label: "
                           "at most 63 characters a-z, 0-9, '-')",
                           200, m->pod_namespace);
    if (!*m->pod_name)
        return tkm_err_set(err, -EINVAL, "pod_name is missing%s", hint);
    if (!tkm_dns1123_subdomain(m->pod_name, strlen(m->pod_name)))
        return tkm_err_set(err, -EINVAL,
                           "pod_name \"%.*s\" is not a pod name (a DNS-1123 subdomain: at most "
                           "253 characters a-z, 0-9, '-', '.')",
                           200, m->pod_name);
    if (!*m->pod_uid)
        return tkm_err_set(err, -EINVAL, "pod_uid is missing%s", hint);
    if (!pod_uid_ok(m->pod_uid))
        return tkm_err_set(err, -EINVAL,
                           "pod_uid \"%.*s\" is not a pod uid (1 to %d characters A-Z, a-z, "
                           "0-9, '-')",
                           200, m->pod_uid, AGENT_RPC_MAX_POD_UID);
    return check_volume_id(m->volume_id, err);
}

/* A csi.storage.k8s.io/ attribute: ignored, but the pod's identity must agree. */
static int check_csi_attr(const Tkm__Agent__V1__MaterializeRequest *m, const char *k, const char *v,
                          struct tkm_err *err)
{
    const char *sub = k + strlen(CSI_PREFIX);
    const char *want = strcmp(sub, "pod.namespace") == 0 ? m->pod_namespace
                       : strcmp(sub, "pod.name") == 0    ? m->pod_name
                       : strcmp(sub, "pod.uid") == 0     ? m->pod_uid
                                                         : NULL;
    if (want && strcmp(want, v) != 0)
        return tkm_err_set(err, -EINVAL,
                           "volume attribute %s is \"%.*s\" but the request is for \"%.*s\"", k,
                           200, v, 200, want);
    return 0;
}

static int check_mount_path(const char *v, struct tkm_err *err)
{
    size_t n = strlen(v);
    if (n == 0 || v[0] != '/')
        return tkm_err_set(err, -EINVAL,
                           "volume attribute mountPath \"%.*s\" is not an absolute path", 200, v);
    if (n > AGENT_RPC_MAX_MOUNT_PATH)
        return tkm_err_set(err, -EINVAL,
                           "volume attribute mountPath is %zu bytes long (at most %d)", n,
                           AGENT_RPC_MAX_MOUNT_PATH);
    for (const char *p = v; (p = strstr(p, "..")) != NULL; p += 2)
        if (p[-1] == '/' && (p[2] == '/' || p[2] == '\0'))
            return tkm_err_set(
                err, -EINVAL, "volume attribute mountPath \"%.*s\" has a \"..\" component", 200, v);
    return 0;
}

/* One known attribute into out. */
static int take_attr(const char *k, const char *v, struct agent_materialize_req *out,
                     struct tkm_err *err)
{
    char **dst = NULL;
    if (strcmp(k, "cacheName") == 0) {
        if (!tkm_dns1123_subdomain(v, strlen(v)))
            return tkm_err_set(err, -EINVAL,
                               "volume attribute cacheName \"%.*s\" is not a cache name (a "
                               "DNS-1123 subdomain: at most 253 characters a-z, 0-9, '-', '.')",
                               200, v);
        dst = &out->cache_name;
    } else if (strcmp(k, "cacheImage") == 0) {
        if (!printable(v, AGENT_RPC_MAX_IMAGE, 0))
            return tkm_err_set(err, -EINVAL,
                               "volume attribute cacheImage \"%.*s\" is not an image reference "
                               "(1 to %d printable ASCII characters without spaces)",
                               200, v, AGENT_RPC_MAX_IMAGE);
        dst = &out->cache_image;
    } else if (strcmp(k, "readOnly") == 0) {
        if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
            return tkm_err_set(err, -EINVAL,
                               "volume attribute readOnly is \"%.*s\": it must be \"true\" or "
                               "\"false\"",
                               200, v);
        out->read_only = v[0] == 't' ? AGENT_READ_ONLY_TRUE : AGENT_READ_ONLY_FALSE;
        return 0;
    } else if (strcmp(k, "mountPath") == 0) {
        if (check_mount_path(v, err) < 0)
            return -EINVAL;
        dst = &out->mount_path;
    } else {
        return tkm_err_set(err, -EINVAL,
                           "unknown volume attribute \"%.*s\" (known: cacheName, cacheImage, "
                           "readOnly, mountPath; csi.storage.k8s.io/... are ignored)",
                           200, k);
    }
    return (*dst = strdup(v)) ? 0 : -ENOMEM;
}

static int check_attrs(const Tkm__Agent__V1__MaterializeRequest *m,
                       struct agent_materialize_req *out, struct tkm_err *err)
{
    int rc;
    if (m->n_volume_attributes > AGENT_RPC_MAX_ATTRS)
        return tkm_err_set(err, -EINVAL, "%zu volume attributes (at most %d)",
                           m->n_volume_attributes, AGENT_RPC_MAX_ATTRS);
    for (size_t i = 0; i < m->n_volume_attributes; i++) {
        const char *k = m->volume_attributes[i]->key, *v = m->volume_attributes[i]->value;
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->volume_attributes[j]->key, k) == 0)
                return tkm_err_set(err, -EINVAL, "volume attribute \"%.*s\" is given twice", 200,
                                   k);
        if (strncmp(k, CSI_PREFIX, strlen(CSI_PREFIX)) == 0)
            rc = check_csi_attr(m, k, v, err);
        else
            rc = take_attr(k, v, out, err);
        if (rc < 0)
            return rc;
    }
    if (out->cache_name && out->cache_image)
        return tkm_err_set(err, -EINVAL,
                           "volume attributes cacheName and cacheImage are both set: give "
                           "exactly one");
    if (!out->cache_name && !out->cache_image)
        return tkm_err_set(err, -EINVAL,
                           "no cache named: set the volume attribute cacheName (a "
                           "TritonKernelCache in the pod's namespace or a "
                           "TritonKernelCacheCluster) or cacheImage");
    return 0;
}

/* ---- NUL bytes -------------------------------------------------------------------------- */
/* protobuf-c hands out strings NUL-terminated, so a NUL inside one would
 * silently cut it: look at the wire bytes of every string field instead. */

static size_t wire_varint(const uint8_t *p, size_t n, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n && i < 10; i++) {
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80))
            return i + 1;
    }
    return 0;
}

/* names[f]: the string field number f at the top level (NULL: not a
 * string); map_field: the map<string,string> field (0: none); in_map: p is
 * one map entry. Malformed input returns 0: the unpack already judged it. */
static int wire_nul(const uint8_t *p, size_t n, const char *const *names, size_t n_names,
                    uint32_t map_field, int in_map, struct tkm_err *err)
{
    const uint8_t *key = NULL;
    size_t key_len = 0;
    while (n > 0) {
        uint64_t tag, len = 0;
        size_t k = wire_varint(p, n, &tag);
        uint32_t field = (uint32_t)(tag >> 3);
        if (!k)
            return 0;
        p += k, n -= k;
        if ((tag & 7) == 0) {
            if (!(k = wire_varint(p, n, &len)))
                return 0;
            len = 0;
        } else if ((tag & 7) == 1 || (tag & 7) == 5) {
            k = 0, len = (tag & 7) == 1 ? 8 : 4;
        } else if ((tag & 7) == 2) {
            if (!(k = wire_varint(p, n, &len)))
                return 0;
        } else {
            return 0;
        }
        p += k, n -= k;
        if (len > n)
            return 0;
        if ((tag & 7) == 2 && in_map && field == 1) {
            key = p, key_len = (size_t)len;
            if (memchr(p, 0, len))
                return tkm_err_set(err, -EINVAL, "a volume attribute key contains a NUL byte");
        } else if ((tag & 7) == 2 && in_map && field == 2 && memchr(p, 0, len)) {
            if (!key) /* the value came before its key */
                return tkm_err_set(err, -EINVAL, "a volume attribute value contains a NUL byte");
            return tkm_err_set(err, -EINVAL, "volume attribute \"%.*s\" contains a NUL byte",
                               (int)(key_len > 200 ? 200 : key_len), (const char *)key);
        } else if ((tag & 7) == 2 && !in_map && field == map_field) {
            if (wire_nul(p, (size_t)len, names, n_names, map_field, 1, err) < 0)
                return -EINVAL;
        } else if ((tag & 7) == 2 && !in_map && field < n_names && names[field] &&
                   memchr(p, 0, len)) {
            return tkm_err_set(err, -EINVAL, "%s contains a NUL byte", names[field]);
        }
        p += len, n -= len;
    }
    return 0;
}

/* ---- decoders --------------------------------------------------------------------------- */

void agent_materialize_req_release(struct agent_materialize_req *req)
{
    if (!req)
        return;
    free(req->pod_ns);
    free(req->pod_name);
    free(req->pod_uid);
    free(req->volume_id);
    free(req->cache_name);
    free(req->cache_image);
    free(req->mount_path);
    memset(req, 0, sizeof *req);
}

int agent_materialize_req_decode(const void *bytes, size_t len, struct agent_materialize_req *out,
                                 struct tkm_err *err)
{
    static const char *const names[] = {NULL, "pod_namespace", "pod_name", "pod_uid", "volume_id"};
    Tkm__Agent__V1__MaterializeRequest *m = NULL;
    int rc = -EINVAL;
    memset(out, 0, sizeof *out);
    m = tkm__agent__v1__materialize_request__unpack(NULL, len, bytes);
    if (!m) {
        tkm_err_set(err, -EINVAL, "cannot decode the MaterializeRequest (%zu bytes)", len);
        goto out;
    }
    if ((rc = wire_nul(bytes, len, names, 5, 5, 0, err)) < 0 || (rc = check_pod(m, err)) < 0 ||
        (rc = check_attrs(m, out, err)) < 0)
        goto out;
    rc = -ENOMEM;
    if (!(out->pod_ns = strdup(m->pod_namespace)) || !(out->pod_name = strdup(m->pod_name)) ||
        !(out->pod_uid = strdup(m->pod_uid)) || !(out->volume_id = strdup(m->volume_id)))
        goto out;
    rc = 0;
out:
    if (rc < 0)
        agent_materialize_req_release(out);
    if (rc == -ENOMEM)
        tkm_err_set(err, rc, "out of memory decoding the MaterializeRequest");
    if (m)
        tkm__agent__v1__materialize_request__free_unpacked(m, NULL);
    return rc;
}

void agent_release_req_release(struct agent_release_req *req)
{
    if (!req)
        return;
    free(req->volume_id);
    memset(req, 0, sizeof *req);
}

static void scratch_take(struct agent_scratch *o, const Tkm__Agent__V1__ScratchCount *c)
{
    if (!c)
        return;
    o->present = 1;
    o->triton_kernels = c->triton_kernels;
    o->inductor_fxgraph = c->inductor_fxgraph;
    o->inductor_aotautograd = c->inductor_aotautograd;
    o->vllm_entries = c->vllm_entries;
    o->files = c->files;
    o->bytes = c->bytes;
    o->truncated = c->truncated;
    for (size_t i = 0; i < c->n_kernel_names; i++) {
        const char *k = c->kernel_names[i];
        if (o->n_names == AGENT_SCRATCH_NAMES || !k || !tkm_kernel_name_ok(k, strlen(k))) {
            o->truncated = 1;
            continue;
        }
        snprintf(o->names[o->n_names++], sizeof o->names[0], "%s", c->kernel_names[i]);
    }
}

int agent_release_req_decode(const void *bytes, size_t len, struct agent_release_req *out,
                             struct tkm_err *err)
{
    static const char *const names[] = {NULL, "volume_id"};
    Tkm__Agent__V1__ReleaseRequest *m = NULL;
    int rc = -EINVAL;
    memset(out, 0, sizeof *out);
    m = tkm__agent__v1__release_request__unpack(NULL, len, bytes);
    if (!m) {
        tkm_err_set(err, -EINVAL, "cannot decode the ReleaseRequest (%zu bytes)", len);
        goto out;
    }
    if ((rc = wire_nul(bytes, len, names, 2, 0, 0, err)) < 0 ||
        (rc = check_volume_id(m->volume_id, err)) < 0)
        goto out;
    rc = (out->volume_id = strdup(m->volume_id)) ? 0 : -ENOMEM;
    if (rc == -ENOMEM)
        tkm_err_set(err, rc, "out of memory decoding the ReleaseRequest");
    else
        scratch_take(&out->scratch, m->scratch);
out:
    if (m)
        tkm__agent__v1__release_request__free_unpacked(m, NULL);
    return rc;
}

/* ---- calls ------------------------------------------------------------------------------ */

static void call_free(struct agent_rpc_call *call)
{
    agent_materialize_req_release(&call->mat);
    agent_release_req_release(&call->rel);
    free(call);
}

static const char *call_volume(const struct agent_rpc_call *call)
{
    if (call->method == METHOD_MATERIALIZE)
        return call->mat.volume_id;
    if (call->method == METHOD_RELEASE)
        return call->rel.volume_id;
    return NULL;
}

/* Logs the outcome and frees call. rc: tkm_grpc_call_reply/_fail's. */
static int call_done(struct agent_rpc_call *call, int rc, int code, const char *msg)
{
    const char *vol = call_volume(call);
    if (rc == -ECANCELED)
        tkm_info("agent-rpc: %s%s%s: answered after the call was cancelled (dropped)",
                 method_name(call->method), vol ? " volume " : "", vol ? vol : "");
    else if (call->method == METHOD_STATUS && code == TKM_GRPC_OK)
        tkm_dbg("agent-rpc: Status: OK");
    else
        tkm_info("agent-rpc: %s%s%s: %s%s%s", method_name(call->method), vol ? " volume " : "",
                 vol ? vol : "", tkm_grpc_code_name(code), msg && *msg ? ": " : "", msg ? msg : "");
    call_free(call);
    return rc;
}

int agent_rpc_fail(struct agent_rpc_call *call, int code, const char *message)
{
    int rc = tkm_grpc_call_fail(call->gc, code, message);
    return call_done(call, rc, code == TKM_GRPC_OK ? TKM_GRPC_UNKNOWN : code, message);
}

/* Replies with msg packed, or fails the call when its method is another. */
static int call_reply(struct agent_rpc_call *call, enum method want, const ProtobufCMessage *msg)
{
    uint8_t *b = NULL;
    size_t n;
    int rc;
    if (call->method != want) {
        tkm_err("agent-rpc: bug: a %s reply to a %s call", method_name(want),
                method_name(call->method));
        agent_rpc_fail(call, TKM_GRPC_INTERNAL, "tkm-agent bug: reply of the wrong type");
        return -EINVAL;
    }
    n = protobuf_c_message_get_packed_size(msg);
    if (!(b = malloc(n ? n : 1))) {
        agent_rpc_fail(call, TKM_GRPC_INTERNAL, "tkm-agent: out of memory");
        return -ENOMEM;
    }
    protobuf_c_message_pack(msg, b);
    rc = tkm_grpc_call_reply(call->gc, b, n);
    free(b);
    return call_done(call, rc, rc == -E2BIG ? TKM_GRPC_RESOURCE_EXHAUSTED : TKM_GRPC_OK, NULL);
}

static char *s_or_empty(const char *s)
{
    return (char *)(s ? s : "");
}

int agent_rpc_reply_materialize(struct agent_rpc_call *call,
                                const struct agent_materialize_result *res)
{
    Tkm__Agent__V1__MaterializeResponse r = TKM__AGENT__V1__MATERIALIZE_RESPONSE__INIT;
    r.store_path = s_or_empty(res->store_path);
    r.target_arch = s_or_empty(res->target_arch);
    r.mount_path = s_or_empty(res->mount_path);
    r.cache_namespace = s_or_empty(res->cache_namespace);
    r.cache_name = s_or_empty(res->cache_name);
    r.digest = s_or_empty(res->digest);
    /* store_paths[0] == store_path; parts {"triton"} when not given */
    const char *one[1] = {res->store_path}, *triton[1] = {"triton"};
    if (res->n_store_paths) {
        r.store_paths = (char **)res->store_paths;
        r.n_store_paths = res->n_store_paths;
    } else if (res->store_path && res->store_path[0]) {
        r.store_paths = (char **)one;
        r.n_store_paths = 1;
    }
    r.empty = res->empty ? 1 : 0;
    r.empty_reason = s_or_empty(res->empty_reason);
    r.empty_message = s_or_empty(res->empty_message);
    r.parts = (char **)(res->n_parts ? res->parts : triton);
    r.n_parts = res->n_parts ? res->n_parts : 1;
    return call_reply(call, METHOD_MATERIALIZE, &r.base);
}

int agent_rpc_reply_release(struct agent_rpc_call *call, int released)
{
    Tkm__Agent__V1__ReleaseResponse r = TKM__AGENT__V1__RELEASE_RESPONSE__INIT;
    if (!released && call->method == METHOD_RELEASE) {
        char msg[256];
        snprintf(msg, sizeof msg, "volume \"%s\" is not known to this agent (nothing to release)",
                 call->rel.volume_id);
        return agent_rpc_fail(call, TKM_GRPC_NOT_FOUND, msg);
    }
    r.released = 1;
    return call_reply(call, METHOD_RELEASE, &r.base);
}

int agent_rpc_reply_status(struct agent_rpc_call *call, const struct agent_status_result *res)
{
    Tkm__Agent__V1__StatusResponse r = TKM__AGENT__V1__STATUS_RESPONSE__INIT;
    r.ready = res->ready ? 1 : 0;
    r.message = s_or_empty(res->message);
    r.node_name = s_or_empty(res->node_name);
    r.version = s_or_empty(res->version ? res->version : TKM_VERSION);
    return call_reply(call, METHOD_STATUS, &r.base);
}

/* ---- handlers --------------------------------------------------------------------------- */

static void on_cancel(struct tkm_grpc_call *gc, void *data)
{
    struct agent_rpc_call *call = data;
    const char *vol = call_volume(call);
    (void)gc;
    tkm_info("agent-rpc: %s%s%s: cancelled by the client or the server's shutdown",
             method_name(call->method), vol ? " volume " : "", vol ? vol : "");
    if (call->ops->cancel)
        call->ops->cancel(call, call->data);
}

/* A handle for gc, or NULL after failing gc (out of memory). */
static struct agent_rpc_call *call_new(struct tkm_grpc_call *gc, struct agent_rpc_server *srv,
                                       enum method m)
{
    struct agent_rpc_call *call = calloc(1, sizeof *call);
    if (!call) {
        tkm_grpc_call_fail(gc, TKM_GRPC_RESOURCE_EXHAUSTED, "tkm-agent: out of memory");
        return NULL;
    }
    call->gc = gc;
    call->method = m;
    call->ops = srv->ops;
    call->data = srv->data;
    return call;
}

static void peer_log(const struct agent_rpc_call *call, const char *what)
{
    const struct tkm_grpc_peer *p = tkm_grpc_call_peer(call->gc);
    tkm_info("agent-rpc: %s from pid %d uid %u gid %u: %s", method_name(call->method), (int)p->pid,
             (unsigned)p->uid, (unsigned)p->gid, what);
}

/* A handle for gc with its request decoded and the cancel callback set, or
 * NULL once the call is answered (out of memory, or a request refused). */
static struct agent_rpc_call *call_start(struct tkm_grpc_call *gc, struct agent_rpc_server *srv,
                                         enum method m)
{
    struct agent_rpc_call *call = call_new(gc, srv, m);
    struct tkm_err err = {0};
    Tkm__Agent__V1__StatusRequest *sr;
    size_t n;
    const void *b;
    int rc = 0;
    if (!call)
        return NULL;
    b = tkm_grpc_call_request(gc, &n);
    if (m == METHOD_MATERIALIZE)
        rc = agent_materialize_req_decode(b, n, &call->mat, &err);
    else if (m == METHOD_RELEASE)
        rc = agent_release_req_decode(b, n, &call->rel, &err);
    else if (!(sr = tkm__agent__v1__status_request__unpack(NULL, n, b)))
        rc = tkm_err_set(&err, -EINVAL, "cannot decode the StatusRequest");
    else
        tkm__agent__v1__status_request__free_unpacked(sr, NULL);
    if (rc < 0) {
        peer_log(call, "refused");
        agent_rpc_fail(call, rc == -EINVAL ? TKM_GRPC_INVALID_ARGUMENT : TKM_GRPC_INTERNAL,
                       tkm_err_str(&err));
        return NULL;
    }
    call->mat.peer = call->rel.peer = *tkm_grpc_call_peer(gc); /* its method's is read */
    tkm_grpc_call_on_cancel(gc, on_cancel, call);
    return call;
}

static void handle_materialize(struct tkm_grpc_call *gc, void *data)
{
    struct agent_rpc_server *srv = data;
    struct agent_rpc_call *call = call_start(gc, srv, METHOD_MATERIALIZE);
    struct tkm_buf line = TKM_BUF_INIT(2048);
    if (!call)
        return;
    tkm_buf_printf(&line, "pod %s/%s (%s) volume %s %s %s readOnly=%s mountPath=%s",
                   call->mat.pod_ns, call->mat.pod_name, call->mat.pod_uid, call->mat.volume_id,
                   call->mat.cache_name ? "cacheName" : "cacheImage",
                   call->mat.cache_name ? call->mat.cache_name : call->mat.cache_image,
                   call->mat.read_only == AGENT_READ_ONLY_TRUE    ? "true"
                   : call->mat.read_only == AGENT_READ_ONLY_FALSE ? "false"
                                                                  : "(default)",
                   call->mat.mount_path ? call->mat.mount_path : "(none)");
    peer_log(call, line.data);
    tkm_buf_release(&line);
    srv->ops->materialize(call, &call->mat, srv->data);
}

static void handle_release(struct tkm_grpc_call *gc, void *data)
{
    struct agent_rpc_server *srv = data;
    struct agent_rpc_call *call = call_start(gc, srv, METHOD_RELEASE);
    char what[AGENT_RPC_MAX_VOLUME_ID + 16];
    if (!call)
        return;
    snprintf(what, sizeof what, "volume %s", call->rel.volume_id);
    peer_log(call, what);
    srv->ops->release(call, &call->rel, srv->data);
}

static void handle_status(struct tkm_grpc_call *gc, void *data)
{
    struct agent_rpc_server *srv = data;
    struct agent_rpc_call *call = call_start(gc, srv, METHOD_STATUS);
    if (call)
        srv->ops->status(call, srv->data);
}

/* ---- server ----------------------------------------------------------------------------- */

/* An existing socket directory must be ours and closed to everyone else; we
 * never chmod a directory someone else prepared (it may be /tmp or /). */
static int check_dir(const char *path, struct tkm_err *err)
{
    char dir[4096];
    struct stat st;
    char *slash;
    snprintf(dir, sizeof dir, "%s", path);
    slash = strrchr(dir, '/');
    if (!slash)
        return tkm_err_set(err, -EINVAL, "agent socket %s: not an absolute path", path);
    *(slash == dir ? slash + 1 : slash) = '\0';
    if (stat(dir, &st) < 0)
        return errno == ENOENT ? 0
                               : tkm_err_set(err, -errno, "agent socket directory %s: %s", dir,
                                             strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return tkm_err_set(err, -ENOTDIR, "agent socket directory %s is not a directory", dir);
    if (st.st_uid != geteuid())
        return tkm_err_set(err, -EPERM,
                           "agent socket directory %s belongs to uid %u, not to us (uid %u): "
                           "use a directory of tkm-agent's own",
                           dir, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return tkm_err_set(err, -EPERM,
                           "agent socket directory %s has mode %04o: it must be 0700 (only "
                           "tkm-agent may enter it); chmod 0700 it or remove it",
                           dir, (unsigned)(st.st_mode & 07777));
    return 0;
}

int agent_rpc_server_new(uv_loop_t *loop, const char *socket_path, const struct agent_rpc_ops *ops,
                         void *data, const struct agent_rpc_opts *opts,
                         struct agent_rpc_server **out, struct tkm_err *err)
{
    static const struct {
        const char *m;
        tkm_grpc_handler h;
    } methods[] = {{M_MATERIALIZE, handle_materialize},
                   {M_RELEASE, handle_release},
                   {M_STATUS, handle_status}};
    struct tkm_grpc_server_opts go = {.socket_path = socket_path, .socket_mode = 0600};
    struct agent_rpc_server *srv = NULL;
    int rc;
    *out = NULL;
    if (!ops || !ops->materialize || !ops->release || !ops->status)
        return tkm_err_set(err, -EINVAL,
                           "agent socket: materialize, release and status ops "
                           "are required");
    if (!socket_path || socket_path[0] != '/')
        return tkm_err_set(err, -EINVAL, "agent socket %s: not an absolute path",
                           socket_path ? socket_path : "(null)");
    if ((rc = check_dir(socket_path, err)) < 0)
        return rc;
    if (!(srv = calloc(1, sizeof *srv)))
        return tkm_err_set(err, -ENOMEM, "agent socket %s: out of memory", socket_path);
    srv->ops = ops;
    srv->data = data;
    if (opts) {
        go.allowed_uids = opts->allowed_uids;
        go.n_allowed_uids = opts->n_allowed_uids;
        go.max_connections = opts->max_connections;
        go.idle_timeout_ms = opts->idle_timeout_ms;
    }
    if ((rc = tkm_grpc_server_new(loop, &go, &srv->grpc, err)) < 0) {
        free(srv);
        return rc;
    }
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if ((rc = tkm_grpc_server_register(srv->grpc, methods[i].m, methods[i].h, srv, err)) < 0) {
            agent_rpc_server_close(srv, NULL, NULL);
            return rc;
        }
    tkm_info("agent-rpc: serving %s on %s (mode 0600)", AGENT_RPC_SERVICE, socket_path);
    *out = srv;
    return 0;
}

static void server_closed(void *data)
{
    struct agent_rpc_server *srv = data;
    if (srv->closed_cb)
        srv->closed_cb(srv->closed_data);
    free(srv);
}

void agent_rpc_server_close(struct agent_rpc_server *srv, void (*closed_cb)(void *data), void *data)
{
    if (!srv)
        return;
    srv->closed_cb = closed_cb;
    srv->closed_data = data;
    tkm_grpc_server_close(srv->grpc, server_closed, srv);
}

uint64_t agent_rpc_server_refused(const struct agent_rpc_server *srv)
{
    return srv ? tkm_grpc_server_refused(srv->grpc) : 0;
}

uint64_t agent_rpc_server_idle_closed(const struct agent_rpc_server *srv)
{
    return srv ? tkm_grpc_server_idle_closed(srv->grpc) : 0;
}
