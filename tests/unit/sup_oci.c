/* sup_oci.c - see sup_oci.h. */
#include "sup_oci.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <tkm/oci/digest.h>

#include "oci/session-int.h"

struct wait {
    int done, rc;
    struct tkm_err *err;
};

static void wait_op(int rc, struct tkm_err *e, void *data)
{
    struct wait *w = data;
    w->rc = rc;
    if (rc && w->err && e)
        *w->err = *e;
    w->done = 1;
}

/* Runs s's loop until the operation w waits for has reported. */
static int run(struct tkm_oci_session *s, struct wait *w, int started)
{
    if (started)
        return started;
    while (!w->done)
        uv_run(tkm__oci_session_loop(s), UV_RUN_ONCE);
    return w->rc;
}

const char *sup_oci_scheme(struct tkm_oci_registry *r)
{
    return tkm_oci_session_scheme(tkm__oci_registry_session(r));
}

int sup_oci_resolve(struct tkm_oci_registry *r, const char *repo, const char *reference,
                    char digest[TKM_OCI_DIGEST_LEN + 1], struct tkm_err *err)
{
    struct tkm_buf body = TKM_BUF_INIT(TKM_OCI_MANIFEST_MAX);
    int rc = tkm_oci_registry_get_manifest(r, repo, reference, &body, NULL, 0, digest, err);
    tkm_buf_release(&body);
    return rc;
}

int sup_oci_fetch_blob(struct tkm_oci_registry *r, const char *repo, const struct tkm_oci_desc *d,
                       const char *path, struct tkm_err *err)
{
    struct tkm_oci_session *s = tkm__oci_registry_session(r);
    struct wait w = {.err = err};
    int fd, rc;
    if (!tkm_oci_digest_valid(d->digest))
        return tkm_err_set(err, -EINVAL, "blob digest '%.80s' is not sha256:<64 hex>", d->digest);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return tkm_err_set(err, -errno, "blob %s: create %s: %s", d->digest, path, strerror(errno));
    rc = run(s, &w, tkm__oci_get_blob(s, repo, d, fd, path, NULL, wait_op, &w, NULL, err));
    close(fd);
    if (rc)
        unlink(path);
    return rc;
}

int sup_oci_fetch_blob_mem(struct tkm_oci_registry *r, const char *repo,
                           const struct tkm_oci_desc *d, struct tkm_buf *out, struct tkm_err *err)
{
    struct tkm_oci_session *s = tkm__oci_registry_session(r);
    struct wait w = {.err = err};
    return run(s, &w, tkm__oci_get_blob(s, repo, d, -1, NULL, out, wait_op, &w, NULL, err));
}

int sup_oci_get_referrers(struct tkm_oci_registry *r, const char *repo, const char *digest,
                          const char *artifact_type, struct tkm_buf *body, struct tkm_err *err)
{
    struct tkm_oci_session *s = tkm__oci_registry_session(r);
    struct wait w = {.err = err};
    return run(
        s, &w,
        tkm__oci_get_referrers(s, repo, digest, artifact_type, body, wait_op, &w, NULL, err));
}
