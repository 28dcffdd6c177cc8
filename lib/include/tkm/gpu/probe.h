/*
 * gpu/probe.h - which GPUs this node has, and what Triton would compile for them.
 *
 * Three sources, merged by PCI bus id:
 *   - NVIDIA through NVML, loaded at run time with dlopen("libnvidia-ml.so.1")
 *     (never linked, so tkm runs on nodes without the driver);
 *   - AMD through the amdgpu KFD topology in sysfs
 *     (<sysfs>/class/kfd/kfd/topology/nodes/N/properties: gfx_target_version,
 *     wave_front_size, vendor/device id, PCI location) and the PCI device dir;
 *   - a PCI scan (<sysfs>/bus/pci/devices/X/{vendor,device,class}) that reports
 *     every NVIDIA (0x10de) or AMD (0x1002) display-class (0x03xxxx) device the
 *     drivers above did not: its type comes from a device-id table, its arch is
 *     unknown and `reason` says why ("driver not loaded"). Such a GPU is never
 *     judged compatible (fail closed).
 *
 * The roots are configurable so tests and `tkmctl check --sysfs-root` can point
 * at fixture trees; a fake NVML library can be named with nvml_lib.
 *
 * Ownership: struct tkm_gpu_list is caller-owned; tkm_gpu_list_release() frees
 * its array. Strings in opts are borrowed for the call.
 */
#ifndef TKM_GPU_PROBE_H
#define TKM_GPU_PROBE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include <tkm/err.h>

struct tkm_gpu {
    int index;               /* position in the list (NVML index order first) */
    char vendor[16];         /* "nvidia" or "amd" */
    char backend[16];        /* Triton backend: "cuda" or "hip"; "" if unknown */
    char name[96];           /* product name, e.g. "NVIDIA H200", "AMD Instinct MI300X" */
    char gpu_type[48];       /* e.g. "nvidia-h200", "amd-mi300x" */
    char uuid[96];           /* NVML UUID or KFD unique_id; "" if unknown */
    char pci_bus_id[32];     /* "0000:00:06.0" (lower case, 4-digit domain) */
    uint32_t pci_device_id;  /* e.g. 0x2335 */
    int cc_major, cc_minor;  /* CUDA compute capability; -1 when not NVIDIA/unknown */
    char arch[32];           /* as Triton keys it: "90" (cuda), "gfx942" (hip); "" unknown */
    int warp_size;           /* 32 (cuda), 64 (CDNA), 32 (RDNA); 0 unknown */
    uint64_t memory_bytes;   /* total device memory; 0 unknown */
    char driver_version[32]; /* "580.159.04"; "" unknown */
    int cuda_driver_version; /* NVML form: 13000; 0 unknown */
    char cuda_version[16];   /* "13.0"; "" unknown */
    int mig_mode;            /* 1 enabled, 0 disabled, -1 not supported/unknown */
    char source[8];          /* "nvml", "kfd" or "pci" */
    int usable;              /* 1 when a driver reported it */
    char reason[256];        /* why not usable, e.g. "driver not loaded"; "" when usable */
};

struct tkm_gpu_list {
    struct tkm_gpu *gpus; /* owned */
    size_t n;
    char nvml_error[256]; /* why NVML gave nothing ("" if it answered or was not tried) */
};

struct tkm_gpu_probe_opts {
    const char *sysfs_root;  /* default "/sys" */
    const char *procfs_root; /* default "/proc" */
    const char *nvml_lib;    /* default "libnvidia-ml.so.1" (dlopen search path) */
    int no_nvml;             /* 1: skip NVML entirely */
};

/* Probes all sources. Finding no GPU is not an error (n == 0). Fails only on
 * allocation failure or an unreadable sysfs root. */
int tkm_gpu_probe(struct tkm_gpu_list *out, const struct tkm_gpu_probe_opts *opts,
                  struct tkm_err *err);
void tkm_gpu_list_release(struct tkm_gpu_list *l);

/* "NVIDIA H200" -> "nvidia-h200", "NVIDIA A100-SXM4-80GB" -> "nvidia-a100",
 * "AMD Instinct MI300X" -> "amd-mi300x". out gets at least 48 bytes. */
void tkm_gpu_type_from_name(const char *name, char *out, size_t size);
/* Product name for a PCI vendor/device id, or NULL if unknown. */
const char *tkm_gpu_pci_name(uint32_t vendor, uint32_t device);
/* gfx_target_version (KFD) -> "gfx942" (90402), "gfx90a" (90010); out >= 16 B. */
int tkm_gpu_gfx_name(unsigned long v, char *out, size_t size);

/* The list as JSON: [{"index":0,"vendor":"nvidia",...}] (new reference). */
json_t *tkm_gpu_to_json(const struct tkm_gpu *g);

/* Internal to lib/gpu (one per source); each appends to l. */
int tkm_gpu_probe_nvml(struct tkm_gpu_list *l, const char *lib, struct tkm_err *err);
int tkm_gpu_probe_kfd(struct tkm_gpu_list *l, const char *sysfs, struct tkm_err *err);
int tkm_gpu_probe_pci(struct tkm_gpu_list *l, const char *sysfs, const char *procfs,
                      struct tkm_err *err);
/* Appends a zeroed GPU (cc -1, mig -1) and returns it, or NULL on ENOMEM. */
struct tkm_gpu *tkm_gpu_list_add(struct tkm_gpu_list *l);
/* Normalises an NVML bus id "00000000:00:06.0" to "0000:00:06.0" (lower case). */
void tkm_gpu_norm_bus_id(const char *in, char *out, size_t size);

#endif
