/*
 * kt_out.c - `kubectl tkm check` rendering, and the JSON / YAML writers of
 * every -o json|yaml document.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/yaml_out.h>

#include "kt-int.h"

/* ---- check ---------------------------------------------------------------------------- */

static const char *node_reason(const struct kt_check_node *cn)
{
    for (size_t i = 0; i < cn->n_v; i++)
        if (cn->v[i].compatible == cn->compatible)
            return cn->v[i].reason;
    return "the node reports no GPU";
}

struct check_group {
    const char *label, *gpu_type, *reason;
    int compatible;
    size_t n, first; /* nodes, index of the first */
};

static int check_groups(const struct kt_check *c, struct check_group **out, size_t *n)
{
    struct check_group *g = calloc(c->n_nodes + 1, sizeof *g);
    size_t k = 0;
    if (!g)
        return -ENOMEM;
    for (size_t i = 0; i < c->n_nodes; i++) {
        const struct kt_check_node *cn = &c->nodes[i];
        const char *why = node_reason(cn);
        size_t j = 0;
        while (j < k && (g[j].compatible != cn->compatible ||
                         strcmp(g[j].gpu_type, cn->node->gpu_type) || strcmp(g[j].reason, why)))
            j++;
        if (j == k)
            g[k++] = (struct check_group){
                cn->node->gpu_label, cn->node->gpu_type, why, cn->compatible, 0, i};
        g[j].n++;
    }
    *out = g;
    *n = k;
    return 0;
}

int kt_render_check(const struct kt_check *c, const char *image, const char *digest,
                    const struct tkm_triton_summary *s, const struct kt_render_opts *o,
                    struct tkm_buf *out)
{
    struct check_group *g = NULL;
    struct kt_table t = {0};
    size_t ng = 0, max = o->wide ? SIZE_MAX : 5;
    int rc = tkm_buf_printf(out, "IMAGE    %s\nDIGEST   %s\n", image, digest);
    for (size_t i = 0; rc == 0 && i < s->n_targets; i++) {
        char pv[16];
        const struct tkm_triton_summary_target *x = &s->targets[i];
        rc = tkm_buf_printf(out, "TARGET   %s arch %s warp %d, PTX ISA %s\n", x->target.backend,
                            x->target.arch, x->target.warp_size,
                            tkm_ptx_version_str(x->ptx_max, pv, sizeof pv));
    }
    if (rc == 0)
        rc = tkm_buf_putc(out, '\n');
    if (rc == 0 && c->n_nodes == 0)
        rc = tkm_buf_puts(out, "No node reports its GPUs (no TritonKernelCacheNodeStatus "
                               "object): no tkm-agent runs yet.\n");
    if (rc || c->n_nodes == 0)
        return rc;
    if ((rc = check_groups(c, &g, &ng)) < 0 || (rc = kt__table_init(&t, 4)) < 0 ||
        (rc = kt__table_row(&t)) < 0)
        goto out;
    rc = kt__table_set(&t, 0, "VERDICT", NULL) | kt__table_set(&t, 1, "GPU TYPE", NULL) |
         kt__table_set(&t, 2, "NODES", NULL) | kt__table_set(&t, 3, "REASON", NULL);
    for (int pass = 1; rc == 0 && pass >= 0; pass--)
        for (size_t k = 0; rc == 0 && k < ng; k++) {
            struct tkm_buf names = TKM_BUF_INIT(1 << 20);
            size_t shown = 0;
            if (g[k].compatible != pass)
                continue;
            rc = tkm_buf_printf(&names, "%zu (", g[k].n);
            for (size_t i = g[k].first; rc == 0 && i < c->n_nodes && shown < g[k].n; i++) {
                const struct kt_check_node *cn = &c->nodes[i];
                if (cn->compatible != pass || strcmp(cn->node->gpu_type, g[k].gpu_type) ||
                    strcmp(node_reason(cn), g[k].reason))
                    continue;
                if (shown < max)
                    rc = tkm_buf_printf(&names, "%s%s", shown ? ", " : "", cn->node->name);
                shown++;
            }
            if (rc == 0)
                rc = tkm_buf_puts(&names, shown > max ? ", ...)" : ")");
            if (rc == 0)
                rc = kt__table_row(&t);
            if (rc == 0)
                rc = kt__table_set(&t, 0, pass ? "compatible" : "incompatible",
                                   kt_state_color(pass ? KT_READY : KT_INCOMPATIBLE)) |
                     kt__table_set(&t, 1, g[k].label, NULL) |
                     kt__table_set(&t, 2, names.data, NULL) |
                     kt__table_set(&t, 3, g[k].reason, NULL);
            tkm_buf_release(&names);
        }
    if (rc == 0)
        rc = kt__table_print(&t, o->color, out);
    if (rc == 0)
        rc = tkm_buf_printf(out, "\n%zu of %zu nodes could use it.\n", c->n_compatible, c->n_nodes);
out:
    kt__table_release(&t);
    free(g);
    return rc ? -ENOMEM : 0;
}

json_t *kt_check_json(const struct kt_check *c, const char *image, const char *digest,
                      const struct tkm_triton_summary *s)
{
    char *label = NULL;
    json_t *nodes = json_array(), *summary = NULL, *doc = NULL;
    if (!nodes || tkm_triton_summary_label(s, &label, NULL) < 0 ||
        !(summary = json_loads(label, 0, NULL)))
        goto out;
    for (size_t i = 0; i < c->n_nodes; i++) {
        const struct kt_check_node *cn = &c->nodes[i];
        json_t *gpus = json_array();
        for (size_t j = 0; gpus && j < cn->n_v; j++)
            if (json_array_append_new(gpus, json_pack("{s:i,s:b,s:s}", "id", cn->v[j].gpu_index,
                                                      "compatible", cn->v[j].compatible, "reason",
                                                      cn->v[j].reason)) < 0) {
                json_decref(gpus);
                gpus = NULL;
            }
        if (!gpus ||
            json_array_append_new(nodes, json_pack("{s:s,s:s,s:b,s:o}", "node", cn->node->name,
                                                   "gpuType", cn->node->gpu_type, "compatible",
                                                   cn->compatible, "gpus", gpus)) < 0)
            goto out;
    }
    doc = json_pack("{s:s,s:s,s:s,s:s,s:O,s:I,s:I,s:O}", "apiVersion", KT_DOC_API_VERSION, "kind",
                    "ImageCheck", "image", image, "digest", digest, "summary", summary, "nodeCount",
                    (json_int_t)c->n_nodes, "compatibleNodes", (json_int_t)c->n_compatible, "nodes",
                    nodes);
out:
    free(label);
    json_decref(summary);
    json_decref(nodes);
    return doc;
}

/* ---- JSON and YAML --------------------------------------------------------------------- */

int kt_json_dump(const json_t *doc, struct tkm_buf *out)
{
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    int rc = s ? tkm_buf_puts(out, s) : -ENOMEM;
    free(s);
    return rc == 0 ? tkm_buf_putc(out, '\n') : rc;
}

int kt_yaml_dump(const json_t *doc, struct tkm_buf *out)
{
    return tkm_yaml_from_json(doc, out);
}
