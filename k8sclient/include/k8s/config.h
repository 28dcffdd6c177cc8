/*
 * k8s/config.h - where the apiserver is and how to authenticate to it.
 *
 * Sources:
 *   - a kubeconfig file (YAML, parsed with libyaml): current-context (or a
 *     named context) -> cluster (server, certificate-authority[-data],
 *     tls-server-name, insecure-skip-tls-verify) and user (token, tokenFile,
 *     client-certificate[-data] + client-key[-data], or an exec credential
 *     plugin of client.authentication.k8s.io/v1). Exactly one auth method per
 *     user; more than one is rejected. Relative paths are resolved against the
 *     kubeconfig's own directory. -data values are base64 PEM.
 *   - in-cluster: KUBERNETES_SERVICE_HOST/PORT and the service-account files
 *     <root>/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}.
 *     The token is kept as a tokenFile, so the client re-reads it (every minute
 *     and after a 401): bound tokens rotate.
 *   - k8s_config_load_default(): an explicit --kubeconfig path, else the first
 *     file of $KUBECONFIG (colon-separated) that exists (files are NOT merged),
 *     else in-cluster when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config.
 *
 * YAML limits (hostile or broken files): at most 1 MiB of input, 20,000
 * nodes, 10,000 alias expansions in total and 64 levels of nesting.
 *
 * Errors name the file and the field, e.g.
 *   /x/kubeconfig: users[0] "dev": both "token" and "client-certificate" set; use one auth method
 *
 * Ownership: struct k8s_config is caller-owned; k8s_config_init() before a
 * load, k8s_config_release() after. All strings and PEM blocks are owned by
 * it. A failed load leaves it released.
 */
#ifndef K8S_CONFIG_H
#define K8S_CONFIG_H

#include <stddef.h>

#include <tkm/err.h>

enum k8s_auth_kind {
    K8S_AUTH_NONE = 0,   /* anonymous (or insecure test setups) */
    K8S_AUTH_TOKEN,      /* static bearer token */
    K8S_AUTH_TOKEN_FILE, /* bearer token re-read from a file */
    K8S_AUTH_CERT,       /* client certificate + key */
    K8S_AUTH_EXEC,       /* exec credential plugin */
};

struct k8s_exec_config {
    char *command; /* resolved against the kubeconfig dir when it contains '/' */
    char **args;   /* nargs entries */
    size_t nargs;
    char **env; /* "NAME=value" entries added to the plugin's environment */
    size_t nenv;
    char *api_version;        /* "client.authentication.k8s.io/v1" (v1beta1 accepted too) */
    int provide_cluster_info; /* pass spec.cluster in KUBERNETES_EXEC_INFO */
    unsigned timeout_ms;      /* the plugin is killed after this; default 10,000 */
};

struct k8s_config {
    char *source;          /* the kubeconfig path, or "in-cluster" (for messages) */
    char *context;         /* context name used; NULL in-cluster */
    char *server;          /* "https://host:port" with no trailing slash */
    char *tls_server_name; /* or NULL */
    int insecure;          /* insecure-skip-tls-verify: true */
    char *ca_file;         /* absolute path, or NULL */
    char *ca_pem;          /* decoded certificate-authority-data, or NULL */
    size_t ca_pem_len;
    enum k8s_auth_kind auth;
    char *token;                /* K8S_AUTH_TOKEN, or the first read of a token file */
    char *token_file;           /* K8S_AUTH_TOKEN_FILE: absolute path */
    char *cert_file, *key_file; /* K8S_AUTH_CERT from files (absolute paths) */
    char *cert_pem, *key_pem;   /* K8S_AUTH_CERT from -data, or exec results */
    size_t cert_pem_len, key_pem_len;
    struct k8s_exec_config *exec; /* K8S_AUTH_EXEC */
    char *namespace; /* context namespace / in-cluster namespace file; default "default" */
};

void k8s_config_init(struct k8s_config *c);
/* Frees everything and re-initialises. NULL is a no-op. */
void k8s_config_release(struct k8s_config *c);

/* Loads path (borrowed). context NULL = current-context. */
int k8s_config_load_file(struct k8s_config *c, const char *path, const char *context,
                         struct tkm_err *err);

/* Loads kubeconfig text (yaml, len bytes, borrowed). base_dir resolves
 * relative paths; source names the input in errors. Reads no file itself
 * except those the kubeconfig names (CA, cert, key, tokenFile are read
 * during the load to check they exist). */
int k8s_config_load_yaml(struct k8s_config *c, const char *yaml, size_t len, const char *base_dir,
                         const char *source, const char *context, struct tkm_err *err);

/* In-cluster config. root NULL means "/" (tests pass a directory holding
 * var/run/secrets/kubernetes.io/serviceaccount/). */
int k8s_config_load_incluster(struct k8s_config *c, const char *root, struct tkm_err *err);

/* The default search described above. kubeconfig_arg may be NULL. */
int k8s_config_load_default(struct k8s_config *c, const char *kubeconfig_arg, struct tkm_err *err);

/* Deep copy of src into dst (dst initialised or released). */
int k8s_config_copy(struct k8s_config *dst, const struct k8s_config *src);

/* Credentials produced by an exec plugin. Owned; k8s_exec_result_release(). */
struct k8s_exec_result {
    char *token;
    char *cert_pem, *key_pem;
    size_t cert_pem_len, key_pem_len;
    long long expires_unix; /* status.expirationTimestamp as Unix seconds; 0 = none */
};
void k8s_exec_result_release(struct k8s_exec_result *r);

/*
 * Runs the exec plugin of c (c->exec must be set) synchronously with
 * KUBERNETES_EXEC_INFO (interactive: false), stdin from /dev/null, killing it
 * after c->exec->timeout_ms. Accepts status.token, or status.clientCertificateData
 * and status.clientKeyData together. Blocks: call it at start-up or from a
 * worker thread (the client uses uv_queue_work), never on the loop.
 */
int k8s_exec_run(const struct k8s_config *c, struct k8s_exec_result *out, struct tkm_err *err);

#endif
