/*
 * fuzz_triton_meta.c - libFuzzer target for the parsers of untrusted Triton
 * cache files: kernel metadata (<name>.json), group files (__grp__*.json),
 * the PTX header, the cubin/hsaco ELF header and the summary label.
 * The first byte picks the parser; the rest is the input.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/gpu/compat.h>
#include <tkm/triton/cache.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tkm_err err = {0};
    if (size < 1)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 5) {
    case 0: {
        struct tkm_triton_kernel k;
        if (tkm_triton_meta_parse(&k, p, n, "fuzz.json", &err) == 0) {
            struct tkm_triton_summary s;
            if (tkm_triton_summary_build(&s, &k, 1, &err) == 0) {
                char *label = NULL;
                if (tkm_triton_summary_label(&s, &label, &err) == 0) {
                    struct tkm_triton_summary back;
                    if (tkm_triton_summary_parse(&back, label, &err) == 0)
                        tkm_triton_summary_release(&back);
                    free(label);
                }
                tkm_triton_summary_release(&s);
            }
            tkm_triton_kernel_release(&k);
        }
        break;
    }
    case 1: {
        struct tkm_triton_group g;
        if (tkm_triton_group_parse(&g, p, n, "fuzz-grp.json", &err) == 0)
            tkm_triton_group_release(&g);
        break;
    }
    case 2: {
        struct tkm_ptx_version v;
        char target[32];
        tkm_ptx_header_parse(p, n, &v, target, sizeof target);
        break;
    }
    case 3: {
        char backend[16], arch[32];
        tkm_elf_gpu_arch((const unsigned char *)p, n, backend, arch, sizeof arch);
        break;
    }
    default: {
        char *s = malloc(n + 1);
        struct tkm_triton_summary sum;
        if (!s)
            return 0;
        memcpy(s, p, n);
        s[n] = '\0';
        if (tkm_triton_summary_parse(&sum, s, &err) == 0) {
            struct tkm_gpu g;
            struct tkm_compat_verdict v;
            memset(&g, 0, sizeof g);
            snprintf(g.backend, sizeof g.backend, "cuda");
            snprintf(g.arch, sizeof g.arch, "90");
            snprintf(g.name, sizeof g.name, "fuzz");
            g.warp_size = 32;
            g.cuda_driver_version = 12040;
            g.usable = 1;
            tkm_compat_check(&sum, &g, &v);
            tkm_triton_summary_release(&sum);
        }
        free(s);
        break;
    }
    }
    return 0;
}
