/*
 * node.c - the CSI Node service: NodePublishVolume / NodeUnpublishVolume
 * (one queue per volume id, filesystem work on the thread pool, the agent
 * asked on the loop), NodeGetVolumeStats, NodeGetCapabilities, NodeGetInfo.
 * The flow and the layout are in docs/csi.md; see csi.h and csi-int.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <tkm/triton/parts.h>
#include <tkm/fs.h>
#include <tkm/log.h>
#include <tkm/triton/cache.h>
#include <tkm/util.h>

#include "csi-int.h"

/* ---- the per-volume queues ------------------------------------------------ */

static void op_start(struct csi_op *op);

static void op_free(struct csi_op *op)
{
    if (op->req)
        csi__v1__node_publish_volume_request__free_unpacked(op->req, NULL);
    free(op->vol);
    free(op->target);
    free(op->real);
    for (size_t i = 0; i < op->n_stores; i++)
        free(op->stores[i]);
    free(op->stores);
    free(op->mount_path);
    free(op->empty_why);
    free(op);
}

/* Answers the op's call (code OK: the kind's empty response) and runs the
 * volume's next op. */
static void op_finish(struct csi_op *op, int code, const char *msg)
{
    struct csi_driver *d = op->d;
    struct csi_lock *l = op->lock;
    if (code == TKM_GRPC_OK) {
        Csi__V1__NodePublishVolumeResponse pr = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
        Csi__V1__NodeUnpublishVolumeResponse ur = CSI__V1__NODE_UNPUBLISH_VOLUME_RESPONSE__INIT;
        csi_reply(op->call, op->kind == CSI_OP_PUBLISH ? &pr.base : &ur.base);
    } else {
        tkm_info("%s %s at %s: %s: %s", op->kind == CSI_OP_PUBLISH ? "publish" : "unpublish",
                 op->vol, op->target, tkm_grpc_code_name(code), msg);
        tkm_grpc_call_fail(op->call, code, msg);
    }
    op->call = NULL;
    struct csi_op *next = op->next;
    l->head = next;
    if (!next) {
        struct csi_lock **pp = &d->locks;
        while (*pp != l)
            pp = &(*pp)->next;
        *pp = l->next;
        free(l->vol);
        free(l);
    }
    op_free(op);
    d->n_ops--;
    if (next) {
        op_start(next); /* may finish it, and free d when closing: touch nothing after */
        return;
    }
    csi_driver_maybe_done(d);
}

static void op_fail_err(struct csi_op *op, int code)
{
    op_finish(op, code, tkm_err_str(&op->err));
}

/* Queues op behind the volume's running op, or starts it. */
static void op_enqueue(struct csi_driver *d, struct csi_op *op)
{
    struct csi_lock *l = d->locks;
    while (l && strcmp(l->vol, op->vol) != 0)
        l = l->next;
    if (!l) {
        l = calloc(1, sizeof(*l));
        if (!l || !(l->vol = strdup(op->vol))) {
            free(l);
            tkm_grpc_call_fail(op->call, TKM_GRPC_RESOURCE_EXHAUSTED, "tkm-csi: out of memory");
            op_free(op);
            return;
        }
        l->next = d->locks;
        d->locks = l;
    }
    op->lock = l;
    d->n_ops++;
    if (l->tail) {
        l->tail->next = op;
        l->tail = op;
        tkm_dbg("volume %s: waiting for the operation in progress", op->vol);
        return;
    }
    l->head = l->tail = op;
    op_start(op);
}

/* ---- helpers ---------------------------------------------------------------- */

/* What is mounted at target: 1 ours (this volume), 2 something else (its
 * description in what), 0 nothing; < 0 error in err. */
static int target_state(const char *target, const char *vol, char *what, size_t wlen,
                        int *elsewhere, struct tkm_err *err)
{
    struct tkm_buf mi = TKM_BUF_INIT(64u << 20);
    struct csi_mount m;
    char src[sizeof(CSI_MOUNT_SOURCE) + CSI_VOLUME_ID_MAX];
    int rc = csi_mountinfo_read(&mi, err);
    if (rc < 0)
        goto out;
    if ((rc = csi_mountinfo_find(mi.data, target, &m)) < 0) {
        rc = tkm_err_set(err, rc, "parsing /proc/self/mountinfo: %s", strerror(-rc));
        goto out;
    }
    snprintf(src, sizeof(src), CSI_MOUNT_SOURCE "%s", vol);
    if (elsewhere) /* the volume mounted anywhere (checked when the target is free) */
        *elsewhere = csi_mountinfo_has_source(mi.data, src);
    if (rc == 1) {
        rc = strcmp(m.source, src) == 0 && strcmp(m.fstype, "overlay") == 0 ? 1 : 2;
        snprintf(what, wlen, "%s (%s)", m.source, m.fstype);
        csi_mount_release(&m);
    }
out:
    tkm_buf_release(&mi);
    return rc;
}

/* Finds <state>/<ns>/<pod>/<vol> into out; 1 found, 0 not, < 0 error. */
static int find_vol_dir(const char *state, const char *vol, char *out, size_t len)
{
    DIR *sd = opendir(state), *nd = NULL;
    struct dirent *ns, *pod;
    struct stat st;
    int found = 0;
    if (!sd)
        return errno == ENOENT ? 0 : -errno;
    while (!found && (ns = readdir(sd))) {
        char nsd[PATH_MAX];
        if (ns->d_name[0] == '.')
            continue;
        snprintf(nsd, sizeof(nsd), "%s/%s", state, ns->d_name);
        if (!(nd = opendir(nsd)))
            continue;
        while ((pod = readdir(nd))) {
            if (pod->d_name[0] == '.')
                continue;
            snprintf(out, len, "%s/%s/%s", nsd, pod->d_name, vol);
            if (lstat(out, &st) == 0 && S_ISDIR(st.st_mode)) {
                found = 1;
                break;
            }
        }
        closedir(nd);
    }
    closedir(sd);
    return found;
}

/* Writes <state>/.release/<vol>: the agent's reference must be dropped. */
static int write_marker(const char *state, const char *vol, struct tkm_err *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/.release", state);
    if (mkdir(p, 0700) < 0 && errno != EEXIST)
        return tkm_err_set(err, -errno, "creating %s: %s", p, strerror(errno));
    snprintf(p, sizeof(p), "%s/.release/%s", state, vol);
    int fd = open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return tkm_err_set(err, -errno, "creating %s: %s", p, strerror(errno));
    close(fd);
    return 0;
}

/* Removes vol_dir and its pod and namespace dirs when they became empty. */
static int remove_vol_dir(const char *vol_dir, struct tkm_err *err)
{
    char p[PATH_MAX];
    int rc = csi_remove_tree(vol_dir, err);
    snprintf(p, sizeof(p), "%s", vol_dir);
    for (int i = 0; i < 2 && rc == 0; i++) {
        char *slash = strrchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
        if (rmdir(p) < 0)
            break; /* not empty (another volume, another pod) */
    }
    return rc;
}

/* ---- NodePublishVolume ------------------------------------------------------ */

/* An Empty volume's part subdirs in upper (p): writable for any uid, like upper. */
static int pub_empty_parts(struct csi_op *op, const char *upper)
{
    static const struct {
        unsigned bit;
        const char *dir;
    } parts[] = {{TKM_PART_TRITON, TKM_PART_TRITON_DIR},
                 {TKM_PART_INDUCTOR, TKM_PART_INDUCTOR_DIR},
                 {TKM_PART_VLLM, TKM_PART_VLLM_DIR}};
    char p[PATH_MAX];
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (!(op->parts & parts[i].bit))
            continue;
        snprintf(p, sizeof(p), "%s/%s", upper, parts[i].dir);
        if (mkdir(p, 0755) < 0 || chmod(p, 01777) < 0)
            return tkm_err_set(&op->err, -errno, "creating %s: %s", p, strerror(errno));
    }
    return 0;
}

/* What unpublish needs to count the scratch layer, even after a restart
 * (csi_scratch_state_write); a strict volume has none. Never fails the
 * publish: without it the volume is not counted. */
static void pub_scratch_state(struct csi_op *op)
{
    struct tkm_err e = {0};
    if (op->mode == CSI_MODE_STRICT)
        return;
    int root =
        op->empty ? op->parts == 0 : !tkm_parts_is_root(op->stores[0]); /* Triton at the root */
    const char *mode = op->empty ? "empty" : op->mode == CSI_MODE_COPY ? "copy" : "overlay";
    if (csi_scratch_state_write(op->vol_dir, mode, root, (const char *const *)op->stores,
                                op->n_stores, &e) < 0)
        tkm_warn("volume %s: its scratch layer will not be counted at unpublish: %s", op->vol,
                 tkm_err_str(&e));
}

/* Builds the layers under vol_dir (which does not exist yet). */
static int pub_layers(struct csi_op *op)
{
    char p[PATH_MAX], q[PATH_MAX];
    struct stat a, b;
    struct tkm_triton_rewrite_stats rs = {0};
    const char *vd = op->vol_dir;
    int rc;
    if (mkdir(vd, 0700) < 0)
        return tkm_err_set(&op->err, -errno, "creating %s: %s", vd, strerror(errno));
    snprintf(p, sizeof(p), "%s/groups", vd);
    if (mkdir(p, 0755) < 0)
        return tkm_err_set(&op->err, -errno, "creating %s: %s", p, strerror(errno));
    if (op->mode != CSI_MODE_STRICT) {
        snprintf(p, sizeof(p), "%s/upper", vd);
        snprintf(q, sizeof(q), "%s/work", vd);
        /* The upper dir is the root the pod sees: writable for any uid
         * (sticky, like /tmp), so a non-root Triton can add kernels. */
        if (mkdir(p, 0755) < 0 || chmod(p, 01777) < 0 || mkdir(q, 0700) < 0)
            return tkm_err_set(&op->err, -errno, "creating %s: %s", p, strerror(errno));
        if (stat(p, &a) < 0 || stat(q, &b) < 0 || a.st_dev != b.st_dev)
            return tkm_err_set(&op->err, -EXDEV,
                               "%s and %s are not on one filesystem (overlayfs needs that)", p, q);
    }
    if (op->empty) {
        snprintf(p, sizeof(p), "%s/upper", vd);
        if ((rc = pub_empty_parts(op, p)) < 0)
            return rc;
        pub_scratch_state(op);
        return 0;
    }
    /* One layout for all (the agent never mixes them: a Triton cache at the
     * root of one store dir and triton/ of another would show the pod both). */
    for (size_t i = 1; i < op->n_stores; i++)
        if (tkm_parts_is_root(op->stores[i]) != tkm_parts_is_root(op->stores[0]))
            return tkm_err_set(&op->err, -EPROTO,
                               "the agent's store dirs %s and %s have different layouts (one "
                               "with triton/, inductor/ or vllm/ parts, one without)",
                               op->stores[0], op->stores[i]);
    if (op->mode == CSI_MODE_COPY) {
        uint64_t bytes = 0;
        snprintf(p, sizeof(p), "%s/upper", vd);
        /* The union of the stores; the first wins, as in the overlay. */
        for (size_t i = 0; i < op->n_stores; i++)
            if ((rc = csi_copy_tree(op->stores[i], p, &bytes, &op->err)) < 0)
                return rc;
        if (chmod(p, 01777) < 0)
            return tkm_err_set(&op->err, -errno, "chmod %s: %s", p, strerror(errno));
        if (op->mount_path[0] &&
            (rc = tkm_parts_groups_rewrite_to(p, p, op->mount_path, &rs, &op->err)) < 0)
            return rc;
    } else if (op->mount_path[0]) {
        snprintf(p, sizeof(p), "%s/groups", vd);
        /* Every store's group files into the one groups layer (kernel dirs are
         * keyed by the target: two variants do not share one); the last store
         * first, so the top store's file would win a shared name, as in the
         * overlay below. */
        for (size_t i = op->n_stores; i-- > 0;)
            if ((rc = tkm_parts_groups_rewrite_to(op->stores[i], p, op->mount_path, &rs,
                                                  &op->err)) < 0)
                return rc;
    }
    tkm_dbg("volume %s: %zu group files of %zu store dirs rewritten for %s", op->vol, rs.groups,
            op->n_stores, op->mount_path[0] ? op->mount_path : "(no mountPath: as built)");
    pub_scratch_state(op);
    return 0;
}

static void pub_work(uv_work_t *w)
{
    struct csi_op *op = w->data;
    struct tkm_buf opts = TKM_BUF_INIT(8192);
    char fdpath[64];
    int fd = -1, rc, made = 0, opened = 0;
    unsigned long flags = MS_NOSUID | MS_NODEV;
    op->code = TKM_GRPC_INTERNAL;
    /* state/<namespace>/<pod>, private (the state dir exists) */
    char pd[PATH_MAX];
    int pn = snprintf(pd, sizeof pd, "%s/%s/%s", op->d->cfg->state_dir, op->attrs.pod_namespace,
                      op->attrs.pod_name);
    if (pn < 0 || (size_t)pn >= sizeof pd) {
        rc = tkm_err_set(&op->err, -ENAMETOOLONG, "%s/%s/...: path too long", op->d->cfg->state_dir,
                         op->attrs.pod_namespace);
        goto out;
    }
    if ((rc = tkm_mkdir_p(pd, 0700, &op->err)) < 0)
        goto out;
    /* A dir left by a failed attempt (the target is not mounted: checked). */
    if ((rc = csi_remove_tree(op->vol_dir, &op->err)) < 0)
        goto out;
    made = 1;
    if ((rc = pub_layers(op)) < 0)
        goto out;
    if ((rc = csi_overlay_opts(&opts, op->mode, op->vol_dir, (const char *const *)op->stores,
                               op->n_stores, &op->err)) < 0)
        goto out;
    if ((rc = csi_open_target(op->root, op->real, 1, &fd, &op->err)) < 0) {
        op->code = rc == -ELOOP || rc == -ENOTDIR ? TKM_GRPC_INVALID_ARGUMENT : TKM_GRPC_INTERNAL;
        goto out;
    }
    opened = 1;
    if (op->mode == CSI_MODE_STRICT)
        flags |= MS_RDONLY;
    snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
    char src[sizeof(CSI_MOUNT_SOURCE) + CSI_VOLUME_ID_MAX];
    snprintf(src, sizeof(src), CSI_MOUNT_SOURCE "%s", op->vol);
    if (mount(src, fdpath, "overlay", flags, opts.data) < 0) {
        rc = tkm_err_set(&op->err, -errno, "mounting the overlay at %s (%s): %s", op->target,
                         opts.data, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        struct tkm_err e2 = {0};
        /* The agent has a reference for this volume: it must be dropped (the
         * marker keeps it until the agent confirms). Nothing we made stays:
         * the volume dirs, and the target dir when empty. */
        if (write_marker(op->d->cfg->state_dir, op->vol, &e2) < 0 ||
            (made && remove_vol_dir(op->vol_dir, &e2) < 0))
            tkm_warn("cleaning up after a failed publish of %s: %s", op->vol, tkm_err_str(&e2));
        if (opened)
            (void)rmdir(op->real);
    }
    op->rc = rc;
    tkm_buf_release(&opts);
}

static void pub_released(void *data, int released)
{
    (void)data;
    (void)released;
}

static void pub_after(uv_work_t *w, int status)
{
    struct csi_op *op = w->data;
    if (status == UV_ECANCELED && op->rc == 0)
        op->rc = tkm_err_set(&op->err, -ECANCELED, "tkm-csi is shutting down");
    if (op->rc < 0) {
        csi_release_volume(op->d, op->vol, NULL, pub_released, NULL);
        op_fail_err(op, op->code);
        return;
    }
    if (op->empty)
        tkm_info("published %s at %s (an empty writable cache: no variant of the cache fits "
                 "this node: %s; mountPath %s, %llu ms)",
                 op->vol, op->target, op->empty_why, op->mount_path[0] ? op->mount_path : "none",
                 (unsigned long long)(uv_now(op->d->loop) - op->t0));
    else
        tkm_info(
            "published %s at %s (%s, %zu store dir%s, mountPath %s, %llu ms)", op->vol, op->target,
            op->mode == CSI_MODE_STRICT ? "strict read-only"
            : op->mode == CSI_MODE_COPY ? "private copy"
                                        : "overlay",
            op->n_stores, op->n_stores == 1 ? "" : "s", op->mount_path[0] ? op->mount_path : "none",
            (unsigned long long)(uv_now(op->d->loop) - op->t0));
    op_finish(op, TKM_GRPC_OK, NULL);
}

/* Copies what the checked answer a says to mount into op. -ENOMEM. */
static int pub_keep_answer(struct csi_op *op, const struct csi_answer *a,
                           const Tkm__Agent__V1__MaterializeResponse *r)
{
    if (!(op->mount_path = strdup(r->mount_path)))
        return -ENOMEM;
    op->empty = a->empty;
    op->parts = a->parts;
    op->mode = a->empty ? CSI_MODE_COPY : op->attrs.mode; /* Empty: always writable */
    if (a->empty) {
        /* The agent's words go to the log: escaped. */
        char reason[64], m[512], why[600];
        const char *re = r->empty_reason[0] ? r->empty_reason : "(no reason given)";
        snprintf(why, sizeof(why), "%s: %s", tkm_escape(re, strlen(re), reason, sizeof(reason)),
                 tkm_escape(r->empty_message, strlen(r->empty_message), m, sizeof(m)));
        return (op->empty_why = strdup(why)) ? 0 : -ENOMEM;
    }
    if (!(op->stores = calloc(a->n_stores, sizeof(*op->stores))))
        return -ENOMEM;
    for (size_t i = 0; i < a->n_stores; i++)
        if (!(op->stores[op->n_stores++] = strdup(a->stores[i])))
            return -ENOMEM;
    return 0;
}

static void pub_materialized(int code, const char *message, const void *resp, size_t len,
                             void *data)
{
    struct csi_op *op = data;
    Tkm__Agent__V1__MaterializeResponse *r = NULL;
    struct csi_answer a;
    char msg[1200];
    int n;
    if (code != TKM_GRPC_OK) {
        int c = csi_agent_code(code);
        snprintf(msg, sizeof(msg), "%s%s",
                 c == TKM_GRPC_UNAVAILABLE ? "tkm-agent is unavailable: " : "tkm-agent: ", message);
        op_finish(op, c, msg);
        return;
    }
    if (!(r = tkm__agent__v1__materialize_response__unpack(NULL, len, resp))) {
        tkm_err_set(&op->err, -EPROTO, "tkm-agent answered Materialize with a malformed message");
        goto fail;
    }
    if (csi_answer_check(&a, r->store_path, r->store_paths, r->n_store_paths, r->empty, r->parts,
                         r->n_parts, &op->err) < 0 ||
        (r->mount_path[0] && csi_check_abs_path(r->mount_path, "mountPath", &op->err) < 0))
        goto fail;
    if (pub_keep_answer(op, &a, r) < 0) {
        tkm_err_set(&op->err, -ENOMEM, "out of memory");
        goto fail;
    }
    n = snprintf(op->vol_dir, sizeof(op->vol_dir), "%s/%s/%s/%s", op->d->cfg->state_dir,
                 op->attrs.pod_namespace, op->attrs.pod_name, op->vol);
    if (n < 0 || (size_t)n >= sizeof(op->vol_dir) - 16) {
        tkm_err_set(&op->err, -ENAMETOOLONG, "volume dir path too long");
        goto fail;
    }
    tkm__agent__v1__materialize_response__free_unpacked(r, NULL);
    op->work.data = op;
    if (uv_queue_work(op->d->loop, &op->work, pub_work, pub_after) == 0)
        return;
    tkm_err_set(&op->err, -EIO, "cannot queue the publish work");
    csi_release_volume(op->d, op->vol, NULL, pub_released, NULL);
    op_fail_err(op, TKM_GRPC_INTERNAL);
    return;
fail:
    if (r)
        tkm__agent__v1__materialize_response__free_unpacked(r, NULL);
    csi_release_volume(op->d, op->vol, NULL, pub_released, NULL);
    op_fail_err(op, TKM_GRPC_INTERNAL);
}

/* Another volume's operation in progress on the same target (the queues are
 * per volume id; two volumes must not race to mount one directory). */
static const struct csi_op *target_busy(const struct csi_op *op)
{
    for (const struct csi_lock *l = op->d->locks; l; l = l->next)
        if (l->head && l->head != op && strcmp(l->head->real, op->real) == 0)
            return l->head;
    return NULL;
}

static void pub_start(struct csi_op *op)
{
    struct csi_driver *d = op->d;
    Tkm__Agent__V1__MaterializeRequest mr = TKM__AGENT__V1__MATERIALIZE_REQUEST__INIT;
    Tkm__Agent__V1__MaterializeRequest__VolumeAttributesEntry *ents = NULL, **pents = NULL;
    Csi__V1__NodePublishVolumeRequest *q = op->req;
    char what[512], marker[PATH_MAX];
    uint8_t *buf = NULL;
    int elsewhere = 0;
    int st = target_state(op->real, op->vol, what, sizeof(what), &elsewhere, &op->err);
    if (st < 0) {
        op_fail_err(op, TKM_GRPC_INTERNAL);
        return;
    }
    if (st == 1) {
        tkm_info("publish %s at %s: already published", op->vol, op->target);
        {
            op_finish(op, TKM_GRPC_OK, NULL);
            return;
        }
    }
    if (st == 2) {
        tkm_err_set(&op->err, -EEXIST, "target %s is already a mount of %s, not of volume %s",
                    op->target, what, op->vol);
        {
            op_fail_err(op, TKM_GRPC_ALREADY_EXISTS);
            return;
        }
    }
    if (elsewhere) {
        tkm_err_set(&op->err, -EEXIST, "volume %s is already published at another target path",
                    op->vol);
        op_fail_err(op, TKM_GRPC_ALREADY_EXISTS);
        return;
    }
    /* A release still pending for this id would drop the reference the
     * Materialize below takes (the agent keeps one per volume id). */
    snprintf(marker, sizeof(marker), "%s/.release/%s", d->cfg->state_dir, op->vol);
    (void)unlink(marker);
    mr.pod_namespace = (char *)op->attrs.pod_namespace;
    mr.pod_name = (char *)op->attrs.pod_name;
    mr.pod_uid = (char *)op->attrs.pod_uid;
    mr.volume_id = op->vol;
    ents = calloc(q->n_volume_context + 1, sizeof(*ents));
    pents = calloc(q->n_volume_context + 1, sizeof(*pents));
    if (!ents || !pents)
        goto nomem;
    for (size_t i = 0; i < q->n_volume_context; i++) {
        tkm__agent__v1__materialize_request__volume_attributes_entry__init(&ents[i]);
        ents[i].key = q->volume_context[i]->key;
        ents[i].value = q->volume_context[i]->value;
        pents[i] = &ents[i];
    }
    mr.n_volume_attributes = q->n_volume_context;
    mr.volume_attributes = pents;
    size_t n = tkm__agent__v1__materialize_request__get_packed_size(&mr);
    if (!(buf = malloc(n ? n : 1)))
        goto nomem;
    tkm__agent__v1__materialize_request__pack(&mr, buf);
    if (!d->agent ||
        tkm_grpc_client_call(d->agent, "/tkm.agent.v1.Agent/Materialize", buf, n,
                             d->cfg->agent_timeout_ms, pub_materialized, op, &op->err) < 0) {
        free(buf);
        free(ents);
        free(pents);
        tkm_err_set(&op->err, -ESHUTDOWN, "tkm-csi is shutting down");
        {
            op_finish(op, TKM_GRPC_UNAVAILABLE, tkm_err_str(&op->err));
            return;
        }
    }
    free(buf);
    free(ents);
    free(pents);
    return;
nomem:
    free(ents);
    free(pents);
    op_finish(op, TKM_GRPC_RESOURCE_EXHAUSTED, "tkm-csi: out of memory");
}

/* ---- NodeUnpublishVolume ------------------------------------------------------ */

static void unpub_work(uv_work_t *w)
{
    struct csi_op *op = w->data;
    const struct csi_config *cfg = op->d->cfg;
    char what[512];
    int rc;
    op->code = TKM_GRPC_INTERNAL;
    int st = target_state(op->real, op->vol, what, sizeof(what), NULL, &op->err);
    if (st < 0) {
        op->rc = st;
        return;
    }
    if (st == 2) {
        op->code = TKM_GRPC_FAILED_PRECONDITION;
        op->rc = tkm_err_set(&op->err, -EBUSY,
                             "target %s is a mount of %s, not of volume %s: not unmounting it",
                             op->target, what, op->vol);
        return;
    }
    if (st == 1) {
        /* No symlink below the root (the last component is UMOUNT_NOFOLLOW). */
        int fd = -1;
        if ((rc = csi_open_target(op->root, op->real, 0, &fd, &op->err)) < 0) {
            op->code = TKM_GRPC_INVALID_ARGUMENT;
            op->rc = rc;
            return;
        }
        close(fd);
    }
    if (st == 1 && umount2(op->real, UMOUNT_NOFOLLOW) < 0) {
        if (errno != EBUSY || umount2(op->real, UMOUNT_NOFOLLOW | MNT_DETACH) < 0) {
            op->rc =
                tkm_err_set(&op->err, -errno, "unmounting %s: %s", op->target, strerror(errno));
            return;
        }
        tkm_warn("unmount %s: busy, detached lazily", op->target);
    }
    /* The target dir is ours to remove (CSI: the plugin creates and deletes
     * it); a non-empty one is left alone. */
    if (rmdir(op->real) < 0 && errno != ENOENT && errno != ENOTEMPTY && errno != ENOTDIR)
        tkm_warn("removing the target %s: %s", op->target, strerror(errno));
    if ((rc = find_vol_dir(cfg->state_dir, op->vol, op->vol_dir, sizeof(op->vol_dir))) < 0) {
        op->rc = tkm_err_set(&op->err, rc, "looking for volume %s under %s: %s", op->vol,
                             cfg->state_dir, strerror(-rc));
        return;
    }
    op->had_state = rc;
    if (rc == 1 && cfg->count_scratch) {
        /* What the pod compiled, before its scratch goes: never fails the unpublish. */
        struct tkm_err e = {0};
        struct timespec a, b;
        uint64_t c0 = uv_hrtime();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        int c = csi_scratch_volume(op->vol_dir, &op->scratch, &e);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        op->count_us = (uv_hrtime() - c0) / 1000;
        op->count_cpu_us =
            (uint64_t)((b.tv_sec - a.tv_sec) * 1000000 + (b.tv_nsec - a.tv_nsec) / 1000);
        if (c < 0)
            tkm_warn("volume %s: the scratch layer was not counted: %s", op->vol, tkm_err_str(&e));
        op->has_scratch = c == 1;
    }
    if (op->had_state && ((rc = write_marker(cfg->state_dir, op->vol, &op->err)) < 0 ||
                          (rc = remove_vol_dir(op->vol_dir, &op->err)) < 0)) {
        op->rc = rc;
        return;
    }
    op->rc = 0;
}

static void unpub_released(void *data, int released)
{
    struct csi_op *op = data;
    /* Unpublish succeeds either way: the mount and the dirs are gone, and a
     * release the agent did not get is retried from its marker. */
    (void)released;
    if (op->has_scratch) {
        struct tkm_buf sum = TKM_BUF_INIT(8192);
        tkm_info("unpublished %s at %s (%llu ms; the pod compiled: %s; counted in %.2f ms, "
                 "%.2f ms CPU)",
                 op->vol, op->target, (unsigned long long)(uv_now(op->d->loop) - op->t0),
                 csi_scratch_summary(&op->scratch, &sum) == 0 ? sum.data : "(out of memory)",
                 op->count_us / 1000.0, op->count_cpu_us / 1000.0);
        tkm_buf_release(&sum);
    } else {
        tkm_info("unpublished %s at %s (%llu ms)", op->vol, op->target,
                 (unsigned long long)(uv_now(op->d->loop) - op->t0));
    }
    op_finish(op, TKM_GRPC_OK, NULL);
}

static void unpub_after(uv_work_t *w, int status)
{
    struct csi_op *op = w->data;
    if (status == UV_ECANCELED)
        op->rc = tkm_err_set(&op->err, -ECANCELED, "tkm-csi is shutting down");
    if (op->rc < 0) {
        op_fail_err(op, op->code);
        return;
    }
    if (!op->had_state) {
        unpub_released(op, 1);
        return;
    }
    csi_release_volume(op->d, op->vol, op->has_scratch ? &op->scratch : NULL, unpub_released, op);
}

static void op_start(struct csi_op *op)
{
    if (op->d->closing) {
        op_finish(op, TKM_GRPC_UNAVAILABLE, "tkm-csi is shutting down");
        return;
    }
    const struct csi_op *other = target_busy(op);
    if (other) {
        tkm_err_set(&op->err, -EBUSY, "an operation on volume %s at target %s is in progress",
                    other->vol, op->target);
        op_fail_err(op, TKM_GRPC_ABORTED);
        return;
    }
    if (op->kind == CSI_OP_PUBLISH) {
        pub_start(op);
        return;
    }
    op->work.data = op;
    if (uv_queue_work(op->d->loop, &op->work, unpub_work, unpub_after) < 0)
        op_finish(op, TKM_GRPC_INTERNAL, "tkm-csi: cannot queue the unpublish work");
}

/* ---- handlers ----------------------------------------------------------------- */

static struct csi_op *op_new(struct csi_driver *d, struct tkm_grpc_call *call,
                             enum csi_op_kind kind, const char *vol, const char *target)
{
    struct csi_op *op = calloc(1, sizeof(*op));
    if (!op || !(op->vol = strdup(vol)) || !(op->target = strdup(target))) {
        if (op)
            free(op->vol);
        free(op);
        tkm_grpc_call_fail(call, TKM_GRPC_RESOURCE_EXHAUSTED, "tkm-csi: out of memory");
        return NULL;
    }
    op->d = d;
    op->call = call;
    op->kind = kind;
    op->t0 = uv_now(d->loop);
    return op;
}

/* Checks volume id and target; fills err and returns the code, or OK. On OK
 * *root is the root's real path and *real (owned) the target below it. */
static int check_vol_target(struct csi_driver *d, const char *vol, const char *target,
                            const char *target_field, const char **root, char **real,
                            struct tkm_err *err)
{
    const struct csi_config *cfg = d->cfg;
    const char *r;
    size_t i, rl;
    *real = NULL;
    if (!vol || !vol[0])
        return tkm_err_set(err, -EINVAL, "volume_id is required"), TKM_GRPC_INVALID_ARGUMENT;
    if (!target || !target[0])
        return tkm_err_set(err, -EINVAL, "%s is required", target_field), TKM_GRPC_INVALID_ARGUMENT;
    if (csi_check_volume_id(vol, err) < 0 || csi_check_abs_path(target, target_field, err) < 0)
        return TKM_GRPC_INVALID_ARGUMENT;
    r = csi_target_root(target, cfg->target_roots, cfg->n_target_roots);
    if (!r) {
        tkm_err_set(err, -EINVAL, "%s %s is not below the kubelet's pods dir or a --target-root",
                    target_field, target);
        return TKM_GRPC_INVALID_ARGUMENT;
    }
    for (i = 0; cfg->target_roots[i] != r; i++)
        ;
    rl = strcmp(r, "/") == 0 ? 0 : strlen(r);
    *root = d->real_roots[i];
    size_t n = strlen(*root) + strlen(target + rl) + 1;
    if (!(*real = malloc(n)))
        return tkm_err_set(err, -ENOMEM, "out of memory"), TKM_GRPC_RESOURCE_EXHAUSTED;
    snprintf(*real, n, "%s%s", strcmp(*root, "/") == 0 ? "" : *root, target + rl);
    return TKM_GRPC_OK;
}

static void node_publish(struct tkm_grpc_call *call, void *data)
{
    struct csi_driver *d = data;
    struct tkm_err err = {0};
    const char *root = NULL, **keys = NULL, **vals = NULL;
    char *real = NULL;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    Csi__V1__NodePublishVolumeRequest *q = csi__v1__node_publish_volume_request__unpack(NULL, n, b);
    struct csi_op *op = NULL;
    int code;
    if (!q) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad NodePublishVolumeRequest");
        return;
    }
    if ((code =
             check_vol_target(d, q->volume_id, q->target_path, "target_path", &root, &real, &err)))
        goto fail;
    code = TKM_GRPC_INVALID_ARGUMENT;
    if (!q->volume_capability) {
        tkm_err_set(&err, -EINVAL, "volume_capability is required");
        goto fail;
    }
    if (q->volume_capability->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT) {
        tkm_err_set(&err, -EINVAL,
                    "csi.tkm.io volumes are directories: block access is not "
                    "supported (volume_capability must be mount)");
        goto fail;
    }
    keys = calloc(q->n_volume_context + 1, sizeof(*keys));
    vals = calloc(q->n_volume_context + 1, sizeof(*vals));
    if (!keys || !vals) {
        code = TKM_GRPC_RESOURCE_EXHAUSTED;
        tkm_err_set(&err, -ENOMEM, "tkm-csi: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < q->n_volume_context; i++) {
        keys[i] = q->volume_context[i]->key;
        vals[i] = q->volume_context[i]->value;
    }
    if (!(op = op_new(d, call, CSI_OP_PUBLISH, q->volume_id, q->target_path)))
        goto out;
    if (csi_attrs_parse(&op->attrs, keys, vals, q->n_volume_context, q->readonly, &err) < 0) {
        op_free(op);
        goto fail;
    }
    op->root = root;
    op->real = real;
    real = NULL;
    op->req = q;
    q = NULL;
    op_enqueue(d, op);
    goto out;
fail:
    tkm_info("publish %s: %s: %s", q->volume_id, tkm_grpc_code_name(code), tkm_err_str(&err));
    tkm_grpc_call_fail(call, code, tkm_err_str(&err));
out:
    free(real);
    free(keys);
    free(vals);
    if (q)
        csi__v1__node_publish_volume_request__free_unpacked(q, NULL);
}

static void node_unpublish(struct tkm_grpc_call *call, void *data)
{
    struct csi_driver *d = data;
    struct tkm_err err = {0};
    const char *root = NULL;
    char *real = NULL;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    Csi__V1__NodeUnpublishVolumeRequest *q =
        csi__v1__node_unpublish_volume_request__unpack(NULL, n, b);
    int code;
    if (!q) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad NodeUnpublishVolumeRequest");
        return;
    }
    code = check_vol_target(d, q->volume_id, q->target_path, "target_path", &root, &real, &err);
    if (code) {
        tkm_grpc_call_fail(call, code, tkm_err_str(&err));
    } else {
        struct csi_op *op = op_new(d, call, CSI_OP_UNPUBLISH, q->volume_id, q->target_path);
        if (op) {
            op->root = root;
            op->real = real;
            real = NULL;
            op_enqueue(d, op);
        }
    }
    free(real);
    csi__v1__node_unpublish_volume_request__free_unpacked(q, NULL);
}

static void node_stats(struct tkm_grpc_call *call, void *data)
{
    struct csi_driver *d = data;
    struct tkm_err err = {0};
    const char *root = NULL;
    char what[512], *real = NULL;
    struct statvfs sv;
    size_t n;
    const void *b = tkm_grpc_call_request(call, &n);
    Csi__V1__NodeGetVolumeStatsRequest *q =
        csi__v1__node_get_volume_stats_request__unpack(NULL, n, b);
    Csi__V1__NodeGetVolumeStatsResponse r = CSI__V1__NODE_GET_VOLUME_STATS_RESPONSE__INIT;
    Csi__V1__VolumeUsage ub = CSI__V1__VOLUME_USAGE__INIT, ui = CSI__V1__VOLUME_USAGE__INIT;
    Csi__V1__VolumeUsage *u[2] = {&ub, &ui};
    int code, st;
    if (!q) {
        tkm_grpc_call_fail(call, TKM_GRPC_INVALID_ARGUMENT, "bad NodeGetVolumeStatsRequest");
        return;
    }
    code = check_vol_target(d, q->volume_id, q->volume_path, "volume_path", &root, &real, &err);
    if (code && q->volume_id[0] && q->volume_path[0]) {
        /* A path or id we could never have published: not found (CSI). */
        code = TKM_GRPC_NOT_FOUND;
        tkm_err_prefix(&err, "volume %s is not published at %s", q->volume_id, q->volume_path);
    }
    if (code)
        goto fail;
    /* A /proc read and a statvfs of an overlay: quick, on the loop. */
    st = target_state(real, q->volume_id, what, sizeof(what), NULL, &err);
    code = TKM_GRPC_INTERNAL;
    if (st < 0)
        goto fail;
    if (st != 1) {
        code = TKM_GRPC_NOT_FOUND;
        tkm_err_set(&err, -ENOENT, "volume %s is not published at %s", q->volume_id,
                    q->volume_path);
        goto fail;
    }
    if (statvfs(real, &sv) < 0) {
        tkm_err_set(&err, -errno, "statvfs %s: %s", q->volume_path, strerror(errno));
        goto fail;
    }
    ub.unit = CSI__V1__VOLUME_USAGE__UNIT__BYTES;
    ub.total = (int64_t)(sv.f_blocks * sv.f_frsize);
    ub.available = (int64_t)(sv.f_bavail * sv.f_frsize);
    ub.used = (int64_t)((sv.f_blocks - sv.f_bfree) * sv.f_frsize);
    ui.unit = CSI__V1__VOLUME_USAGE__UNIT__INODES;
    ui.total = (int64_t)sv.f_files;
    ui.available = (int64_t)sv.f_favail;
    ui.used = (int64_t)(sv.f_files - sv.f_ffree);
    r.n_usage = 2;
    r.usage = u;
    csi_reply(call, &r.base);
    free(real);
    csi__v1__node_get_volume_stats_request__free_unpacked(q, NULL);
    return;
fail:
    tkm_grpc_call_fail(call, code, tkm_err_str(&err));
    free(real);
    csi__v1__node_get_volume_stats_request__free_unpacked(q, NULL);
}

static void node_caps(struct tkm_grpc_call *call, void *data)
{
    Csi__V1__NodeGetCapabilitiesResponse r = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;
    Csi__V1__NodeServiceCapability c = CSI__V1__NODE_SERVICE_CAPABILITY__INIT;
    Csi__V1__NodeServiceCapability__RPC rpc = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__INIT;
    Csi__V1__NodeServiceCapability *cs[1] = {&c};
    (void)data;
    rpc.type = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS;
    c.type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
    c.rpc = &rpc;
    r.n_capabilities = 1;
    r.capabilities = cs;
    csi_reply(call, &r.base);
}

static void node_info(struct tkm_grpc_call *call, void *data)
{
    struct csi_driver *d = data;
    Csi__V1__NodeGetInfoResponse r = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
    r.node_id = (char *)d->cfg->node_id;
    r.max_volumes_per_node = d->cfg->max_volumes;
    csi_reply(call, &r.base);
}

int csi_node_register(struct csi_driver *d, struct tkm_err *err)
{
    static const struct {
        const char *m;
        tkm_grpc_handler h;
    } t[] = {
        {"/csi.v1.Node/NodePublishVolume", node_publish},
        {"/csi.v1.Node/NodeUnpublishVolume", node_unpublish},
        {"/csi.v1.Node/NodeGetVolumeStats", node_stats},
        {"/csi.v1.Node/NodeGetCapabilities", node_caps},
        {"/csi.v1.Node/NodeGetInfo", node_info},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int rc = tkm_grpc_server_register(d->srv, t[i].m, t[i].h, d, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}
