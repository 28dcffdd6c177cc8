/*
 * troot.c - Sigstore trusted_root.json (mediaType
 * application/vnd.dev.sigstore.trustedroot+json;version=0.1): Fulcio
 * certificate authorities (certChain, leaf-most first, validFor), Rekor
 * transparency logs and CT logs (publicKey.rawBytes SPKI DER, validFor).
 * A log's id is the sha256 of its public key DER, computed here (the file's
 * logId is not trusted for that).
 */
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/buf.h>
#include <tkm/util.h>

#include "trust-int.h"

/* RFC 3339 "2026-11-23T05:16:22.434049245Z" (fraction optional, Z or +hh:mm). */
static int parse_time(const char *s, int64_t *out)
{
    struct tm tm;
    int y, mo, d, h, mi, sec, n = 0;
    memset(&tm, 0, sizeof tm);
    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 ||
        n != 19)
        return -EINVAL;
    const char *p = s + n;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    int64_t off = 0;
    if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int oh = (p[1] - '0') * 10 + (p[2] - '0'), om = (p[4] - '0') * 10 + (p[5] - '0');
        off = (int64_t)(oh * 3600 + om * 60) * (*p == '+' ? 1 : -1);
    } else if (strcmp(p, "Z") != 0) {
        return -EINVAL;
    }
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    *out = (int64_t)timegm(&tm) - off;
    return 0;
}

/* validFor {start, end?}: end absent = open. */
static int valid_for(json_t *v, int64_t *start, int64_t *end)
{
    *start = INT64_MIN;
    *end = INT64_MAX;
    if (!v)
        return 0;
    json_t *s = json_object_get(v, "start"), *e = json_object_get(v, "end");
    if (s && parse_time(json_string_value(s), start) < 0)
        return -EINVAL;
    if (e && parse_time(json_string_value(e), end) < 0)
        return -EINVAL;
    return 0;
}

int tkm__trust_b64(const char *s, size_t max, struct tkm_buf *out)
{
    tkm_buf_release(out);
    tkm_buf_init(out, max);
    if (!s)
        return -EINVAL;
    int rc = tkm_base64_decode(s, strlen(s), out);
    return rc == -ENOMEM ? rc : rc < 0 ? -EINVAL : 0;
}

static int load_log(json_t *j, size_t i, const char *what, struct tkm__tlog *l, struct tkm_err *err)
{
    struct tkm_buf der = TKM_BUF_INIT(0);
    json_t *pk = json_object_get(j, "publicKey");
    int rc = tkm__trust_b64(json_string_value(json_object_get(pk, "rawBytes")), 16384, &der);
    if (rc < 0) {
        rc = tkm_err_set(err, -EINVAL,
                         "trusted root: %s[%zu].publicKey.rawBytes is missing or "
                         "not base64",
                         what, i);
        goto out;
    }
    const unsigned char *p = (const unsigned char *)der.data;
    if (!(l->key = d2i_PUBKEY(NULL, &p, (long)der.len))) {
        rc = tkm_err_set(err, -EINVAL, "trusted root: %s[%zu].publicKey is not a DER public key",
                         what, i);
        goto out;
    }
    unsigned int n = 0;
    EVP_Digest(der.data, der.len, l->id, &n, EVP_sha256(), NULL);
    if (valid_for(json_object_get(pk, "validFor"), &l->start, &l->end) < 0)
        rc = tkm_err_set(err, -EINVAL, "trusted root: %s[%zu].publicKey.validFor is not RFC 3339",
                         what, i);
out:
    tkm_buf_release(&der);
    return rc;
}

static int load_ca(json_t *j, size_t i, struct tkm__ca *ca, struct tkm_err *err)
{
    struct tkm_buf der = TKM_BUF_INIT(0);
    json_t *certs = json_object_get(json_object_get(j, "certChain"), "certificates"), *c;
    size_t k;
    int rc = 0;
    if (!json_is_array(certs) || json_array_size(certs) == 0)
        return tkm_err_set(
            err, -EINVAL, "trusted root: certificateAuthorities[%zu].certChain has no certificates",
            i);
    if (!(ca->chain = sk_X509_new_null()))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    json_array_foreach(certs, k, c)
    {
        X509 *x = NULL;
        if (tkm__trust_b64(json_string_value(json_object_get(c, "rawBytes")), 65536, &der) == 0) {
            const unsigned char *p = (const unsigned char *)der.data;
            x = d2i_X509(NULL, &p, (long)der.len);
        }
        if (!x || !sk_X509_push(ca->chain, x)) {
            X509_free(x);
            rc =
                tkm_err_set(err, -EINVAL,
                            "trusted root: certificateAuthorities[%zu].certChain.certificates[%zu] "
                            "is not a DER certificate",
                            i, k);
            goto out;
        }
    }
    if (valid_for(json_object_get(j, "validFor"), &ca->start, &ca->end) < 0)
        rc = tkm_err_set(err, -EINVAL,
                         "trusted root: certificateAuthorities[%zu].validFor is not RFC 3339", i);
out:
    tkm_buf_release(&der);
    return rc;
}

void tkm__troot_release(struct tkm__troot *t)
{
    for (size_t i = 0; i < t->nca; i++)
        sk_X509_pop_free(t->ca[i].chain, X509_free);
    for (size_t i = 0; i < t->ntlog; i++)
        EVP_PKEY_free(t->tlog[i].key);
    for (size_t i = 0; i < t->nctlog; i++)
        EVP_PKEY_free(t->ctlog[i].key);
    free(t->ca);
    free(t->tlog);
    free(t->ctlog);
    memset(t, 0, sizeof *t);
}

static int load_logs(json_t *arr, const char *what, struct tkm__tlog **out, size_t *n,
                     struct tkm_err *err)
{
    json_t *j;
    size_t i;
    if (!json_is_array(arr) || json_array_size(arr) > 64)
        return tkm_err_set(err, -EINVAL, "trusted root: %s is not an array (of at most 64)", what);
    if (json_array_size(arr) && !(*out = calloc(json_array_size(arr), sizeof **out)))
        return tkm_err_set(err, -ENOMEM, "out of memory");
    json_array_foreach(arr, i, j)
    {
        int rc = load_log(j, i, what, &(*out)[i], err);
        (*n)++;
        if (rc < 0)
            return rc;
    }
    return 0;
}

int tkm__troot_load(const char *data, size_t len, struct tkm__troot *t, struct tkm_err *err)
{
    json_error_t je;
    json_t *cas, *j;
    size_t i;
    int rc = 0;
    memset(t, 0, sizeof *t);
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        rc = tkm_err_set(err, -EINVAL, "trusted root is not a JSON object: %s (line %d)",
                         root ? "not an object" : je.text, je.line);
        goto out;
    }
    const char *mt = json_string_value(json_object_get(root, "mediaType"));
    if (!mt || strncmp(mt, "application/vnd.dev.sigstore.trustedroot", 40) != 0) {
        rc =
            tkm_err_set(err, -EINVAL, "trusted root: mediaType '%s' is not a Sigstore trusted root",
                        mt ? mt : "(none)");
        goto out;
    }
    cas = json_object_get(root, "certificateAuthorities");
    if (!json_is_array(cas) || json_array_size(cas) > 64) {
        rc = tkm_err_set(err, -EINVAL, "trusted root: certificateAuthorities is not an array");
        goto out;
    }
    if (json_array_size(cas) && !(t->ca = calloc(json_array_size(cas), sizeof *t->ca))) {
        rc = tkm_err_set(err, -ENOMEM, "out of memory");
        goto out;
    }
    json_array_foreach(cas, i, j)
    {
        t->nca++;
        if ((rc = load_ca(j, i, &t->ca[i], err)) < 0)
            goto out;
    }
    if ((rc = load_logs(json_object_get(root, "tlogs"), "tlogs", &t->tlog, &t->ntlog, err)) < 0)
        goto out;
    j = json_object_get(root, "ctlogs");
    if (j && (rc = load_logs(j, "ctlogs", &t->ctlog, &t->nctlog, err)) < 0)
        goto out;
    if (t->nca == 0 || t->ntlog == 0)
        rc = tkm_err_set(err, -EINVAL,
                         "trusted root has %zu certificate authorities and %zu transparency logs: "
                         "keyless verification needs both",
                         t->nca, t->ntlog);
out:
    json_decref(root);
    if (rc < 0)
        tkm__troot_release(t);
    return rc;
}

const struct tkm__tlog *tkm__troot_log(const struct tkm__tlog *logs, size_t n,
                                       const unsigned char id[32])
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(logs[i].id, id, 32) == 0)
            return &logs[i];
    return NULL;
}
