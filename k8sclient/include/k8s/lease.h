/*
 * k8s/lease.h - leader election on a coordination.k8s.io/v1 Lease (client-go's
 * leaderelection with the LeaseLock, on a libuv loop).
 *
 * Every retry period (jittered up to +20%) the elector GETs the Lease
 * (creating it when absent). It takes the lease over only when the record
 * (holder, times, transitions) has not CHANGED for leaseDurationSeconds as
 * observed locally on CLOCK_MONOTONIC: the remote timestamps are never
 * compared with the local clock. A candidate waiting for such a record
 * tries again at the instant the duration runs out rather than at its next
 * retry tick, so the takeover comes at most leaseDuration + one (jittered)
 * retry period after the holder's last renewal: the time until a poll sees
 * that renewal (client-go: up to lease + 2 retry periods; a tighter bound
 * would need the holder's renewTime compared with the local clock). Acquiring
 * or renewing is an UPDATE that
 * carries the resourceVersion read (optimistic lock: a racing candidate gets
 * 409 and loses the round); a takeover increments leaderTransitions.
 *
 * A leader renews every retry period. If no renewal has succeeded for
 * renew_deadline (counted from the start of the last successful attempt),
 * it stops leading at once: on_stopped_leading runs from a timer armed for
 * that instant, and k8s_lease_is_leader() returns 0 from then on even before
 * the timer has had a chance to run (e.g. right after the process was
 * SIGSTOPped and resumed). There is no fencing: keep the leader's writes
 * idempotent (server-side apply). After losing, the elector goes back to
 * being a candidate; controller-runtime exits instead, which the caller may
 * do from on_stopped_leading.
 *
 * Defaults: lease 15 s, renew deadline 10 s, retry 2 s; required
 * lease > renew_deadline > 1.2 x retry (else -EINVAL).
 *
 * Lifecycle: k8s_lease_start(client, &opts, &l, err) ...
 * k8s_lease_close(l, closed_cb, data): with release_on_stop a leader first
 * writes an empty holder with leaseDurationSeconds=1 (so a successor need not
 * wait the full duration), then on_stopped_leading runs, then the memory is
 * freed and closed_cb runs. The client must outlive the elector.
 * Callbacks run from the loop, never inside start/stop; if start fails none
 * runs. Single-threaded.
 */
#ifndef K8S_LEASE_H
#define K8S_LEASE_H

#include <stdint.h>

#include <tkm/err.h>
#include <k8s/client.h>

struct k8s_lease;

struct k8s_lease_opts {
    const char *ns;             /* the Lease's namespace; NULL = the client's */
    const char *name;           /* the Lease's name; required */
    const char *identity;       /* this candidate, unique (e.g. "<host>_<pid>"); required */
    uint64_t lease_duration_ms; /* default 15,000 (written in whole seconds) */
    uint64_t renew_deadline_ms; /* default 10,000 */
    uint64_t retry_period_ms;   /* default 2,000 */
    int release_on_stop;        /* 1: give the lease up in k8s_lease_close() */
    void (*on_started_leading)(void *data);
    void (*on_stopped_leading)(void *data);
    /* The observed holder changed (identity borrowed; "" = nobody). */
    void (*on_new_leader)(const char *identity, void *data);
    void *data;
};

/* Counters for tests and metrics. */
struct k8s_lease_stats {
    uint64_t attempts;  /* acquire/renew rounds started */
    uint64_t renewals;  /* successful acquire/renew writes */
    uint64_t conflicts; /* 409 on update/create: another candidate won */
    uint64_t failures;  /* rounds that failed for other reasons */
    uint64_t acquired;  /* times leadership was gained */
    uint64_t lost;      /* times leadership was lost (not counting release) */
};

/* Starts campaigning. c borrowed (must outlive the elector); strings copied.
 * *out owned: end with k8s_lease_close(). 0, -EINVAL (err says which option),
 * -ENOMEM. */
int k8s_lease_start(struct k8s_client *c, const struct k8s_lease_opts *opts, struct k8s_lease **out,
                    struct tkm_err *err);
/* 1 while leading and the last renewal is younger than renew_deadline. */
int k8s_lease_is_leader(const struct k8s_lease *l);
const struct k8s_lease_stats *k8s_lease_get_stats(const struct k8s_lease *l);
/* NULL is a no-op. */
void k8s_lease_close(struct k8s_lease *l, void (*closed_cb)(void *data), void *data);

#endif
