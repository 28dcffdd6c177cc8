/*
 * gpu/amd.c - AMD GPUs from the amdgpu KFD topology in sysfs.
 *
 * <sysfs>/class/kfd/kfd/topology/nodes/<N>/properties is "key value" lines:
 * gfx_target_version (90402 = gfx942), wave_front_size, vendor_id (4098),
 * device_id, domain and location_id (bus << 8 | device << 3 | function),
 * unique_id. CPU nodes have gfx_target_version 0 and are skipped. The gfx name
 * comes from that number, not from a product-name table (upstream's table
 * maps MI300 to gfx90c, which is wrong: it is gfx942).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tkm/fs.h>
#include <tkm/gpu/probe.h>
#include <tkm/util.h>

#include "triton/pathf-int.h"

struct kfd_props {
    unsigned long gfx, wave, vendor, device, domain, location;
    unsigned long long unique_id;
    int have_location;
};

static void read_props(FILE *f, struct kfd_props *p)
{
    char line[256];
    memset(p, 0, sizeof *p);
    while (fgets(line, sizeof line, f)) {
        char key[64];
        unsigned long long v;
        if (sscanf(line, "%63s %llu", key, &v) != 2)
            continue;
        if (!strcmp(key, "gfx_target_version"))
            p->gfx = (unsigned long)v;
        else if (!strcmp(key, "wave_front_size"))
            p->wave = (unsigned long)v;
        else if (!strcmp(key, "vendor_id"))
            p->vendor = (unsigned long)v;
        else if (!strcmp(key, "device_id"))
            p->device = (unsigned long)v;
        else if (!strcmp(key, "domain"))
            p->domain = (unsigned long)v;
        else if (!strcmp(key, "location_id"))
            p->location = (unsigned long)v, p->have_location = 1;
        else if (!strcmp(key, "unique_id"))
            p->unique_id = v;
    }
}

/* Reads one small sysfs value (first line, newline stripped). */
static int read_line(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    if (!fgets(out, (int)size, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static void fill_amd(struct tkm_gpu *g, const struct kfd_props *p, const char *sysfs)
{
    char path[4096], v[64];
    const char *pn;
    snprintf(g->vendor, sizeof g->vendor, "amd");
    snprintf(g->backend, sizeof g->backend, "hip");
    snprintf(g->source, sizeof g->source, "kfd");
    g->pci_device_id = (uint32_t)p->device;
    if (tkm_gpu_gfx_name(p->gfx, g->arch, sizeof g->arch) != 0)
        snprintf(g->reason, sizeof g->reason,
                 "KFD reports gfx_target_version %lu, which is not a gfx name", p->gfx);
    /* CDNA (gfx9) runs wave64; RDNA reports 32. Trust KFD, default to 64. */
    g->warp_size = p->wave ? (int)p->wave : 64;
    if (p->have_location)
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%04lx:%02lx:%02lx.%lx", p->domain & 0xffff,
                 (p->location >> 8) & 0xff, (p->location >> 3) & 0x1f, p->location & 0x7);
    if (p->unique_id)
        snprintf(g->uuid, sizeof g->uuid, "GPU-%016llx", p->unique_id);
    pn = tkm_gpu_pci_name(0x1002, (uint32_t)p->device);
    if (pn)
        snprintf(g->name, sizeof g->name, "%s", pn);
    else
        snprintf(g->name, sizeof g->name, "AMD GPU 0x%04lx (%s)", p->device, g->arch);
    if (pn)
        tkm_gpu_type_from_name(pn, g->gpu_type, sizeof g->gpu_type);
    else
        snprintf(g->gpu_type, sizeof g->gpu_type, "amd-%s", g->arch[0] ? g->arch : "unknown");
    if (g->pci_bus_id[0] &&
        tkm_pathf(path, sizeof path, "%s/bus/pci/devices/%s/mem_info_vram_total", sysfs,
                  g->pci_bus_id) == 0 &&
        read_line(path, v, sizeof v) == 0) {
        uint64_t mem;
        if (tkm_parse_u64(v, UINT64_MAX, &mem) == 0)
            g->memory_bytes = mem;
    }
    if (tkm_pathf(path, sizeof path, "%s/module/amdgpu/version", sysfs) == 0 &&
        read_line(path, v, sizeof v) == 0)
        snprintf(g->driver_version, sizeof g->driver_version, "%.31s", v);
    g->usable = g->arch[0] != '\0';
}

static int node_cmp(const void *a, const void *b)
{
    long x = strtol(*(char *const *)a, NULL, 10), y = strtol(*(char *const *)b, NULL, 10);
    return (x > y) - (x < y);
}

int tkm_gpu_probe_kfd(struct tkm_gpu_list *l, const char *sysfs, struct tkm_err *err)
{
    char dir[4096], path[4096], **names = NULL;
    size_t n = 0;
    int rc = 0, fd;
    if (tkm_pathf(dir, sizeof dir, "%s/class/kfd/kfd/topology/nodes", sysfs) != 0)
        return tkm_err_set(err, -ENAMETOOLONG, "sysfs root too long");
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return 0; /* amdgpu/KFD not loaded: the PCI scan reports AMD GPUs */
    rc = tkm_list_dir(fd, TKM_LIST_ALL, SIZE_MAX, &names, &n);
    close(fd);
    if (rc)
        return rc == -ENOMEM ? tkm_err_set(err, rc, "out of memory") : 0;
    qsort(names, n, sizeof *names, node_cmp); /* node order = KFD GPU order */
    for (size_t i = 0; i < n; i++) {
        struct kfd_props p;
        FILE *f;
        if (names[i][0] < '0' || names[i][0] > '9' ||
            tkm_pathf(path, sizeof path, "%s/%s/properties", dir, names[i]) != 0 ||
            !(f = fopen(path, "re")))
            continue;
        read_props(f, &p);
        fclose(f);
        if (p.gfx == 0 || (p.vendor && p.vendor != 0x1002))
            continue; /* a CPU node */
        struct tkm_gpu *g = tkm_gpu_list_add(l);
        if (!g) {
            rc = tkm_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        fill_amd(g, &p, sysfs);
    }
    tkm_names_free(names, n);
    return rc;
}
