/* digest.c - see digest.h. */
#include <tkm/oci/digest.h>

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <unistd.h>

#include <tkm/archive.h>
#include <tkm/util.h>

int tkm_oci_hasher_init(struct tkm_oci_hasher *h)
{
    h->bytes = 0;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx)
        return -ENOMEM;
    if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
        return -EIO;
    }
    return 0;
}

int tkm_oci_hasher_update(struct tkm_oci_hasher *h, const void *p, size_t n)
{
    if (!h->ctx)
        return -EINVAL;
    if (n && EVP_DigestUpdate(h->ctx, p, n) != 1)
        return -EIO;
    h->bytes += n;
    return 0;
}

int tkm_oci_hasher_final(struct tkm_oci_hasher *h, char out[TKM_OCI_DIGEST_LEN + 1])
{
    unsigned char md[32];
    unsigned int len = 0;
    if (!h->ctx)
        return -EINVAL;
    if (EVP_DigestFinal_ex(h->ctx, md, &len) != 1 || len != 32)
        return -EIO;
    memcpy(out, "sha256:", 7);
    tkm_hex(md, 32, out + 7);
    return 0;
}

void tkm_oci_hasher_release(struct tkm_oci_hasher *h)
{
    if (h && h->ctx) {
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
    }
}

int tkm_oci_digest_bytes(const void *p, size_t n, char out[TKM_OCI_DIGEST_LEN + 1])
{
    struct tkm_oci_hasher h;
    int rc = tkm_oci_hasher_init(&h);
    if (rc == 0)
        rc = tkm_oci_hasher_update(&h, p, n);
    if (rc == 0)
        rc = tkm_oci_hasher_final(&h, out);
    tkm_oci_hasher_release(&h);
    return rc;
}

int tkm_oci_digest_file(const char *path, char out[TKM_OCI_DIGEST_LEN + 1], uint64_t *size,
                        struct tkm_err *err)
{
    struct tkm_oci_hasher h = {0};
    char buf[65536];
    int rc, fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tkm_err_set(err, -errno, "open %s: %s", path, strerror(errno));
    rc = tkm_oci_hasher_init(&h);
    while (rc == 0) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = tkm_err_set(err, -errno, "read %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        rc = tkm_oci_hasher_update(&h, buf, (size_t)r);
    }
    if (rc == 0)
        rc = tkm_oci_hasher_final(&h, out);
    if (rc == 0 && size)
        *size = h.bytes;
    tkm_oci_hasher_release(&h);
    close(fd);
    return rc;
}

const char *tkm_oci_digest_hex(const char *d)
{
    const char *c = strchr(d, ':');
    return c ? c + 1 : d;
}

/* Here, not in archive.c: a program that checks digests but extracts nothing
 * (tkm-controller) then links no libarchive, zlib or zstd. */
int tkm_digest_valid(const char *s)
{
    if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != 71)
        return 0;
    for (const char *p = s + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}
