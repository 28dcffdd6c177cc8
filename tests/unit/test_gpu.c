/*
 * Unit tests for lib/gpu probing over fixture trees:
 *   - the real H200 facts (tests/fixtures/gpu/h200: gpu-facts.json is what
 *     NVML said there, gpu-probe.txt what /sys and /proc held), served by a fake
 *     libnvidia-ml.so.1 (tests/fixtures/fakenvml) and a sysfs/procfs tree built
 *     from those files;
 *   - an A100 (fake NVML) and an MI300X (KFD topology + PCI) tree built here;
 *   - GPUs without a driver (PCI scan fallback).
 */
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/gpu/compat.h>
#include <tkm/gpu/probe.h>

#include "test.h"

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        tkm_test_fail(__FILE__, __LINE__, "command failed: %s", cmd);
}

static char *tmp_path(const char *rel)
{
    static char bufs[8][1024];
    static int i;
    char *b = bufs[i++ % 8];
    snprintf(b, 1024, "%s/%s", tkm_test_tmpdir(), rel);
    return b;
}

/* Builds the fake NVML into <tmp>/nvml/libnvidia-ml.so.1 and returns its path. */
static const char *build_fake_nvml(void)
{
    const char *src = getenv("TKM_SOURCE_DIR") ? getenv("TKM_SOURCE_DIR") : TKM_SOURCE_DIR;
    sh("mkdir -p '%s' && cc -shared -fPIC -o '%s' '%s/tests/fixtures/fakenvml/fakenvml.c'",
       tmp_path("nvml"), tmp_path("nvml/libnvidia-ml.so.1"), src);
    return tmp_path("nvml/libnvidia-ml.so.1");
}

/* A PCI device dir under sysfs; driver "" leaves it unbound. */
static void pci_dev(const char *sysfs, const char *bdf, const char *vendor, const char *device,
                    const char *cls, const char *driver)
{
    sh("d='%s/bus/pci/devices/%s' && mkdir -p \"$d\" '%s/bus/pci/drivers/%s' && "
       "echo %s > \"$d/vendor\" && echo %s > \"$d/device\" && echo %s > \"$d/class\"",
       sysfs, bdf, sysfs, driver[0] ? driver : "none", vendor, device, cls);
    if (driver[0])
        sh("ln -s '../../drivers/%s' '%s/bus/pci/devices/%s/driver'", driver, sysfs, bdf);
}

/* The H200 node: fake NVML config from gpu-facts.json, sysfs/procfs from gpu-probe.txt. */
static void h200_tree(const char *sysfs, const char *procfs, const char *nvml_conf)
{
    char path[1024], line[512];
    json_error_t je;
    snprintf(path, sizeof path, "%s/gpu/h200/gpu-facts.json", tkm_test_fixtures());
    json_t *f = json_load_file(path, 0, &je);
    ASSERT_NOT_NULL(f);
    FILE *c = fopen(nvml_conf, "w");
    ASSERT_NOT_NULL(c);
    json_t *cc = json_object_get(f, "nvml_cc");
    fprintf(c, "driver=%s\ncuda=%lld\n[gpu]\nname=%s\nuuid=%s\ncc=%lld.%lld\nmem=%lld\n",
            json_string_value(json_object_get(f, "nvml_driver")),
            json_integer_value(json_object_get(f, "nvml_cuda_driver")),
            json_string_value(json_object_get(f, "nvml_name")),
            json_string_value(json_object_get(f, "nvml_uuid")),
            json_integer_value(json_array_get(cc, 0)), json_integer_value(json_array_get(cc, 1)),
            json_integer_value(json_object_get(f, "nvml_mem_total")));
    fprintf(c, "busid=%s\npcidevid=%s\nmig=0\n",
            json_string_value(json_object_get(f, "nvml_pci_busid")),
            json_string_value(json_object_get(f, "nvml_pci_device_id")));
    fclose(c);
    json_decref(f);
    /* "/sys/bus/pci/devices/0000:00:06.0 vendor=0x10de device=0x2335 class=0x030200" and the
     * "NVRM version:" line, as recorded on the H200 */
    snprintf(path, sizeof path, "%s/gpu/h200/gpu-probe.txt", tkm_test_fixtures());
    FILE *p = fopen(path, "r");
    ASSERT_NOT_NULL(p);
    int have_pci = 0;
    while (fgets(line, sizeof line, p)) {
        char bdf[64], v[16], d[16], k[16];
        if (sscanf(line, "/sys/bus/pci/devices/%63s vendor=%15s device=%15s class=%15s", bdf, v, d,
                   k) == 4) {
            pci_dev(sysfs, bdf, v, d, k, "nvidia");
            have_pci = 1;
        } else if (strncmp(line, "NVRM version:", 13) == 0) {
            sh("mkdir -p '%s/driver/nvidia'", procfs);
            snprintf(path, sizeof path, "%s/driver/nvidia/version", procfs);
            FILE *o = fopen(path, "w");
            ASSERT_NOT_NULL(o);
            fputs(line, o);
            fclose(o);
        }
    }
    fclose(p);
    ASSERT(have_pci);
    /* the host bridge and others are on the bus too */
    pci_dev(sysfs, "0000:00:00.0", "0x8086", "0x1237", "0x060000", "");
}

TEST(h200_through_fake_nvml)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    const char *sysfs = tmp_path("sys"), *procfs = tmp_path("proc");
    h200_tree(sysfs, procfs, tmp_path("nvml.conf"));
    setenv("TKM_FAKE_NVML", tmp_path("nvml.conf"), 1);
    struct tkm_gpu_probe_opts o = {sysfs, procfs, build_fake_nvml(), 0};
    ASSERT_OK(tkm_gpu_probe(&l, &o, &e));
    ASSERT_STREQ(l.nvml_error, "");
    ASSERT_EQ(l.n, 1); /* the PCI scan does not add the same GPU twice */
    const struct tkm_gpu *g = &l.gpus[0];
    ASSERT_STREQ(g->name, "NVIDIA H200");
    ASSERT_STREQ(g->gpu_type, "nvidia-h200");
    ASSERT_STREQ(g->uuid, "GPU-9e6a0cf1-1528-6ed0-474d-41f4c7634e37");
    ASSERT_EQ(g->cc_major, 9);
    ASSERT_EQ(g->cc_minor, 0);
    ASSERT_STREQ(g->arch, "90");
    ASSERT_EQ(g->warp_size, 32);
    ASSERT_STREQ(g->backend, "cuda");
    ASSERT_UEQ(g->memory_bytes, 150754820096ULL);
    ASSERT_STREQ(g->pci_bus_id, "0000:00:06.0");
    ASSERT_EQ(g->pci_device_id, 0x2335);
    ASSERT_STREQ(g->driver_version, "580.159.04");
    ASSERT_EQ(g->cuda_driver_version, 13000);
    ASSERT_STREQ(g->cuda_version, "13.0");
    ASSERT_EQ(g->mig_mode, 0);
    ASSERT_STREQ(g->source, "nvml");
    ASSERT_EQ(g->usable, 1);
    json_t *j = tkm_gpu_to_json(g);
    ASSERT_STREQ(json_string_value(json_object_get(j, "computeCapability")), "9.0");
    ASSERT_STREQ(json_string_value(json_object_get(j, "pciDeviceId")), "0x2335");
    ASSERT_STREQ(json_string_value(json_object_get(j, "migMode")), "disabled");
    json_decref(j);
    tkm_gpu_list_release(&l);
}

TEST(h200_without_nvml_is_reported_unusable)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    const char *sysfs = tmp_path("sys"), *procfs = tmp_path("proc");
    h200_tree(sysfs, procfs, tmp_path("nvml.conf"));
    struct tkm_gpu_probe_opts o = {sysfs, procfs, tmp_path("no/libnvidia-ml.so.1"), 0};
    ASSERT_OK(tkm_gpu_probe(&l, &o, &e));
    ASSERT_STRCONTAINS(l.nvml_error, "cannot load");
    ASSERT_EQ(l.n, 1);
    ASSERT_STREQ(l.gpus[0].name, "NVIDIA H200"); /* from the PCI id table */
    ASSERT_STREQ(l.gpus[0].gpu_type, "nvidia-h200");
    ASSERT_STREQ(l.gpus[0].source, "pci");
    ASSERT_STREQ(l.gpus[0].arch, "");
    ASSERT_EQ(l.gpus[0].usable, 0);
    ASSERT_STREQ(l.gpus[0].driver_version, "580.159.04"); /* from /proc/driver/nvidia/version */
    ASSERT_STRCONTAINS(l.gpus[0].reason, "nvidia driver is loaded but NVML is unavailable");
    tkm_gpu_list_release(&l);
}

TEST(gpu_without_driver_fails_closed)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    const char *sysfs = tmp_path("sys");
    pci_dev(sysfs, "0000:41:00.0", "0x10de", "0x20b2", "0x030200", "");
    pci_dev(sysfs, "0000:c1:00.0", "0x1002", "0x74a1", "0x038000", "vfio-pci");
    pci_dev(sysfs, "0000:02:00.0", "0x10de", "0x1af1", "0x068000", ""); /* NVSwitch: a bridge */
    struct tkm_gpu_probe_opts o = {sysfs, tmp_path("proc"), NULL, 1};
    ASSERT_OK(tkm_gpu_probe(&l, &o, &e));
    ASSERT_EQ(l.n, 2);
    ASSERT_STREQ(l.gpus[0].gpu_type, "nvidia-a100");
    ASSERT_STRCONTAINS(l.gpus[0].reason, "driver not loaded");
    ASSERT_STRCONTAINS(l.gpus[0].reason, "0000:41:00.0");
    ASSERT_STREQ(l.gpus[1].gpu_type, "amd-mi300x");
    ASSERT_STRCONTAINS(l.gpus[1].reason, "bound to vfio-pci, not amdgpu");
    struct tkm_triton_summary s;
    ASSERT_OK(tkm_triton_summary_parse(
        &s, "{\"targets\":[{\"backend\":\"cuda\",\"arch\":\"80\",\"warp_size\":32}]}", &e));
    struct tkm_compat_verdict v;
    tkm_compat_check(&s, &l.gpus[0], &v);
    ASSERT_EQ(v.compatible, 0);
    ASSERT_STRCONTAINS(v.reason, "cannot be used: driver not loaded");
    tkm_triton_summary_release(&s);
    tkm_gpu_list_release(&l);
}

TEST(a100_through_fake_nvml)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    const char *sysfs = tmp_path("sys");
    pci_dev(sysfs, "0000:07:00.0", "0x10de", "0x20b2", "0x030200", "nvidia");
    FILE *c = fopen(tmp_path("a100.conf"), "w");
    ASSERT_NOT_NULL(c);
    fprintf(c, "driver=550.54.15\ncuda=12040\n[gpu]\nname=NVIDIA A100-SXM4-80GB\n"
               "uuid=GPU-a100\ncc=8.0\nmem=85899345920\nbusid=00000000:07:00.0\n"
               "pcidevid=0x20b210de\nmig=1\n");
    fclose(c);
    setenv("TKM_FAKE_NVML", tmp_path("a100.conf"), 1);
    struct tkm_gpu_probe_opts o = {sysfs, tmp_path("proc"), build_fake_nvml(), 0};
    ASSERT_OK(tkm_gpu_probe(&l, &o, &e));
    ASSERT_EQ(l.n, 1);
    ASSERT_STREQ(l.gpus[0].gpu_type, "nvidia-a100");
    ASSERT_STREQ(l.gpus[0].arch, "80");
    ASSERT_STREQ(l.gpus[0].cuda_version, "12.4");
    ASSERT_EQ(l.gpus[0].mig_mode, 1);
    tkm_gpu_list_release(&l);
}

TEST(nvml_init_failure_is_explained)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    FILE *c = fopen(tmp_path("bad.conf"), "w");
    ASSERT_NOT_NULL(c);
    fprintf(c, "init_error=9\n");
    fclose(c);
    setenv("TKM_FAKE_NVML", tmp_path("bad.conf"), 1);
    sh("mkdir -p '%s'", tmp_path("sys"));
    struct tkm_gpu_probe_opts o = {tmp_path("sys"), tmp_path("proc"), build_fake_nvml(), 0};
    ASSERT_OK(tkm_gpu_probe(&l, &o, &e));
    ASSERT_EQ(l.n, 0);
    ASSERT_STREQ(l.nvml_error, "nvmlInit_v2 failed: Driver Not Loaded");
    tkm_gpu_list_release(&l);
}

/* A KFD topology node. */
static void kfd_node(const char *sysfs, int node, const char *props)
{
    sh("d='%s/class/kfd/kfd/topology/nodes/%d' && mkdir -p \"$d\" && printf '%s' > "
       "\"$d/properties\"",
       sysfs, node, props);
}

TEST(mi300x_through_kfd)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    const char *sysfs = tmp_path("sys");
    kfd_node(sysfs, 0, "cpu_cores_count 96\nsimd_count 0\ngfx_target_version 0\nvendor_id 0\n");
    kfd_node(sysfs, 1,
             "cpu_cores_count 0\nsimd_count 1216\nwave_front_size 64\n"
             "gfx_target_version 90402\nvendor_id 4098\ndevice_id 29857\nlocation_id 3072\n"
             "domain 0\nunique_id 12345678901234\ndrm_render_minor 128\n");
    kfd_node(sysfs, 2,
             "simd_count 440\nwave_front_size 64\ngfx_target_version 90010\nvendor_id 4098\n"
             "device_id 29708\nlocation_id 8192\ndomain 0\n");
    pci_dev(sysfs, "0000:0c:00.0", "0x1002", "0x74a1", "0x038000", "amdgpu");
    pci_dev(sysfs, "0000:20:00.0", "0x1002", "0x740c", "0x038000", "amdgpu");
    sh("echo 206141652992 > '%s/bus/pci/devices/0000:0c:00.0/mem_info_vram_total'", sysfs);
    struct tkm_gpu_probe_opts o = {sysfs, tmp_path("proc"), NULL, 1};
    ASSERT_OK(tkm_gpu_probe(&l, &o, &e));
    ASSERT_EQ(l.n, 2);
    const struct tkm_gpu *g = &l.gpus[0];
    ASSERT_STREQ(g->name, "AMD Instinct MI300X");
    ASSERT_STREQ(g->gpu_type, "amd-mi300x");
    ASSERT_STREQ(g->arch, "gfx942"); /* not upstream's gfx90c */
    ASSERT_STREQ(g->backend, "hip");
    ASSERT_EQ(g->warp_size, 64);
    ASSERT_STREQ(g->pci_bus_id, "0000:0c:00.0");
    ASSERT_UEQ(g->memory_bytes, 206141652992ULL);
    ASSERT_STREQ(g->source, "kfd");
    ASSERT_EQ(g->usable, 1);
    ASSERT_STREQ(l.gpus[1].gpu_type, "amd-mi250x");
    ASSERT_STREQ(l.gpus[1].arch, "gfx90a");
    tkm_gpu_list_release(&l);
}

TEST(gpu_type_and_gfx_names)
{
    char b[48];
    tkm_gpu_type_from_name("NVIDIA H200", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-h200");
    tkm_gpu_type_from_name("NVIDIA A100-SXM4-80GB", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-a100");
    tkm_gpu_type_from_name("NVIDIA H100 80GB HBM3", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-h100");
    tkm_gpu_type_from_name("Tesla V100-SXM2-16GB", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-v100");
    tkm_gpu_type_from_name("AMD Instinct MI300X", b, sizeof b);
    ASSERT_STREQ(b, "amd-mi300x");
    tkm_gpu_type_from_name("NVIDIA GeForce RTX 4090", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-rtx-4090");
    tkm_gpu_type_from_name("NVIDIA RTX A6000", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-rtx-a6000");
    tkm_gpu_type_from_name("NVIDIA RTX", b, sizeof b);
    ASSERT_STREQ(b, "nvidia-rtx");
    tkm_gpu_type_from_name("", b, sizeof b);
    ASSERT_STREQ(b, "unknown");
    ASSERT_OK(tkm_gpu_gfx_name(90402, b, sizeof b));
    ASSERT_STREQ(b, "gfx942");
    ASSERT_OK(tkm_gpu_gfx_name(90010, b, sizeof b));
    ASSERT_STREQ(b, "gfx90a");
    ASSERT_OK(tkm_gpu_gfx_name(110000, b, sizeof b));
    ASSERT_STREQ(b, "gfx1100");
    ASSERT_EQ(tkm_gpu_gfx_name(0, b, sizeof b), -EINVAL);
    ASSERT_STREQ(tkm_gpu_pci_name(0x1002, 0x738c), "AMD Instinct MI100");
    ASSERT_NULL(tkm_gpu_pci_name(0x1234, 0x1));
}

TEST(missing_sysfs_root_is_an_error)
{
    struct tkm_gpu_list l;
    struct tkm_err e = {0};
    struct tkm_gpu_probe_opts o = {tmp_path("nope"), NULL, NULL, 1};
    ASSERT_EQ(tkm_gpu_probe(&l, &o, &e), -ENOENT);
    ASSERT_STRCONTAINS(e.msg, "nope");
}

/* The value of the first <tag>...</tag> in xml, into out. */
static void xml_value(const char *xml, const char *tag, char *out, size_t size)
{
    char open[64];
    snprintf(open, sizeof open, "<%s>", tag);
    const char *p = strstr(xml, open);
    ASSERT_NOT_NULL(p);
    p += strlen(open);
    const char *e = strstr(p, "</");
    ASSERT_NOT_NULL(e);
    snprintf(out, size, "%.*s", (int)(e - p), p);
}

static json_t *device_json(const char *dir, const char *file)
{
    char path[1024];
    json_error_t je;
    const char *src = getenv("TKM_SOURCE_DIR") ? getenv("TKM_SOURCE_DIR") : TKM_SOURCE_DIR;
    snprintf(path, sizeof path, "%s/tests/fixtures/gpu/%s/%s", src, dir, file);
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s", path, je.text);
    return j;
}

/* tkmctl check on a real GPU (dir) against nvidia-smi of the same machine. */
static void device_run(const char *dir, const char *gpu_type)
{
    char path[1024], name[128], drv[64], cuda[32], uuid[128], bus[64], mig[32], line[512];
    char want[512];
    const char *src = getenv("TKM_SOURCE_DIR") ? getenv("TKM_SOURCE_DIR") : TKM_SOURCE_DIR;
    snprintf(path, sizeof path, "%s/tests/fixtures/gpu/%s/nvidia-smi.xml", src, dir);
    FILE *f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    char *xml = calloc(1, 1 << 20);
    ASSERT_NOT_NULL(xml);
    size_t n = fread(xml, 1, (1 << 20) - 1, f);
    fclose(f);
    ASSERT(n > 1000);
    xml_value(xml, "product_name", name, sizeof name);
    xml_value(xml, "driver_version", drv, sizeof drv);
    xml_value(xml, "cuda_version", cuda, sizeof cuda);
    xml_value(xml, "uuid", uuid, sizeof uuid);
    xml_value(xml, "pci_bus_id", bus, sizeof bus);
    xml_value(xml, "current_mig", mig, sizeof mig);
    free(xml);
    ASSERT_EQ(strncmp(drv, "580.", 4), 0);
    ASSERT_STREQ(cuda, "13.0");
    /* compute_cap is only in the --query-gpu output */
    snprintf(path, sizeof path, "%s/tests/fixtures/gpu/%s/nvidia-smi-query.csv", src, dir);
    f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    ASSERT_NOT_NULL(fgets(line, sizeof line, f));
    ASSERT_NOT_NULL(fgets(line, sizeof line, f));
    fclose(f);
    ASSERT_STRCONTAINS(line, ", 9.0, ");

    json_t *j = device_json(dir, "check-sm90.json");
    json_t *r = json_array_get(json_object_get(j, "results"), 0);
    json_t *g = json_object_get(r, "gpu");
    ASSERT_EQ(json_array_size(json_object_get(j, "results")), 1);
    ASSERT_STREQ(json_string_value(json_object_get(g, "name")), name);
    ASSERT_STREQ(json_string_value(json_object_get(g, "gpuType")), gpu_type);
    ASSERT_STREQ(json_string_value(json_object_get(g, "uuid")), uuid);
    ASSERT_STREQ(json_string_value(json_object_get(g, "computeCapability")), "9.0");
    ASSERT_STREQ(json_string_value(json_object_get(g, "arch")), "90");
    ASSERT_EQ(json_integer_value(json_object_get(g, "warpSize")), 32);
    ASSERT_STREQ(json_string_value(json_object_get(g, "driverVersion")), drv);
    ASSERT_STREQ(json_string_value(json_object_get(g, "cudaVersion")), cuda);
    ASSERT_STREQ(json_string_value(json_object_get(g, "migMode")), "disabled");
    ASSERT_STREQ(mig, "Disabled");
    char nb[32];
    tkm_gpu_norm_bus_id(bus, nb, sizeof nb);
    ASSERT_STREQ(json_string_value(json_object_get(g, "pciBusId")), nb);
    ASSERT_STREQ(json_string_value(json_object_get(g, "source")), "nvml");
    ASSERT(json_is_true(json_object_get(r, "compatible")));
    ASSERT(json_is_true(json_object_get(j, "compatible")));
    ASSERT_STRCONTAINS(json_string_value(json_object_get(r, "reason")),
                       "PTX ISA 8.7 needs CUDA 12.8+, driver supports 13.0");
    json_decref(j);

    j = device_json(dir, "check-sm80.json");
    r = json_array_get(json_object_get(j, "results"), 0);
    ASSERT(json_is_false(json_object_get(r, "compatible")));
    ASSERT(json_is_false(json_object_get(j, "compatible")));
    snprintf(want, sizeof want, "arch mismatch: cache built for sm80, GPU 0 (%s) is sm90", name);
    ASSERT_STREQ(json_string_value(json_object_get(r, "reason")), want);
    ASSERT_EQ(json_array_size(json_object_get(j, "incompatibleGpus")), 1);
    json_decref(j);

    j = device_json(dir, "check-inductor.json");
    r = json_array_get(json_object_get(j, "results"), 0);
    ASSERT(json_is_true(json_object_get(r, "compatible")));
    ASSERT_STRCONTAINS(json_string_value(json_object_get(r, "reason")), "PTX ISA 9.0");
    json_decref(j);

    j = device_json(dir, "check-sm90-no-nvml.json");
    r = json_array_get(json_object_get(j, "results"), 0);
    ASSERT(json_is_false(json_object_get(r, "compatible")));
    ASSERT_STREQ(json_string_value(json_object_get(json_object_get(r, "gpu"), "source")), "pci");
    json_decref(j);
}

TEST(device_run_h200_matches_nvidia_smi)
{
    device_run("h200-device", "nvidia-h200");
}

TEST(device_run_h100_matches_nvidia_smi)
{
    device_run("h100-device", "nvidia-h100");
}
