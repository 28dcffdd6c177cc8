/* api-int.h - decode/encode helpers shared by the files of lib/api (libtkmapi only). */
#ifndef TKM_API_INT_H
#define TKM_API_INT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include <tkm/api/v1alpha1.h>
#include <tkm/err.h>

/* Each getter reads obj[key] (obj a JSON object); path names obj in
 * messages. Absent or null: the zero value and 0. Wrong type or range:
 * -EPROTO with err "<path>.<key>: expected ..., got ...". */
int tkm__api_str(const json_t *obj, const char *path, const char *key, char **out,
                 struct tkm_err *err);
int tkm__api_int(const json_t *obj, const char *path, const char *key, int64_t min, int64_t max,
                 int64_t *out, struct tkm_err *err);
int tkm__api_i32(const json_t *obj, const char *path, const char *key, int32_t *out,
                 struct tkm_err *err);
int tkm__api_bool(const json_t *obj, const char *path, const char *key, int *out,
                  struct tkm_err *err);
/* *out borrowed from obj, NULL when absent. */
int tkm__api_obj(const json_t *obj, const char *path, const char *key, const json_t **out,
                 struct tkm_err *err);
/* *out borrowed, NULL when absent; *n its size, checked against max. */
int tkm__api_arr(const json_t *obj, const char *path, const char *key, size_t max,
                 const json_t **out, size_t *n, struct tkm_err *err);
/* calloc(n, size) that is fine with n == 0 (*out NULL). */
int tkm__api_alloc(size_t n, size_t size, void **out, struct tkm_err *err);

/* Parses json (duplicates rejected), checks apiVersion and that kind is one
 * of the two given, decodes metadata. *root owned. *cluster = kind is
 * cluster_kind. */
int tkm__api_parse(const char *json, size_t len, const char *kind, const char *cluster_kind,
                   json_t **root, int *cluster, struct tkm_api_meta *meta, struct tkm_err *err);
void tkm__api_meta_release(struct tkm_api_meta *m);

int tkm__api_conditions_decode(const json_t *status, const char *path,
                               struct tkm_api_condition **out, size_t *n, struct tkm_err *err);
void tkm__api_conditions_release(struct tkm_api_condition *c, size_t n);

/* Encoding: set key only when the value is there (string non-NULL). -ENOMEM. */
int tkm__api_set_str(json_t *o, const char *key, const char *v);
int tkm__api_set_int(json_t *o, const char *key, int64_t v);
int tkm__api_set_bool(json_t *o, const char *key, int v);
/* Takes v (decref'd on failure too). */
int tkm__api_set_new(json_t *o, const char *key, json_t *v);
/* {apiVersion, kind, metadata:{name[, namespace]}}; *out owned. */
int tkm__api_object(const char *kind, const char *name, const char *ns, json_t **out,
                    struct tkm_err *err);
/* parent.compiles (jansson; the cache status) into *out (present 1 when
 * there), checked as the CRD; on failure *out is released. 0, -EPROTO, -ENOMEM. */
int tkm__api_compiles_decode(const json_t *parent, const char *path, struct tkm_api_compiles *out,
                             struct tkm_err *err);
json_t *tkm__api_conditions_encode(const struct tkm_api_condition *c, size_t n,
                                   struct tkm_err *err);

#endif
