/* fuzz_variants.c - variant indexes (triton/variants.h): no crash, no leak, consistent results.
 * A parsed set must keep its invariants (at most TKM_VARIANTS_MAX variants, no two with one
 * target, valid digests) and the pick must answer for a fixed GPU. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/digest.h>
#include <tkm/triton/variants.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tkm_variant_set s;
    struct tkm_err e = {0};
    struct tkm_gpu g;
    int is = tkm_variants_is_index(data, size);
    int rc = tkm_variants_parse(data, size, NULL, "fuzz", &s, &e);
    if (rc != 0) {
        if (rc != -EPROTO && rc != -ENOMEM)
            abort();
        if (rc == -EPROTO && !e.msg[0])
            abort();
        if (s.v || s.n)
            abort();
        return 0;
    }
    if (!is || !s.from_index || s.n == 0 || s.n > TKM_VARIANTS_MAX)
        abort();
    for (size_t i = 0; i < s.n; i++) {
        char d[160];
        if (!tkm_oci_digest_valid(s.v[i].digest) || s.v[i].warp_size < 1 || s.v[i].warp_size > 1024)
            abort();
        for (size_t k = 0; k < i; k++)
            if (tkm_variant_same_target(&s.v[i], &s.v[k]))
                abort();
        tkm_variant_describe(&s.v[i], d, sizeof d);
    }
    memset(&g, 0, sizeof g);
    snprintf(g.backend, sizeof g.backend, "cuda");
    snprintf(g.arch, sizeof g.arch, "90");
    g.warp_size = 32;
    size_t idx = SIZE_MAX;
    const char *reason = NULL;
    char msg[512];
    if (tkm_variant_pick(&s, &g, "amd64", &idx, &reason, msg, sizeof msg) == 0) {
        if (idx >= s.n)
            abort();
    } else if (!reason || !msg[0]) {
        abort();
    }
    tkm_variant_set_release(&s);
    return 0;
}
