/*
 * backoff.h - the one exponential backoff of tkm (k8sclient's, exported).
 *
 * A struct tkm_backoff is plain data owned by whoever embeds it (no heap, no
 * handles, nothing to free). Set the settings with a designated initializer
 * and leave the state zero:
 *
 *     struct tkm_backoff bo = {.initial_ms = 800, .max_ms = 30000, .jitter_pct = 100,
 *                              .reset_ms = 120000, .rng = seed};
 *     uv_timer_start(&t, retry, tkm_backoff_next(&bo, tkm_now_ms()), 0);
 *     ...on success: tkm_backoff_reset(&bo);
 *
 * The k-th delay (k = 0, 1, ...) is d = min(initial * factor^k, max), plus a
 * random jitter in [0, d * jitter_pct / 100]. A delay that the jitter would
 * take past max is drawn from [max * 100 / (100 + jitter_pct), max] instead,
 * so no delay exceeds max and the jitter still spreads the capped ones
 * (client-go's jittered backoff manager; with jitter_pct 0 the sequence is
 * initial, 2*initial, ... max). Not thread-safe; one loop owns each.
 */
#ifndef TKM_BACKOFF_H
#define TKM_BACKOFF_H

#include <stdint.h>

struct tkm_backoff {
    /* settings: set before the first tkm_backoff_next, then left alone */
    uint64_t initial_ms; /* first delay; 0 is taken as 1 */
    uint64_t max_ms;     /* cap; 0 or below initial_ms: initial_ms */
    uint64_t reset_ms;   /* a quiet period longer than this (since the previous
                          * tkm_backoff_next) starts over from initial_ms; 0: never */
    unsigned factor;     /* growth per delay; 0 is taken as 2 */
    unsigned jitter_pct; /* 0: none; 100: up to twice the delay */
    uint64_t rng;        /* xorshift64 seed/state of the jitter; 0 is a fixed seed */
    /* state (read-only for the owner) */
    uint64_t cur_ms;  /* next delay before jitter; 0 = starts at initial_ms */
    uint64_t last_ms; /* now_ms of the previous tkm_backoff_next, 0 = never */
    unsigned steps;   /* delays handed out since the last reset */
};

/* The next delay in ms; advances the state. now_ms (the caller's monotonic
 * clock, tkm_now_ms()) is read only when reset_ms is set. */
uint64_t tkm_backoff_next(struct tkm_backoff *b, uint64_t now_ms);

/* Starts over: the next delay is initial_ms again (after a success). The
 * settings and the jitter state stay. */
void tkm_backoff_reset(struct tkm_backoff *b);

/* Uniform random integer in [lo, hi] (lo when hi <= lo) from a xorshift64
 * state (0 is a fixed seed), which it advances. */
uint64_t tkm_rand_range(uint64_t *state, uint64_t lo, uint64_t hi);

#endif
