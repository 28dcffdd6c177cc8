/*
 * cmd_sign_entries.c - tkmctl sign-entries / verify-entries: the TCE
 * per-entry signatures (<tkm/trust/tce.h>) of a Triton cache directory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tkm/trust/keys.h>
#include <tkm/trust/tce.h>

#include "ctl_tce.h"
#include "ctl_args.h"
#include "tkmctl.h"

static void usage_sign(FILE *f)
{
    fprintf(f, "Usage: tkmctl sign-entries --key PRIVATE.pem CACHE_DIR\n\n"
               "Signs every file of every kernel directory of a Triton cache the way TCE's\n"
               "copy_entry.py --sign-with does: <file>.sig next to each file, the raw RSA\n"
               "PKCS#1 v1.5 signature over SHA-384 of its bytes. Group files (__grp__*.json)\n"
               "are not signed (TCE does not check them; they are rewritten on the node).\n"
               "Existing .sig files are replaced. Exit status 1 if any file failed.\n\n"
               "Flags:\n"
               "  --key FILE   RSA private key, unencrypted PEM (e.g. openssl genrsa 3072)\n"
               "  --quiet      print only failures and the summary\n\n"
               "Example:\n"
               "  openssl genrsa -out tce.key 3072 && openssl rsa -in tce.key -pubout -out "
               "tce.pub\n"
               "  tkmctl sign-entries --key tce.key ~/.triton/cache\n");
}

static void usage_verify(FILE *f)
{
    fprintf(f, "Usage: tkmctl verify-entries --key PUBLIC.pem CACHE_DIR\n\n"
               "Checks the TCE per-entry signatures of a Triton cache: every file of every\n"
               "kernel directory except __grp__*.json must have a <file>.sig that verifies\n"
               "(RSA PKCS#1 v1.5, SHA-384) with the public key. Prints each failure with its\n"
               "reason and a summary. Exit status 0 when all verify, 1 otherwise.\n\n"
               "Flags:\n"
               "  --key FILE   RSA public key, PEM (-----BEGIN PUBLIC KEY-----)\n"
               "  --list       also print every file that verified\n\n"
               "Example:\n"
               "  tkmctl verify-entries --key tce.pub ./cache/io.triton.cache\n");
}

int ctl_tce_run(int argc, char **argv, int verify)
{
    const char *cmd = verify ? "verify-entries" : "sign-entries";
    const char *key = NULL, *dir = NULL;
    int quiet = 0, list = 0;
    const struct ctl_arg sign_args[] = {{"--key", &key, NULL}, {"--quiet", NULL, &quiet}, {0}};
    const struct ctl_arg verify_args[] = {{"--key", &key, NULL}, {"--list", NULL, &list}, {0}};
    const struct ctl_args_spec spec = {cmd, verify ? verify_args : sign_args,   &dir,
                                       1,   verify ? usage_verify : usage_sign, NULL};
    int st = ctl_args_parse(&spec, argc, argv);
    if (st >= 0)
        return st;
    if (!key || !dir) {
        fprintf(stderr, "tkmctl %s: need --key FILE and CACHE_DIR\n\n", cmd);
        (verify ? usage_verify : usage_sign)(stderr);
        return 2;
    }
    char *pem = NULL;
    size_t len = 0;
    struct tkm_err err = {0};
    struct tkm_tce_report rep = {0};
    if (tkm_trust_read_file(key, 1 << 20, &pem, &len, &err) < 0) {
        fprintf(stderr, "tkmctl %s: key: %s\n", cmd, tkm_err_str(&err));
        return 1;
    }
    int rc = tkm_tce_dir(dir, pem, len, verify, &rep, &err);
    free(pem);
    if (rc < 0 && rc != -EKEYREJECTED && rc != -EIO && rep.n == 0)
        tkm_err_prefix(&err, "key %s, cache %s", key, dir);
    for (size_t i = 0; i < rep.n; i++) {
        const struct tkm_tce_entry *e = &rep.v[i];
        if (e->status != TKM_TCE_OK)
            printf("FAIL %s: %s: %s\n", e->path, tkm_tce_status_name(e->status), e->msg);
        else if ((verify && list) || (!verify && !quiet))
            printf("%s %s\n", verify ? "ok  " : "signed", e->path);
    }
    if (rep.n)
        printf("%s: %zu of %zu files in %zu kernel dirs %s\n", dir, rep.ok, rep.n, rep.kernel_dirs,
               verify ? "verified" : "signed");
    tkm_tce_report_release(&rep);
    if (rc < 0) {
        fprintf(stderr, "tkmctl %s: %s\n", cmd, tkm_err_str(&err));
        return 1;
    }
    return 0;
}

static int cmd_sign_entries(int argc, char **argv)
{
    return ctl_tce_run(argc, argv, 0);
}

/* Registered by hand: the command name has a dash. */
static struct tkmctl_command tkmctl_cmd_sign_entries = {
    "sign-entries", "sign each cache file (TCE scheme: <file>.sig, RSA over SHA-384)",
    cmd_sign_entries, 40, 0};
__attribute__((constructor)) static void tkmctl_reg_sign_entries(void)
{
    tkmctl_register(&tkmctl_cmd_sign_entries);
}
