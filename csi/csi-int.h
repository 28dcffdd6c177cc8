/*
 * csi-int.h - what csi/driver.c, csi/node.c and csi/identity.c share: the
 * driver object and its per-volume operation queues. Private to csi/.
 *
 * Threading: everything here runs on the loop's thread, except the work
 * functions of csi_op (uv_queue_work), which touch only their op's inputs and
 * outputs (paths, rc, err) until their after-callback runs on the loop.
 *
 * Ownership: the driver owns every struct csi_lock and struct csi_op; an op
 * owns its strings, its unpacked request and borrows its call until
 * csi_op_finish() answers it (the call is then the grpc library's again).
 */
#ifndef TKM_CSI_INT_H
#define TKM_CSI_INT_H

#include <limits.h>
#include <protobuf-c/protobuf-c.h>

#include <tkm/grpc.h>

#include "agent.pb-c.h"
#include "csi.h"
#include "csi.pb-c.h"

struct csi_op;

/* One volume id's queue: its operations run one at a time, in arrival order
 * (the per-volume lock). */
struct csi_lock {
    struct csi_lock *next; /* the driver's list */
    char *vol;             /* owned */
    struct csi_op *head, *tail;
};

enum csi_op_kind { CSI_OP_PUBLISH, CSI_OP_UNPUBLISH };

struct csi_op {
    struct csi_driver *d;  /* borrowed */
    struct csi_op *next;   /* in its lock's queue */
    struct csi_lock *lock; /* borrowed from the driver */
    enum csi_op_kind kind;
    struct tkm_grpc_call *call;             /* borrowed until finished */
    char *vol, *target;                     /* owned; target as the request spelled it (messages) */
    char *real;                             /* owned: target below the root's real path (all I/O) */
    const char *root;                       /* the root's real path (borrowed from the driver) */
    Csi__V1__NodePublishVolumeRequest *req; /* owned (publish) */
    struct csi_attrs attrs;                 /* borrows from req */
    char **stores;                          /* owned: the agent's store dirs (n_stores) */
    size_t n_stores;                        /* 0 for an Empty volume */
    char *mount_path;                       /* owned: the agent's answer */
    char *empty_why;                        /* owned: an Empty volume's "Reason: message" */
    int empty;                              /* an Empty volume (the agent said so) */
    enum csi_mode mode;                     /* what is mounted: attrs.mode, COPY when empty */
    unsigned parts;                         /* an Empty volume's part subdirs (TKM_PART_*) */
    char vol_dir[PATH_MAX];
    uv_work_t work;
    uv_fs_t fs;                 /* marker unlink after a release */
    int rc;                     /* the work's result */
    int code;                   /* gRPC code to answer when rc < 0 */
    int had_state;              /* unpublish: a volume dir was found (and removed) */
    int has_scratch;            /* unpublish: scratch below was counted */
    uint64_t count_us;          /* ... in this long (the log line) */
    uint64_t count_cpu_us;      /* ... with this much of the thread's CPU time */
    struct csi_scratch scratch; /* unpublish: what the pod compiled (csi/scratch.c) */
    struct tkm_err err;
    uint64_t t0; /* when the op was received (uv_now) */
};

struct csi_driver {
    uv_loop_t *loop;               /* borrowed */
    const struct csi_config *cfg;  /* borrowed */
    struct tkm_grpc_server *srv;   /* CSI Identity + Node */
    struct tkm_grpc_server *reg;   /* plugin registration, or NULL */
    struct tkm_grpc_client *agent; /* tkm-agent */
    struct csi_lock *locks;
    size_t n_ops;     /* ops alive (queued, running, finishing) */
    size_t n_pending; /* other asynchronous things alive (release retries, probes) */
    uv_timer_t retry; /* pending releases */
    int retry_running;
    int closing;
    int handles_open; /* servers, client, timer not yet closed */
    void (*closed_cb)(void *data);
    void *closed_data;
    char reg_path[108];
    /* realpath() of each cfg->target_roots[i] at start: mountinfo names real
     * paths, so a root reached through a symlink (/var/lib/kubelet -> /data)
     * must be compared and mounted by its real path. Owned. */
    char *real_roots[CSI_MAX_TARGET_ROOTS];
};

/* node.c: registers the Node service's methods. */
int csi_node_register(struct csi_driver *d, struct tkm_err *err);
/* identity.c: registers the Identity service's methods on d->srv and the
 * registration service's on d->reg (when set). */
int csi_identity_register(struct csi_driver *d, struct tkm_err *err);

/* driver.c */
/* Packs m and finishes call with it (INTERNAL when packing fails). */
void csi_reply(struct tkm_grpc_call *call, const ProtobufCMessage *m);
/* Maps an agent call's outcome to the code the CSI client gets. */
int csi_agent_code(int code);
/* Drops the agent's reference for vol (tkm.agent.v1.Agent/Release; NOT_FOUND
 * counts as done) and then removes the marker <state>/.release/<vol>. When
 * the agent cannot be reached the marker stays and the retry timer tries
 * again (without the counts). sc (optional, borrowed for the call) is what
 * the pod compiled: sent as ReleaseRequest.scratch. done (optional) runs
 * once from the loop with released 1 or 0; vol is copied. */
void csi_release_volume(struct csi_driver *d, const char *vol, const struct csi_scratch *sc,
                        void (*done)(void *data, int released), void *data);
/* Starts the release retry timer (idempotent). */
void csi_retry_kick(struct csi_driver *d);
/* Called when an op or a pending thing ends: frees the driver once closing
 * and nothing is left. */
void csi_driver_maybe_done(struct csi_driver *d);

#endif
