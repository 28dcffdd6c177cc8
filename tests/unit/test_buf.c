/* Unit tests for lib/buf and lib/util. */
#include <tkm/buf.h>
#include <tkm/util.h>

#include "test.h"

TEST(buf_starts_empty_and_terminated)
{
    struct tkm_buf b = TKM_BUF_INIT(16);
    ASSERT_NOT_NULL(b.data);
    ASSERT_EQ(b.len, 0);
    ASSERT_STREQ(b.data, "");
    tkm_buf_release(&b);
}

TEST(buf_append_and_printf)
{
    struct tkm_buf b = TKM_BUF_INIT(1024);
    ASSERT_OK(tkm_buf_puts(&b, "hello"));
    ASSERT_OK(tkm_buf_printf(&b, ", %s %d", "world", 42));
    ASSERT_STREQ(b.data, "hello, world 42");
    ASSERT_EQ(b.len, 15);
    tkm_buf_release(&b);
}

TEST(buf_long_printf_grows)
{
    struct tkm_buf b = TKM_BUF_INIT(100000);
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ASSERT_OK(tkm_buf_printf(&b, "<%s>", big));
    ASSERT_EQ(b.len, 3001);
    ASSERT_EQ(b.data[0], '<');
    ASSERT_EQ(b.data[3000], '>');
    ASSERT_EQ(b.data[3001], '\0');
    tkm_buf_release(&b);
}

TEST(buf_cap_is_enforced_and_releases)
{
    struct tkm_buf b = TKM_BUF_INIT(8);
    ASSERT_OK(tkm_buf_puts(&b, "12345678"));
    ASSERT_EQ(tkm_buf_putc(&b, '9'), -E2BIG);
    /* The failed append released the buffer: empty, still valid. */
    ASSERT_EQ(b.len, 0);
    ASSERT_STREQ(b.data, "");
    ASSERT_OK(tkm_buf_puts(&b, "ok"));
    ASSERT_STREQ(b.data, "ok");
    tkm_buf_release(&b);
}

TEST(buf_consume_and_detach)
{
    struct tkm_buf b = TKM_BUF_INIT(64);
    ASSERT_OK(tkm_buf_puts(&b, "abc\ndef"));
    tkm_buf_consume(&b, 4);
    ASSERT_STREQ(b.data, "def");
    size_t n = 0;
    char *s = tkm_buf_detach(&b, &n);
    ASSERT_STREQ(s, "def");
    ASSERT_EQ(n, 3);
    ASSERT_EQ(b.len, 0);
    free(s);
    s = tkm_buf_detach(&b, NULL); /* empty buffer still yields an owned "" */
    ASSERT_STREQ(s, "");
    free(s);
}

TEST(parse_numbers_strictly)
{
    int64_t v = 7;
    ASSERT_OK(tkm_parse_i64("-12", -100, 100, &v));
    ASSERT_EQ(v, -12);
    ASSERT_EQ(tkm_parse_i64("12x", 0, 100, &v), -EINVAL);
    ASSERT_EQ(tkm_parse_i64("", 0, 100, &v), -EINVAL);
    ASSERT_EQ(tkm_parse_i64(" 1", 0, 100, &v), -EINVAL);
    ASSERT_EQ(tkm_parse_i64("101", 0, 100, &v), -ERANGE);
    ASSERT_EQ(v, -12);
    uint64_t u = 0;
    ASSERT_OK(tkm_parse_u64("18446744073709551615", UINT64_MAX, &u));
    ASSERT_UEQ(u, UINT64_MAX);
    ASSERT_EQ(tkm_parse_u64("18446744073709551616", UINT64_MAX, &u), -ERANGE);
    ASSERT_EQ(tkm_parse_u64("-1", UINT64_MAX, &u), -EINVAL);
}

TEST(hex_encodes_lowercase)
{
    unsigned char in[] = {0x00, 0xab, 0xff, 0x10};
    char out[9];
    tkm_hex(in, sizeof in, out);
    ASSERT_STREQ(out, "00abff10");
}

#include <tkm/err.h>

TEST(err_first_wins_and_prefix)
{
    struct tkm_err e = {0};
    ASSERT_STREQ(tkm_err_str(&e), "no error");
    ASSERT_EQ(tkm_err_set(&e, -EINVAL, "field %s is bad", "x"), -EINVAL);
    ASSERT_EQ(tkm_err_set(&e, -EIO, "later"), -EIO);
    ASSERT_EQ(e.code, -EINVAL);
    tkm_err_prefix(&e, "file %s", "a.yaml");
    ASSERT_STREQ(tkm_err_str(&e), "file a.yaml: field x is bad");
    ASSERT_EQ(tkm_err_set(NULL, -ENOENT, "ignored"), -ENOENT);
}
