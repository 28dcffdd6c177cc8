/* test_k8s_config.c - kubeconfig, in-cluster config and exec plugins. */
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/fs.h>
#include <k8s/config.h>
#include <tkm/util.h>

#include "test.h"
#include "config-int.h"

static void write_file(const char *path, const char *text, int mode)
{
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs(text, f);
    fclose(f);
    chmod(path, (mode_t)mode);
}

static const char *tmp_path(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", tkm_test_tmpdir(), rel);
    return buf;
}

#define KC_HEAD                                                                                    \
    "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"                                         \
    "clusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:6443/\n"                     \
    "contexts:\n- name: dev\n  context:\n    cluster: c1\n    user: u1\n    namespace: team\n"     \
    "users:\n- name: u1\n  user:\n"

static int load(struct k8s_config *c, const char *yaml, struct tkm_err *err)
{
    k8s_config_init(c);
    return k8s_config_load_yaml(c, yaml, strlen(yaml), tkm_test_tmpdir(), "/t/kubeconfig", NULL,
                                err);
}

TEST(token_and_cluster_fields)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, KC_HEAD "    token: abc123\n", &err));
    ASSERT_STREQ(c.server, "https://127.0.0.1:6443"); /* trailing slash dropped */
    ASSERT_EQ(c.auth, K8S_AUTH_TOKEN);
    ASSERT_STREQ(c.token, "abc123");
    ASSERT_STREQ(c.namespace, "team");
    ASSERT_STREQ(c.context, "dev");
    ASSERT_EQ(c.insecure, 0);
    ASSERT_NULL(c.ca_file);
    k8s_config_release(&c);
}

TEST(cert_data_decoded)
{
    /* "CA-PEM\n", "CERT\n", "KEY\n" in base64. */
    const char *y = "apiVersion: v1\ncurrent-context: dev\n"
                    "clusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:1\n"
                    "    certificate-authority-data: Q0EtUEVNCg==\n"
                    "    tls-server-name: kubernetes\n"
                    "contexts:\n- name: dev\n  context: {cluster: c1, user: u1}\n"
                    "users:\n- name: u1\n  user:\n"
                    "    client-certificate-data: Q0VSVAo=\n    client-key-data: S0VZCg==\n";
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    ASSERT_EQ(c.auth, K8S_AUTH_CERT);
    ASSERT_UEQ(c.ca_pem_len, 7);
    ASSERT_MEMEQ(c.ca_pem, "CA-PEM\n", 7);
    ASSERT_MEMEQ(c.cert_pem, "CERT\n", 5);
    ASSERT_MEMEQ(c.key_pem, "KEY\n", 4);
    ASSERT_STREQ(c.tls_server_name, "kubernetes");
    ASSERT_STREQ(c.namespace, "default");
    k8s_config_release(&c);
}

TEST(bad_base64_names_field)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_EQ(load(&c,
                   KC_HEAD "    client-certificate-data: '***'\n    client-key-data: S0VZCg==\n",
                   &err),
              -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "/t/kubeconfig");
    ASSERT_STRCONTAINS(err.msg, "users[0] \"u1\"");
    ASSERT_STRCONTAINS(err.msg, "client-certificate-data");
    ASSERT_NULL(c.server); /* released on failure */
}

TEST(cert_files_relative_to_kubeconfig_dir)
{
    char p[1024], dir[512];
    snprintf(dir, sizeof dir, "%s/kc", tkm_test_tmpdir());
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%s/certs", dir);
    mkdir(p, 0700);
    write_file(tmp_path(p, sizeof p, "kc/certs/ca.crt"), "CA", 0644);
    write_file(tmp_path(p, sizeof p, "kc/certs/u.crt"), "CERT", 0644);
    write_file(tmp_path(p, sizeof p, "kc/u.key"), "KEY", 0600);
    write_file(tmp_path(p, sizeof p, "kc/config"),
               "apiVersion: v1\ncurrent-context: dev\n"
               "clusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:1\n"
               "    certificate-authority: certs/ca.crt\n"
               "contexts:\n- name: dev\n  context: {cluster: c1, user: u1}\n"
               "users:\n- name: u1\n  user:\n"
               "    client-certificate: certs/u.crt\n    client-key: u.key\n",
               0600);
    struct k8s_config c;
    struct tkm_err err = {0};
    k8s_config_init(&c);
    ASSERT_OK(k8s_config_load_file(&c, p, NULL, &err));
    char want[600];
    snprintf(want, sizeof want, "%s/certs/ca.crt", dir);
    ASSERT_STREQ(c.ca_file, want);
    snprintf(want, sizeof want, "%s/certs/u.crt", dir);
    ASSERT_STREQ(c.cert_file, want);
    snprintf(want, sizeof want, "%s/u.key", dir);
    ASSERT_STREQ(c.key_file, want);
    ASSERT_STREQ(c.source, p);
    k8s_config_release(&c);
}

TEST(missing_file_named_in_error)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    char p[512];
    write_file(tmp_path(p, sizeof p, "u.crt"), "CERT", 0644);
    ASSERT_EQ(load(&c, KC_HEAD "    client-certificate: u.crt\n    client-key: nope.key\n", &err),
              -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "/t/kubeconfig: users[0] \"u1\"");
    ASSERT_STRCONTAINS(err.msg, "client-key");
    ASSERT_STRCONTAINS(err.msg, "nope.key");
    ASSERT_STRCONTAINS(err.msg, "No such file");
}

TEST(two_auth_methods_rejected)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_EQ(load(&c,
                   KC_HEAD "    token: abc\n    client-certificate-data: Q0VSVAo=\n"
                           "    client-key-data: S0VZCg==\n",
                   &err),
              -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "both \"token\" and \"client-certificate-data\"");
    ASSERT_STRCONTAINS(err.msg, "users[0] \"u1\"");
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, KC_HEAD "    token: abc\n    exec:\n      command: x\n", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "both \"token\" and \"exec\"");
}

TEST(cert_without_key_rejected)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_EQ(load(&c, KC_HEAD "    client-certificate-data: Q0VSVAo=\n", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "\"client-certificate\" is set but \"client-key\" is missing");
}

TEST(token_file_relative)
{
    char p[512];
    write_file(tmp_path(p, sizeof p, "tok"), "  tok-from-file\n", 0600);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, KC_HEAD "    tokenFile: tok\n", &err));
    ASSERT_EQ(c.auth, K8S_AUTH_TOKEN_FILE);
    ASSERT_STREQ(c.token_file, p);
    k8s_config_release(&c);
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, KC_HEAD "    tokenFile: missing-token\n", &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "tokenFile");
    ASSERT_STRCONTAINS(err.msg, "missing-token");
}

TEST(context_selection_and_errors)
{
    const char *y =
        "current-context: a\n"
        "clusters:\n- name: c1\n  cluster: {server: 'https://one:1'}\n"
        "- name: c2\n  cluster: {server: 'https://two:2', insecure-skip-tls-verify: true}\n"
        "contexts:\n- name: a\n  context: {cluster: c1}\n"
        "- name: b\n  context: {cluster: c2}\n- name: c\n  context: {cluster: c3}\n";
    struct k8s_config c;
    struct tkm_err err = {0};
    k8s_config_init(&c);
    ASSERT_OK(k8s_config_load_yaml(&c, y, strlen(y), "/", "kc", "b", &err));
    ASSERT_STREQ(c.server, "https://two:2");
    ASSERT_EQ(c.insecure, 1);
    ASSERT_EQ(c.auth, K8S_AUTH_NONE);
    ASSERT_OK(k8s_config_load_yaml(&c, y, strlen(y), "/", "kc", NULL, &err));
    ASSERT_STREQ(c.server, "https://one:1");
    ASSERT_EQ(k8s_config_load_yaml(&c, y, strlen(y), "/", "kc", "zz", &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "context \"zz\" not found");
    tkm_err_clear(&err);
    ASSERT_EQ(k8s_config_load_yaml(&c, y, strlen(y), "/", "kc", "c", &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "cluster \"c3\" not found");
}

TEST(bad_values_named)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    const char *y = "current-context: a\nclusters:\n- name: c1\n  cluster:\n"
                    "    server: https://x:1\n    insecure-skip-tls-verify: maybe\n"
                    "contexts:\n- name: a\n  context: {cluster: c1}\n";
    ASSERT_EQ(load(&c, y, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "clusters[0] \"c1\"");
    ASSERT_STRCONTAINS(err.msg, "insecure-skip-tls-verify");
    tkm_err_clear(&err);
    y = "current-context: a\nclusters:\n- name: c1\n  cluster:\n    server: [1, 2]\n"
        "contexts:\n- name: a\n  context: {cluster: c1}\n";
    ASSERT_EQ(load(&c, y, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "field \"server\" must be a string");
    tkm_err_clear(&err);
    y = "current-context: a\nclusters:\n- name: c1\n  cluster:\n    server: ftp://x\n"
        "contexts:\n- name: a\n  context: {cluster: c1}\n";
    ASSERT_EQ(load(&c, y, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "must start with https://");
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, "a: [unclosed\n", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "invalid YAML");
    ASSERT_STRCONTAINS(err.msg, "line");
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, "- just\n- a list\n", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not a kubeconfig");
}

TEST(alias_bomb_bounded)
{
    /* Billion laughs: 9 levels of 9 aliases each would be 9^9 nodes expanded. */
    char y[4096];
    size_t n = 0;
    n += (size_t)snprintf(y + n, sizeof y - n, "a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 9; i++) {
        n += (size_t)snprintf(y + n, sizeof y - n, "a%d: &a%d [", i, i);
        for (int j = 0; j < 9; j++)
            n += (size_t)snprintf(y + n, sizeof y - n, "%s*a%d", j ? ", " : "", i - 1);
        n += (size_t)snprintf(y + n, sizeof y - n, "]\n");
    }
    /* Parses (aliases share nodes) but as a kubeconfig has no context. */
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_EQ(load(&c, y, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "current-context");
    /* Many alias uses hit the cap, whatever they point at. */
    struct tkm_buf big = TKM_BUF_INIT(1 << 20);
    ASSERT_OK(tkm_buf_puts(&big, "x: &x [a]\ny: ["));
    for (int i = 0; i < 12000; i++)
        ASSERT_OK(tkm_buf_puts(&big, "*x, "));
    ASSERT_OK(tkm_buf_puts(&big, "*x]\n"));
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, big.data, &err), -E2BIG);
    ASSERT_STRCONTAINS(err.msg, "aliases");
    /* Deep nesting is capped too. */
    tkm_buf_reset(&big);
    for (int i = 0; i < 200; i++)
        ASSERT_OK(tkm_buf_putc(&big, '['));
    for (int i = 0; i < 200; i++)
        ASSERT_OK(tkm_buf_putc(&big, ']'));
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, big.data, &err), -E2BIG);
    ASSERT_STRCONTAINS(err.msg, "nested deeper");
    /* And a self-referencing anchor is refused, not looped over. */
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, "a: &a [*a]\n", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "unknown or unfinished anchor");
    tkm_buf_release(&big);
}

TEST(oversized_input_rejected)
{
    struct tkm_buf big = TKM_BUF_INIT(3 << 20);
    for (int i = 0; i < (1 << 20) / 8 + 10; i++)
        ASSERT_OK(tkm_buf_puts(&big, "# pad\n  "));
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_EQ(load(&c, big.data, &err), -E2BIG);
    ASSERT_STRCONTAINS(err.msg, "larger than");
    tkm_buf_release(&big);
}

static void exec_kubeconfig(char *out, size_t n, const char *script_body, const char *extra)
{
    char sp[512];
    write_file(tmp_path(sp, sizeof sp, "plugin.sh"), script_body, 0755);
    snprintf(out, n,
             KC_HEAD "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                     "      command: ./plugin.sh\n      args: [one, two]\n"
                     "      env:\n      - {name: PLUGIN_ENV, value: hello}\n"
                     "      interactiveMode: Never\n%s",
             extra ? extra : "");
}

TEST(exec_plugin_token)
{
    char y[4096], envf[512];
    tmp_path(envf, sizeof envf, "env.out");
    char script[2048];
    snprintf(script, sizeof script,
             "#!/bin/sh\nprintf '%%s\\n' \"$KUBERNETES_EXEC_INFO\" \"$PLUGIN_ENV\" \"$1$2\" > %s\n"
             "cat <<EOF\n{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
             "\"ExecCredential\",\"status\":{\"token\":\"exec-token\","
             "\"expirationTimestamp\":\"2030-01-02T03:04:05Z\"}}\nEOF\n",
             envf);
    exec_kubeconfig(y, sizeof y, script, NULL);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    ASSERT_EQ(c.auth, K8S_AUTH_EXEC);
    char want[600];
    snprintf(want, sizeof want, "%s/plugin.sh", tkm_test_tmpdir());
    ASSERT_STREQ(c.exec->command, want);
    ASSERT_UEQ(c.exec->nargs, 2);
    struct k8s_exec_result r;
    ASSERT_OK(k8s_exec_run(&c, &r, &err));
    ASSERT_STREQ(r.token, "exec-token");
    ASSERT_EQ(r.expires_unix, 1893553445LL);
    ASSERT_NULL(r.cert_pem);
    struct tkm_buf b = TKM_BUF_INIT(65536);
    ASSERT_OK(tkm_read_file(envf, b.max, &b, "env", NULL));
    ASSERT_STRCONTAINS(b.data, "\"kind\":\"ExecCredential\"");
    ASSERT_STRCONTAINS(b.data, "\"interactive\":false");
    ASSERT_STRCONTAINS(b.data, "client.authentication.k8s.io/v1");
    ASSERT_STRCONTAINS(b.data, "\nhello\n");
    ASSERT_STRCONTAINS(b.data, "\nonetwo\n");
    tkm_buf_release(&b);
    k8s_exec_result_release(&r);
    k8s_config_release(&c);
}

TEST(exec_plugin_cert_and_key)
{
    char y[4096];
    exec_kubeconfig(y, sizeof y,
                    "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                    "\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":\"C\","
                    "\"clientKeyData\":\"K\"}}'\n",
                    NULL);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    struct k8s_exec_result r;
    ASSERT_OK(k8s_exec_run(&c, &r, &err));
    ASSERT_STREQ(r.cert_pem, "C");
    ASSERT_STREQ(r.key_pem, "K");
    ASSERT_NULL(r.token);
    k8s_exec_result_release(&r);
    k8s_config_release(&c);
}

TEST(exec_plugin_cert_only_rejected)
{
    char y[4096];
    exec_kubeconfig(y, sizeof y,
                    "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                    "\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":\"C\"}}'\n",
                    NULL);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    struct k8s_exec_result r;
    ASSERT_EQ(k8s_exec_run(&c, &r, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "clientCertificateData but not clientKeyData");
    ASSERT_STRCONTAINS(err.msg, "plugin.sh");
    k8s_config_release(&c);
}

TEST(exec_plugin_exit_1)
{
    char y[4096];
    exec_kubeconfig(y, sizeof y, "#!/bin/sh\necho 'login required' >&2\nexit 1\n", NULL);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    struct k8s_exec_result r;
    ASSERT_EQ(k8s_exec_run(&c, &r, &err), -EIO);
    ASSERT_STRCONTAINS(err.msg, "exited with status 1");
    ASSERT_STRCONTAINS(err.msg, "login required");
    ASSERT_STRCONTAINS(err.msg, "/t/kubeconfig");
    k8s_config_release(&c);
}

TEST(exec_plugin_hang_times_out)
{
    char y[4096];
    exec_kubeconfig(y, sizeof y, "#!/bin/sh\nsleep 30\necho never\n", NULL);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    c.exec->timeout_ms = 500;
    struct k8s_exec_result r;
    uint64_t t0 = tkm_now_ms();
    ASSERT_EQ(k8s_exec_run(&c, &r, &err), -ETIMEDOUT);
    ASSERT(tkm_now_ms() - t0 < 3000 * tkm_test_timeout_scale()); /* not the plugin's 30 s */
    ASSERT_STRCONTAINS(err.msg, "did not finish within 500 ms");
    k8s_config_release(&c);
}

TEST(exec_plugin_garbage_and_interactive)
{
    char y[4096];
    exec_kubeconfig(y, sizeof y, "#!/bin/sh\necho 'Please log in:'\n", NULL);
    struct k8s_config c;
    struct tkm_err err = {0};
    ASSERT_OK(load(&c, y, &err));
    struct k8s_exec_result r;
    ASSERT_EQ(k8s_exec_run(&c, &r, &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "not an ExecCredential");
    k8s_config_release(&c);
    tkm_err_clear(&err);
    ASSERT_EQ(load(&c, KC_HEAD "    exec: {command: x, interactiveMode: Always}\n", &err), -EINVAL);
    ASSERT_STRCONTAINS(err.msg, "interactiveMode Always");
}

TEST(in_cluster)
{
    char p[512];
    const char *root = tkm_test_tmpdir();
    const char *dirs[] = {"var", "var/run", "var/run/secrets", "var/run/secrets/kubernetes.io",
                          "var/run/secrets/kubernetes.io/serviceaccount"};
    for (size_t i = 0; i < 5; i++)
        mkdir(tmp_path(p, sizeof p, dirs[i]), 0755);
    write_file(tmp_path(p, sizeof p, "var/run/secrets/kubernetes.io/serviceaccount/token"),
               "sa-token\n", 0600);
    write_file(tmp_path(p, sizeof p, "var/run/secrets/kubernetes.io/serviceaccount/ca.crt"), "CA",
               0644);
    write_file(tmp_path(p, sizeof p, "var/run/secrets/kubernetes.io/serviceaccount/namespace"),
               "tkm-system", 0644);
    struct k8s_config c;
    struct tkm_err err = {0};
    k8s_config_init(&c);
    unsetenv("KUBERNETES_SERVICE_HOST");
    ASSERT_EQ(k8s_config_load_incluster(&c, root, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "KUBERNETES_SERVICE_HOST");
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ASSERT_OK(k8s_config_load_incluster(&c, root, &err));
    ASSERT_STREQ(c.server, "https://[fd00::1]:443");
    ASSERT_EQ(c.auth, K8S_AUTH_TOKEN_FILE);
    ASSERT_STREQ(c.token, "sa-token");
    ASSERT_STRCONTAINS(c.token_file, "serviceaccount/token");
    ASSERT_STRCONTAINS(c.ca_file, "serviceaccount/ca.crt");
    ASSERT_STREQ(c.namespace, "tkm-system");
    k8s_config_release(&c);
    unlink(tmp_path(p, sizeof p, "var/run/secrets/kubernetes.io/serviceaccount/token"));
    tkm_err_clear(&err);
    ASSERT_EQ(k8s_config_load_incluster(&c, root, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "serviceaccount/token");
}

TEST(default_search_uses_first_existing_kubeconfig)
{
    char a[512], b[512], env[1100];
    tmp_path(a, sizeof a, "missing-config");
    write_file(tmp_path(b, sizeof b, "second"), KC_HEAD "    token: second-token\n", 0600);
    snprintf(env, sizeof env, "%s:%s", a, b);
    setenv("KUBECONFIG", env, 1);
    struct k8s_config c;
    struct tkm_err err = {0};
    k8s_config_init(&c);
    ASSERT_OK(k8s_config_load_default(&c, NULL, &err));
    ASSERT_STREQ(c.token, "second-token");
    ASSERT_STREQ(c.source, b);
    /* An explicit path wins over KUBECONFIG. */
    tkm_err_clear(&err);
    ASSERT_EQ(k8s_config_load_default(&c, a, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "missing-config");
    setenv("KUBECONFIG", a, 1);
    tkm_err_clear(&err);
    ASSERT_EQ(k8s_config_load_default(&c, NULL, &err), -ENOENT);
    ASSERT_STRCONTAINS(err.msg, "none of its files exists");
}

TEST(copy_is_deep)
{
    struct k8s_config c, d;
    struct tkm_err err = {0};
    char y[4096];
    exec_kubeconfig(y, sizeof y, "#!/bin/sh\nexit 0\n", NULL);
    ASSERT_OK(load(&c, y, &err));
    k8s_config_init(&d);
    ASSERT_OK(k8s_config_copy(&d, &c));
    k8s_config_release(&c);
    ASSERT_STREQ(d.server, "https://127.0.0.1:6443");
    ASSERT_STREQ(d.exec->args[1], "two");
    ASSERT_STREQ(d.exec->env[0], "PLUGIN_ENV=hello");
    k8s_config_release(&d);
}

TEST(helpers_base64_and_time)
{
    struct tkm_buf b = TKM_BUF_INIT(64);
    ASSERT_OK(tkm_base64_decode("aGVs\nbG8=", 9, &b));
    ASSERT_STREQ(b.data, "hello");
    ASSERT_EQ(tkm_base64_decode("a=b", 3, &b), -EINVAL);
    ASSERT_EQ(tkm_base64_decode("a", 1, &b), -EINVAL);
    tkm_buf_release(&b);
    long long t;
    ASSERT_OK(k8s__parse_time("1970-01-01T00:01:00Z", &t));
    ASSERT_EQ(t, 60);
    ASSERT_OK(k8s__parse_time("1970-01-01T01:00:00.123+01:00", &t));
    ASSERT_EQ(t, 0);
    ASSERT_EQ(k8s__parse_time("yesterday", &t), -EINVAL);
    ASSERT_EQ(k8s__parse_time("1970-01-01T00:00:00", &t), -EINVAL);
}
