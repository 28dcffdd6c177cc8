/* fuzz_oci_manifest.c - manifest/index/config JSON: no crash, no leak, consistent results.
 * The first byte picks the Content-Type the bytes are "served" with. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/manifest.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const types[] = {NULL,
                                    TKM_OCI_MT_MANIFEST,
                                    TKM_OCI_MT_INDEX,
                                    TKM_DOCKER_MT_MANIFEST,
                                    TKM_DOCKER_MT_LIST,
                                    "application/json",
                                    TKM_OCI_MT_MANIFEST "; charset=utf-8"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tkm_oci_manifest m;
    struct tkm_oci_config c;
    struct tkm_err e = {0};
    if (size < 1)
        return 0;
    const char *ct = types[data[0] % (sizeof types / sizeof types[0])];
    if (tkm_oci_manifest_parse(&m, ct, data + 1, size - 1, "fuzz", &e) == 0) {
        if (m.kind == TKM_OCI_KIND_NONE || !tkm_oci_digest_valid(m.digest) || m.size != size - 1)
            abort();
        for (size_t i = 0; i < m.n_descs; i++)
            if (!tkm_oci_digest_valid(m.descs[i].digest))
                abort();
        if (m.kind == TKM_OCI_KIND_INDEX) {
            const struct tkm_oci_desc *d = NULL;
            if (tkm_oci_index_select(&m, "linux", "amd64", NULL, &d, NULL) == 0 &&
                (d < m.descs || d >= m.descs + m.n_descs))
                abort();
        }
        tkm_oci_manifest_release(&m);
    } else if (!e.msg[0] && e.code != -ENOMEM) {
        abort();
    }
    if (tkm_oci_config_parse(&c, data + 1, size - 1, "fuzz", NULL) == 0) {
        (void)tkm_oci_config_label(&c, "cache.triton.image/summary");
        tkm_oci_config_release(&c);
    }
    return 0;
}
