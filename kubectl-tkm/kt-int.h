/*
 * kt-int.h - what kubectl-tkm's own files share (never included from
 * outside kubectl-tkm/ and its unit test): a small text table, the GPU-type
 * groups of the matrix.
 *
 * Ownership: struct kt_table owns its cell strings (kt__table_release());
 * colours are borrowed static strings. struct kt_group borrows its strings
 * from the matrix; the array from kt__groups() is owned (free()).
 */
#ifndef KT_INT_H
#define KT_INT_H

#include "kt.h"

/* apiVersion of the -o json|yaml documents (docs/kubectl-tkm.md). */
#define KT_DOC_API_VERSION "kubectl-tkm.tkm.io/v1"

struct kt_table {
    size_t ncols, nrows, cap;
    char **cells;        /* nrows * ncols, owned, NULL = "" */
    const char **colors; /* per cell: an SGR code or NULL */
};

int kt__table_init(struct kt_table *t, size_t ncols);
void kt__table_release(struct kt_table *t);
int kt__table_row(struct kt_table *t);
int kt__table_set(struct kt_table *t, size_t col, const char *s, const char *color);
/* Column widths into w (ncols entries); returns the line width (3 spaces between). */
size_t kt__table_width(const struct kt_table *t, size_t *w);
int kt__table_print(const struct kt_table *t, int color, struct tkm_buf *out);

/* Control characters of s replaced with '?', into out (n bytes). */
void kt__clean(const char *s, char *out, size_t n);
/* "ready", "in use (2)", ... */
void kt__cell_text(enum kt_state s, int pods, char *out, size_t n);

struct kt_group {
    const char *gpu_type, *label; /* borrowed from a node of the matrix */
    size_t n;                     /* nodes */
};

/* The GPU types of m's nodes, most nodes first. *out owned (free()). */
int kt__groups(const struct kt_matrix *m, struct kt_group **out, size_t *n);
/* Nodes per state (cnt: KT_STATE_COUNT entries) of row r in group g, pods
 * summed; returns the state most of them are in. */
enum kt_state kt__group_counts(const struct kt_matrix *m, const struct kt_row *r,
                               const struct kt_group *g, size_t *cnt, int *pods);

/* The row's "variants" (nodes per variant used) and "withoutVariant" (nodes per GPU type no
 * variant fits) members into o, each only when not empty. 0 or -ENOMEM. */
int kt__row_variants_json(const struct kt_matrix *m, const struct kt_row *r, json_t *o);

#endif
