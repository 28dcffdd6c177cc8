/*
 * gpu/pci.c - GPUs that no driver reported, from the PCI bus in sysfs.
 *
 * Every <sysfs>/bus/pci/devices/<bdf> with vendor 0x10de (NVIDIA) or 0x1002
 * (AMD) and a display class (0x03xxxx) that NVML or KFD did not already list
 * is added as unusable, with the reason a person needs: no driver bound, a
 * different driver bound (vfio-pci, nouveau), or the right driver bound but
 * its user-space interface (NVML, KFD) unavailable.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/fs.h>
#include <tkm/gpu/probe.h>
#include <tkm/util.h>

#include "triton/pathf-int.h"

static int read_hex(const char *dir, const char *file, unsigned long *out)
{
    char path[PATH_MAX], buf[64], *end;
    FILE *f;
    if (tkm_pathf(path, sizeof path, "%s/%s", dir, file) != 0 || !(f = fopen(path, "re")))
        return -ENOENT;
    if (!fgets(buf, sizeof buf, f)) {
        fclose(f);
        return -EIO;
    }
    fclose(f);
    errno = 0;
    *out = strtoul(buf, &end, 16);
    return errno || end == buf ? -EINVAL : 0;
}

/* The bound driver's name ("nvidia", "vfio-pci"), or "" when none. */
static void bound_driver(const char *dir, char *out, size_t size)
{
    char path[PATH_MAX], target[PATH_MAX];
    ssize_t n;
    out[0] = '\0';
    if (tkm_pathf(path, sizeof path, "%s/driver", dir) != 0)
        return;
    n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return;
    target[n] = '\0';
    const char *base = strrchr(target, '/');
    tkm_pathf(out, size, "%s", base ? base + 1 : target);
}

/* The version in <procfs>/driver/nvidia/version ("NVRM version: ... 580.159.04 ..."). */
static void nvidia_proc_version(const char *procfs, char *out, size_t size)
{
    char path[PATH_MAX], line[512];
    FILE *f;
    out[0] = '\0';
    if (tkm_pathf(path, sizeof path, "%s/driver/nvidia/version", procfs) != 0 ||
        !(f = fopen(path, "re")))
        return;
    if (fgets(line, sizeof line, f)) {
        for (char *p = line; *p; p++) {
            if (isdigit((unsigned char)*p) && (p == line || p[-1] == ' ')) {
                size_t n = strspn(p, "0123456789.");
                if (n >= 5 && memchr(p, '.', n)) {
                    snprintf(out, size, "%.*s", (int)n, p);
                    break;
                }
            }
        }
    }
    fclose(f);
}

static void explain(struct tkm_gpu *g, const char *drv, const char *want, const char *nvml_error)
{
    if (!drv[0])
        snprintf(g->reason, sizeof g->reason,
                 "driver not loaded: no kernel driver is bound to PCI device %s", g->pci_bus_id);
    else if (strcmp(drv, want) != 0)
        snprintf(g->reason, sizeof g->reason,
                 "driver not loaded: PCI device %s is bound to %s, not %s", g->pci_bus_id, drv,
                 want);
    else if (!strcmp(want, "nvidia"))
        snprintf(g->reason, sizeof g->reason,
                 "the nvidia driver is loaded but NVML is unavailable (%.180s)",
                 nvml_error[0] ? nvml_error : "it did not list this GPU");
    else
        snprintf(g->reason, sizeof g->reason,
                 "the amdgpu driver is loaded but KFD lists no compute node for %s", g->pci_bus_id);
}

static int listed(const struct tkm_gpu_list *l, const char *bdf)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->gpus[i].pci_bus_id, bdf) == 0)
            return 1;
    return 0;
}

static int add_pci_gpu(struct tkm_gpu_list *l, const char *dir, const char *bdf,
                       unsigned long vendor, unsigned long device, const char *procfs)
{
    char drv[64];
    const char *pn = tkm_gpu_pci_name((uint32_t)vendor, (uint32_t)device);
    int nv = vendor == 0x10de;
    struct tkm_gpu *g = tkm_gpu_list_add(l);
    if (!g)
        return -ENOMEM;
    snprintf(g->vendor, sizeof g->vendor, nv ? "nvidia" : "amd");
    snprintf(g->backend, sizeof g->backend, nv ? "cuda" : "hip");
    snprintf(g->source, sizeof g->source, "pci");
    snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", bdf);
    g->pci_device_id = (uint32_t)device;
    if (pn)
        snprintf(g->name, sizeof g->name, "%s", pn);
    else
        snprintf(g->name, sizeof g->name, "%s GPU 0x%04lx", nv ? "NVIDIA" : "AMD", device);
    if (pn)
        tkm_gpu_type_from_name(pn, g->gpu_type, sizeof g->gpu_type);
    else
        snprintf(g->gpu_type, sizeof g->gpu_type, "%s-unknown", g->vendor);
    if (nv)
        nvidia_proc_version(procfs, g->driver_version, sizeof g->driver_version);
    bound_driver(dir, drv, sizeof drv);
    explain(g, drv, nv ? "nvidia" : "amdgpu", l->nvml_error);
    return 0;
}

int tkm_gpu_probe_pci(struct tkm_gpu_list *l, const char *sysfs, const char *procfs,
                      struct tkm_err *err)
{
    char root[PATH_MAX], dir[PATH_MAX], bdf[32], **names = NULL;
    size_t n = 0;
    int rc = 0, fd;
    if (tkm_pathf(root, sizeof root, "%s/bus/pci/devices", sysfs) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "sysfs root too long");
    if ((fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return 0; /* no PCI bus visible (a container without /sys/bus) */
    rc = tkm_list_dir(fd, TKM_LIST_ALL, SIZE_MAX, &names, &n); /* sorted */
    close(fd);
    if (rc)
        return rc == -ENOMEM ? tkm_err_set(err, rc, "out of memory") : 0;
    for (size_t i = 0; i < n; i++) {
        unsigned long vendor, device, cls;
        if (tkm_pathf(dir, sizeof dir, "%s/%s", root, names[i]) != 0 ||
            read_hex(dir, "vendor", &vendor) != 0 || read_hex(dir, "class", &cls) != 0 ||
            read_hex(dir, "device", &device) != 0)
            continue;
        if ((vendor != 0x10de && vendor != 0x1002) || (cls >> 16) != 0x03)
            continue;
        tkm_gpu_norm_bus_id(names[i], bdf, sizeof bdf);
        if (listed(l, bdf))
            continue;
        if ((rc = add_pci_gpu(l, dir, bdf, vendor, device, procfs)) != 0) {
            tkm_err_set(err, rc, "out of memory");
            break;
        }
    }
    tkm_names_free(names, n);
    return rc;
}
