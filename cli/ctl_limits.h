/*
 * ctl_limits.h - --max-bytes / --max-file-bytes for the commands that pull.
 *
 * A pull with caps inspects the image first (manifest and config, verified),
 * adds up the sizes its descriptors declare, refuses an image over the caps
 * before any layer is downloaded, then pulls that exact digest (an index's
 * digest when the reference named an index), so the bytes checked are the
 * bytes fetched: the registry client enforces each descriptor's size while it
 * streams.
 */
#ifndef CTL_LIMITS_H
#define CTL_LIMITS_H

#include <stdint.h>

#include <tkm/err.h>
#include <tkm/oci/image.h>

struct ctl_pull_caps {
    uint64_t max_bytes;      /* config + layers, 0 = no cap */
    uint64_t max_blob_bytes; /* one layer blob, 0 = no cap */
    /* --mirrors-hosts-dir / --registries-conf (borrowed, NULL: none): the
     * pull by digest tries the mirrors they name first (docs/mirrors.md) */
    const char *mirrors_dir, *registries_conf;
};

/* tkm_oci_pull with caps (caps borrowed; both 0: a plain pull). ref is
 * borrowed and not changed; res as for tkm_oci_pull. -EFBIG with err naming
 * the blob and the cap when the image is too large.
 * With mirrors, a tag is resolved at the registry itself (inspect), then the
 * digest is pulled from each mirror in order, then from the registry; each
 * mirror that fails is named on stderr ("trying ..."), the digests are
 * verified whatever served them. A bad mirror file fails the pull (-EPROTO,
 * err names the file and line). */
int ctl_pull_capped(const struct tkm_oci_ref *ref, const struct tkm_oci_registry_opts *ro,
                    const char *layout_dir, const char *tag, int layers,
                    const struct ctl_pull_caps *caps, struct tkm_oci_pull_result *res,
                    struct tkm_err *err);

#endif
