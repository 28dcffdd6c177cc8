/* yaml.c - bounded YAML tree from libyaml events. See yaml-int.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "yaml-int.h"

struct anchor {
    char *name;
    struct k8s__ynode *node;
    struct anchor *next;
};

struct builder {
    struct k8s__yaml *y;
    struct k8s__ynode *stack[K8S_YAML_MAX_DEPTH + 1];
    char *stack_anchor[K8S_YAML_MAX_DEPTH + 1];
    int depth;
    struct anchor *anchors;
    const char *source;
    struct tkm_err *err;
};

static int node_new(struct builder *b, enum k8s__ynode_kind kind, int line, struct k8s__ynode **out)
{
    if (b->y->nodes >= K8S_YAML_MAX_NODES)
        return tkm_err_set(b->err, -E2BIG, "%s: line %d: more than %d YAML nodes", b->source, line,
                           K8S_YAML_MAX_NODES);
    struct k8s__ynode *n = calloc(1, sizeof *n);
    if (!n)
        return tkm_err_set(b->err, -ENOMEM, "%s: out of memory", b->source);
    n->kind = kind;
    n->line = line;
    n->all_next = b->y->all;
    b->y->all = n;
    b->y->nodes++;
    *out = n;
    return 0;
}

/* Adds child to the open collection, or makes it the root. */
static int attach(struct builder *b, struct k8s__ynode *child)
{
    if (b->depth == 0) {
        if (!b->y->root)
            b->y->root = child;
        return 0;
    }
    struct k8s__ynode *p = b->stack[b->depth - 1];
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 8;
        struct k8s__ynode **ni = realloc(p->items, nc * sizeof *ni);
        if (!ni)
            return tkm_err_set(b->err, -ENOMEM, "%s: out of memory", b->source);
        p->items = ni;
        p->cap = nc;
    }
    p->items[p->n++] = child;
    return 0;
}

static int anchor_add(struct builder *b, const char *name, struct k8s__ynode *n)
{
    struct anchor *a = calloc(1, sizeof *a);
    if (!a || !(a->name = strdup(name))) {
        free(a);
        return tkm_err_set(b->err, -ENOMEM, "%s: out of memory", b->source);
    }
    a->node = n;
    a->next = b->anchors; /* newest first: a redefined anchor wins */
    b->anchors = a;
    return 0;
}

static struct k8s__ynode *anchor_find(struct builder *b, const char *name)
{
    for (struct anchor *a = b->anchors; a; a = a->next)
        if (strcmp(a->name, name) == 0)
            return a->node;
    return NULL;
}

static int on_event(struct builder *b, yaml_event_t *ev)
{
    int line = (int)ev->start_mark.line + 1;
    struct k8s__ynode *n = NULL;
    int rc;
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        if ((rc = node_new(b, K8S_Y_SCALAR, line, &n)))
            return rc;
        n->str = malloc(ev->data.scalar.length + 1);
        if (!n->str)
            return tkm_err_set(b->err, -ENOMEM, "%s: out of memory", b->source);
        memcpy(n->str, ev->data.scalar.value, ev->data.scalar.length);
        n->str[ev->data.scalar.length] = '\0';
        n->len = ev->data.scalar.length;
        if (ev->data.scalar.anchor && anchor_add(b, (char *)ev->data.scalar.anchor, n))
            return -ENOMEM;
        return attach(b, n);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        if (b->depth >= K8S_YAML_MAX_DEPTH)
            return tkm_err_set(b->err, -E2BIG, "%s: line %d: YAML nested deeper than %d levels",
                               b->source, line, K8S_YAML_MAX_DEPTH);
        rc = node_new(b, ev->type == YAML_SEQUENCE_START_EVENT ? K8S_Y_SEQ : K8S_Y_MAP, line, &n);
        if (rc)
            return rc;
        if (attach(b, n))
            return -ENOMEM;
        yaml_char_t *anc = ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                                                 : ev->data.mapping_start.anchor;
        b->stack_anchor[b->depth] = NULL;
        if (anc && !(b->stack_anchor[b->depth] = strdup((char *)anc)))
            return tkm_err_set(b->err, -ENOMEM, "%s: out of memory", b->source);
        b->stack[b->depth++] = n;
        return 0;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        b->depth--;
        char *aname = b->stack_anchor[b->depth];
        b->stack_anchor[b->depth] = NULL;
        rc = aname ? anchor_add(b, aname, b->stack[b->depth]) : 0;
        free(aname);
        return rc;
    }
    case YAML_ALIAS_EVENT:
        if (++b->y->aliases > K8S_YAML_MAX_ALIASES)
            return tkm_err_set(b->err, -E2BIG, "%s: line %d: more than %d YAML aliases", b->source,
                               line, K8S_YAML_MAX_ALIASES);
        if (!(n = anchor_find(b, (char *)ev->data.alias.anchor)))
            return tkm_err_set(b->err, -EINVAL, "%s: line %d: unknown or unfinished anchor \"%s\"",
                               b->source, line, (char *)ev->data.alias.anchor);
        return attach(b, n);
    default:
        return 0;
    }
}

int k8s__yaml_parse(struct k8s__yaml *y, const char *text, size_t len, const char *source,
                    struct tkm_err *err)
{
    memset(y, 0, sizeof *y);
    if (len > K8S_YAML_MAX_INPUT)
        return tkm_err_set(err, -E2BIG, "%s: larger than %u bytes", source, K8S_YAML_MAX_INPUT);
    struct builder b = {.y = y, .source = source, .err = err};
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return tkm_err_set(err, -ENOMEM, "%s: out of memory", source);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = 0, docs = 0, done = 0;
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = tkm_err_set(err, -EINVAL, "%s: line %zu: invalid YAML: %s", source,
                             p.problem_mark.line + 1, p.problem ? p.problem : "parse error");
            break;
        }
        if (ev.type == YAML_DOCUMENT_START_EVENT && ++docs > 1)
            rc = tkm_err_set(err, -EINVAL, "%s: more than one YAML document", source);
        else
            rc = on_event(&b, &ev);
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
        if (rc)
            break;
    }
    yaml_parser_delete(&p);
    for (int i = 0; i < b.depth; i++)
        free(b.stack_anchor[i]);
    while (b.anchors) {
        struct anchor *a = b.anchors;
        b.anchors = a->next;
        free(a->name);
        free(a);
    }
    if (rc) {
        if (!err || !err->code)
            tkm_err_set(err, rc, "%s: cannot parse YAML", source);
        k8s__yaml_release(y);
    }
    return rc;
}

void k8s__yaml_release(struct k8s__yaml *y)
{
    if (!y)
        return;
    struct k8s__ynode *n = y->all;
    while (n) {
        struct k8s__ynode *next = n->all_next;
        free(n->str);
        free(n->items);
        free(n);
        n = next;
    }
    memset(y, 0, sizeof *y);
}

struct k8s__ynode *k8s__yaml_get(const struct k8s__ynode *m, const char *key)
{
    if (!m || m->kind != K8S_Y_MAP)
        return NULL;
    for (size_t i = 0; i + 1 < m->n; i += 2) {
        const struct k8s__ynode *k = m->items[i];
        if (k->kind == K8S_Y_SCALAR && strcmp(k->str, key) == 0)
            return m->items[i + 1];
    }
    return NULL;
}
