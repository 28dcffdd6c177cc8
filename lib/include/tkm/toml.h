/*
 * toml.h - a bounded parser of the TOML subset that container runtimes'
 * registry files use: containerd's hosts.toml and CRI-O's registries.conf
 * (issue 26). This comment is the definition of the subset.
 *
 * Supported: comments; bare keys (A-Za-z0-9_-), quoted keys (basic and
 * literal) and dotted keys, on the left of '=' and in table headers;
 * [table] and [[array.of.tables]] headers; values: basic strings (escapes
 * \b \t \n \f \r \" \\ \uXXXX \UXXXXXXXX), literal strings, decimal integers
 * (sign, '_' between digits), true/false, arrays (of any supported values,
 * newlines and comments inside, trailing comma) and one-line inline tables.
 * Refused with "line L, column C: ..." (the column counts bytes from 1):
 * multi-line strings, floats, inf/nan, dates and times, hex/octal/binary
 * integers, a key defined twice, a table defined twice, extending an inline
 * table or a static array, invalid UTF-8, control characters.
 *
 * Bounds: at most TKM_TOML_MAX_BYTES of input, TKM_TOML_MAX_DEPTH levels of
 * nesting (tables, arrays, inline tables and dotted keys together),
 * TKM_TOML_MAX_ITEMS entries in one table or array and TKM_TOML_MAX_NODES
 * values in a document. The parser reads only the len bytes it is given
 * (no NUL terminator needed, a NUL byte inside is refused).
 *
 * Ownership: tkm_toml_parse() gives the caller a document (the root table);
 * every value, key and string in it is owned by the document and freed with
 * tkm_toml_free(). Strings are NUL-terminated (a string holding \u0000 is
 * refused, so strlen is its length). Lookups return borrowed pointers valid
 * until the document is freed. Thread safety: a document is read-only after
 * parsing; all functions are reentrant.
 */
#ifndef TKM_TOML_H
#define TKM_TOML_H

#include <stddef.h>
#include <stdint.h>

struct tkm_err;

#define TKM_TOML_MAX_BYTES (1024 * 1024)
#define TKM_TOML_MAX_DEPTH 16
#define TKM_TOML_MAX_ITEMS 4096
#define TKM_TOML_MAX_NODES 65536

enum tkm_toml_type { TKM_TOML_STRING, TKM_TOML_INT, TKM_TOML_BOOL, TKM_TOML_ARRAY, TKM_TOML_TABLE };

struct tkm_toml {
    enum tkm_toml_type type;
    unsigned line, col; /* where the value (or the table's first mention) is */
    unsigned flags;     /* parser-private */
    char *s;            /* STRING */
    int64_t i;          /* INT; BOOL: 0 or 1 */
    /* ARRAY: items[0..n); TABLE: keys[k] names items[k], in file order */
    struct tkm_toml **items;
    char **keys;
    size_t n, cap;
};

/* Parses len bytes of data (borrowed). what (borrowed, may be NULL) names the
 * input in errors: `hosts.toml "/x/hosts.toml": line 3, column 7: ...`.
 * Returns 0 with *out the root table; -EPROTO (bad or unsupported TOML),
 * -E2BIG (over a bound) or -ENOMEM, with err set and *out NULL. */
int tkm_toml_parse(const char *data, size_t len, const char *what, struct tkm_toml **out,
                   struct tkm_err *err);
void tkm_toml_free(struct tkm_toml *t);

/* The value of key in table t (NULL when t is not a table or lacks it). */
const struct tkm_toml *tkm_toml_get(const struct tkm_toml *t, const char *key);
/* "string", "integer", "boolean", "array", "table". */
const char *tkm_toml_type_name(enum tkm_toml_type type);

#endif
