/*
 * agent/rpc.h - the protocol side of tkm-agent's socket for the CSI driver
 * (service tkm.agent.v1.Agent, agent/agent.proto; docs/agent-socket.md).
 *
 * This layer owns the socket and the wire: it serves /tkm.agent.v1.Agent/
 * Materialize, /Release and /Status on lib/grpc, decodes each request with
 * protobuf-c, validates it into a plain C struct and hands it to the daemon's
 * ops. It knows nothing of caches, stores or informers; the daemon answers
 * each call LATER (after a pull, an extraction...) through the call handle.
 * The declaration check lives beside it in agent/declared.h.
 *
 * Threading: single-threaded, on the loop given to agent_rpc_server_new();
 * every op and callback runs from that loop.
 *
 * Call handles (struct agent_rpc_call): an op receives a handle and OWNS the
 * duty to finish it with exactly one agent_rpc_reply_*() matching the method
 * or agent_rpc_fail() - now or later. If the call is cancelled first (client
 * deadline, client gone, server closing), ops->cancel (optional) runs once;
 * the daemon may stop its work there or let it run, but it must still finish
 * the handle, which then only frees it (returns -ECANCELED, nothing is
 * sent). A handle may outlive the server: finishing it after
 * agent_rpc_server_close() only frees it. After finishing, never touch the
 * handle or the request it gave again.
 *
 * Requests are validated before any op sees them: a bad request is answered
 * INVALID_ARGUMENT by this layer with a sentence naming the field or
 * attribute (see agent_materialize_req_decode()).
 */
#ifndef AGENT_RPC_H
#define AGENT_RPC_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <tkm/err.h>
#include <tkm/grpc.h>
#include <tkm/triton/cache.h>

#define AGENT_RPC_SERVICE "tkm.agent.v1.Agent"

/* Bounds enforced by the decoders (bytes, without the NUL). */
#define AGENT_RPC_MAX_VOLUME_ID  128  /* the CSI spec's limit for volume ids */
#define AGENT_RPC_MAX_POD_UID    128  /* a UUID is 36; static pods' config hashes are 32 */
#define AGENT_RPC_MAX_CACHE_NAME 253  /* a DNS-1123 subdomain (object name) */
#define AGENT_RPC_MAX_IMAGE      512  /* the CRD's bound on spec.cacheImage */
#define AGENT_RPC_MAX_MOUNT_PATH 4096 /* the CRD's bound on spec.mountPath */
#define AGENT_RPC_MAX_ATTRS      32   /* volume attributes, csi.storage.k8s.io/ ones included */

/* The volume attribute readOnly: absent, "true" or "false". */
enum agent_read_only {
    AGENT_READ_ONLY_DEFAULT = 0, /* absent: overlay with a per-pod scratch layer */
    AGENT_READ_ONLY_TRUE,        /* "true": strict, no scratch layer */
    AGENT_READ_ONLY_FALSE,       /* "false": a private writable copy */
};

/* A validated Materialize request. Every string is owned by the struct
 * (agent_materialize_req_release()); the ones given to ops are borrowed from
 * the call handle until it is finished. */
struct agent_materialize_req {
    char *pod_ns;   /* a DNS-1123 label */
    char *pod_name; /* a DNS-1123 subdomain */
    char *pod_uid;  /* [A-Za-z0-9-], 1..AGENT_RPC_MAX_POD_UID */
    /* Printable ASCII without '/', '\\' and spaces, not "." or "..",
     * 1..AGENT_RPC_MAX_VOLUME_ID: safe as a file name and a database key. */
    char *volume_id;
    /* Exactly one of cache_name / cache_image is non-NULL. */
    char *cache_name;  /* attribute cacheName: a DNS-1123 subdomain */
    char *cache_image; /* attribute cacheImage: printable ASCII, no spaces, 1..512 */
    enum agent_read_only read_only;
    char *mount_path; /* attribute mountPath: absolute, no ".." component; NULL if absent */
    struct tkm_grpc_peer peer; /* the calling process (SO_PEERCRED); zero when decoded alone */
};

/* ReleaseRequest.scratch, validated (agent.proto's ScratchCount): what the
 * pod compiled into its scratch layer. Untrusted: counts are taken as
 * numbers; kernel names tkm_kernel_name_ok() refuses and those past the
 * 32nd are dropped and set truncated (never an error). Fixed arrays. */
#define AGENT_SCRATCH_NAMES    32
#define AGENT_SCRATCH_NAME_MAX TKM_KERNEL_NAME_MAX
struct agent_scratch {
    int present; /* 0: the request carried none (nothing is counted) */
    uint32_t triton_kernels, inductor_fxgraph, inductor_aotautograd, vllm_entries;
    uint64_t files, bytes;
    char names[AGENT_SCRATCH_NAMES][AGENT_SCRATCH_NAME_MAX + 1];
    size_t n_names;
    int truncated; /* the sender's, or names dropped here */
};

/* A validated Release request (owned string: agent_release_req_release()). */
struct agent_release_req {
    char *volume_id; /* the same rules as in Materialize */
    struct tkm_grpc_peer peer;
    struct agent_scratch scratch;
};

/* What Materialize answers; every pointer borrowed for the reply call
 * (copied). NULL strings go out as "". */
struct agent_materialize_result {
    const char *store_path;      /* the extracted, verified cache dir in the store */
    const char *target_arch;     /* "90", "gfx942" */
    const char *mount_path;      /* the volume's mountPath, else the cache's spec.mountPath */
    const char *cache_namespace; /* NULL/"" for a TritonKernelCacheCluster */
    const char *cache_name;
    const char *digest; /* the pinned manifest digest */
    /* every store dir the node's GPUs use (store_paths[0] == store_path); n 0:
     * store_path alone */
    const char *const *store_paths;
    size_t n_store_paths;
    /* policy Empty and no variant fits: an empty writable volume (store_path NULL) */
    int empty;
    const char *empty_reason, *empty_message;
    /* the store dirs' layout: {"triton"} (n 0 means the same) or one subdir per part */
    const char *const *parts;
    size_t n_parts;
};

/* What Status answers; strings borrowed for the reply call (copied).
 * version NULL: this build's TKM_VERSION. */
struct agent_status_result {
    int ready;
    const char *message;
    const char *node_name;
    const char *version;
};

struct agent_rpc_server;
struct agent_rpc_call;

/* The daemon's side. Every member but cancel is required. req is borrowed
 * from call until call is finished; data is agent_rpc_server_new()'s. */
struct agent_rpc_ops {
    /* Finish with agent_rpc_reply_materialize() or agent_rpc_fail(). */
    void (*materialize)(struct agent_rpc_call *call, const struct agent_materialize_req *req,
                        void *data);
    /* Finish with agent_rpc_reply_release() or agent_rpc_fail(). */
    void (*release)(struct agent_rpc_call *call, const struct agent_release_req *req, void *data);
    /* Finish with agent_rpc_reply_status() or agent_rpc_fail(). */
    void (*status)(struct agent_rpc_call *call, void *data);
    /* Optional: call (not yet finished) was cancelled; see the top of this
     * file. Runs at most once per call, from the loop or from inside
     * agent_rpc_server_close(); it may finish call itself. */
    void (*cancel)(struct agent_rpc_call *call, void *data);
};

/* Server settings; NULL opts = all defaults. */
struct agent_rpc_opts {
    /* Only peers with these uids may connect: NULL/0 = uid 0 and our
     * effective uid (lib/grpc's default). Borrowed for _new() only. */
    const uid_t *allowed_uids;
    size_t n_allowed_uids;
    unsigned max_connections; /* 0: lib/grpc's default (1024) */
    uint64_t idle_timeout_ms; /* 0: lib/grpc's default (5 min) */
};

/* Listens on socket_path (absolute, < 108 bytes; copied) on loop (borrowed,
 * must outlive the server). The parent directory is created 0700 when
 * missing; when it exists it must be a directory owned by our euid (else
 * -EPERM) and is tightened to 0700 if group or others had any access (logged).
 * A stale socket nobody listens on is replaced; a live server there is
 * -EADDRINUSE, any other file -EEXIST. The socket is 0600. ops (borrowed,
 * must outlive the server) and data are kept for every call. Each call is
 * logged with the peer's pid/uid/gid. *out is owned: agent_rpc_server_close().
 * 0 or a negative errno with err naming the path; on failure nothing needs
 * closing and no op is ever called. */
int agent_rpc_server_new(uv_loop_t *loop, const char *socket_path, const struct agent_rpc_ops *ops,
                         void *data, const struct agent_rpc_opts *opts,
                         struct agent_rpc_server **out, struct tkm_err *err);

/* Stops listening, cancels every call in flight (ops->cancel runs; the
 * client gets UNAVAILABLE), unlinks the socket and frees the server;
 * closed_cb (optional) runs from the loop when every handle has closed.
 * Handles not yet finished stay valid until finished. NULL: no-op. */
void agent_rpc_server_close(struct agent_rpc_server *srv, void (*closed_cb)(void *data),
                            void *data);

/* Connections refused by max_connections, and closed as idle, so far (0 for
 * NULL). */
uint64_t agent_rpc_server_refused(const struct agent_rpc_server *srv);
uint64_t agent_rpc_server_idle_closed(const struct agent_rpc_server *srv);

/* ---- finishing a call ---------------------------------------------------------------- */

/* Each finishes call (never touch it again) and returns 0, -ECANCELED
 * (cancelled earlier: nothing sent, only freed), -EINVAL (a reply that does
 * not match the call's method: the client gets INTERNAL) or -ENOMEM. */
int agent_rpc_reply_materialize(struct agent_rpc_call *call,
                                const struct agent_materialize_result *res);
/* released 1: OK {released: true}. released 0: the volume was not known:
 * NOT_FOUND "volume \"ID\" is not known to this agent (nothing to release)"
 * (the CSI driver treats NOT_FOUND from Release as success). */
int agent_rpc_reply_release(struct agent_rpc_call *call, int released);
int agent_rpc_reply_status(struct agent_rpc_call *call, const struct agent_status_result *res);
/* Any method: a non-OK enum tkm_grpc_code and a sentence (copied; may be
 * NULL) that the CSI driver passes on to the kubelet. OK becomes UNKNOWN. */
int agent_rpc_fail(struct agent_rpc_call *call, int code, const char *message);

/* ---- decoding (used by the server; public for tests and tools) ------------------------ */

/* Decodes an encoded MaterializeRequest (bytes borrowed) and validates it
 * into *out (owned on success: agent_materialize_req_release(); zeroed on
 * failure). -EINVAL with err's sentence naming the field or attribute (the
 * INVALID_ARGUMENT message), -ENOMEM. Rules: pod namespace/name/uid and
 * volume id present and well-formed (see the struct), no string with a NUL
 * byte, at most AGENT_RPC_MAX_ATTRS attributes, no attribute twice, exactly
 * one of cacheName / cacheImage, readOnly only "true"/"false", mountPath
 * absolute without ".." and bounded; csi.storage.k8s.io/... attributes are
 * ignored, except that pod.namespace, pod.name and pod.uid must agree with
 * the request's fields when given; any other key is refused, named. */
int agent_materialize_req_decode(const void *bytes, size_t len, struct agent_materialize_req *out,
                                 struct tkm_err *err);
void agent_materialize_req_release(struct agent_materialize_req *req);

/* As above for ReleaseRequest. */
int agent_release_req_decode(const void *bytes, size_t len, struct agent_release_req *out,
                             struct tkm_err *err);
void agent_release_req_release(struct agent_release_req *req);

#endif
