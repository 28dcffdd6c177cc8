/*
 * api_policy.c - drives <tkm/api/policy.h> against a real apiserver for
 * tests/e2e/api_policy.sh: GETs a cache and the ConfigMap tkm-config, then
 * resolves the cache's effective signature policy and the registry
 * credentials of its imagePullSecrets for the cache image's host.
 *
 *   e2e_api_policy NS NAME CONFIG_NS      NS "-": a TritonKernelCacheCluster
 *
 * Prints one line per result:
 *   policy rc=0 source=spec|config|default mode=Enforce keys=N root=BYTES ids=N cross=0|1
 * describe=... policy rc=-2 reason=SecretNotFound message=... creds rc=0 user=U source=S (user "-"
 * when anonymous) creds rc=-2 reason=... message=... Exits 0 when both calls completed (whatever
 * their rc), 1 otherwise.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>

#include <tkm/api/policy.h>
#include <tkm/api/v1alpha1.h>
#include <tkm/http.h>
#include <tkm/oci/ref.h>
#include <k8s/client.h>
#include <k8s/config.h>
#include "sup_k8s.h"

struct state {
    int policy_done, creds_done;
};

static const char *source_name(enum tkm_api_policy_source s)
{
    return s == TKM_API_POLICY_SPEC ? "spec" : s == TKM_API_POLICY_CONFIG ? "config" : "default";
}

static const char *mode_name(enum tkm_sig_mode m)
{
    return m == TKM_SIG_MODE_AUDIT ? "Audit" : m == TKM_SIG_MODE_DISABLED ? "Disabled" : "Enforce";
}

static void policy_cb(int rc, struct tkm_api_policy *pol, const char *reason,
                      const struct tkm_err *err, void *data)
{
    struct state *s = data;
    s->policy_done = 1;
    if (rc < 0) {
        printf("policy rc=%d reason=%s message=%s\n", rc, reason, err->msg);
        return;
    }
    printf("policy rc=0 source=%s mode=%s keys=%zu root=%zu ids=%zu cross=%d describe=%s\n",
           source_name(pol->source), mode_name(pol->pol.mode), pol->pol.nkeys,
           pol->pol.trusted_root_len, pol->pol.nidentities, pol->pol.allow_cross_repository,
           pol->describe);
    tkm_api_policy_free(pol);
}

static void creds_cb(int rc, const struct tkm_oci_creds *creds, const char *reason,
                     const struct tkm_err *err, void *data)
{
    struct state *s = data;
    s->creds_done = 1;
    if (rc < 0)
        printf("creds rc=%d reason=%s message=%s\n", rc, reason, err->msg);
    else
        printf("creds rc=0 user=%s source=%s\n", creds->username[0] ? creds->username : "-",
               creds->source[0] ? creds->source : "-");
}

static int run(struct k8s_client *c, const char *ns, const char *name, const char *config_ns)
{
    struct k8s_status st = K8S_STATUS_INIT;
    struct tkm_api_cache cache = {0};
    struct tkm_api_config cfg = {0};
    struct tkm_oci_ref ref;
    struct tkm_err err = {0};
    struct state s = {0};
    json_t *obj = NULL, *cm = NULL;
    char *text = NULL;
    int rc, ret = 1;
    rc = sup_k8s_get(c, ns ? &tkm_api_res_tkc : &tkm_api_res_tkcc, ns, name, NULL, &obj, &st);
    if (rc < 0) {
        fprintf(stderr, "get cache: %d %s\n", rc, st.message ? st.message : "");
        goto out;
    }
    k8s_status_release(&st);
    rc = sup_k8s_get(c, &k8s_res_configmaps, config_ns, TKM_API_CONFIG_NAME, NULL, &cm, &st);
    if (rc < 0 && rc != -ENOENT) {
        fprintf(stderr, "get tkm-config: %d\n", rc);
        goto out;
    }
    text = json_dumps(obj, JSON_COMPACT);
    if (!text || tkm_api_cache_decode(text, strlen(text), &cache, &err) < 0 ||
        tkm_oci_ref_parse(&ref, cache.spec.cache_image, &err) < 0) {
        fprintf(stderr, "decode: %s\n", err.msg);
        goto out;
    }
    if (tkm_api_config_decode(cm, &cfg, &err) < 0) {
        printf("config rc=%d message=%s\n", err.code, err.msg);
        ret = 0;
        goto out;
    }
    if (tkm_api_policy_resolve(c, &cache, &cfg, config_ns, policy_cb, &s, &err) < 0 ||
        tkm_api_pull_creds_resolve(c, &cache, config_ns, ref.host, creds_cb, &s, &err) < 0) {
        fprintf(stderr, "start: %s\n", err.msg);
        goto out;
    }
    if (s.policy_done || s.creds_done) {
        fprintf(stderr, "a callback ran from inside the starting call\n");
        goto out;
    }
    while (!(s.policy_done && s.creds_done))
        uv_run(k8s_client_loop(c), UV_RUN_ONCE);
    ret = 0;
out:
    k8s_status_release(&st);
    tkm_api_cache_release(&cache);
    tkm_api_config_release(&cfg);
    json_decref(obj);
    json_decref(cm);
    free(text);
    return ret;
}

int main(int argc, char **argv)
{
    struct tkm_err err = {0};
    struct k8s_config cfg;
    struct k8s_client *c = NULL;
    uv_loop_t loop;
    int ret = 1;
    if (argc != 4) {
        fprintf(stderr, "usage: e2e_api_policy NS|- NAME CONFIG_NS\n");
        return 1;
    }
    if (tkm_http_global_init(&err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    k8s_config_init(&cfg);
    uv_loop_init(&loop);
    if (k8s_config_load_default(&cfg, NULL, &err) || k8s_client_new(&loop, &cfg, NULL, &c, &err)) {
        fprintf(stderr, "client: %s\n", err.msg);
        goto out;
    }
    ret = run(c, strcmp(argv[1], "-") == 0 ? NULL : argv[1], argv[2], argv[3]);
out:
    k8s_config_release(&cfg);
    k8s_client_free(c);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    curl_global_cleanup();
    return ret;
}
