/* fuzz_toml.c - the TOML subset parser (lib/toml.c): no crash or leak, every
 * refusal explains itself, and every value in an accepted document is one of
 * the five types with the shape toml.h promises. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <tkm/err.h>
#include <tkm/toml.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const struct tkm_toml *t, unsigned depth)
{
    if (depth > TKM_TOML_MAX_DEPTH + 1)
        abort();
    switch (t->type) {
    case TKM_TOML_STRING:
        if (!t->s)
            abort();
        (void)strlen(t->s);
        break;
    case TKM_TOML_INT:
        break;
    case TKM_TOML_BOOL:
        if (t->i != 0 && t->i != 1)
            abort();
        break;
    case TKM_TOML_TABLE:
        for (size_t i = 0; i < t->n; i++)
            if (tkm_toml_get(t, t->keys[i]) != t->items[i])
                abort(); /* keys are unique: a lookup finds the same value */
        /* fall through */
    case TKM_TOML_ARRAY:
        if (t->n > TKM_TOML_MAX_ITEMS)
            abort();
        for (size_t i = 0; i < t->n; i++)
            walk(t->items[i], depth + 1);
        break;
    default:
        abort();
    }
    (void)tkm_toml_type_name(t->type);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tkm_toml *t = NULL;
    struct tkm_err e = {0};
    if (tkm_toml_parse((const char *)data, size, "fuzz.toml", &t, &e) == 0) {
        if (!t || t->type != TKM_TOML_TABLE)
            abort();
        walk(t, 0);
        tkm_toml_free(t);
    } else if (t || e.code == 0 || !e.msg[0]) {
        abort();
    }
    return 0;
}
