/* credhelper.c - docker credential helpers (docker-credential-<name> get); see auth.h. */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <tkm/buf.h>
#include <tkm/oci/auth.h>
#include <tkm/oci/ref.h>
#include <tkm/spawn.h>

#define HELPER_OUT_MAX    (64u << 10)
#define HELPER_ERR_MAX    (4u << 10)
#define HELPER_TIMEOUT_MS 10000

static int helper_name_ok(const char *s)
{
    if (!*s || strlen(s) > 64)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return 0;
    return 1;
}

static void trim_end(struct tkm_buf *b)
{
    while (b->len > 0 && isspace((unsigned char)b->data[b->len - 1]))
        b->data[--b->len] = '\0';
}

static int parse_reply(const struct tkm_buf *b, const char *prog, struct tkm_oci_creds *out,
                       struct tkm_err *err)
{
    json_t *j = json_loadb(b->data, b->len, JSON_REJECT_DUPLICATES, NULL);
    const char *user = json_string_value(json_object_get(j, "Username"));
    const char *secret = json_string_value(json_object_get(j, "Secret"));
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (!user || !secret || !*secret) {
        rc = tkm_err_set(err, -EINVAL, "%s: reply has no Username/Secret", prog);
        goto out;
    }
    if (strcmp(user, "<token>") == 0) { /* an identity token, as docker login stores them */
        if (strlen(secret) >= sizeof out->identity_token)
            rc = tkm_err_set(err, -EINVAL, "%s: identity token too long", prog);
        else
            memcpy(out->identity_token, secret, strlen(secret) + 1);
    } else if (strlen(user) >= sizeof out->username || strlen(secret) >= sizeof out->password) {
        rc = tkm_err_set(err, -EINVAL, "%s: user or secret too long", prog);
    } else {
        memcpy(out->username, user, strlen(user) + 1);
        memcpy(out->password, secret, strlen(secret) + 1);
    }
    snprintf(out->source, sizeof out->source, "credential helper %s", prog);
out:
    json_decref(j);
    if (rc)
        tkm_oci_creds_wipe(out);
    return rc;
}

int tkm_oci_creds_from_helper(const char *helper, const char *host, struct tkm_oci_creds *out,
                              struct tkm_err *err)
{
    struct tkm_spawn_result res;
    struct tkm_err se = {0};
    char prog[96], url[TKM_OCI_NAME_MAX + 16], what[64];
    int rc;
    if (!helper_name_ok(helper))
        return tkm_err_set(err, -EINVAL, "credential helper name '%.80s' is not [A-Za-z0-9._-]+",
                           helper);
    snprintf(prog, sizeof prog, "docker-credential-%s", helper);
    /* Docker stores Docker Hub under its v1 index URL; other registries by host. */
    int hub = strcmp(host, TKM_OCI_DOCKER_HUB) == 0;
    snprintf(url, sizeof url, "%s", hub ? "https://index.docker.io/v1/" : host);
    char *argv[] = {prog, "get", NULL};
    struct tkm_spawn_opts so = {.argv = argv,
                                .stdin_data = url,
                                .stdin_len = strlen(url),
                                .stdout_max = HELPER_OUT_MAX,
                                .stderr_max = HELPER_ERR_MAX,
                                .timeout_ms = HELPER_TIMEOUT_MS};
    rc = tkm_spawn_run(&so, &res, &se);
    if (rc == -ENOENT) {
        /* Not -ENOENT: that would read as "no credentials" and go on anonymously. */
        rc = tkm_err_set(err, -ENOEXEC,
                         "%s (credsStore/credHelpers in the docker config): not found on PATH",
                         prog);
        goto out;
    }
    if (rc) { /* timed out (killed), an answer over 64 KiB, not executable, ... */
        rc = tkm_err_set(err, rc, "%s (named by credsStore/credHelpers in the docker config)",
                         se.msg);
        goto out;
    }
    trim_end(&res.out);
    trim_end(&res.err);
    if (!(res.exited && res.exit_status == 0)) {
        /* docker-credential-* print "credentials not found in native keychain" */
        if (strstr(res.out.data, "not found"))
            rc = -ENOENT;
        else
            rc = tkm_err_set(err, -EIO, "%s get %s failed: %.200s (%s)", prog, url,
                             res.out.len ? res.out.data : res.err.data,
                             tkm_spawn_status_str(&res, what, sizeof what));
        goto out;
    }
    rc = parse_reply(&res.out, prog, out, err);
out:
    tkm_spawn_result_release(&res);
    return rc;
}
