/* test_util.c - lib/util.c: tkm_escape (names quoted in messages). */
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
