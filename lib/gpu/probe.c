/*
 * gpu/probe.c - merging the GPU sources, naming GPUs, and their JSON form.
 */
#include <tkm/gpu/probe.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <tkm/util.h>

void tkm_gpu_list_release(struct tkm_gpu_list *l)
{
    if (!l)
        return;
    free(l->gpus);
    memset(l, 0, sizeof *l);
}

struct tkm_gpu *tkm_gpu_list_add(struct tkm_gpu_list *l)
{
    struct tkm_gpu *n = realloc(l->gpus, (l->n + 1) * sizeof *n);
    if (!n)
        return NULL;
    l->gpus = n;
    struct tkm_gpu *g = &l->gpus[l->n];
    memset(g, 0, sizeof *g);
    g->index = (int)l->n;
    g->cc_major = g->cc_minor = -1;
    g->mig_mode = -1;
    l->n++;
    return g;
}

void tkm_gpu_norm_bus_id(const char *in, char *out, size_t size)
{
    /* NVML writes an 8-digit domain ("00000000:00:06.0"); sysfs uses 4. */
    const char *colon = strchr(in, ':');
    if (colon && colon - in == 8 && strncmp(in, "0000", 4) == 0)
        in += 4;
    snprintf(out, size, "%s", in);
    for (char *p = out; *p; p++)
        *p = (char)tolower((unsigned char)*p);
}

/* Series words that name no model on their own: "RTX 4090" -> "rtx-4090". */
static int series_word(const char *w)
{
    return !strcmp(w, "rtx") || !strcmp(w, "gtx") || !strcmp(w, "rx") || !strcmp(w, "titan");
}

void tkm_gpu_type_from_name(const char *name, char *out, size_t size)
{
    /* lower case; vendor words kept ("nvidia", "amd"); brand words ("tesla",
     * "geforce", "instinct", "radeon") imply the vendor; the model is the first
     * other word up to a '-', joined with the next word after a series word. */
    char vendor[16] = "", model[48] = "";
    int join_next = 0;
    const char *p = name;
    while (*p) {
        char w[32];
        size_t n = 0;
        while (*p == ' ')
            p++;
        while (*p && *p != ' ' && n < sizeof w - 1)
            w[n++] = (char)tolower((unsigned char)*p++);
        w[n] = '\0';
        while (*p && *p != ' ')
            p++;
        if (!n)
            break;
        w[strcspn(w, "-")] = '\0'; /* "a100-sxm4-80gb" -> "a100" */
        if (!strcmp(w, "nvidia") || !strcmp(w, "amd")) {
            snprintf(vendor, sizeof vendor, "%s", w);
        } else if (!strcmp(w, "tesla") || !strcmp(w, "geforce") || !strcmp(w, "quadro")) {
            if (!vendor[0])
                snprintf(vendor, sizeof vendor, "nvidia");
        } else if (!strcmp(w, "instinct") || !strcmp(w, "radeon") || !strcmp(w, "ati")) {
            if (!vendor[0])
                snprintf(vendor, sizeof vendor, "amd");
        } else if (!model[0]) {
            snprintf(model, sizeof model, "%s", w);
            join_next = series_word(w);
        } else if (join_next && w[0]) {
            size_t ml = strlen(model);
            snprintf(model + ml, sizeof model - ml, "-%.20s", w);
            join_next = 0;
        }
    }
    if (!vendor[0] && model[0])
        snprintf(vendor, sizeof vendor, "gpu");
    if (model[0])
        snprintf(out, size, "%s-%s", vendor, model);
    else
        snprintf(out, size, "%s", vendor[0] ? vendor : "unknown");
}

int tkm_gpu_gfx_name(unsigned long v, char *out, size_t size)
{
    unsigned long major = v / 10000, minor = (v / 100) % 100, step = v % 100;
    if (v == 0 || major == 0 || minor > 15 || step > 15)
        return -EINVAL;
    snprintf(out, size, "gfx%lu%lx%lx", major, minor, step);
    return 0;
}

static const struct {
    uint32_t vendor, device;
    const char *name;
} pci_names[] = {
    /* NVIDIA (pci.ids) */
    {0x10de, 0x2335, "NVIDIA H200"},
    {0x10de, 0x233b, "NVIDIA H200 NVL"},
    {0x10de, 0x2330, "NVIDIA H100 SXM5 80GB"},
    {0x10de, 0x2331, "NVIDIA H100 PCIe"},
    {0x10de, 0x2339, "NVIDIA H100 SXM5 94GB"},
    {0x10de, 0x2321, "NVIDIA H100 NVL"},
    {0x10de, 0x2324, "NVIDIA H800"},
    {0x10de, 0x20b0, "NVIDIA A100-SXM4-40GB"},
    {0x10de, 0x20b2, "NVIDIA A100-SXM4-80GB"},
    {0x10de, 0x20b5, "NVIDIA A100 80GB PCIe"},
    {0x10de, 0x20f1, "NVIDIA A100-PCIE-40GB"},
    {0x10de, 0x20b7, "NVIDIA A30"},
    {0x10de, 0x2236, "NVIDIA A10"},
    {0x10de, 0x26b5, "NVIDIA L40"},
    {0x10de, 0x26b9, "NVIDIA L40S"},
    {0x10de, 0x27b8, "NVIDIA L4"},
    {0x10de, 0x1eb8, "NVIDIA T4"},
    {0x10de, 0x1db4, "NVIDIA V100-PCIE-16GB"},
    {0x10de, 0x1db1, "NVIDIA V100-SXM2-16GB"},
    {0x10de, 0x2901, "NVIDIA B200"},
    /* AMD Instinct (amdgpu pciids) */
    {0x1002, 0x74a1, "AMD Instinct MI300X"},
    {0x1002, 0x74a0, "AMD Instinct MI300A"},
    {0x1002, 0x74a5, "AMD Instinct MI325X"},
    {0x1002, 0x740c, "AMD Instinct MI250X"},
    {0x1002, 0x740f, "AMD Instinct MI210"},
    {0x1002, 0x738c, "AMD Instinct MI100"},
    {0x1002, 0x66a1, "AMD Instinct MI50"},
    {0x1002, 0x744c, "AMD Radeon RX 7900 XTX"},
};

const char *tkm_gpu_pci_name(uint32_t vendor, uint32_t device)
{
    for (size_t i = 0; i < TKM_ARRAY_SIZE(pci_names); i++)
        if (pci_names[i].vendor == vendor && pci_names[i].device == device)
            return pci_names[i].name;
    return NULL;
}

json_t *tkm_gpu_to_json(const struct tkm_gpu *g)
{
    char cc[16], dev[16];
    const char *mig = g->mig_mode == 1 ? "enabled" : g->mig_mode == 0 ? "disabled" : "n/a";
    snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
    snprintf(dev, sizeof dev, "0x%04x", g->pci_device_id);
    /* s?: null when NULL; s*: left out when NULL */
    return json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s?,s:i,s:I,s:s,s:s,s:s,s:s,s:b,s:s*}",
                     "index", g->index, "vendor", g->vendor, "name", g->name, "gpuType",
                     g->gpu_type, "uuid", g->uuid, "pciBusId", g->pci_bus_id, "pciDeviceId", dev,
                     "backend", g->backend, "arch", g->arch, "computeCapability",
                     g->cc_major >= 0 ? cc : NULL, "warpSize", g->warp_size, "memoryBytes",
                     (json_int_t)g->memory_bytes, "driverVersion", g->driver_version, "cudaVersion",
                     g->cuda_version, "migMode", mig, "source", g->source, "usable", g->usable,
                     "reason", g->reason[0] ? g->reason : NULL);
}

int tkm_gpu_probe(struct tkm_gpu_list *out, const struct tkm_gpu_probe_opts *opts,
                  struct tkm_err *err)
{
    const char *sysfs = opts && opts->sysfs_root ? opts->sysfs_root : "/sys";
    const char *procfs = opts && opts->procfs_root ? opts->procfs_root : "/proc";
    const char *lib = opts && opts->nvml_lib ? opts->nvml_lib : "libnvidia-ml.so.1";
    struct stat st;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (stat(sysfs, &st) != 0 || !S_ISDIR(st.st_mode))
        return tkm_err_set(err, -ENOENT, "sysfs root %s is not a directory", sysfs);
    if (opts && opts->no_nvml)
        snprintf(out->nvml_error, sizeof out->nvml_error, "not loaded: --no-nvml");
    else if ((rc = tkm_gpu_probe_nvml(out, lib, err)) != 0)
        goto out;
    if ((rc = tkm_gpu_probe_kfd(out, sysfs, err)) != 0)
        goto out;
    rc = tkm_gpu_probe_pci(out, sysfs, procfs, err);
out:
    if (rc)
        tkm_gpu_list_release(out);
    return rc;
}
