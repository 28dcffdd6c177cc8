/*
 * tce.c - TCE per-entry signatures: RSA PKCS#1 v1.5 over SHA-384 (tce.h).
 */
#include <tkm/trust/tce.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/fs.h>
#include <tkm/buf.h>
#include <tkm/util.h>
#include <tkm/trust/keys.h>

#define MAX_SIG   2048
#define READ_BUF  (64 * 1024)
#define MAX_NAMES 1000000

void tkm_tce_report_release(struct tkm_tce_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].path);
        free(r->v[i].msg);
    }
    free(r->v);
    memset(r, 0, sizeof(*r));
}

const char *tkm_tce_status_name(enum tkm_tce_status s)
{
    static const char *const names[] = {"ok", "unsigned", "bad signature", "error"};
    return (unsigned)s < TKM_ARRAY_SIZE(names) ? names[s] : "error";
}

static int report_add(struct tkm_tce_report *r, const char *dir, const char *file,
                      enum tkm_tce_status st, const char *msg)
{
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 64;
        struct tkm_tce_entry *nv = realloc(r->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        r->v = nv;
        r->cap = ncap;
    }
    struct tkm_buf p = TKM_BUF_INIT(8192);
    if (tkm_buf_printf(&p, "%s/%s", dir, file) < 0)
        return -ENOMEM;
    struct tkm_tce_entry *e = &r->v[r->n];
    e->path = tkm_buf_detach(&p, NULL);
    e->status = st;
    e->msg = msg ? strdup(msg) : NULL;
    if (!e->path || (msg && !e->msg)) {
        free(e->path);
        free(e->msg);
        return -ENOMEM;
    }
    r->n++;
    if (st == TKM_TCE_OK)
        r->ok++;
    else
        r->failed++;
    return 0;
}

static int eligible(const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, "__grp__", 7) == 0)
        return 0;
    if (n >= 4 && strcmp(name + n - 4, ".sig") == 0)
        return 0;
    return 1;
}

/* Feeds the file into ctx (DigestSign/VerifyUpdate). msg gets a reason. */
static int hash_file(int dirfd, const char *name, EVP_MD_CTX *ctx, int verify, char *msg,
                     size_t msgn)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        snprintf(msg, msgn, "cannot open: %s", strerror(errno));
        return -errno;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(msg, msgn, "not a regular file");
        return -EINVAL;
    }
    unsigned char *buf = malloc(READ_BUF);
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0) {
        ssize_t r = read(fd, buf, READ_BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            snprintf(msg, msgn, "read: %s", strerror(errno));
        }
        if (r <= 0)
            break;
        int ok = verify ? EVP_DigestVerifyUpdate(ctx, buf, (size_t)r)
                        : EVP_DigestSignUpdate(ctx, buf, (size_t)r);
        if (ok != 1) {
            rc = -EIO;
            snprintf(msg, msgn, "SHA-384 failed");
        }
    }
    free(buf);
    close(fd);
    return rc;
}

static int write_sig(int dirfd, const char *name, const unsigned char *sig, size_t n, char *msg,
                     size_t msgn)
{
    char sn[NAME_MAX + 8];
    if (snprintf(sn, sizeof sn, "%s.sig", name) >= (int)sizeof sn) {
        snprintf(msg, msgn, "name too long for a .sig file");
        return -ENAMETOOLONG;
    }
    int fd = openat(dirfd, sn, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, sig, n) != (ssize_t)n) {
        int e = errno ? errno : EIO;
        snprintf(msg, msgn, "cannot write %s: %s", sn, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    if (close(fd) < 0) {
        snprintf(msg, msgn, "cannot write %s: %s", sn, strerror(errno));
        return -errno;
    }
    return 0;
}

static enum tkm_tce_status sign_one(EVP_PKEY *k, int dirfd, const char *name, char *msg,
                                    size_t msgn)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_PKEY_CTX *pctx = NULL;
    unsigned char sig[MAX_SIG];
    size_t slen = sizeof sig;
    enum tkm_tce_status st = TKM_TCE_ERROR;
    if (!ctx || EVP_DigestSignInit(ctx, &pctx, EVP_sha384(), NULL, k) != 1 ||
        EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) != 1) {
        snprintf(msg, msgn, "cannot set up RSA/SHA-384 signing");
        goto out;
    }
    if (hash_file(dirfd, name, ctx, 0, msg, msgn) < 0)
        goto out;
    if (EVP_DigestSignFinal(ctx, sig, &slen) != 1) {
        snprintf(msg, msgn, "RSA signing failed");
        goto out;
    }
    if (write_sig(dirfd, name, sig, slen, msg, msgn) == 0)
        st = TKM_TCE_OK;
out:
    EVP_MD_CTX_free(ctx);
    return st;
}

static enum tkm_tce_status verify_one(EVP_PKEY *k, int dirfd, const char *name, char *msg,
                                      size_t msgn)
{
    char sn[NAME_MAX + 8];
    unsigned char sig[MAX_SIG];
    EVP_MD_CTX *ctx = NULL;
    EVP_PKEY_CTX *pctx = NULL;
    enum tkm_tce_status st = TKM_TCE_ERROR;
    snprintf(sn, sizeof sn, "%s.sig", name);
    int fd = openat(dirfd, sn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, msgn, errno == ENOENT ? "no signature file %s" : "cannot open %s", sn);
        return errno == ENOENT ? TKM_TCE_MISSING_SIG : TKM_TCE_ERROR;
    }
    ssize_t slen = read(fd, sig, sizeof sig);
    close(fd);
    if (slen <= 0 || (size_t)slen == sizeof sig) {
        snprintf(msg, msgn, "%s is empty or too large for an RSA signature", sn);
        return TKM_TCE_BAD_SIG;
    }
    ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestVerifyInit(ctx, &pctx, EVP_sha384(), NULL, k) != 1 ||
        EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) != 1) {
        snprintf(msg, msgn, "cannot set up RSA/SHA-384 verification");
        goto out;
    }
    if (hash_file(dirfd, name, ctx, 1, msg, msgn) < 0)
        goto out;
    if (EVP_DigestVerifyFinal(ctx, sig, (size_t)slen) == 1) {
        st = TKM_TCE_OK;
    } else {
        st = TKM_TCE_BAD_SIG;
        snprintf(msg, msgn, "signature does not verify with the key (RSA PKCS#1 v1.5, SHA-384)");
    }
out:
    EVP_MD_CTX_free(ctx);
    return st;
}

/* Walks cache_dir/<kernel dir>/<file> and signs or verifies each eligible file. */
static int walk(const char *cache_dir, EVP_PKEY *k, int verify, struct tkm_tce_report *rep,
                struct tkm_err *err)
{
    char **dirs = NULL;
    size_t nd = 0;
    int rc, root = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return tkm_err_set(err, -errno, "cannot open cache dir %s: %s", cache_dir, strerror(errno));
    if ((rc = tkm_list_dir(root, TKM_LIST_DIRS, MAX_NAMES, &dirs, &nd)) < 0) {
        tkm_err_set(err, rc, "cannot list %s: %s", cache_dir, strerror(-rc));
        goto out;
    }
    for (size_t i = 0; i < nd && rc == 0; i++) {
        char **files = NULL;
        size_t nf = 0;
        int dfd = openat(root, dirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || (rc = tkm_list_dir(dfd, TKM_LIST_NONDIRS, MAX_NAMES, &files, &nf)) < 0) {
            rc = tkm_err_set(err, dfd < 0 ? -errno : rc, "cannot list %s/%s", cache_dir, dirs[i]);
            if (dfd >= 0)
                close(dfd);
            break;
        }
        rep->kernel_dirs++;
        for (size_t j = 0; j < nf && rc == 0; j++) {
            char msg[512] = "";
            if (!eligible(files[j]))
                continue;
            enum tkm_tce_status st = verify ? verify_one(k, dfd, files[j], msg, sizeof msg)
                                            : sign_one(k, dfd, files[j], msg, sizeof msg);
            if (report_add(rep, dirs[i], files[j], st, st == TKM_TCE_OK ? NULL : msg) < 0)
                rc = tkm_err_set(err, -ENOMEM, "out of memory");
        }
        tkm_names_free(files, nf);
        close(dfd);
    }
out:
    tkm_names_free(dirs, nd);
    close(root);
    return rc;
}

static int load_rsa(const char *pem, size_t len, int priv, EVP_PKEY **k, struct tkm_err *err)
{
    int rc =
        priv ? tkm_trust_load_privkey(pem, len, k, err) : tkm_trust_load_pubkey(pem, len, k, err);
    if (rc < 0)
        return rc;
    if (EVP_PKEY_get_base_id(*k) != EVP_PKEY_RSA) {
        char d[80];
        tkm_trust_key_desc(*k, d, sizeof d);
        EVP_PKEY_free(*k);
        *k = NULL;
        return tkm_err_set(err, -EINVAL, "TCE signatures are RSA; this key is %s", d);
    }
    return 0;
}

int tkm_tce_dir(const char *cache_dir, const char *pem, size_t pem_len, int verify,
                struct tkm_tce_report *rep, struct tkm_err *err)
{
    EVP_PKEY *k = NULL;
    memset(rep, 0, sizeof(*rep));
    int rc = load_rsa(pem, pem_len, !verify, &k, err);
    if (rc == 0)
        rc = walk(cache_dir, k, verify, rep, err);
    EVP_PKEY_free(k);
    if (rc == 0 && verify && rep->n == 0)
        rc = tkm_err_set(err, -ENOENT, "%s has no kernel files to verify", cache_dir);
    else if (rc == 0 && rep->failed)
        rc = tkm_err_set(err, verify ? -EKEYREJECTED : -EIO, "%zu of %zu files in %s %s",
                         rep->failed, rep->n, cache_dir,
                         verify ? "failed verification" : "could not be signed");
    return rc;
}
