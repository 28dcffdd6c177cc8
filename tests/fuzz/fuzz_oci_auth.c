/* fuzz_oci_auth.c - WWW-Authenticate and docker config parsing: no crash, no leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/oci/auth.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tkm_oci_challenge c;
    struct tkm_oci_creds cr;
    char tok[256];
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    if (tkm_oci_challenge_parse(&c, s, NULL) == 0 && c.scheme == TKM_OCI_AUTH_BEARER && !c.realm[0])
        abort();
    (void)tkm_oci_creds_from_config(data, size, "registry-1.docker.io", "fuzz", &cr, NULL);
    (void)tkm_oci_creds_from_config(data, size, "127.0.0.1:5000", "fuzz", &cr, NULL);
    (void)tkm_oci_token_parse(data, size, "fuzz", tok, sizeof tok, NULL, NULL);
    free(s);
    return 0;
}
