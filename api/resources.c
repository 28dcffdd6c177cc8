/* resources.c - the tkm.io/v1alpha1 resource descriptors and small helpers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tkm/api/v1alpha1.h>

#include "api-int.h"

const struct k8s_resource tkm_api_res_tkc = {TKM_API_GROUP, TKM_API_VERSION, "tritonkernelcaches",
                                             "TritonKernelCache", 1};
const struct k8s_resource tkm_api_res_tkcc = {
    TKM_API_GROUP, TKM_API_VERSION, "tritonkernelcacheclusters", "TritonKernelCacheCluster", 0};
const struct k8s_resource tkm_api_res_tkcns = {TKM_API_GROUP, TKM_API_VERSION,
                                               "tritonkernelcachenodestatuses",
                                               "TritonKernelCacheNodeStatus", 1};
const struct k8s_resource tkm_api_res_tkcnsc = {TKM_API_GROUP, TKM_API_VERSION,
                                                "tritonkernelcachenodestatusclusters",
                                                "TritonKernelCacheNodeStatusCluster", 0};

void tkm_api_now(char *out, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    if (strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 && n)
        out[0] = '\0';
}

int tkm_api_dump(const json_t *obj, struct tkm_buf *out)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    if (!s)
        return -ENOMEM;
    int rc = tkm_buf_puts(out, s);
    free(s);
    return rc;
}
