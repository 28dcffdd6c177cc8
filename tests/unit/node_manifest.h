/*
 * node_manifest.h - reads a container's flag from manifests/base/daemonset-node.yaml
 * (the tkm-node DaemonSet), so the unit tests of tkm-agent and tkm-csi can check that
 * their built-in defaults are what the deploy manifest passes (test_agent.c,
 * test_csi.c). Header-only, for tests only; parses with k8sclient's bounded YAML
 * tree (k8sclient/yaml-int.h), so flow and block styles read alike.
 *
 * node_manifest_arg(container, flag, out, n): the value of FLAG in the args of the
 * container named CONTAINER, written as "--flag=value" or as "--flag", "value";
 * copied into out (caller-owned, n bytes). Fails the test (a missing manifest, no
 * such container or flag, a value too long) rather than returning an error.
 */
#ifndef TKM_TEST_NODE_MANIFEST_H
#define TKM_TEST_NODE_MANIFEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/err.h>
#include <tkm/fs.h>

#include "test.h"
#include "yaml-int.h"

static inline const struct k8s__ynode *node_manifest_container(const struct k8s__ynode *root,
                                                               const char *name)
{
    const struct k8s__ynode *c =
        k8s__yaml_get(k8s__yaml_get(k8s__yaml_get(k8s__yaml_get(root, "spec"), "template"), "spec"),
                      "containers");
    for (size_t i = 0; c && c->kind == K8S_Y_SEQ && i < c->n; i++) {
        const struct k8s__ynode *n = k8s__yaml_get(c->items[i], "name");
        if (n && n->kind == K8S_Y_SCALAR && strcmp(n->str, name) == 0)
            return c->items[i];
    }
    return NULL;
}

static inline void node_manifest_arg(const char *container, const char *flag, char *out, size_t n)
{
    char path[1024];
    struct tkm_buf text = TKM_BUF_INIT(1 << 20);
    struct tkm_err err = {0};
    struct k8s__yaml y = {0};
    size_t fl = strlen(flag);
    const char *val = NULL;
    snprintf(path, sizeof path, "%s/manifests/base/daemonset-node.yaml", tkm_test_source_dir());
    if (tkm_read_file(path, 1 << 20, &text, "manifest", &err) < 0 ||
        k8s__yaml_parse(&y, text.data, text.len, path, &err) < 0)
        tkm_test_fail(__FILE__, __LINE__, "%s", tkm_err_str(&err));
    const struct k8s__ynode *c = node_manifest_container(y.root, container);
    if (!c)
        tkm_test_fail(__FILE__, __LINE__, "%s: no container %s", path, container);
    const struct k8s__ynode *args = k8s__yaml_get(c, "args");
    for (size_t i = 0; args && args->kind == K8S_Y_SEQ && i < args->n && !val; i++) {
        const char *a = args->items[i]->kind == K8S_Y_SCALAR ? args->items[i]->str : "";
        if (strncmp(a, flag, fl) == 0 && a[fl] == '=')
            val = a + fl + 1;
        else if (strcmp(a, flag) == 0 && i + 1 < args->n &&
                 args->items[i + 1]->kind == K8S_Y_SCALAR)
            val = args->items[i + 1]->str;
    }
    if (!val)
        tkm_test_fail(__FILE__, __LINE__, "%s: container %s has no %s in its args", path, container,
                      flag);
    if (strlen(val) >= n)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s of %s is too long", path, flag, container);
    memcpy(out, val, strlen(val) + 1);
    k8s__yaml_release(&y);
    tkm_buf_release(&text);
}

#endif
