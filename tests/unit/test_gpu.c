/*
 * Unit tests for lib/gpu probing over fixture trees:
 *   - the real H200 facts (tests/fixtures/gpu/h200: gpu-facts.json is what
 *     NVML said there, gpu-probe.txt what /sys and /proc held), served by a fake
 *     libnvidia-ml.so.1 (tests/fixtures/fakenvml) and a sysfs/procfs tree built
 *     from those files;
 *   - an A100 (fake NVML) and an MI300X (KFD topology + PCI) tree built here;
 *   - GPUs without a driver (PCI scan fallback);
 *   - the real-GPU runs of tkmctl check (tests/fixtures/gpu/h200-device,
 *     h100-device) replayed through the probe and compat code (see below).
 * The fake NVML is the CMake target fakenvml (TKM_FAKE_NVML_DIR).
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

/* The fake NVML that CMake built (target fakenvml in tests/CMakeLists.txt). */
static const char *fake_nvml(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/libnvidia-ml.so.1", TKM_FAKE_NVML_DIR);
    if (access(path, R_OK) != 0)
        tkm_test_fail(__FILE__, __LINE__, "%s: %s (build the fakenvml target)", path,
                      strerror(errno));
    return path;
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
    struct tkm_gpu_probe_opts o = {sysfs, procfs, fake_nvml(), 0};
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
    struct tkm_gpu_probe_opts o = {sysfs, tmp_path("proc"), fake_nvml(), 0};
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
    struct tkm_gpu_probe_opts o = {tmp_path("sys"), tmp_path("proc"), fake_nvml(), 0};
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

/*
 * The real-GPU runs (tests/fixtures/gpu/h200-device, h100-device; see its
 * README.md) reproduced through the code: the fake NVML answers what
 * nvidia-smi recorded on that machine, the sysfs/procfs trees are rebuilt
 * from its pci.txt and /proc/driver/nvidia/version, the real probe and
 * compat code judge the fixture caches, and each verdict must equal what
 * tkmctl printed on the real GPU (check-*.json), field by field.
 */

/* A whole fixture file, NUL-terminated (owned: free()); missing fails. */
static char *fixture_text(const char *dir, const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/gpu/%s/%s", tkm_test_fixtures(), dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        tkm_test_fail(__FILE__, __LINE__, "fixture %s: %s", path, strerror(errno));
    char *b = calloc(1, 1 << 20);
    ASSERT_NOT_NULL(b);
    size_t n = fread(b, 1, (1 << 20) - 1, f);
    fclose(f);
    b[n] = '\0';
    return b;
}

static json_t *device_json(const char *dir, const char *file)
{
    char path[1024];
    json_error_t je;
    snprintf(path, sizeof path, "%s/gpu/%s/%s", tkm_test_fixtures(), dir, file);
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        tkm_test_fail(__FILE__, __LINE__, "fixture %s: %s", path, je.text);
    return j;
}

/* The value of the first <tag>...</tag> in xml, into out. */
static void xml_value(const char *xml, const char *tag, char *out, size_t size)
{
    char open[64];
    snprintf(open, sizeof open, "<%s>", tag);
    const char *p = strstr(xml, open);
    if (!p)
        tkm_test_fail(__FILE__, __LINE__, "nvidia-smi.xml has no <%s>", tag);
    p += strlen(open);
    const char *e = strstr(p, "</");
    ASSERT_NOT_NULL(e);
    snprintf(out, size, "%.*s", (int)(e - p), p);
}

/* Splits a CSV line at ',' (fields trimmed) into f[]; returns the count. */
static int csv_split(char *line, char **f, int max)
{
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; p && n < max;) {
        char *c = strchr(p, ',');
        if (c)
            *c = '\0';
        while (*p == ' ')
            p++;
        for (char *e = p + strlen(p); e > p && e[-1] == ' ';)
            *--e = '\0';
        f[n++] = p;
        p = c ? c + 1 : NULL;
    }
    return n;
}

/* What nvidia-smi recorded on the machine. */
struct smi {
    char name[128], uuid[128], driver[64], cuda[32], bus[64], cc[16], devid[32], mig[32];
    unsigned long long mem_mib;
};

static void smi_read(const char *dir, struct smi *s)
{
    char x[128], *hdr[16], *row[16];
    char *xml = fixture_text(dir, "nvidia-smi.xml");
    memset(s, 0, sizeof *s);
    xml_value(xml, "driver_version", s->driver, sizeof s->driver);
    xml_value(xml, "cuda_version", s->cuda, sizeof s->cuda);
    xml_value(xml, "product_name", s->name, sizeof s->name);
    xml_value(xml, "uuid", s->uuid, sizeof s->uuid);
    xml_value(xml, "pci_bus_id", s->bus, sizeof s->bus);
    xml_value(xml, "current_mig", s->mig, sizeof s->mig);
    free(xml);
    /* compute capability, memory and the PCI device id: --query-gpu */
    char *csv = fixture_text(dir, "nvidia-smi-query.csv");
    char *nl = strchr(csv, '\n');
    ASSERT_NOT_NULL(nl);
    *nl = '\0';
    int nh = csv_split(csv, hdr, 16), nr = csv_split(nl + 1, row, 16);
    ASSERT_EQ(nh, nr);
    for (int i = 0; i < nh; i++) {
        const char *k = hdr[i], *v = row[i];
        if (!strcmp(k, "name"))
            ASSERT_STREQ(v, s->name);
        else if (!strcmp(k, "uuid"))
            ASSERT_STREQ(v, s->uuid);
        else if (!strcmp(k, "driver_version"))
            ASSERT_STREQ(v, s->driver);
        else if (!strcmp(k, "pci.bus_id"))
            ASSERT_STREQ(v, s->bus);
        else if (!strcmp(k, "mig.mode.current"))
            ASSERT_STREQ(v, s->mig);
        else if (!strcmp(k, "compute_cap"))
            snprintf(s->cc, sizeof s->cc, "%s", v);
        else if (!strcmp(k, "pci.device_id"))
            snprintf(s->devid, sizeof s->devid, "%s", v);
        else if (!strcmp(k, "memory.total [MiB]"))
            ASSERT_EQ(sscanf(v, "%llu MiB%127s", &s->mem_mib, x), 1);
    }
    free(csv);
    ASSERT(s->cc[0] && s->devid[0] && s->mem_mib > 0);
}

/* The machine: fake NVML config from nvidia-smi, sysfs from pci.txt, procfs
 * from proc-nvidia-version.txt. */
static void device_tree(const char *dir, const struct smi *s, const char *sysfs, const char *procfs,
                        const char *conf)
{
    int maj = 0, min = 0, pcis = 0, gpus = 0;
    ASSERT_EQ(sscanf(s->cuda, "%d.%d", &maj, &min), 2);
    FILE *c = fopen(conf, "w");
    ASSERT_NOT_NULL(c);
    fprintf(c, "driver=%s\ncuda=%d\n[gpu]\nname=%s\nuuid=%s\ncc=%s\nmem=%llu\nbusid=%s\n",
            s->driver, maj * 1000 + min * 10, s->name, s->uuid, s->cc, s->mem_mib << 20, s->bus);
    fprintf(c, "pcidevid=%s\nmig=%d\n", s->devid, strcmp(s->mig, "Enabled") == 0);
    fclose(c);
    char *pci = fixture_text(dir, "pci.txt");
    for (char *line = pci, *next; line && *line; line = next) {
        char bdf[64], v[16], d[16], k[16], drv[64] = "";
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        int n = sscanf(line, "/sys/bus/pci/devices/%63s %15s %15s %15s %63s", bdf, v, d, k, drv);
        if (n < 4)
            tkm_test_fail(__FILE__, __LINE__, "%s/pci.txt: bad line \"%s\"", dir, line);
        pci_dev(sysfs, bdf, v, d, k, n == 5 ? drv : "");
        pcis++;
        gpus += strcmp(v, "0x10de") == 0;
    }
    free(pci);
    ASSERT(pcis > 1);
    ASSERT_EQ(gpus, 1);
    char *ver = fixture_text(dir, "proc-nvidia-version.txt");
    char path[1024];
    sh("mkdir -p '%s/driver/nvidia'", procfs);
    snprintf(path, sizeof path, "%s/driver/nvidia/version", procfs);
    FILE *o = fopen(path, "w");
    ASSERT_NOT_NULL(o);
    fputs(ver, o);
    fclose(o);
    free(ver);
}

/* Probes the rebuilt machine, with NVML or without (--no-nvml). */
static void device_probe(const char *dir, const struct smi *s, int no_nvml, struct tkm_gpu_list *l)
{
    struct tkm_err e = {0};
    const char *sysfs = tmp_path("sys"), *procfs = tmp_path("proc");
    device_tree(dir, s, sysfs, procfs, tmp_path("nvml.conf"));
    setenv("TKM_FAKE_NVML", tmp_path("nvml.conf"), 1);
    struct tkm_gpu_probe_opts o = {sysfs, procfs, fake_nvml(), no_nvml};
    ASSERT_OK(tkm_gpu_probe(l, &o, &e));
}

/* The probe's facts are nvidia-smi's. */
static void assert_facts(const struct tkm_gpu_list *l, const struct smi *s, const char *type)
{
    char bus[32];
    ASSERT_STREQ(l->nvml_error, "");
    ASSERT_EQ(l->n, 1); /* NVML's GPU, not again from the PCI scan */
    const struct tkm_gpu *g = &l->gpus[0];
    tkm_gpu_norm_bus_id(s->bus, bus, sizeof bus);
    ASSERT_STREQ(g->name, s->name);
    ASSERT_STREQ(g->gpu_type, type);
    ASSERT_STREQ(g->uuid, s->uuid);
    ASSERT_STREQ(s->cc, "9.0");
    ASSERT_EQ(g->cc_major, 9);
    ASSERT_EQ(g->cc_minor, 0);
    ASSERT_STREQ(g->arch, "90");
    ASSERT_STREQ(s->driver, "580.159.04");
    ASSERT_STREQ(g->driver_version, s->driver);
    ASSERT_STREQ(s->cuda, "13.0");
    ASSERT_STREQ(g->cuda_version, s->cuda);
    ASSERT_EQ(g->cuda_driver_version, 13000);
    ASSERT_UEQ(g->memory_bytes, s->mem_mib << 20);
    ASSERT_STREQ(g->pci_bus_id, bus);
    ASSERT_UEQ(g->pci_device_id, strtoul(s->devid, NULL, 16) >> 16);
    ASSERT_EQ(g->mig_mode, 0);
    ASSERT_STREQ(s->mig, "Disabled");
    ASSERT_STREQ(g->source, "nvml");
    ASSERT_EQ(g->usable, 1);
}

/* Extracts a fixture cache into <tmp>/<top> and scans it; sm80: the copy
 * that the device run made (every target.arch 80, `.target sm_80` in the
 * PTX). */
static void device_cache(const char *tarball, const char *top, int sm80, struct tkm_triton_cache *c)
{
    struct tkm_err e = {0};
    sh("cd '%s' && tar xzf '%s/triton-cache/%s'", tkm_test_tmpdir(), tkm_test_fixtures(), tarball);
    if (sm80)
        sh("cd '%s' && mv %s tcache-sm80 && sed -i 's/\"arch\": 90,/\"arch\": 80,/' "
           "tcache-sm80/*/*.json && sed -i 's/^\\.target sm_90a$/.target sm_80/' "
           "tcache-sm80/*/*.ptx",
           tkm_test_tmpdir(), top);
    ASSERT_OK(tkm_triton_cache_scan(c, tmp_path(sm80 ? "tcache-sm80" : top), &e));
}

/* A copy of v with the text after `marker` in o[key] removed. */
static void cut_after(json_t *o, const char *key, const char *marker)
{
    const char *v = json_string_value(json_object_get(o, key));
    ASSERT_NOT_NULL(v);
    const char *m = strstr(v, marker);
    if (!m)
        tkm_test_fail(__FILE__, __LINE__, "%s \"%s\" lacks \"%s\"", key, v, marker);
    char cut[1024];
    snprintf(cut, sizeof cut, "%.*s", (int)(m - v + strlen(marker)), v);
    json_object_set_new(o, key, json_string(cut));
}

static void assert_json_equal(json_t *got, json_t *want, const char *what)
{
    if (json_equal(got, want))
        return;
    char *g = json_dumps(got, JSON_INDENT(1) | JSON_SORT_KEYS);
    char *w = json_dumps(want, JSON_INDENT(1) | JSON_SORT_KEYS);
    tkm_test_fail(__FILE__, __LINE__, "%s differs:\n code: %s\n recorded: %s", what, g, w);
}

/* The code's verdicts on c equal tkmctl's recorded file, field by field. */
static void assert_check(const char *dir, const char *file, const struct tkm_triton_cache *c,
                         const struct tkm_gpu_list *l, int no_nvml)
{
    json_t *rec = device_json(dir, file);
    json_t *rc = json_object_get(rec, "cache"), *res = json_object_get(rec, "results");
    char *label = NULL;
    struct tkm_err e = {0};
    ASSERT_UEQ(json_integer_value(json_object_get(rc, "entryCount")), c->n_kernels);
    ASSERT_UEQ(json_integer_value(json_object_get(rc, "cacheSizeBytes")), c->size_bytes);
    ASSERT_OK(tkm_triton_summary_label(&c->summary, &label, &e));
    json_t *sum = json_loads(label, JSON_REJECT_DUPLICATES, NULL);
    free(label);
    assert_json_equal(sum, json_object_get(rc, "summary"), "cache summary");
    json_decref(sum);
    ASSERT_EQ(json_array_size(res), l->n);
    size_t ok = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct tkm_compat_verdict v;
        tkm_compat_check(&c->summary, &l->gpus[i], &v);
        json_t *got = tkm_compat_verdict_json(&c->summary, &l->gpus[i], &v);
        json_t *want = json_deep_copy(json_array_get(res, i));
        ASSERT_NOT_NULL(got);
        ASSERT_NOT_NULL(want);
        if (no_nvml) {
            /* The recordings predate the wording of --no-nvml's NVML error
             * (h200: none, h100: "NVML was not loaded (--no-nvml)"); the rest
             * of each reason must match, and the code's ends in its own. */
            char tail[300];
            snprintf(tail, sizeof tail, "(%s)", l->nvml_error);
            ASSERT(strlen(v.reason) > strlen(tail));
            ASSERT_STREQ(v.reason + strlen(v.reason) - strlen(tail), tail);
            cut_after(json_object_get(got, "gpu"), "reason", "NVML is unavailable");
            cut_after(json_object_get(want, "gpu"), "reason", "NVML is unavailable");
            cut_after(got, "reason", "NVML is unavailable");
            cut_after(want, "reason", "NVML is unavailable");
        }
        assert_json_equal(got, want, file);
        ok += (size_t)v.compatible;
        ASSERT_EQ(
            json_integer_value(json_array_get(
                json_object_get(rec, v.compatible ? "compatibleGpus" : "incompatibleGpus"), 0)),
            l->gpus[i].index);
        json_decref(got);
        json_decref(want);
    }
    ASSERT_EQ(json_array_size(json_object_get(rec, "compatibleGpus")), ok);
    ASSERT_EQ(json_array_size(json_object_get(rec, "incompatibleGpus")), l->n - ok);
    ASSERT_EQ(json_is_true(json_object_get(rec, "compatible")), ok > 0);
    if (!no_nvml) /* NVML answered on the machine, and here */
        ASSERT_NULL(json_object_get(rec, "nvmlError"));
    json_decref(rec);
}

enum device_case { DEV_SM90, DEV_SM80, DEV_INDUCTOR, DEV_NO_NVML };

static void device_run(const char *dir, const char *type, enum device_case k)
{
    struct smi s;
    struct tkm_gpu_list l;
    struct tkm_triton_cache c;
    smi_read(dir, &s);
    device_probe(dir, &s, k == DEV_NO_NVML, &l);
    if (k == DEV_NO_NVML) {
        ASSERT_STREQ(l.nvml_error, "not loaded: --no-nvml");
        ASSERT_EQ(l.n, 1); /* found on the PCI bus only */
        ASSERT_STREQ(l.gpus[0].source, "pci");
        ASSERT_EQ(l.gpus[0].usable, 0);
        ASSERT_STREQ(l.gpus[0].driver_version, s.driver); /* /proc/driver/nvidia/version */
    } else {
        assert_facts(&l, &s, type);
    }
    if (k == DEV_INDUCTOR)
        device_cache("triton-3.6.0-cuda-sm90-inductor-block.tar.gz", "tcache-inductor", 0, &c);
    else
        device_cache("triton-3.6.0-cuda-sm90.tar.gz", "tcache", k == DEV_SM80, &c);
    struct tkm_compat_verdict v;
    tkm_compat_check(&c.summary, &l.gpus[0], &v);
    char want[512];
    switch (k) {
    case DEV_SM90:
        ASSERT_EQ(v.compatible, 1);
        ASSERT_STRCONTAINS(v.reason, "PTX ISA 8.7 needs CUDA 12.8+, driver supports 13.0");
        assert_check(dir, "check-sm90.json", &c, &l, 0);
        break;
    case DEV_SM80:
        ASSERT_EQ(v.compatible, 0);
        snprintf(want, sizeof want, "arch mismatch: cache built for sm80, GPU 0 (%s) is sm90",
                 s.name);
        ASSERT_STREQ(v.reason, want);
        assert_check(dir, "check-sm80.json", &c, &l, 0);
        break;
    case DEV_INDUCTOR:
        ASSERT_EQ(v.compatible, 1);
        ASSERT_STRCONTAINS(v.reason, "PTX ISA 9.0 needs CUDA 13.0+, driver supports 13.0");
        assert_check(dir, "check-inductor.json", &c, &l, 0);
        break;
    case DEV_NO_NVML:
        ASSERT_EQ(v.compatible, 0); /* fail closed */
        ASSERT_STRCONTAINS(v.reason, "cannot be used: the nvidia driver is loaded but NVML is "
                                     "unavailable (not loaded: --no-nvml)");
        assert_check(dir, "check-sm90-no-nvml.json", &c, &l, 1);
        break;
    }
    tkm_triton_cache_release(&c);
    tkm_gpu_list_release(&l);
}

TEST_TIMEOUT(device_h200_sm90_compatible, 60)
{
    device_run("h200-device", "nvidia-h200", DEV_SM90);
}

TEST_TIMEOUT(device_h200_sm80_arch_mismatch, 60)
{
    device_run("h200-device", "nvidia-h200", DEV_SM80);
}

TEST_TIMEOUT(device_h200_inductor_needs_cuda_13, 60)
{
    device_run("h200-device", "nvidia-h200", DEV_INDUCTOR);
}

TEST_TIMEOUT(device_h200_without_nvml_fails_closed, 60)
{
    device_run("h200-device", "nvidia-h200", DEV_NO_NVML);
}

TEST_TIMEOUT(device_h100_sm90_compatible, 60)
{
    device_run("h100-device", "nvidia-h100", DEV_SM90);
}

TEST_TIMEOUT(device_h100_sm80_arch_mismatch, 60)
{
    device_run("h100-device", "nvidia-h100", DEV_SM80);
}

TEST_TIMEOUT(device_h100_inductor_needs_cuda_13, 60)
{
    device_run("h100-device", "nvidia-h100", DEV_INDUCTOR);
}

TEST_TIMEOUT(device_h100_without_nvml_fails_closed, 60)
{
    device_run("h100-device", "nvidia-h100", DEV_NO_NVML);
}
