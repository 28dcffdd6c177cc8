/*
 * async.h - image operations for daemons that own one libuv loop.
 *
 * The registry client is synchronous; these run it on the libuv thread pool
 * (uv_queue_work) and report on the loop, so the loop never blocks:
 *
 *   tkm_oci_inspect_start(loop, &ref, &opts, cb, data, &err)   resolve + manifest + config
 *   tkm_oci_pull_start(loop, &ref, &opts, dir, tag, cb, data, &err)   ...and layers, to a layout
 *
 * Everything passed in is copied (the reference, the layout path and tag,
 * and every string and byte buffer in opts), so the caller may free its
 * copies on return. opts.progress, if set, is called on the worker thread.
 *
 * Callback contract: if _start fails (< 0), cb is never called. Otherwise cb
 * runs exactly once, on the loop thread, with rc 0 and res filled, or rc < 0
 * and err saying why (rc -ECANCELED when the loop was closed before the work
 * started). res and err are borrowed for the call; cb may keep the result by
 * copying *res and zeroing it (memset), which hands over its allocations.
 */
#ifndef TKM_OCI_ASYNC_H
#define TKM_OCI_ASYNC_H

#include <uv.h>

#include <tkm/err.h>
#include <tkm/oci/image.h>

typedef void (*tkm_oci_job_cb)(int rc, struct tkm_oci_pull_result *res, const struct tkm_err *err,
                               void *data);

int tkm_oci_inspect_start(uv_loop_t *loop, const struct tkm_oci_ref *ref,
                          const struct tkm_oci_registry_opts *opts, tkm_oci_job_cb cb, void *data,
                          struct tkm_err *err);

int tkm_oci_pull_start(uv_loop_t *loop, const struct tkm_oci_ref *ref,
                       const struct tkm_oci_registry_opts *opts, const char *layout_dir,
                       const char *tag, tkm_oci_job_cb cb, void *data, struct tkm_err *err);

#endif
