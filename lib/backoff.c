/*
 * backoff.c - exponential backoff with jitter, see <tkm/backoff.h>.
 */
#include <limits.h>

#include <tkm/backoff.h>

uint64_t tkm_rand_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    if (hi <= lo)
        return lo;
    return lo + x % (hi - lo + 1);
}

/* d * pct / 100 without overflow. */
static uint64_t pct_of(uint64_t d, unsigned pct)
{
    return d / 100 * pct + d % 100 * pct / 100;
}

void tkm_backoff_reset(struct tkm_backoff *b)
{
    b->cur_ms = 0;
    b->steps = 0;
}

uint64_t tkm_backoff_next(struct tkm_backoff *b, uint64_t now_ms)
{
    uint64_t initial = b->initial_ms ? b->initial_ms : 1;
    uint64_t max = b->max_ms > initial ? b->max_ms : initial;
    unsigned factor = b->factor ? b->factor : 2;
    if (b->reset_ms && b->last_ms && now_ms - b->last_ms > b->reset_ms)
        tkm_backoff_reset(b);
    b->last_ms = now_ms;
    uint64_t cur = b->cur_ms ? b->cur_ms : initial;
    uint64_t d = cur;
    if (b->jitter_pct) {
        uint64_t j = pct_of(cur, b->jitter_pct);
        if (j > max - cur) { /* cur + j > max: spread below the cap */
            uint64_t lo = max / (100 + b->jitter_pct) * 100 +
                          max % (100 + b->jitter_pct) * 100 / (100 + b->jitter_pct);
            d = tkm_rand_range(&b->rng, lo, max);
        } else {
            d = cur + tkm_rand_range(&b->rng, 0, j);
        }
    }
    b->cur_ms = cur > max / factor ? max : cur * factor;
    if (b->steps < UINT_MAX)
        b->steps++;
    return d;
}
