/* test_yaml_out.c - <tkm/yaml_out.h>: JSON written as YAML, every string that
 * would read back as another type quoted, and the text read back by libyaml's
 * own parser to the same scalars. */
#include <string.h>
#include <yaml.h>

#include <tkm/buf.h>
#include <tkm/yaml_out.h>

#include "test.h"

TEST(strings_that_read_as_other_types_are_quoted)
{
    const char *quoted[] = {"",
                            "true",
                            "No",
                            "off",
                            "~",
                            "null",
                            "123",
                            "1e3",
                            "0x1f",
                            "-5",
                            "+1",
                            ".5",
                            "inf",
                            "3.6.0",
                            "2026-11-23T13:27:27Z",
                            "127.0.0.1:5000/k/v:1"};
    const char *plain[] = {"sha256:ab", "vector-add", "nvidia-h200", "Ready", "kind", "a b"};
    for (size_t i = 0; i < sizeof quoted / sizeof quoted[0]; i++)
        ASSERT_EQ(1, tkm_yaml_needs_quotes(quoted[i]));
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        ASSERT_EQ(0, tkm_yaml_needs_quotes(plain[i]));
}

TEST(document_in_block_style_and_key_order)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 16);
    json_t *d =
        json_pack("{s:s,s:{s:s,s:i},s:[s,b,n],s:f,s:[]}", "kind", "CacheStatus", "meta", "created",
                  "2026-11-23T13:27:27Z", "n", 3, "list", "x", 0, "r", 1.5, "empty");
    ASSERT_OK(tkm_yaml_from_json(d, &b));
    ASSERT_STREQ(b.data, "kind: CacheStatus\nmeta:\n  created: \"2026-11-23T13:27:27Z\"\n"
                         "  \"n\": 3\nlist:\n- x\n- false\n- null\nr: 1.5\nempty: []\n");
    json_decref(d);
    tkm_buf_release(&b);
}

/* What libyaml's parser reads back: the scalars and their quoting style. */
TEST(reads_back_with_libyaml)
{
    struct tkm_buf b = TKM_BUF_INIT(1u << 16);
    json_t *d = json_pack("{s:s,s:s}", "v", "3.6.0", "w", "line\nbreak: \"q\"");
    ASSERT_OK(tkm_yaml_from_json(d, &b));
    yaml_parser_t p;
    yaml_event_t ev;
    ASSERT(yaml_parser_initialize(&p));
    yaml_parser_set_input_string(&p, (const unsigned char *)b.data, b.len);
    const char *want[] = {"v", "3.6.0", "w", "line\nbreak: \"q\""};
    size_t n = 0;
    int done = 0;
    while (!done) {
        ASSERT(yaml_parser_parse(&p, &ev));
        if (ev.type == YAML_SCALAR_EVENT) {
            ASSERT(n < 4);
            ASSERT_STREQ((const char *)ev.data.scalar.value, want[n]);
            if (n == 1)
                ASSERT_EQ(YAML_DOUBLE_QUOTED_SCALAR_STYLE, ev.data.scalar.style);
            n++;
        }
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    ASSERT_EQ(4, (int)n);
    yaml_parser_delete(&p);
    json_decref(d);
    tkm_buf_release(&b);
}

/* A buffer too small for the text: the buffer's error, never a partial success. */
TEST(buffer_limit_is_an_error)
{
    struct tkm_buf b = TKM_BUF_INIT(16);
    json_t *d = json_pack("{s:s}", "a-long-key-name", "a long value that does not fit");
    ASSERT(tkm_yaml_from_json(d, &b) < 0);
    json_decref(d);
    tkm_buf_release(&b);
}
