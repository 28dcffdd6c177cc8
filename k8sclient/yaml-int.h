/*
 * yaml-int.h - a small, bounded YAML tree on top of libyaml's event parser.
 *
 * Used for kubeconfig files. Limits are enforced while parsing (input size,
 * node count, alias uses, nesting depth), so a hostile file ("billion
 * laughs") fails with a clear error instead of exhausting memory. Aliases
 * share the anchored node (no copy), and an anchor is usable only after its
 * node is complete, so the tree has no cycles.
 *
 * Ownership: k8s__yaml_parse() fills a caller-owned struct k8s__yaml;
 * k8s__yaml_release() frees every node. Nodes are borrowed from it.
 */
#ifndef K8S_YAML_INT_H
#define K8S_YAML_INT_H

#include <stddef.h>

#include <tkm/err.h>

#define K8S_YAML_MAX_INPUT   (1u << 20)
#define K8S_YAML_MAX_NODES   20000
#define K8S_YAML_MAX_ALIASES 10000
#define K8S_YAML_MAX_DEPTH   64

enum k8s__ynode_kind { K8S_Y_SCALAR, K8S_Y_SEQ, K8S_Y_MAP };

struct k8s__ynode {
    enum k8s__ynode_kind kind;
    char *str; /* scalar value, NUL-terminated */
    size_t len;
    struct k8s__ynode **items; /* seq: n items; map: n/2 key,value pairs */
    size_t n, cap;
    int line; /* 1-based line of the node's start */
    struct k8s__ynode *all_next;
};

struct k8s__yaml {
    struct k8s__ynode *root; /* NULL for an empty document */
    struct k8s__ynode *all;  /* every node, for freeing */
    size_t nodes, aliases;
};

int k8s__yaml_parse(struct k8s__yaml *y, const char *text, size_t len, const char *source,
                    struct tkm_err *err);
void k8s__yaml_release(struct k8s__yaml *y);

/* Mapping lookup of a scalar key; NULL when m is not a map or has no key. */
struct k8s__ynode *k8s__yaml_get(const struct k8s__ynode *m, const char *key);

#endif
