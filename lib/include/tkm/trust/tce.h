/*
 * tce.h - the TCE per-entry signature scheme (TKDK tce/, "signed cache").
 *
 * In a Triton cache directory (one sub-directory per kernel), every regular
 * file of a kernel directory except the group files __grp__*.json (and the
 * signatures themselves) has a sibling "<file>.sig": the raw RSA PKCS#1 v1.5
 * signature over the SHA-384 digest of the file bytes. TCE's
 * SignedCacheManager checks these when Triton loads a kernel.
 *
 * Note the scheme's gap (docs/security.md): group files are not signed, so
 * they can be swapped; tkm rewrites them itself and relies on the image
 * signature (cosign) for the whole entry.
 *
 * Results are per file, in a report owned by the caller
 * (tkm_tce_report_release). Paths in it are relative to the cache dir.
 */
#ifndef TKM_TRUST_TCE_H
#define TKM_TRUST_TCE_H

#include <stddef.h>

#include <tkm/err.h>

enum tkm_tce_status {
    TKM_TCE_OK = 0,      /* signed (sign) or signature valid (verify) */
    TKM_TCE_MISSING_SIG, /* verify: no <file>.sig */
    TKM_TCE_BAD_SIG,     /* verify: the signature does not verify */
    TKM_TCE_ERROR,       /* the file could not be read/written, or is not a regular file */
};

struct tkm_tce_entry {
    char *path; /* owned: "<kernel dir>/<file>" */
    enum tkm_tce_status status;
    char *msg; /* owned, NULL when OK */
};

struct tkm_tce_report {
    struct tkm_tce_entry *v; /* owned array, sorted by path */
    size_t n, cap;
    size_t kernel_dirs; /* kernel directories visited */
    size_t ok, failed;
};

void tkm_tce_report_release(struct tkm_tce_report *r);
const char *tkm_tce_status_name(enum tkm_tce_status s);

/* verify 0: signs every eligible file under cache_dir (borrowed) with the
 * RSA private key in pem (borrowed), writing <file>.sig (replacing an old
 * one). 0 when every file was signed; -EIO when some failed (see the report).
 * verify 1: verifies every eligible file against the RSA public key in pem.
 * 0 when all verify; -EKEYREJECTED when any is unsigned or does not verify
 * (the report says which); a cache dir without any eligible file is -ENOENT.
 * Other negative codes when nothing could be done (a bad key or dir; err
 * says why). */
int tkm_tce_dir(const char *cache_dir, const char *pem, size_t pem_len, int verify,
                struct tkm_tce_report *rep, struct tkm_err *err);

#endif
