/*
 * Write nri-wasm policies in C.
 *
 * The bindings of the nri-wasm:policy world (policy.h) are generated from
 * the repository's wit/ by `wit-bindgen c` when a policy is built
 * (guest-sdk/c/build.sh); this header adds short names for the types a
 * policy uses most and helpers to read the event, answer it and read
 * settings (JSON).
 *
 * A policy defines two functions:
 *
 *   // Checks the settings and names the events to handle; returning
 *   // nw_invalid(...) (false) keeps the policy from loading.
 *   bool policy_configure(const char *settings, nw_events_t *events);
 *
 *   // Answers one event: true with *reply set (it starts as nw_none();
 *   // nw_adjust(...) adjusts), or nw_deny(...) (false) to deny it.
 *   bool policy_handle(nw_event_kind_t kind, nw_reply_t *reply);
 *
 * Strings from the host are nw_string_t (bytes and a length, not
 * NUL-terminated); the nw_* readers that return `char *` return
 * NUL-terminated copies (NULL when absent). Every string put into a reply
 * is copied, so anything may be passed. An instance of a policy lives for
 * one call: memory need not be freed.
 *
 * A bug is not a denial: nw_panic(), a failed assert() or abort() end the
 * call with a trap, and the host reports the policy's failure with what
 * was written to stderr (nw_panic's message; assert's).
 */
#ifndef NRIWASM_H
#define NRIWASM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

typedef policy_string_t nw_string_t;
typedef nri_wasm_policy_types_event_kind_t nw_event_kind_t;
typedef nri_wasm_policy_types_reply_t nw_reply_t;
typedef nri_wasm_policy_types_container_adjustment_t nw_adjustment_t;
typedef nri_wasm_policy_types_key_value_t nw_key_value_t;
typedef nri_wasm_policy_event_list_key_value_t nw_key_values_t;
typedef policy_list_string_t nw_strings_t;
typedef nri_wasm_policy_types_pod_sandbox_t nw_pod_t;
typedef nri_wasm_policy_types_container_t nw_container_t;
typedef nri_wasm_policy_types_mount_t nw_mount_t;
typedef nri_wasm_policy_types_linux_resources_t nw_resources_t;
typedef nri_wasm_policy_event_pod_meta_t nw_pod_meta_t;
typedef nri_wasm_policy_event_container_meta_t nw_container_meta_t;

/* Event kinds. */
#define NW_RUN_POD_SANDBOX NRI_WASM_POLICY_TYPES_EVENT_KIND_RUN_POD_SANDBOX
#define NW_STOP_POD_SANDBOX NRI_WASM_POLICY_TYPES_EVENT_KIND_STOP_POD_SANDBOX
#define NW_REMOVE_POD_SANDBOX NRI_WASM_POLICY_TYPES_EVENT_KIND_REMOVE_POD_SANDBOX
#define NW_CREATE_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_CREATE_CONTAINER
#define NW_POST_CREATE_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_POST_CREATE_CONTAINER
#define NW_START_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_START_CONTAINER
#define NW_POST_START_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_POST_START_CONTAINER
#define NW_UPDATE_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_UPDATE_CONTAINER
#define NW_POST_UPDATE_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_POST_UPDATE_CONTAINER
#define NW_STOP_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_STOP_CONTAINER
#define NW_REMOVE_CONTAINER NRI_WASM_POLICY_TYPES_EVENT_KIND_REMOVE_CONTAINER
#define NW_UPDATE_POD_SANDBOX NRI_WASM_POLICY_TYPES_EVENT_KIND_UPDATE_POD_SANDBOX
#define NW_POST_UPDATE_POD_SANDBOX NRI_WASM_POLICY_TYPES_EVENT_KIND_POST_UPDATE_POD_SANDBOX
#define NW_VALIDATE_CONTAINER_ADJUSTMENT NRI_WASM_POLICY_TYPES_EVENT_KIND_VALIDATE_CONTAINER_ADJUSTMENT
#define NW_SYNCHRONIZE NRI_WASM_POLICY_TYPES_EVENT_KIND_SYNCHRONIZE

/* Log levels. */
#define NW_DEBUG NRI_WASM_POLICY_TYPES_LOG_LEVEL_DEBUG
#define NW_INFO NRI_WASM_POLICY_TYPES_LOG_LEVEL_INFO
#define NW_WARN NRI_WASM_POLICY_TYPES_LOG_LEVEL_WARN
#define NW_ERROR NRI_WASM_POLICY_TYPES_LOG_LEVEL_ERROR

/* The events a policy subscribes to (policy_configure fills it). */
typedef struct {
    nw_event_kind_t kinds[16];
    size_t len;
} nw_events_t;

/* Adds a kind to the subscription. */
void nw_subscribe(nw_events_t *events, nw_event_kind_t kind);

/* ---- what a policy implements ---- */
bool policy_configure(const char *settings, nw_events_t *events);
bool policy_handle(nw_event_kind_t kind, nw_reply_t *reply);

/* Sets the reason of a denial (in policy_handle) and returns false. */
bool nw_deny(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* Sets why the settings are invalid (in policy_configure) and returns
 * false; the message gets the prefix "invalid settings: ". */
bool nw_invalid(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* A bug: writes "panic: <message>" to stderr and traps. */
_Noreturn void nw_panic(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* ---- host ---- */
/* The settings text (what policy_configure checked), NUL-terminated. */
const char *nw_settings(void);
/* Writes a line to the host's log, tagged with the policy's name. */
void nw_log(uint8_t level, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* ---- the event, read on demand (each read asks the host once) ---- */
/* The pod's id, name, uid, namespace...; NULL on synchronize. */
const nw_pod_meta_t *nw_pod_meta(void);
/* The container's id, pod id, name, state, pid; NULL on pod events. */
const nw_container_meta_t *nw_container_meta(void);
/* One pod label / annotation, container label / annotation, environment
 * variable: a NUL-terminated copy, NULL if absent. */
char *nw_pod_label(const char *key);
char *nw_pod_annotation(const char *key);
char *nw_container_label(const char *key);
char *nw_container_annotation(const char *key);
char *nw_env_var(const char *name);
/* Every pod label / annotation, container label / annotation, sorted by key. */
const nw_key_values_t *nw_pod_labels(void);
const nw_key_values_t *nw_pod_annotations(void);
const nw_key_values_t *nw_container_labels(void);
const nw_key_values_t *nw_container_annotations(void);
/* The container's environment, NAME=value strings in order. */
const nw_strings_t *nw_container_env(void);
/* The container's resources; NULL if it has none. */
const nw_resources_t *nw_container_resources(void);
/* The container's memory limit: true and *bytes if it has one. */
bool nw_memory_limit(int64_t *bytes);
/* The whole pod / container: the costlier reads; NULL when absent. */
const nw_pod_t *nw_pod(void);
const nw_container_t *nw_container(void);

/* ---- strings ---- */
/* A NUL-terminated copy of a host string. */
char *nw_cstr(nw_string_t s);
/* A host string that refers to a C string (no copy). */
nw_string_t nw_str(const char *s);
bool nw_eq(nw_string_t s, const char *c);
bool nw_starts_with(nw_string_t s, const char *prefix);
/* The value of `key` in a list of key-value pairs, NUL-terminated, or NULL. */
char *nw_lookup(const nw_key_values_t *list, const char *key);
/* A string made with a printf format, which the caller owns. */
char *nw_format(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* Splits text at commas into trimmed, non-empty items; returns how many
 * (at most max) and points items[i] at NUL-terminated copies. */
size_t nw_split_list(const char *text, char **items, size_t max);

/* ---- settings: JSON ---- */
typedef enum {
    NW_JSON_NULL,
    NW_JSON_BOOL,
    NW_JSON_NUMBER,
    NW_JSON_STRING,
    NW_JSON_ARRAY,
    NW_JSON_OBJECT,
} nw_json_type_t;

typedef struct nw_json nw_json_t;
struct nw_json {
    nw_json_type_t type;
    bool boolean;
    /* Numbers: the value, and for an integer in range (no fraction or
     * exponent), is_integer and the exact value. */
    double number;
    bool is_integer;
    int64_t integer;
    /* Strings: NUL-terminated, `len` bytes (it may hold \u0000). */
    char *string;
    size_t len;
    /* Arrays and objects: `count` items; objects also their keys, in order. */
    nw_json_t *items;
    char **keys;
    size_t count;
};

/* Parses a JSON text; NULL (and *error, if given) if it is not JSON. */
nw_json_t *nw_json_parse(const char *text, char **error);
/* The member `key` of an object, or NULL. */
const nw_json_t *nw_json_get(const nw_json_t *object, const char *key);
/* The settings as JSON: an empty text is an empty object. NULL (and
 * *error) if the text is not JSON. */
const nw_json_t *nw_settings_json(char **error);

/* ---- replies ---- */
/* The empty reply: it changes nothing. */
nw_reply_t nw_none(void);
/* A reply that adjusts the container being created. */
nw_reply_t nw_adjust(const nw_adjustment_t *adjustment);
/* Whether an adjustment changes nothing. */
bool nw_adjustment_is_empty(const nw_adjustment_t *a);
/* Builders of an adjustment (start from `nw_adjustment_t a = {0};`). */
void nw_set_annotation(nw_adjustment_t *a, const char *key, const char *value);
void nw_remove_annotation(nw_adjustment_t *a, const char *key);
void nw_set_env(nw_adjustment_t *a, const char *name, const char *value);
void nw_remove_env(nw_adjustment_t *a, const char *name);
/* Adds (or replaces, by destination) a mount; options end with NULL. */
void nw_add_mount(nw_adjustment_t *a, const char *destination, const char *type, const char *source,
                  const char *const *options);
void nw_remove_mount(nw_adjustment_t *a, const char *destination);
void nw_set_rlimit(nw_adjustment_t *a, const char *type, uint64_t soft, uint64_t hard);
void nw_add_cdi_device(nw_adjustment_t *a, const char *name);
void nw_set_memory_limit(nw_adjustment_t *a, int64_t bytes);
void nw_set_cpu_shares(nw_adjustment_t *a, uint64_t shares);
void nw_set_pids_limit(nw_adjustment_t *a, int64_t limit);
void nw_set_oom_score_adj(nw_adjustment_t *a, int64_t value);
void nw_set_unified(nw_adjustment_t *a, const char *file, const char *value);

#endif
