/* test_util.c - lib's small utilities: tkm_escape (names quoted in messages),
 * the DNS-1123 name rules, tkm_mkdir_p, the backoff. */
#include <sys/stat.h>
#include <unistd.h>

#include <tkm/backoff.h>
#include <tkm/err.h>
#include <tkm/fs.h>
#include <tkm/util.h>

#include "test.h"

static const char *esc(const char *s, size_t n, char *out, size_t outlen)
{
    return tkm_escape(s, n, out, outlen);
}

TEST(escape_controls_backslash_and_nul)
{
    char out[256];
    ASSERT_STREQ(esc("plain/name.json", 15, out, sizeof out), "plain/name.json");
    ASSERT_STREQ(esc("a\nb\tc\rd", 7, out, sizeof out), "a\\nb\\tc\\rd");
    ASSERT_STREQ(esc("\x1b[31mred\x1b[0m", 12, out, sizeof out), "\\x1b[31mred\\x1b[0m");
    ASSERT_STREQ(esc("a\0b", 3, out, sizeof out), "a\\x00b");
    ASSERT_STREQ(esc("del\x7f", 4, out, sizeof out), "del\\x7f");
    /* a literal backslash is doubled, so "\\x1b" in output always means an escape */
    ASSERT_STREQ(esc("a\\x1b", 5, out, sizeof out), "a\\\\x1b");
    ASSERT_STREQ(esc("", 0, out, sizeof out), "");
}

TEST(escape_keeps_utf8_text_and_escapes_the_rest)
{
    char out[256];
    /* é, €, 😀 stay */
    ASSERT_STREQ(esc("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, out, sizeof out),
                 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* U+009B (CSI as a C1 control), a lone 0x9b, a truncated sequence, an
     * overlong '/', a surrogate, RIGHT-TO-LEFT OVERRIDE U+202E */
    ASSERT_STREQ(esc("\xc2\x9b", 2, out, sizeof out), "\\xc2\\x9b");
    ASSERT_STREQ(esc("\x9b"
                     "31m",
                     4, out, sizeof out),
                 "\\x9b31m");
    ASSERT_STREQ(esc("a\xe2\x82", 3, out, sizeof out), "a\\xe2\\x82");
    ASSERT_STREQ(esc("\xc0\xaf", 2, out, sizeof out), "\\xc0\\xaf");
    ASSERT_STREQ(esc("\xed\xa0\x80", 3, out, sizeof out), "\\xed\\xa0\\x80");
    ASSERT_STREQ(esc("x\xe2\x80\xaegpj.exe", 11, out, sizeof out), "x\\xe2\\x80\\xaegpj.exe");
}

TEST(escape_truncates_at_a_whole_escape)
{
    char out[12];
    /* 10 bytes of output fit with "..." and the NUL: never half of "\x1b" */
    ASSERT_STREQ(esc("abcdef\x1b\x1b\x1bxyz", 12, out, sizeof out), "abcdef...");
    ASSERT_STREQ(esc("abcdefghijk", 11, out, sizeof out), "abcdefghijk");
    ASSERT_STREQ(esc("abcdefghijkl", 12, out, sizeof out), "abcdefgh...");
    char tiny[3];
    ASSERT_STREQ(esc("\x1b\x1b", 2, tiny, sizeof tiny), "..");
    char one[1];
    ASSERT_STREQ(esc("abc", 3, one, sizeof one), "");
    /* the worst case fits in 4n+1 */
    char big[4 * 64 + 1], in[64];
    memset(in, 0x1b, sizeof in);
    esc(in, sizeof in, big, sizeof big);
    ASSERT_EQ(strlen(big), 4 * 64);
}

TEST(dns1123_label_and_subdomain)
{
    char l63[64], l64[65], s253[254], s254[255];
    memset(l63, 'a', 63);
    l63[63] = '\0';
    memset(l64, 'a', 64);
    l64[64] = '\0';
    memset(s253, 'a', 253);
    s253[253] = '\0';
    memset(s254, 'a', 254);
    s254[254] = '\0';
    const char *labels[] = {"a", "0", "ml-team", "a-b-c9", l63};
    const char *not_labels[] = {"", "-a", "a-", "A", "a.b", "a_b", "a b", l64};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(labels); i++)
        ASSERT_EQ(tkm_dns1123_label(labels[i], strlen(labels[i])), 1);
    for (size_t i = 0; i < TKM_ARRAY_SIZE(not_labels); i++)
        ASSERT_EQ(tkm_dns1123_label(not_labels[i], strlen(not_labels[i])), 0);
    /* labels inside a subdomain may be longer than 63 (Kubernetes' rule) */
    const char *subs[] = {"a", "pod.with.dots-1", "vadd", "a.b.c", l64, s253};
    const char *not_subs[] = {"",   "a-.b", "a.-b", "a..b", ".a", "a.",
                              "..", "A.b",  "a/b",  "a_b",  s254};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(subs); i++)
        ASSERT_EQ(tkm_dns1123_subdomain(subs[i], strlen(subs[i])), 1);
    for (size_t i = 0; i < TKM_ARRAY_SIZE(not_subs); i++)
        ASSERT_EQ(tkm_dns1123_subdomain(not_subs[i], strlen(not_subs[i])), 0);
    /* a NUL inside is not a name character */
    ASSERT_EQ(tkm_dns1123_subdomain("a\0b", 3), 0);
}

TEST(mkdir_p_creates_every_missing_directory)
{
    char p[512], f[512];
    struct stat st;
    const char *t = tkm_test_tmpdir();
    snprintf(p, sizeof p, "%s/a/b/c", t);
    ASSERT_OK(tkm_mkdir_p(p, 0700, NULL));
    ASSERT_OK(stat(p, &st));
    ASSERT(S_ISDIR(st.st_mode));
    ASSERT_EQ(st.st_mode & 0777, 0700);
    ASSERT_OK(tkm_mkdir_p(p, 0700, NULL)); /* again: nothing to do */
    snprintf(p, sizeof p, "%s/a/b/c/", t); /* a trailing slash */
    ASSERT_OK(tkm_mkdir_p(p, 0755, NULL));
    /* a file on the way or at the end */
    snprintf(f, sizeof f, "%s/a/file", t);
    FILE *fp = fopen(f, "w");
    ASSERT_NOT_NULL(fp);
    fclose(fp);
    struct tkm_err err = {0};
    ASSERT_EQ(tkm_mkdir_p(f, 0755, &err), -ENOTDIR);
    ASSERT_STRCONTAINS(err.msg, "cannot create directory");
    tkm_err_clear(&err);
    snprintf(p, sizeof p, "%s/a/file/d", t);
    ASSERT_EQ(tkm_mkdir_p(p, 0755, &err), -ENOTDIR);
    ASSERT_STRCONTAINS(err.msg, "/a/file/d");
    tkm_err_clear(&err);
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[0] = '/';
    big[sizeof big - 1] = '\0';
    ASSERT_EQ(tkm_mkdir_p(big, 0755, &err), -ENAMETOOLONG);
    tkm_err_clear(&err);
}

TEST(backoff_grows_caps_jitters_and_resets)
{
    /* the watch's settings (client-go's reflector backoff) */
    struct tkm_backoff b = {
        .initial_ms = 800, .max_ms = 30000, .reset_ms = 120000, .jitter_pct = 100, .rng = 42};
    uint64_t now = 1000, expect = 800;
    for (int i = 0; i < 12; i++) {
        uint64_t d = tkm_backoff_next(&b, now);
        if (expect * 2 <= 30000) {
            ASSERT(d >= expect && d <= expect * 2);
        } else {
            ASSERT(d >= 15000 && d <= 30000);
        }
        expect = expect * 2 > 30000 ? 30000 : expect * 2;
        now += d;
    }
    ASSERT_EQ(b.steps, 12);
    /* After 2 min without a backoff the delay starts over. */
    uint64_t d = tkm_backoff_next(&b, now + 120001);
    ASSERT(d >= 800 && d <= 1600);
    ASSERT_EQ(b.steps, 1);
}

TEST(backoff_without_jitter_doubles_to_the_cap_and_resets)
{
    struct tkm_backoff b = {.initial_ms = 1000, .max_ms = 5000};
    const uint64_t want[] = {1000, 2000, 4000, 5000, 5000};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(want); i++)
        ASSERT_UEQ(tkm_backoff_next(&b, 0), want[i]);
    ASSERT_EQ(b.steps, 5);
    tkm_backoff_reset(&b);
    ASSERT_EQ(b.steps, 0);
    ASSERT_UEQ(tkm_backoff_next(&b, 0), 1000);
    /* factor 3; reset_ms 0 never restarts by itself */
    struct tkm_backoff c = {.initial_ms = 5, .max_ms = 100, .factor = 3};
    const uint64_t want3[] = {5, 15, 45, 100, 100};
    for (size_t i = 0; i < TKM_ARRAY_SIZE(want3); i++)
        ASSERT_UEQ(tkm_backoff_next(&c, i * 1000000), want3[i]);
    /* a huge cap does not overflow: the delays grow to it and stay near it */
    struct tkm_backoff h = {.initial_ms = 1, .max_ms = UINT64_MAX, .jitter_pct = 25};
    uint64_t v = 0;
    for (int i = 0; i < 80; i++)
        v = tkm_backoff_next(&h, 0);
    ASSERT(h.cur_ms == UINT64_MAX);
    ASSERT(v >= UINT64_MAX / 5 * 4);
}

TEST(backoff_small_jitter_stays_within_its_share)
{
    struct tkm_backoff b = {.initial_ms = 200, .max_ms = 5000, .jitter_pct = 25, .rng = 7};
    uint64_t base = 200;
    for (int i = 0; i < 10; i++) {
        uint64_t d = tkm_backoff_next(&b, 0);
        if (base + base / 4 <= 5000)
            ASSERT(d >= base && d <= base + base / 4);
        else
            ASSERT(d >= 4000 && d <= 5000);
        base = base * 2 > 5000 ? 5000 : base * 2;
    }
}

TEST(rand_range_stays_in_bounds)
{
    uint64_t s = 7;
    int seen_lo = 0, seen_hi = 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t v = tkm_rand_range(&s, 300, 600);
        ASSERT(v >= 300 && v <= 600);
        seen_lo |= v < 330;
        seen_hi |= v > 570;
    }
    ASSERT(seen_lo && seen_hi);
    ASSERT_UEQ(tkm_rand_range(&s, 9, 3), 9);
}
