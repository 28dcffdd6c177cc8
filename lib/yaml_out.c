/*
 * yaml_out.c - JSON to YAML text with libyaml's emitter (see <tkm/yaml_out.h>).
 * Used by every `-o yaml`: tkm-agent --once and kubectl-tkm.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include <tkm/buf.h>
#include <tkm/yaml_out.h>

int tkm_yaml_needs_quotes(const char *s)
{
    /* YAML 1.1 booleans and nulls (what most readers, PyYAML and Go's yaml.v2
     * included, still apply), and YAML 1.2's. */
    static const char *const words[] = {"true", "false", "null", "yes",   "no",    "on",   "off",
                                        "~",    "y",     "n",    "True",  "False", "Null", "NULL",
                                        "Yes",  "No",    "TRUE", "FALSE", "YES",   "NO",   "On",
                                        "Off",  "ON",    "OFF",  "Y",     "N"};
    char *end;
    if (!s[0])
        return 1;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcmp(s, words[i]))
            return 1;
    /* Numbers in any spelling (strtod: decimal, hex, inf, nan), and anything
     * that starts like one: timestamps, octals, versions, sexagesimals. */
    (void)strtod(s, &end);
    return *end == '\0' || strchr("0123456789+-.", s[0]) != NULL;
}

static int yaml_write(void *data, unsigned char *buf, size_t size)
{
    return tkm_buf_append(data, buf, size) == 0;
}

static int emit(yaml_emitter_t *e, yaml_event_t *ev)
{
    return yaml_emitter_emit(e, ev) ? 0 : -EINVAL;
}

static int scalar(yaml_emitter_t *e, const char *s, int quote)
{
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), !quote, 1,
                                      quote ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                                            : YAML_ANY_SCALAR_STYLE))
        return -ENOMEM;
    return emit(e, &ev);
}

static int node(yaml_emitter_t *e, const json_t *v)
{
    yaml_event_t ev;
    char num[64];
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        rc = emit(e, &ev);
        json_object_foreach((json_t *)v, k, x)
        {
            if (rc == 0)
                rc = scalar(e, k, tkm_yaml_needs_quotes(k));
            if (rc == 0)
                rc = node(e, x);
        }
        yaml_mapping_end_event_initialize(&ev);
        return rc ? rc : emit(e, &ev);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        rc = emit(e, &ev);
        json_array_foreach(v, i, x) if (rc == 0) rc = node(e, x);
        yaml_sequence_end_event_initialize(&ev);
        return rc ? rc : emit(e, &ev);
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        return scalar(e, s, tkm_yaml_needs_quotes(s));
    }
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return scalar(e, num, 0);
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        return scalar(e, num, 0);
    case JSON_TRUE:
        return scalar(e, "true", 0);
    case JSON_FALSE:
        return scalar(e, "false", 0);
    default:
        return scalar(e, "null", 0);
    }
}

int tkm_yaml_from_json(const json_t *doc, struct tkm_buf *out)
{
    yaml_emitter_t e;
    yaml_event_t ev;
    int rc;
    if (!yaml_emitter_initialize(&e))
        return -ENOMEM;
    yaml_emitter_set_output(&e, yaml_write, out);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    rc = emit(&e, &ev);
    if (rc == 0) {
        yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
        rc = emit(&e, &ev);
    }
    if (rc == 0)
        rc = node(&e, doc);
    if (rc == 0) {
        yaml_document_end_event_initialize(&ev, 1);
        rc = emit(&e, &ev);
    }
    if (rc == 0) {
        yaml_stream_end_event_initialize(&ev);
        rc = emit(&e, &ev);
    }
    if (rc == 0 && !yaml_emitter_flush(&e))
        rc = -EIO;
    yaml_emitter_delete(&e);
    return rc;
}
