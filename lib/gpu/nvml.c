/*
 * gpu/nvml.c - NVIDIA GPUs through NVML, loaded with dlopen (never linked).
 *
 * Only the handful of entry points below are resolved; the types are the
 * stable NVML ABI (nvml.h): every call returns nvmlReturn_t (0 = success).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <tkm/gpu/probe.h>

typedef void *nvml_device;
struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_pci_info { /* nvmlPciInfo_t (v2/v3 layout) */
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};

struct nvml_api {
    int (*init)(void);
    int (*shutdown)(void);
    const char *(*error_string)(int);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, nvml_device *);
    int (*name)(nvml_device, char *, unsigned int);
    int (*uuid)(nvml_device, char *, unsigned int);
    int (*cc)(nvml_device, int *, int *);
    int (*memory)(nvml_device, struct nvml_memory *);
    int (*pci)(nvml_device, struct nvml_pci_info *);
    int (*driver)(char *, unsigned int);
    int (*cuda_driver)(int *);
    int (*mig)(nvml_device, unsigned int *, unsigned int *);
};

static const char *nvml_strerror(const struct nvml_api *a, int r)
{
    const char *s = a->error_string ? a->error_string(r) : NULL;
    return s ? s : "unknown NVML error";
}

/* Resolves the symbols; returns the name of the first missing one, or NULL. */
static const char *resolve(void *h, struct nvml_api *a)
{
    static const struct {
        const char *sym;
        size_t off;
    } syms[] = {
        {"nvmlInit_v2", offsetof(struct nvml_api, init)},
        {"nvmlShutdown", offsetof(struct nvml_api, shutdown)},
        {"nvmlDeviceGetCount_v2", offsetof(struct nvml_api, count)},
        {"nvmlDeviceGetHandleByIndex_v2", offsetof(struct nvml_api, handle)},
        {"nvmlDeviceGetName", offsetof(struct nvml_api, name)},
        {"nvmlDeviceGetUUID", offsetof(struct nvml_api, uuid)},
        {"nvmlDeviceGetCudaComputeCapability", offsetof(struct nvml_api, cc)},
        {"nvmlDeviceGetMemoryInfo", offsetof(struct nvml_api, memory)},
        {"nvmlDeviceGetPciInfo_v3", offsetof(struct nvml_api, pci)},
        {"nvmlSystemGetDriverVersion", offsetof(struct nvml_api, driver)},
        {"nvmlSystemGetCudaDriverVersion_v2", offsetof(struct nvml_api, cuda_driver)},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(h, syms[i].sym);
        if (!p)
            return syms[i].sym;
        memcpy((char *)a + syms[i].off, &p, sizeof p);
    }
    /* optional: */
    void *p = dlsym(h, "nvmlErrorString");
    memcpy(&a->error_string, &p, sizeof p);
    p = dlsym(h, "nvmlDeviceGetMigMode");
    memcpy(&a->mig, &p, sizeof p);
    return NULL;
}

static void fill_device(const struct nvml_api *a, nvml_device d, struct tkm_gpu *g)
{
    struct nvml_memory mem;
    struct nvml_pci_info pci;
    unsigned int cur, pend;
    snprintf(g->backend, sizeof g->backend, "cuda");
    g->warp_size = 32; /* every CUDA GPU Triton supports */
    if (a->name(d, g->name, sizeof g->name) != 0)
        g->name[0] = '\0';
    g->name[sizeof g->name - 1] = '\0';
    tkm_gpu_type_from_name(g->name, g->gpu_type, sizeof g->gpu_type);
    if (a->uuid(d, g->uuid, sizeof g->uuid) != 0)
        g->uuid[0] = '\0';
    g->uuid[sizeof g->uuid - 1] = '\0';
    if (a->cc(d, &g->cc_major, &g->cc_minor) == 0 && g->cc_major > 0 && g->cc_minor >= 0)
        snprintf(g->arch, sizeof g->arch, "%d", g->cc_major * 10 + g->cc_minor);
    else
        g->cc_major = g->cc_minor = -1;
    if (a->memory(d, &mem) == 0)
        g->memory_bytes = mem.total;
    memset(&pci, 0, sizeof pci);
    if (a->pci(d, &pci) == 0) {
        pci.bus_id[sizeof pci.bus_id - 1] = '\0';
        tkm_gpu_norm_bus_id(pci.bus_id, g->pci_bus_id, sizeof g->pci_bus_id);
        g->pci_device_id = pci.pci_device_id >> 16; /* 0x233510de: device << 16 | vendor */
    }
    if (a->mig && a->mig(d, &cur, &pend) == 0)
        g->mig_mode = cur ? 1 : 0;
    g->usable = g->arch[0] != '\0';
    if (!g->usable)
        snprintf(g->reason, sizeof g->reason, "NVML did not report a compute capability");
}

static int probe_devices(const struct nvml_api *a, struct tkm_gpu_list *l, struct tkm_err *err)
{
    unsigned int n = 0;
    char drv[80] = "";
    int cuda = 0, r;
    if ((r = a->count(&n)) != 0) {
        snprintf(l->nvml_error, sizeof l->nvml_error, "nvmlDeviceGetCount_v2 failed: %s",
                 nvml_strerror(a, r));
        return 0;
    }
    if (a->driver(drv, sizeof drv) != 0)
        drv[0] = '\0';
    drv[sizeof drv - 1] = '\0';
    if (a->cuda_driver(&cuda) != 0)
        cuda = 0;
    for (unsigned int i = 0; i < n && i < 256; i++) {
        nvml_device d = NULL;
        struct tkm_gpu *g = tkm_gpu_list_add(l);
        if (!g)
            return tkm_err_set(err, -ENOMEM, "out of memory");
        snprintf(g->vendor, sizeof g->vendor, "nvidia");
        snprintf(g->source, sizeof g->source, "nvml");
        snprintf(g->driver_version, sizeof g->driver_version, "%s", drv);
        g->cuda_driver_version = cuda;
        if (cuda > 0)
            snprintf(g->cuda_version, sizeof g->cuda_version, "%d.%d", cuda / 1000,
                     (cuda % 1000) / 10);
        if ((r = a->handle(i, &d)) != 0) {
            snprintf(g->reason, sizeof g->reason, "NVML cannot open GPU %u: %s", i,
                     nvml_strerror(a, r));
            continue;
        }
        fill_device(a, d, g);
    }
    return 0;
}

int tkm_gpu_probe_nvml(struct tkm_gpu_list *l, const char *lib, struct tkm_err *err)
{
    struct nvml_api a;
    const char *missing;
    int rc = 0, r;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(l->nvml_error, sizeof l->nvml_error, "cannot load %s: %s", lib,
                 e ? e : "unknown error");
        return 0;
    }
    memset(&a, 0, sizeof a);
    if ((missing = resolve(h, &a)) != NULL) {
        snprintf(l->nvml_error, sizeof l->nvml_error, "%s has no %s (driver too old?)", lib,
                 missing);
        goto out;
    }
    if ((r = a.init()) != 0) {
        snprintf(l->nvml_error, sizeof l->nvml_error, "nvmlInit_v2 failed: %s",
                 nvml_strerror(&a, r));
        goto out;
    }
    rc = probe_devices(&a, l, err);
    a.shutdown();
out:
    dlclose(h);
    return rc;
}
