/* fuzz_kubeconfig.c - kubeconfig YAML (bounded libyaml tree, field checks). */
#include <stddef.h>
#include <stdint.h>

#include <k8s/config.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k8s_config c;
    struct tkm_err err = {0};
    k8s_config_init(&c);
    /* Relative paths resolve under a directory that does not exist, so the
     * file checks fail fast; exec plugins are parsed, never run. */
    if (k8s_config_load_yaml(&c, (const char *)data, size, "/nonexistent-fuzz", "fuzz", NULL,
                             &err) == 0) {
        struct k8s_config copy;
        k8s_config_init(&copy);
        k8s_config_copy(&copy, &c);
        k8s_config_release(&copy);
    }
    k8s_config_release(&c);
    return 0;
}
