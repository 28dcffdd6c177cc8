/* ctl_json.c - see ctl_json.h. */
#include "ctl_json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <tkm/util.h>

int ctl_json_print(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    int rc = s ? 0 : -1;
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
    return rc;
}

json_t *ctl_json_label(const char *s)
{
    uint64_t v;
    if (!s)
        return json_null();
    if (tkm_parse_u64(s, INT64_MAX, &v) == 0)
        return json_integer((json_int_t)v);
    return json_string(s);
}
