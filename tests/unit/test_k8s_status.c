/* test_k8s_status.c - decoding apiserver Status replies. */
#include <jansson.h>

#include <k8s/status.h>

#include "test.h"

TEST(conflict_with_causes)
{
    const char *body =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"Apply failed with 1 conflict: conflict with \\\"mgr-a\\\": .data.k\","
        "\"reason\":\"Conflict\",\"details\":{\"name\":\"cm1\",\"kind\":\"configmaps\","
        "\"causes\":[{\"reason\":\"FieldManagerConflict\",\"message\":\"conflict with "
        "\\\"mgr-a\\\"\",\"field\":\".data.k\"}]},\"code\":409}";
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(k8s_status_decode(&st, 409, body, strlen(body), -1), -ESTALE);
    ASSERT_EQ(st.code, 409);
    ASSERT_EQ(st.rc, -ESTALE);
    ASSERT_EQ(st.transport, 0);
    ASSERT_STREQ(st.reason, "Conflict");
    ASSERT_STREQ(st.status, "Failure");
    ASSERT_STRCONTAINS(st.message, "Apply failed with 1 conflict");
    ASSERT_STREQ(st.details_name, "cm1");
    ASSERT_STREQ(st.details_kind, "configmaps");
    ASSERT_UEQ(st.ncauses, 1);
    ASSERT_STREQ(st.causes[0].reason, "FieldManagerConflict");
    ASSERT_STREQ(st.causes[0].field, ".data.k");
    ASSERT(k8s_status_has_cause(&st, "FieldManagerConflict"));
    ASSERT(!k8s_status_has_cause(&st, "FieldValueInvalid"));
    char line[512];
    k8s_status_str(&st, line, sizeof line);
    ASSERT_STRCONTAINS(line, "409 Conflict: Apply failed");
    ASSERT_STRCONTAINS(line, "[FieldManagerConflict .data.k: conflict with \"mgr-a\"]");
    ASSERT(!k8s_status_retryable(&st, 1));
    k8s_status_release(&st);
    ASSERT_NULL(st.message);
    ASSERT_EQ(st.retry_after_s, -1);
}

TEST(already_exists_and_not_found)
{
    const char *ae = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"AlreadyExists\","
                     "\"message\":\"configmaps \\\"x\\\" already exists\",\"code\":409}";
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(k8s_status_decode(&st, 409, ae, strlen(ae), -1), -EEXIST);
    const char *nf = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"NotFound\","
                     "\"message\":\"configmaps \\\"y\\\" not found\",\"code\":404}";
    /* Reusing the struct frees the previous strings (valgrind checks). */
    ASSERT_EQ(k8s_status_decode(&st, 404, nf, strlen(nf), -1), -ENOENT);
    ASSERT_STREQ(st.message, "configmaps \"y\" not found");
    k8s_status_release(&st);
}

TEST(invalid_422_causes)
{
    const char *b =
        "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Invalid\",\"message\":"
        "\"TritonKernelCache.tkm.io \\\"x\\\" is invalid: spec.cacheImage: Required value\","
        "\"details\":{\"name\":\"x\",\"group\":\"tkm.io\",\"kind\":\"TritonKernelCache\","
        "\"causes\":[{\"reason\":\"FieldValueRequired\",\"message\":\"Required value\","
        "\"field\":\"spec.cacheImage\"},{\"reason\":\"FieldValueInvalid\"}]},\"code\":422}";
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(k8s_status_decode(&st, 422, b, strlen(b), -1), -EINVAL);
    ASSERT_STREQ(st.details_group, "tkm.io");
    ASSERT_UEQ(st.ncauses, 2);
    ASSERT_NULL(st.causes[1].field);
    ASSERT_NULL(st.causes[1].message);
    k8s_status_release(&st);
}

TEST(non_json_bodies_kept)
{
    struct k8s_status st = K8S_STATUS_INIT;
    const char *html = "  <html><body>502 Bad Gateway\x01</body></html>\n";
    ASSERT_EQ(k8s_status_decode(&st, 502, html, strlen(html), -1), -EREMOTEIO);
    ASSERT_EQ(st.code, 502);
    ASSERT_STREQ(st.message, "<html><body>502 Bad Gateway?</body></html>");
    ASSERT_NULL(st.reason);
    ASSERT_EQ(k8s_status_decode(&st, 403, "forbidden: go away", 18, -1), -EACCES);
    ASSERT_STREQ(st.reason, "Forbidden");
    ASSERT_STREQ(st.message, "forbidden: go away");
    ASSERT_EQ(k8s_status_decode(&st, 500, "", 0, -1), -EREMOTEIO);
    ASSERT_STREQ(st.message, "HTTP 500 with an empty body");
    /* JSON that is not a Status is shown raw, not dropped. */
    ASSERT_EQ(k8s_status_decode(&st, 400, "{\"error\":\"bad\"}", 15, -1), -EINVAL);
    ASSERT_STREQ(st.message, "{\"error\":\"bad\"}");
    /* A huge body is truncated. */
    char big[5000];
    memset(big, 'z', sizeof big);
    ASSERT_EQ(k8s_status_decode(&st, 500, big, sizeof big, -1), -EREMOTEIO);
    ASSERT_UEQ(strlen(st.message), 1024 + 3);
    /* Duplicate keys: not trusted as a Status. */
    const char *dup = "{\"kind\":\"Status\",\"message\":\"a\",\"message\":\"b\"}";
    ASSERT_EQ(k8s_status_decode(&st, 404, dup, strlen(dup), -1), -ENOENT);
    ASSERT_STREQ(st.message, dup);
    k8s_status_release(&st);
}

TEST(retry_after_and_policy)
{
    const char *b = "{\"kind\":\"Status\",\"reason\":\"TooManyRequests\",\"message\":\"slow "
                    "down\",\"details\":{\"retryAfterSeconds\":3},\"code\":429}";
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(k8s_status_decode(&st, 429, b, strlen(b), 9), -EBUSY);
    ASSERT_EQ(st.retry_after_s, 3); /* details win over the header */
    ASSERT(k8s_status_retryable(&st, 0));
    ASSERT_EQ(k8s_status_decode(&st, 503, "x", 1, 5), -EREMOTEIO);
    ASSERT_EQ(st.retry_after_s, 5);
    ASSERT(k8s_status_retryable(&st, 0)); /* the server asked */
    ASSERT_EQ(k8s_status_decode(&st, 500, "x", 1, -1), -EREMOTEIO);
    ASSERT(k8s_status_retryable(&st, 1));
    ASSERT(!k8s_status_retryable(&st, 0)); /* POST without Retry-After: no */
    k8s_status_set_transport(&st, -ECONNREFUSED, "https://x: refused");
    ASSERT_EQ(st.code, 0);
    ASSERT_EQ(st.transport, 1);
    ASSERT(k8s_status_retryable(&st, 1));
    ASSERT(!k8s_status_retryable(&st, 0));
    char line[256];
    ASSERT_STREQ(k8s_status_str(&st, line, sizeof line), "transport error: https://x: refused");
    k8s_status_release(&st);
}

TEST(errno_table)
{
    ASSERT_EQ(k8s_status_errno(200, NULL), 0);
    ASSERT_EQ(k8s_status_errno(401, NULL), -EKEYREJECTED);
    ASSERT_EQ(k8s_status_errno(403, NULL), -EACCES);
    ASSERT_EQ(k8s_status_errno(404, NULL), -ENOENT);
    ASSERT_EQ(k8s_status_errno(409, "AlreadyExists"), -EEXIST);
    ASSERT_EQ(k8s_status_errno(409, "Conflict"), -ESTALE);
    ASSERT_EQ(k8s_status_errno(410, "Expired"), -EIDRM);
    ASSERT_EQ(k8s_status_errno(422, NULL), -EINVAL);
    ASSERT_EQ(k8s_status_errno(429, NULL), -EBUSY);
    ASSERT_EQ(k8s_status_errno(504, NULL), -ETIMEDOUT);
    ASSERT_EQ(k8s_status_errno(418, NULL), -EPROTO);
}

TEST(decode_json_object_from_watch)
{
    json_t *o = json_loads("{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Expired\","
                           "\"message\":\"too old resource version: 1 (5)\",\"code\":410}",
                           0, NULL);
    ASSERT_NOT_NULL(o);
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(k8s_status_decode_json(&st, 0, o), -EIDRM);
    ASSERT_EQ(st.code, 410);
    ASSERT_STREQ(st.reason, "Expired");
    json_decref(o);
    k8s_status_release(&st);
}

TEST(str_truncates_safely)
{
    struct k8s_status st = K8S_STATUS_INIT;
    ASSERT_EQ(k8s_status_decode(&st, 404, "nothing here at all", 19, -1), -ENOENT);
    char small[12];
    k8s_status_str(&st, small, sizeof small);
    ASSERT_STREQ(small, "404 NotFoun");
    k8s_status_release(&st);
    ASSERT_STREQ(k8s_status_str(&st, small, sizeof small), "no error");
}
