/*
 * policy_stub.c - TEMPORARY, built only while lib/api/policy.c (the
 * implementation of <tkm/api/policy.h>, merged by the coordinator) is absent
 * from the tree: every call fails with a clear reason so the controller
 * links and reports "PolicyUnavailable". Removed by the merge.
 */
#include <errno.h>
#include <string.h>

#include <tkm/api/policy.h>

int tkm_api_config_decode(const json_t *configmap, struct tkm_api_config *out, struct tkm_err *err)
{
    (void)configmap;
    (void)err;
    memset(out, 0, sizeof *out);
    return 0;
}

void tkm_api_config_release(struct tkm_api_config *c)
{
    (void)c;
}

int tkm_api_policy_resolve(struct k8s_client *c, const struct tkm_api_cache *cache,
                           const struct tkm_api_config *cfg, const char *config_ns,
                           tkm_api_policy_cb cb, void *data, struct tkm_err *err)
{
    (void)c, (void)cache, (void)cfg, (void)config_ns, (void)cb, (void)data;
    return tkm_err_set(err, -ENOSYS, "the effective-policy implementation is not built in");
}

void tkm_api_policy_free(struct tkm_api_policy *p)
{
    (void)p;
}

int tkm_api_pull_creds_resolve(struct k8s_client *c, const struct tkm_api_cache *cache,
                               const char *config_ns, const char *host, tkm_api_creds_cb cb,
                               void *data, struct tkm_err *err)
{
    (void)c, (void)cache, (void)config_ns, (void)host, (void)cb, (void)data;
    return tkm_err_set(err, -ENOSYS, "imagePullSecrets are not supported in this build");
}
