/* test_toml.c - the TOML subset parser (lib/toml.c): the shapes containerd's
 * hosts.toml and CRI-O's registries.conf use, and clear refusals with line and
 * column for everything outside the subset. Inputs are written here from the
 * formats' documented semantics. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/err.h>
#include <tkm/toml.h>

#include "test.h"

static struct tkm_toml *parse_ok(const char *s)
{
    struct tkm_toml *t = NULL;
    struct tkm_err e = {0};
    int rc = tkm_toml_parse(s, strlen(s), "t.toml", &t, &e);
    if (rc)
        tkm_test_fail(__FILE__, __LINE__, "parse failed: %s", e.msg);
    return t;
}

static void parse_bad(const char *s, int code, const char *msg)
{
    struct tkm_toml *t = (struct tkm_toml *)1;
    struct tkm_err e = {0};
    int rc = tkm_toml_parse(s, strlen(s), "t.toml", &t, &e);
    if (rc != code || t != NULL || !strstr(e.msg, msg))
        tkm_test_fail(__FILE__, __LINE__, "input %s: rc %d, message \"%s\", want \"%s\"", s, rc,
                      e.msg, msg);
}

TEST(hosts_toml_shape)
{
    struct tkm_toml *t =
        parse_ok("# mirrors for docker.io\n"
                 "server = \"https://registry-1.docker.io\"\n"
                 "\n"
                 "[host.\"https://mirror.local:5000\"]\n"
                 "  capabilities = [\"pull\", \"resolve\"] # no push\n"
                 "  ca = '/etc/certs/mirror ca.crt'\n"
                 "  client = [[\"/c/cert.pem\", \"/c/key.pem\"], \"/c/both.pem\"]\n"
                 "  skip_verify = false\n"
                 "  header = { X-Team = \"gpu\", \"X-Multi\" = [\"a\", \"b\"] }\n"
                 "[host.\"http://10.0.0.1:5000/v1/x\"]\n"
                 "  override_path = true\n"
                 "  dial_timeout = -1_000\n");
    ASSERT_EQ(t->n, 2);
    ASSERT_STREQ(tkm_toml_get(t, "server")->s, "https://registry-1.docker.io");
    const struct tkm_toml *h = tkm_toml_get(t, "host");
    ASSERT_EQ(h->type, TKM_TOML_TABLE);
    ASSERT_EQ(h->n, 2);
    ASSERT_STREQ(h->keys[0], "https://mirror.local:5000"); /* file order kept */
    ASSERT_STREQ(h->keys[1], "http://10.0.0.1:5000/v1/x");
    const struct tkm_toml *m = h->items[0];
    const struct tkm_toml *caps = tkm_toml_get(m, "capabilities");
    ASSERT_EQ(caps->type, TKM_TOML_ARRAY);
    ASSERT_EQ(caps->n, 2);
    ASSERT_STREQ(caps->items[1]->s, "resolve");
    ASSERT_STREQ(tkm_toml_get(m, "ca")->s, "/etc/certs/mirror ca.crt");
    const struct tkm_toml *cl = tkm_toml_get(m, "client");
    ASSERT_EQ(cl->n, 2);
    ASSERT_EQ(cl->items[0]->type, TKM_TOML_ARRAY);
    ASSERT_STREQ(cl->items[0]->items[1]->s, "/c/key.pem");
    ASSERT_STREQ(cl->items[1]->s, "/c/both.pem");
    ASSERT_EQ(tkm_toml_get(m, "skip_verify")->type, TKM_TOML_BOOL);
    ASSERT_EQ(tkm_toml_get(m, "skip_verify")->i, 0);
    const struct tkm_toml *hd = tkm_toml_get(m, "header");
    ASSERT_STREQ(tkm_toml_get(hd, "X-Team")->s, "gpu");
    ASSERT_EQ(tkm_toml_get(hd, "X-Multi")->n, 2);
    ASSERT_EQ(tkm_toml_get(h->items[1], "override_path")->i, 1);
    ASSERT_EQ(tkm_toml_get(h->items[1], "dial_timeout")->i, -1000);
    ASSERT_EQ(tkm_toml_get(h->items[1], "dial_timeout")->line, 12);
    tkm_toml_free(t);
}

TEST(registries_conf_shape)
{
    struct tkm_toml *t = parse_ok("unqualified-search-registries = [\n"
                                  "  \"registry.example\", # first\n"
                                  "  \"quay.io\",\n"
                                  "]\n"
                                  "[[registry]]\n"
                                  "prefix = \"example.com/foo\"\n"
                                  "location = \"internal:5000/bar\"\n"
                                  "insecure = true\n"
                                  "[[registry.mirror]]\n"
                                  "location = \"m1.local/bar\"\n"
                                  "pull-from-mirror = \"digest-only\"\n"
                                  "[[registry.mirror]]\n"
                                  "location = \"m2.local\"\n"
                                  "[[registry]]\n"
                                  "location = \"quay.io\"\n"
                                  "blocked = true\n");
    ASSERT_EQ(tkm_toml_get(t, "unqualified-search-registries")->n, 2);
    const struct tkm_toml *r = tkm_toml_get(t, "registry");
    ASSERT_EQ(r->type, TKM_TOML_ARRAY);
    ASSERT_EQ(r->n, 2);
    const struct tkm_toml *mir = tkm_toml_get(r->items[0], "mirror");
    ASSERT_EQ(mir->n, 2);
    ASSERT_STREQ(tkm_toml_get(mir->items[0], "pull-from-mirror")->s, "digest-only");
    ASSERT_STREQ(tkm_toml_get(mir->items[1], "location")->s, "m2.local");
    ASSERT_NULL(tkm_toml_get(r->items[1], "mirror"));
    ASSERT_EQ(tkm_toml_get(r->items[1], "blocked")->i, 1);
    tkm_toml_free(t);
}

TEST(strings_keys_integers)
{
    struct tkm_toml *t = parse_ok("\xef\xbb\xbf"
                                  "a.b . c = \"t\\tq\\\"\\\\\\u00e9\\U0001F600\"\r\n"
                                  "a.b.d = 'C:\\no\\escape'\n"
                                  "[x]\n"
                                  "[x.y]\n"
                                  "n = -9223372036854775808\n"
                                  "m = +9_223_372_036_854_775_807\n"
                                  "z = 0\n"
                                  "e = []\n"
                                  "\"\" = {}\n");
    const struct tkm_toml *b = tkm_toml_get(tkm_toml_get(t, "a"), "b");
    ASSERT_STREQ(tkm_toml_get(b, "c")->s, "t\tq\"\\\xc3\xa9\xf0\x9f\x98\x80");
    ASSERT_STREQ(tkm_toml_get(b, "d")->s, "C:\\no\\escape");
    const struct tkm_toml *y = tkm_toml_get(tkm_toml_get(t, "x"), "y");
    ASSERT_EQ(tkm_toml_get(y, "n")->i, INT64_MIN);
    ASSERT_EQ(tkm_toml_get(y, "m")->i, INT64_MAX);
    ASSERT_EQ(tkm_toml_get(y, "z")->i, 0);
    ASSERT_EQ(tkm_toml_get(y, "e")->n, 0);
    ASSERT_EQ(tkm_toml_get(y, "")->type, TKM_TOML_TABLE);
    tkm_toml_free(t);
    /* [x.y] before [x] defines x once */
    t = parse_ok("[x.y]\nq = 1\n[x]\nr = 2\n");
    ASSERT_EQ(tkm_toml_get(t, "x")->n, 2);
    tkm_toml_free(t);
}

TEST(outside_the_subset_refused)
{
    parse_bad("a = 1.5\n", -EPROTO, "line 1, column 5: floats are not supported");
    parse_bad("a = 1e3\n", -EPROTO, "floats are not supported");
    parse_bad("a = inf\n", -EPROTO, "floats are not supported");
    parse_bad("\n a = 1979-05-27\n", -EPROTO, "line 2, column 6: dates and times");
    parse_bad("a = 07:32:00\n", -EPROTO, "dates and times");
    parse_bad("a = \"\"\"x\"\"\"\n", -EPROTO, "multi-line strings are not supported");
    parse_bad("a = '''x'''\n", -EPROTO, "multi-line strings are not supported");
    parse_bad("a = 0x1f\n", -EPROTO, "hexadecimal, octal and binary");
    parse_bad("a = 012\n", -EPROTO, "leading zeros");
    parse_bad("a = 1__2\n", -EPROTO, "'_' in an integer");
    parse_bad("a = 99999999999999999999\n", -EPROTO, "integer out of range");
    parse_bad("a = yes\n", -EPROTO, "unexpected 'y' where a value is expected");
}

TEST(bad_toml_refused_with_position)
{
    parse_bad("a = 1\na = 2\n", -EPROTO, "line 2, column 1: key \"a\" is defined twice");
    parse_bad("[t]\n[t]\n", -EPROTO, "line 2, column 2: table \"t\" is defined twice");
    parse_bad("a = 1\n[a]\n", -EPROTO, "table \"a\" is defined twice");
    parse_bad("[[r]]\n[r]\n", -EPROTO, "defined twice");
    parse_bad("r = []\n[[r]]\n", -EPROTO, "not an array of tables");
    parse_bad("t = {a = 1}\n[t.b]\n", -EPROTO, "inline table that cannot be extended");
    parse_bad("t = {a = 1}\nt.b = 2\n", -EPROTO, "cannot be extended with a dotted key");
    parse_bad("[a.b]\nx = 1\n[a]\nb.y = 1\n", -EPROTO,
              "line 4, column 1: key \"b\" is already defined");
    parse_bad("a = \"open\n", -EPROTO, "line 1, column 10: unterminated string");
    parse_bad("a = \"\\q\"\n", -EPROTO, "invalid escape");
    parse_bad("a = \"\\u00\"\n", -EPROTO, "needs 4 hex digits");
    parse_bad("a = \"\\ud800\"\n", -EPROTO, "not a Unicode scalar");
    parse_bad("a = \"\\u0000\"\n", -EPROTO, "not a Unicode scalar");
    parse_bad("a = \"x\ty\x01\"\n", -EPROTO, "control character 0x01");
    parse_bad("a = [1, 2\n", -EPROTO, "unterminated array");
    parse_bad("a = [1 2]\n", -EPROTO, "',' or ']'");
    parse_bad("a = {b = 1,}\n", -EPROTO, "trailing comma");
    parse_bad("a = {b = 1\n}\n", -EPROTO, "inline tables are one line");
    parse_bad("a = 1 b = 2\n", -EPROTO, "unexpected 'b' after the value");
    parse_bad("a\n", -EPROTO, "'=' is expected");
    parse_bad("= 1\n", -EPROTO, "unexpected '=' in a key");
    parse_bad("a =\n", -EPROTO, "a value is expected");
    parse_bad("[a\n", -EPROTO, "']' is expected");
    parse_bad("[[a]\n", -EPROTO, "']]' is expected");
    parse_bad("a = 1\r b = 2\n", -EPROTO, "carriage return");
    parse_bad("# c\x7f\n", -EPROTO, "control character 0x7f in a comment");
    parse_bad("a = \"\xc3\x28\"\n", -EPROTO, "line 1, column 6: invalid UTF-8");
    parse_bad("a = \"\xed\xa0\x80\"\n", -EPROTO, "invalid UTF-8"); /* a surrogate */
    parse_bad("a = \"\xc0\xaf\"\n", -EPROTO, "invalid UTF-8");     /* overlong */
    struct tkm_toml *t = (struct tkm_toml *)1;
    struct tkm_err e = {0};
    ASSERT_EQ(tkm_toml_parse("a = 1\n\0", 7, NULL, &t, &e), -EPROTO);
    ASSERT_STRCONTAINS(e.msg, "line 2, column 1: a NUL byte");
    ASSERT_NULL(t);
}

TEST(bounds)
{
    /* nesting: arrays, inline tables and dotted keys all count */
    char deep[256];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "a = ");
    for (int i = 0; i < 40; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    parse_bad(deep, -E2BIG, "nested deeper than 16 levels");
    parse_bad("a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q = 1\n", -E2BIG, "nested deeper");
    parse_bad("[a.b.c.d.e.f.g.h.i.j]\nk.l.m.n.o.p.q = 1\n", -E2BIG, "nested deeper");
    /* each array of tables in a header is two levels: the array and its table */
    parse_bad("[[a]]\n[[a.b]]\n[[a.b.c]]\n[[a.b.c.d]]\ne.f.g.h.i.j.k.l.m = 1\n", -E2BIG,
              "line 5, column 17: nested deeper than 16 levels");
    parse_bad("[[a]]\n[[a.b]]\n[[a.b.c]]\n[[a.b.c.d]]\n[[a.b.c.d.e]]\n[[a.b.c.d.e.f]]\n"
              "[[a.b.c.d.e.f.g]]\n[[a.b.c.d.e.f.g.h]]\n[[a.b.c.d.e.f.g.h.i]]\n",
              -E2BIG, "line 9, column 3: nested deeper than 16 levels");
    struct tkm_toml *ok = parse_ok("[[a]]\n[[a.b]]\n[[a.b.c]]\n[[a.b.c.d]]\ne.f.g.h.i.j.k = 1\n");
    tkm_toml_free(ok);
    struct tkm_toml *t = parse_ok("a.b.c.d.e.f.g.h.i.j.k.l.m.n.o = [1]\n"); /* 16 levels */
    tkm_toml_free(t);

    /* entries per table and array */
    size_t cap = (TKM_TOML_MAX_ITEMS + 2) * 12;
    char *big = malloc(cap);
    ASSERT_NOT_NULL(big);
    n = 0;
    for (int i = 0; i <= TKM_TOML_MAX_ITEMS; i++)
        n += (size_t)snprintf(big + n, cap - n, "k%d = 1\n", i);
    parse_bad(big, -E2BIG, "more than 4096 entries in one table");
    n = (size_t)snprintf(big, cap, "a = [");
    for (int i = 0; i <= TKM_TOML_MAX_ITEMS; i++)
        n += (size_t)snprintf(big + n, cap - n, "1,");
    snprintf(big + n, cap - n, "]\n");
    parse_bad(big, -E2BIG, "more than 4096 entries in one array");
    free(big);

    /* the size cap, checked before anything is read */
    struct tkm_err e = {0};
    t = (struct tkm_toml *)1;
    ASSERT_EQ(tkm_toml_parse("", (size_t)TKM_TOML_MAX_BYTES + 1, "big", &t, &e), -E2BIG);
    ASSERT_STRCONTAINS(e.msg, "big: larger than 1048576 bytes");
    ASSERT_NULL(t);

    /* only len bytes are read: a value cut at the end of the buffer */
    const char *s = "a = \"abc\"";
    t = (struct tkm_toml *)1;
    ASSERT_EQ(tkm_toml_parse(s, 7, NULL, &t, &e), -EPROTO);
    t = (struct tkm_toml *)1;
    ASSERT_EQ(tkm_toml_parse(s, 3, NULL, &t, NULL), -EPROTO);
    t = parse_ok("");
    ASSERT_EQ(t->n, 0);
    tkm_toml_free(t);
}
