/*
 * sup_archive.h - test support around lib/archive and lib/store: the
 * one-call forms the tests use, built on the product's entry points.
 */
#ifndef TKM_SUP_ARCHIVE_H
#define TKM_SUP_ARCHIVE_H

#include <stddef.h>

#include <tkm/archive.h>

/* Extracts blob_path (tkm_archive_extract_fd) into dest_path, a new
 * directory this creates (-EEXIST when it exists). On failure dest_path is
 * removed again with rmdir(2): tkm_archive_extract_fd left it empty, or the
 * rmdir fails and the tree stays for the test to find. Strings are borrowed. */
int sup_extract_path(const char *blob_path, const char *dest_path, const struct tkm_archive_opts *o,
                     struct tkm_archive_result *res, struct tkm_err *err);

struct tkm_store;
struct tkm_store_ingest_info;

/* tkm_store_ingest_start run to its end on a private loop: the blocking
 * ingest the tests use. Arguments as for _start; *path (may be NULL) gets an
 * owned copy of the entry's path, *info (may be NULL) what happened. A
 * *o->cancel already non-zero is passed on with tkm_store_job_cancel (the
 * job has its own flag). */
int sup_store_ingest(struct tkm_store *s, const char *digest, const char *blob_path,
                     const struct tkm_archive_opts *o, char **path,
                     struct tkm_store_ingest_info *info, struct tkm_err *err);

#endif
