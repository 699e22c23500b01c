/* The C SDK: the world's exports on top of policy_configure and
 * policy_handle, and the helpers of nriwasm.h (JSON is in json.c). */
#include "nriwasm.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ---- */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        nw_panic("out of memory");
    }
    return p;
}

char *nw_cstr(nw_string_t s) {
    char *out = xmalloc(s.len + 1);
    memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return out;
}

nw_string_t nw_str(const char *s) {
    nw_string_t out = {(uint8_t *)s, strlen(s)};
    return out;
}

/* A host string the reply owns (the generated post-return frees it). */
static nw_string_t owned(const char *s) {
    size_t n = strlen(s);
    nw_string_t out = {xmalloc(n), n};
    memcpy(out.ptr, s, n);
    return out;
}

bool nw_eq(nw_string_t s, const char *c) {
    return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

bool nw_starts_with(nw_string_t s, const char *prefix) {
    size_t n = strlen(prefix);
    return s.len >= n && memcmp(s.ptr, prefix, n) == 0;
}

static char *vformat(const char *format, va_list args) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args);
    char *out = xmalloc((size_t)(n < 0 ? 0 : n) + 1);
    vsnprintf(out, (size_t)n + 1, format, again);
    va_end(again);
    return out;
}

char *nw_format(const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *out = vformat(format, args);
    va_end(args);
    return out;
}

size_t nw_split_list(const char *text, char **items, size_t max) {
    size_t count = 0;
    const char *p = text;
    while (*p && count < max) {
        const char *end = strchr(p, ',');
        if (!end) {
            end = p + strlen(p);
        }
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a)) a++;
        while (b > a && isspace((unsigned char)b[-1])) b--;
        if (b > a) {
            char *item = xmalloc((size_t)(b - a) + 1);
            memcpy(item, a, (size_t)(b - a));
            item[b - a] = 0;
            items[count++] = item;
        }
        p = *end ? end + 1 : end;
    }
    return count;
}

/* ---- configure and handle ---- */

static char *reason;

bool nw_deny(const char *format, ...) {
    va_list args;
    va_start(args, format);
    reason = vformat(format, args);
    va_end(args);
    return false;
}

bool nw_invalid(const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *message = vformat(format, args);
    va_end(args);
    reason = nw_format("invalid settings: %s", message);
    free(message);
    return false;
}

_Noreturn void nw_panic(const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *message = vformat(format, args);
    va_end(args);
    /* The host keeps the end of stderr with a failure: the message last. */
    fprintf(stderr, "panic: %s\n", message);
    fflush(stderr);
    abort();
}

void nw_subscribe(nw_events_t *events, nw_event_kind_t kind) {
    for (size_t i = 0; i < events->len; i++) {
        if (events->kinds[i] == kind) {
            return;
        }
    }
    if (events->len < sizeof events->kinds / sizeof events->kinds[0]) {
        events->kinds[events->len++] = kind;
    }
}

bool exports_policy_configure(policy_string_t *settings, policy_list_event_kind_t *ret, policy_string_t *err) {
    nw_events_t events = {0};
    char *text = nw_cstr(*settings);
    reason = NULL;
    if (!policy_configure(text, &events)) {
        *err = owned(reason ? reason : "invalid settings: refused");
        return false;
    }
    ret->len = events.len;
    ret->ptr = xmalloc(events.len * sizeof(nw_event_kind_t));
    memcpy(ret->ptr, events.kinds, events.len * sizeof(nw_event_kind_t));
    return true;
}

bool exports_policy_handle(policy_event_kind_t kind, policy_reply_t *ret, policy_string_t *err) {
    *ret = nw_none();
    reason = NULL;
    if (!policy_handle(kind, ret)) {
        *err = owned(reason ? reason : "denied");
        return false;
    }
    return true;
}

/* ---- host ---- */

static char *settings_text;

const char *nw_settings(void) {
    if (!settings_text) {
        nw_string_t s;
        nri_wasm_policy_host_settings(&s);
        settings_text = nw_cstr(s);
    }
    return settings_text;
}

void nw_log(uint8_t level, const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *line = vformat(format, args);
    va_end(args);
    nw_string_t s = nw_str(line);
    nri_wasm_policy_host_log(level, &s);
    free(line);
}

/* ---- the event ---- */

static char *found(bool present, nw_string_t s) {
    return present ? nw_cstr(s) : NULL;
}

#define LOOKUP(fn, host_fn)                  \
    char *fn(const char *key) {              \
        nw_string_t k = nw_str(key), v;        \
        bool present = host_fn(&k, &v);      \
        return found(present, v);            \
    }

LOOKUP(nw_pod_label, nri_wasm_policy_event_pod_label)
LOOKUP(nw_pod_annotation, nri_wasm_policy_event_pod_annotation)
LOOKUP(nw_container_label, nri_wasm_policy_event_container_label)
LOOKUP(nw_container_annotation, nri_wasm_policy_event_container_annotation)
LOOKUP(nw_env_var, nri_wasm_policy_event_container_env_var)

char *nw_lookup(const nw_key_values_t *list, const char *key) {
    for (size_t i = 0; i < list->len; i++) {
        if (nw_eq(list->ptr[i].key, key)) {
            return nw_cstr(list->ptr[i].value);
        }
    }
    return NULL;
}

static bool pod_meta_read, pod_meta_present;
static nw_pod_meta_t pod_meta;

const nw_pod_meta_t *nw_pod_meta(void) {
    if (!pod_meta_read) {
        pod_meta_present = nri_wasm_policy_event_pod_metadata(&pod_meta);
        pod_meta_read = true;
    }
    return pod_meta_present ? &pod_meta : NULL;
}

static bool container_meta_read, container_meta_present;
static nw_container_meta_t container_meta;

const nw_container_meta_t *nw_container_meta(void) {
    if (!container_meta_read) {
        container_meta_present = nri_wasm_policy_event_container_metadata(&container_meta);
        container_meta_read = true;
    }
    return container_meta_present ? &container_meta : NULL;
}

#define LIST(fn, type, host_fn)          \
    const type *fn(void) {               \
        static bool read;                \
        static type value;               \
        if (!read) {                     \
            host_fn(&value);             \
            read = true;                 \
        }                                \
        return &value;                   \
    }

LIST(nw_pod_labels, nw_key_values_t, nri_wasm_policy_event_pod_labels)
LIST(nw_pod_annotations, nw_key_values_t, nri_wasm_policy_event_pod_annotations)
LIST(nw_container_labels, nw_key_values_t, nri_wasm_policy_event_container_labels)
LIST(nw_container_annotations, nw_key_values_t, nri_wasm_policy_event_container_annotations)
LIST(nw_container_env, nw_strings_t, nri_wasm_policy_event_container_env)

static bool resources_read, resources_present;
static nw_resources_t resources;

const nw_resources_t *nw_container_resources(void) {
    if (!resources_read) {
        resources_present = nri_wasm_policy_event_container_resources(&resources);
        resources_read = true;
    }
    return resources_present ? &resources : NULL;
}

bool nw_memory_limit(int64_t *bytes) {
    const nw_resources_t *r = nw_container_resources();
    if (!r || !r->memory.is_some || !r->memory.val.limit.is_some) {
        return false;
    }
    *bytes = r->memory.val.limit.val;
    return true;
}

static bool pod_read, pod_present;
static nw_pod_t pod;

const nw_pod_t *nw_pod(void) {
    if (!pod_read) {
        pod_present = nri_wasm_policy_event_pod(&pod);
        pod_read = true;
    }
    return pod_present ? &pod : NULL;
}

static bool container_read, container_present;
static nw_container_t container;

const nw_container_t *nw_container(void) {
    if (!container_read) {
        container_present = nri_wasm_policy_event_container(&container);
        container_read = true;
    }
    return container_present ? &container : NULL;
}

/* ---- replies ---- */

nw_reply_t nw_none(void) {
    nw_reply_t r;
    memset(&r, 0, sizeof r);
    return r;
}

nw_reply_t nw_adjust(const nw_adjustment_t *adjustment) {
    nw_reply_t r = nw_none();
    r.adjust.is_some = true;
    r.adjust.val = *adjustment;
    return r;
}

/* Appends one element to a generated list (ptr, len) of elements of size n. */
static void *push(void **ptr, size_t *len, size_t n) {
    void *grown = realloc(*ptr, (*len + 1) * n);
    if (!grown) {
        nw_panic("out of memory");
    }
    *ptr = grown;
    void *slot = (char *)grown + *len * n;
    memset(slot, 0, n);
    (*len)++;
    return slot;
}

#define PUSH(list) push((void **)&(list).ptr, &(list).len, sizeof *(list).ptr)

static void push_key_value(nri_wasm_policy_types_list_key_value_t *list, const char *key, const char *value) {
    nw_key_value_t *kv = PUSH(*list);
    kv->key = owned(key);
    kv->value = owned(value);
}

void nw_set_annotation(nw_adjustment_t *a, const char *key, const char *value) {
    push_key_value(&a->annotations, key, value);
}

void nw_remove_annotation(nw_adjustment_t *a, const char *key) {
    char *marker = nw_format("-%s", key);
    push_key_value(&a->annotations, marker, "");
    free(marker);
}

void nw_set_env(nw_adjustment_t *a, const char *name, const char *value) {
    push_key_value(&a->env, name, value);
}

void nw_remove_env(nw_adjustment_t *a, const char *name) {
    char *marker = nw_format("-%s", name);
    push_key_value(&a->env, marker, "");
    free(marker);
}

void nw_add_mount(nw_adjustment_t *a, const char *destination, const char *type, const char *source,
                  const char *const *options) {
    nw_mount_t *m = PUSH(a->mounts);
    m->destination = owned(destination);
    m->type = owned(type ? type : "");
    m->source = owned(source ? source : "");
    for (const char *const *o = options; o && *o; o++) {
        nw_string_t *slot = PUSH(m->options);
        *slot = owned(*o);
    }
}

void nw_remove_mount(nw_adjustment_t *a, const char *destination) {
    char *marker = nw_format("-%s", destination);
    nw_add_mount(a, marker, "", "", NULL);
    free(marker);
}

void nw_add_cdi_device(nw_adjustment_t *a, const char *name) {
    nw_string_t *slot = PUSH(a->cdi_devices);
    *slot = owned(name);
}

void nw_set_rlimit(nw_adjustment_t *a, const char *type, uint64_t soft, uint64_t hard) {
    nri_wasm_policy_types_posix_rlimit_t *r = PUSH(a->rlimits);
    r->type = owned(type);
    r->soft = soft;
    r->hard = hard;
}

static nw_resources_t *adjust_resources(nw_adjustment_t *a) {
    a->linux.is_some = true;
    a->linux.val.resources.is_some = true;
    return &a->linux.val.resources.val;
}

void nw_set_memory_limit(nw_adjustment_t *a, int64_t bytes) {
    nw_resources_t *r = adjust_resources(a);
    r->memory.is_some = true;
    r->memory.val.limit.is_some = true;
    r->memory.val.limit.val = bytes;
}

void nw_set_cpu_shares(nw_adjustment_t *a, uint64_t shares) {
    nw_resources_t *r = adjust_resources(a);
    r->cpu.is_some = true;
    r->cpu.val.shares.is_some = true;
    r->cpu.val.shares.val = shares;
}

void nw_set_pids_limit(nw_adjustment_t *a, int64_t limit) {
    nw_resources_t *r = adjust_resources(a);
    r->pids.is_some = true;
    r->pids.val.limit = limit;
}

void nw_set_oom_score_adj(nw_adjustment_t *a, int64_t value) {
    a->linux.is_some = true;
    a->linux.val.oom_score_adj.is_some = true;
    a->linux.val.oom_score_adj.val = value;
}

void nw_set_unified(nw_adjustment_t *a, const char *file, const char *value) {
    push_key_value(&adjust_resources(a)->unified, file, value);
}

bool nw_adjustment_is_empty(const nw_adjustment_t *a) {
    return a->annotations.len == 0 && a->mounts.len == 0 && a->env.len == 0 && !a->hooks.is_some &&
           !a->linux.is_some && a->rlimits.len == 0 && a->cdi_devices.len == 0 && a->args.len == 0;
}
