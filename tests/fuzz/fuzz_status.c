/* fuzz_status.c - apiserver Status decoding of any reply body. */
#include <stddef.h>
#include <stdint.h>

#include <k8s/status.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const long codes[] = {400, 401, 403, 404, 409, 410, 422, 429, 500, 503, 504, 418};
    long code = size ? codes[data[0] % 12] : 500;
    struct k8s_status st = K8S_STATUS_INIT;
    k8s_status_decode(&st, code, size ? (const char *)data + 1 : "", size ? size - 1 : 0,
                      size > 1 ? data[1] % 40 - 1 : -1);
    char line[256];
    k8s_status_str(&st, line, sizeof line);
    k8s_status_has_cause(&st, "FieldManagerConflict");
    k8s_status_retryable(&st, size & 1);
    k8s_status_release(&st);
    return 0;
}
