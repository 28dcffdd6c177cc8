/*
 * trust-int.h - helpers shared inside lib/trust (not installed).
 */
#ifndef TKM_TRUST_INT_H
#define TKM_TRUST_INT_H

#include <jansson.h>
#include <openssl/evp.h>
#include <stddef.h>

/* The first key (borrowed from v) of an object anywhere in v that has two
 * keys equal but for case (Go's encoding/json matches them
 * case-insensitively), or NULL when there is none. */
const char *tkm__trust_case_dup(json_t *v);

/* 1 when sig verifies over p[0..n) with k and md (NULL for Ed25519), else 0. */
int tkm__trust_sig_ok(EVP_PKEY *k, const EVP_MD *md, const unsigned char *sig, size_t siglen,
                      const unsigned char *p, size_t n);

#endif
