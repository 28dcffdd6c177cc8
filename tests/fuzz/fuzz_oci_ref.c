/* fuzz_oci_ref.c - the reference parser: no crash, and parse(format(parse(x))) == parse(x). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/ref.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    struct tkm_oci_ref a, b;
    struct tkm_err e = {0};
    char canon[1200];
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (tkm_oci_ref_parse(&a, s, &e) == 0) {
        if (tkm_oci_ref_format(&a, canon, sizeof canon) < 0)
            abort();
        if (tkm_oci_ref_parse(&b, canon, NULL) != 0)
            abort(); /* the canonical form must parse */
        if (strcmp(a.host, b.host) || strcmp(a.repo, b.repo) || strcmp(a.tag, b.tag) ||
            strcmp(a.digest, b.digest))
            abort(); /* and give the same reference */
        (void)tkm_oci_host_plain_http(a.host, NULL);
    } else if (e.code == 0 || !e.msg[0]) {
        abort(); /* every rejection explains itself */
    }
    free(s);
    return 0;
}
