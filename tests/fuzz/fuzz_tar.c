/*
 * fuzz_tar.c - feeds bytes to lib/archive as a layer blob, twice: as they
 * are (plain tar, or gzip/zstd when the magic says so) and gzip-compressed,
 * extracting beneath a fresh private directory with small limits. Any crash,
 * leak or sanitizer report is a bug; so is a file written outside the root
 * (checked: the root's parent must hold nothing new).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <tkm/archive.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_one(const void *p, size_t n)
{
    char base[] = "/tmp/tkm-fuzz-tar-XXXXXX";
    if (!mkdtemp(base))
        abort();
    int bfd = memfd_create("blob", MFD_CLOEXEC);
    if (bfd < 0 || write(bfd, p, n) != (ssize_t)n || lseek(bfd, 0, SEEK_SET) != 0)
        abort();
    char root[64];
    snprintf(root, sizeof root, "%s/root", base);
    if (mkdir(root, 0700) < 0)
        abort();
    int dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        abort();
    struct tkm_archive_opts o;
    tkm_archive_opts_init(&o);
    o.fsync = 0;
    o.limits.max_total_bytes = 8 << 20;
    o.limits.max_file_bytes = 1 << 20;
    o.limits.max_entries = 2000;
    o.limits.max_pax_bytes = 64 << 10;
    o.limits.ratio_grace_bytes = 1 << 20;
    struct tkm_archive_result r;
    struct tkm_err err = {0};
    int rc = tkm_archive_extract_fd(bfd, dfd, &o, &r, &err);
    if (rc < 0 && err.msg[0] == '\0')
        abort(); /* every failure must explain itself */
    close(dfd);
    close(bfd);
    /* nothing but root/ may exist in base */
    char probe[96];
    snprintf(probe, sizeof probe, "%s", base);
    int bd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (bd < 0)
        abort();
    if (tkm_rmtree_at(bd, "root") < 0)
        abort();
    close(bd);
    if (rmdir(base) < 0) /* fails (ENOTEMPTY) if anything escaped into base */
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1 << 20))
        return 0;
    run_one(data, size);
    uLongf zn = compressBound(size) + 32;
    unsigned char *z = malloc(zn);
    if (!z)
        return 0;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK) {
        zs.next_in = (unsigned char *)data;
        zs.avail_in = (uInt)size;
        zs.next_out = z;
        zs.avail_out = (uInt)zn;
        if (deflate(&zs, Z_FINISH) == Z_STREAM_END)
            run_one(z, zn - zs.avail_out);
        deflateEnd(&zs);
    }
    free(z);
    return 0;
}
