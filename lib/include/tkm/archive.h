/*
 * archive.h - safe extraction of an OCI layer blob (tar, tar+gzip, tar+zstd).
 *
 * Verify before parse: the caller has already checked the compressed sha256
 * of the blob (lib/oci does it while downloading into a staging file); this
 * module may check it again (opts.blob_digest) and always hashes the
 * uncompressed stream to check the diff_id (opts.diff_id).
 *
 * How a blob is read (docs/security.md has the why):
 *   - decompression (zlib for gzip, libzstd for zstd with a windowLogMax
 *     cap) is done here, inside a libarchive read callback; libarchive sees
 *     only the plain tar stream and has only its tar formats enabled;
 *   - a header screen walks the same plain stream before libarchive parses
 *     it: checksums, octal sizes (base-256 and negative sizes rejected), PAX
 *     and GNU long-name sizes, entry types (links, devices, FIFOs, sparse
 *     files rejected) and the entry count;
 *   - total uncompressed bytes and the compression ratio are capped while
 *     streaming; memory stays flat (one 128 KiB output buffer);
 *   - entries are written only beneath the destination directory fd, one
 *     path component at a time (openat with O_NOFOLLOW, mkdirat, files with
 *     O_CREAT|O_EXCL|O_NOFOLLOW); names that are absolute, contain "..",
 *     are empty or control characters, start with ".wh." (whiteouts), or pass
 *     the length/depth caps are rejected;
 *   - modes are normalised: directories 0755, files 0755 when the archive
 *     gives any execute bit, else 0644 (setuid/setgid/sticky are masked, not
 *     rejected); owners, times and xattrs (e.g. security.capability) are
 *     never applied.
 *   - a NUL in a PAX path/linkpath or inside a GNU long name, and any
 *     non-zero byte after the end-of-archive marker, are rejected;
 *   - with opts.blob_size, a blob of another size is rejected.
 * Every rejection names the entry, escaped with tkm_escape() (<tkm/util.h>)
 * so control characters cannot forge terminal output or log lines. A failed
 * extraction leaves nothing of the layer on disk (see _extract_fd and
 * _extract_path). The extraction is blocking: run it on a
 * worker thread (the agent uses the libuv thread pool); progress callbacks
 * are made on that thread.
 */
#ifndef TKM_ARCHIVE_H
#define TKM_ARCHIVE_H

#include <stdatomic.h>
#include <stdint.h>

#include <tkm/err.h>

struct tkm_archive_limits {
    uint64_t max_total_bytes;   /* uncompressed tar stream bytes */
    uint64_t max_file_bytes;    /* one regular file */
    uint64_t max_entries;       /* tar entries (PAX/long-name headers not counted) */
    uint64_t max_pax_bytes;     /* one PAX ('x'/'g') header body */
    uint32_t max_path_len;      /* bytes of an entry name */
    uint32_t max_depth;         /* path components of an entry name */
    uint32_t max_ratio;         /* uncompressed / compressed bytes ... */
    uint64_t ratio_grace_bytes; /* ... checked once this many bytes came out */
    uint32_t zstd_window_log_max;
    /* Free space the destination filesystem must keep: checked before the
     * first write and every 1 MiB written (-ENOSPC below it). 0 = no check. */
    uint64_t min_free_bytes;
};

enum tkm_compression {
    TKM_COMPRESSION_AUTO = 0, /* by magic bytes: gzip, zstd, else plain tar */
    TKM_COMPRESSION_NONE,
    TKM_COMPRESSION_GZIP,
    TKM_COMPRESSION_ZSTD,
};
/* "none", "gzip", "zstd", "auto" */
const char *tkm_compression_name(enum tkm_compression c);

struct tkm_archive_progress {
    uint64_t blob_bytes; /* compressed bytes read so far */
    uint64_t tar_bytes;  /* uncompressed bytes so far */
    uint64_t entries;
    uint64_t file_bytes; /* bytes written into files */
};

struct tkm_archive_opts {
    struct tkm_archive_limits limits;
    enum tkm_compression compression;
    /* Borrowed, may be NULL: expected "sha256:<64 hex>" of the uncompressed
     * stream (diff_id) / of the blob as stored (compressed digest). */
    const char *diff_id;
    const char *blob_digest;
    /* The blob's size from its descriptor, 0 = unchecked: a blob file of
     * another size is refused before it is read (-EINVAL, -EFBIG when larger),
     * and reading more than this many bytes stops with -EFBIG. */
    uint64_t blob_size;
    /* Borrowed, may be NULL (= every entry): NULL-terminated list of name
     * prefixes such as "io.triton.cache/"; other entries are still screened
     * (a link or device anywhere rejects the archive) but not written. */
    const char *const *include;
    /* Borrowed, may be NULL: a prefix removed from every written name, e.g.
     * "io.triton.cache/" to extract the cache tree itself; entries not under
     * it are skipped (still screened). */
    const char *strip;
    /* Borrowed, may be NULL: NULL-terminated pairs {from, to, from, to, ...,
     * NULL} such as {"io.triton.cache/", "triton/", ...}: an entry under a
     * `from` prefix is written under `to` instead; entries under none of them
     * are skipped (still screened). Used instead of strip (both set: rename). */
    const char *const *rename;
    int fsync; /* 1 (default): the tree is durable on return (one syncfs(2) of its filesystem) */
    /* Borrowed, may be NULL: when it becomes non-zero the extraction stops
     * with -ECANCELED. Checked between reads and entries. */
    const atomic_int *cancel;
    /* May be NULL: called on the extracting thread every 1 MiB or 64
     * entries, and once at the end of a successful extraction. */
    void (*progress)(void *ud, const struct tkm_archive_progress *p);
    void *progress_ud; /* borrowed */
};

/* Fills o with the default limits (docs/security.md: 32 GiB total, 4 GiB
 * per file, 200000 entries, 1 MiB PAX header, 1024-byte paths, depth 32,
 * ratio 250 after 16 MiB, zstd windowLog 27 (128 MiB), no free-space
 * reserve), compression AUTO, fsync on, nothing else. */
void tkm_archive_opts_init(struct tkm_archive_opts *o);

struct tkm_archive_result {
    uint64_t entries;                 /* entries seen (all, filtered or not) */
    uint64_t files;                   /* regular files written */
    uint64_t dirs;                    /* directories created */
    uint64_t skipped;                 /* entries outside opts.include */
    uint64_t file_bytes;              /* bytes written into files */
    uint64_t tar_bytes;               /* uncompressed stream length */
    uint64_t blob_bytes;              /* compressed (stored) length */
    enum tkm_compression compression; /* what was found */
    char diff_id[72];                 /* "sha256:<hex>" of the uncompressed stream */
    char blob_digest[72];             /* "sha256:<hex>" of the blob */
};

/*
 * Extracts the blob read from blob_fd (borrowed; read from its current
 * offset to EOF) beneath dest_dirfd (borrowed; should be an empty private
 * directory). On failure, when the directory was empty at the start, what
 * was written beneath it is removed again (it is left empty); a directory
 * that was not empty may keep a partial tree. res (may be NULL) is filled on
 * success. Returns 0, or -EINVAL (bad archive: err names the entry), -EBADMSG
 * (digest mismatch), -EFBIG (a size cap), -ECANCELED, -EIO/-errno (I/O).
 */
int tkm_archive_extract_fd(int blob_fd, int dest_dirfd, const struct tkm_archive_opts *o,
                           struct tkm_archive_result *res, struct tkm_err *err);

/*
 * Staging directories: ".tkm-staging-<pid>-<start>-<random>", where <start>
 * is the creator's start time (field 22 of /proc/<pid>/stat), so a later
 * process can tell whether the creator still runs even after its pid was
 * reused. The creator also holds a flock(2) on the directory while it has it
 * open, which protects it from a process of another PID namespace sharing
 * the directory.
 */
#define TKM_STAGING_PREFIX   ".tkm-staging-"
#define TKM_STAGING_NAME_MAX 80

/* Creates a new staging directory (mode 0700) beneath parent_fd (borrowed);
 * name (namelen >= TKM_STAGING_NAME_MAX) gets its name. Returns an owned
 * O_DIRECTORY fd holding the flock (close it after the rename or removal),
 * or a negative errno. Without /proc the start time is written as 0. */
int tkm_staging_create(int parent_fd, char *name, size_t namelen, struct tkm_err *err);

/* 1 when name (borrowed) beneath parent_fd is a staging directory whose
 * creator runs (or whose state cannot be told: it is kept), 0 when its
 * creator is gone and nobody holds its flock, -EINVAL when name is not a
 * staging name. */
int tkm_staging_live(int parent_fd, const char *name);

/* Removes the staging directories beneath parent_fd whose creator is gone
 * (tkm_staging_live() == 0); other names, and directories of live
 * processes, are left alone; nothing is removed where /proc cannot be read.
 * where (borrowed, may be NULL) names the directory in log lines. Returns the
 * number removed, or -errno when parent_fd cannot be listed. */
int tkm_staging_purge(int parent_fd, const char *where);

/* Removes name (a file or a whole tree) beneath dirfd without following
 * symlinks. 0, or 0 when it does not exist, or -errno. (Defined in lib/fs.c.) */
int tkm_rmtree_at(int dirfd, const char *name);

/* 1 when s is "sha256:" + 64 lower-case hex digits, else 0 (defined in
 * lib/oci/digest.c, so that using it links no libarchive). */
int tkm_digest_valid(const char *s);

#endif
