/*
 * mirrors.c - pulls through the node's registry mirrors (issue 26,
 * docs/mirrors.md): the configuration the container runtime has
 * (--mirrors-hosts-dir, --registries-conf; lib/mirrors.c reads them), kept
 * last-good across bad edits, and one registry session per mirror endpoint.
 *
 * What goes through a mirror: the layer pull by digest (manifest, config,
 * layer: store.c tries the endpoints in order, then the verified upstream
 * session). What never does: tag resolution and signature lookups (the
 * verification, cache.c), which stay with the upstream the policy names.
 * Digests are verified whatever served the bytes.
 *
 * Mirror sessions are the admin's configuration, not a tenant's: no registry
 * reach policy applies to them; they are anonymous (credentials for a mirror
 * come from its hosts.toml `header`), so the upstream's pull secret never
 * reaches another host.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <k8s/events.h>
#include <tkm/buf.h>
#include <tkm/log.h>
#include <tkm/mirrors.h>
#include <tkm/oci/session.h>

#include "agent.h"

/* Mirror sessions kept; above this, idle ones (no job) are closed. */
#define AGENT_MIRROR_SESSIONS 64

struct agent_msess {
    struct agent_msess *next;
    char *key; /* every setting of the endpoint, so a changed file means a new session */
    struct tkm_oci_session *s;
};

static int mirrors_configured(const struct agent *a)
{
    return (a->o.mirrors_dir && *a->o.mirrors_dir) ||
           (a->o.registries_conf && *a->o.registries_conf);
}

void agent_mirrors_refresh(struct agent *a)
{
    struct tkm_mirrors *m = NULL;
    struct tkm_err e = {0};
    const char *dir = a->o.mirrors_dir && *a->o.mirrors_dir ? a->o.mirrors_dir : NULL;
    const char *conf = a->o.registries_conf && *a->o.registries_conf ? a->o.registries_conf : NULL;
    if (!mirrors_configured(a) ||
        (a->mirrors_loaded && !tkm_mirrors_changed(a->mirrors, dir, conf)))
        return;
    if (tkm_mirrors_load(dir, conf, &m, &e) < 0) {
        /* keep the last good configuration; say so once per distinct error */
        if (strcmp(a->mirrors_err, tkm_err_str(&e)) != 0) {
            snprintf(a->mirrors_err, sizeof a->mirrors_err, "%s", tkm_err_str(&e));
            a->mirror_config_errors++;
            tkm_warn("registry mirrors: %s; %s", a->mirrors_err,
                     a->mirrors_loaded ? "keeping the last good configuration"
                                       : "pulling from the registries themselves");
        }
        return;
    }
    if (a->mirrors_err[0] || !a->mirrors_loaded)
        tkm_info("registry mirrors: configuration loaded (%s%s%s)", dir ? dir : "",
                 dir && conf ? ", " : "", conf ? conf : "");
    a->mirrors_err[0] = 0;
    tkm_mirrors_free(a->mirrors);
    a->mirrors = m;
    a->mirrors_loaded = 1;
}

/* 1 when ep needs a session of its own: a mirror, or an upstream the files
 * moved elsewhere (CRI-O location, containerd server on another host or
 * path). The registry itself is always pulled through the session it was
 * verified with: its credentials, tkm-config's CA and reach policy (the
 * files' TLS settings for it are not used, docs/mirrors.md). */
static int endpoint_own(const struct tkm_mirror_endpoint *ep, const struct tkm_oci_ref *ref)
{
    return !tkm_mirror_endpoint_is_registry(ep, ref->host, ref->repo);
}

int agent_mirrors_plan(struct agent *a, const struct tkm_oci_ref *ref,
                       struct tkm_mirror_endpoint **eps, size_t *n, size_t *use,
                       struct tkm_err *err)
{
    struct tkm_mirror_endpoint *all = NULL;
    size_t na = 0, k = 0;
    *eps = NULL;
    *n = *use = 0;
    if (!mirrors_configured(a))
        return 0;
    agent_mirrors_refresh(a);
    if (!a->mirrors)
        return 0;
    int rc = tkm_mirrors_resolve(a->mirrors, ref->host, ref->repo, 1, &all, &na, err);
    if (rc < 0)
        return rc;
    /* keep what needs its own session, in order; the verified upstream session comes last */
    for (size_t i = 0; i < na; i++) {
        if (endpoint_own(&all[i], ref)) {
            if (k != i) {
                struct tkm_mirror_endpoint t = all[k];
                all[k] = all[i];
                all[i] = t;
            }
            k++;
        }
    }
    if (k == 0) {
        tkm_mirror_endpoints_free(all, na);
        return 0;
    }
    *eps = all; /* na entries, the first k to try */
    *n = na;
    *use = k;
    return 0;
}

/* The key of every setting a session takes from ep. */
static char *endpoint_key(const struct tkm_mirror_endpoint *ep)
{
    struct tkm_buf b;
    tkm_buf_init(&b, 16384);
    tkm_buf_printf(&b, "%s|%s|%s|%s|%s|%s|%s|%s|%d", ep->scheme ? ep->scheme : "", ep->host,
                   ep->path ? ep->path : "", ep->ns ? ep->ns : "", ep->ca_file ? ep->ca_file : "",
                   ep->client_cert ? ep->client_cert : "", ep->client_key ? ep->client_key : "",
                   ep->source ? ep->source : "", ep->skip_verify);
    for (size_t i = 0; ep->headers && ep->headers[i]; i++)
        tkm_buf_printf(&b, "|%s", ep->headers[i]);
    return tkm_buf_detach(&b, NULL);
}

/* Closes idle sessions while more than the cap are kept. */
static void sessions_trim(struct agent *a)
{
    size_t n = 0;
    for (struct agent_msess *m = a->msess; m; m = m->next)
        n++;
    for (struct agent_msess **pp = &a->msess; *pp && n > AGENT_MIRROR_SESSIONS;) {
        struct agent_msess *m = *pp;
        if (tkm_oci_session_jobs(m->s) == 0) {
            *pp = m->next;
            tkm_oci_session_close(m->s, NULL, NULL);
            free(m->key);
            free(m);
            n--;
        } else {
            pp = &m->next;
        }
    }
}

struct tkm_oci_session *agent_mirror_session(struct agent *a, const struct tkm_mirror_endpoint *ep,
                                             uint64_t deadline_ms, struct tkm_err *err)
{
    char *key = endpoint_key(ep);
    if (!key) {
        tkm_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    for (struct agent_msess *m = a->msess; m; m = m->next)
        if (strcmp(m->key, key) == 0) {
            free(key);
            tkm_oci_session_set_deadline(m->s, deadline_ms);
            return m->s;
        }
    struct tkm_oci_registry_opts o = {.deadline_ms = deadline_ms,
                                      .max_recv_bps = agent_download_bps(a)};
    tkm_mirror_endpoint_opts(ep, &o);
    struct agent_msess *m = calloc(1, sizeof *m);
    if (!m || tkm_oci_session_new(a->http, ep->host, &o, &m->s, err) < 0) {
        if (!m)
            tkm_err_set(err, -ENOMEM, "out of memory");
        free(m);
        free(key);
        return NULL;
    }
    m->key = key;
    m->next = a->msess;
    a->msess = m;
    sessions_trim(a);
    return m->s;
}

void agent_mirrors_close(struct agent *a, struct tkm_closer *users)
{
    while (a->msess) {
        struct agent_msess *m = a->msess;
        a->msess = m->next;
        tkm_oci_session_close(m->s, tkm_closer_done, tkm_closer_add(users));
        free(m->key);
        free(m);
    }
    tkm_mirrors_free(a->mirrors);
    a->mirrors = NULL;
}

void agent_cache_event(struct agent *a, const struct agent_cache *ac, const char *type,
                       const char *reason, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    if (!a->rec || !ac)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct k8s_object_ref ref = {.api_version = TKM_API_GROUP_VERSION,
                                 .kind = ac->c.cluster ? "TritonKernelCacheCluster"
                                                       : "TritonKernelCache",
                                 .namespace = ac->c.cluster ? NULL : ac->c.meta.ns,
                                 .name = ac->c.meta.name,
                                 .uid = ac->c.meta.uid ? ac->c.meta.uid : ""};
    k8s_event_emit(a->rec, &ref, type, reason, "%s", msg);
}
