/*
 * The C test host (see nwtest.h): NRI's JSON read into the structs of the
 * generated bindings by walking schema.c, the world's imported functions
 * answered from the call in progress, each call in a forked process, the
 * reply described as `nri-wasm eval` prints it, and a small test runner.
 */
#define _GNU_SOURCE
#include "nwtest.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nwtest_schema.h"

const nwt_type nwt_string = {NWT_STRING, sizeof(policy_string_t)};
const nwt_type nwt_bool = {NWT_BOOL, sizeof(bool)};
const nwt_type nwt_u8 = {NWT_INT, 1, false}, nwt_u16 = {NWT_INT, 2, false}, nwt_u32 = {NWT_INT, 4, false},
               nwt_u64 = {NWT_INT, 8, false};
const nwt_type nwt_s8 = {NWT_INT, 1, true}, nwt_s16 = {NWT_INT, 2, true}, nwt_s32 = {NWT_INT, 4, true},
               nwt_s64 = {NWT_INT, 8, true};

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) abort();
    return p;
}

static char *xprintf(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *format, ...) {
    va_list args;
    va_start(args, format);
    char *out = NULL;
    if (vasprintf(&out, format, args) < 0) abort();
    va_end(args);
    return out;
}

static policy_string_t str_of(const char *s, size_t len) {
    uint8_t *copy = xcalloc(len + 1, 1);
    memcpy(copy, s, len);
    return (policy_string_t){copy, len};
}

/* ---- NRI's JSON to the world's records ---- */

/* Field names compared without case and separators: pod_sandbox_id,
 * podSandboxId and pod-sandbox-id are one name, as are CDI_devices and
 * cdi-devices. */
static bool same_name(const char *a, const char *b) {
    for (;;) {
        while (*a == '_' || *a == '-') a++;
        while (*b == '_' || *b == '-') b++;
        if (!*a || !*b) return !*a && !*b;
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return false;
        a++, b++;
    }
}

static bool walk(const nw_json_t *j, const nwt_type *t, void *dst, const char *path, char **err);

static bool fail_at(char **err, const char *path, const char *what) {
    *err = xprintf("%s: expected %s", path, what);
    return false;
}

static bool integer(const nw_json_t *j, int64_t *out) {
    if (j->type == NW_JSON_NUMBER && j->is_integer) {
        *out = j->integer;
        return true;
    }
    if (j->type == NW_JSON_STRING && j->len > 0) {
        char *end;
        long long v = strtoll(j->string, &end, 10);
        if (*end == '\0') {
            *out = v;
            return true;
        }
    }
    return false;
}

static bool walk_record(const nw_json_t *j, const nwt_type *t, void *dst, const char *path, char **err) {
    if (j->type != NW_JSON_OBJECT) return fail_at(err, path, xprintf("an object (%s)", t->name));
    for (size_t i = 0; i < j->count; i++) {
        const nwt_field *f = NULL;
        for (size_t k = 0; k < t->count; k++) {
            if (same_name(t->fields[k].name, j->keys[i])) f = &t->fields[k];
        }
        if (!f) {
            *err = xprintf("%s: unknown field \"%s\" of %s", path, j->keys[i], t->name);
            return false;
        }
        char *sub = xprintf("%s.%s", path, j->keys[i]);
        if (!walk(&j->items[i], f->type, (char *)dst + f->offset, sub, err)) return false;
    }
    return true;
}

static bool walk(const nw_json_t *j, const nwt_type *t, void *dst, const char *path, char **err) {
    if (j->type == NW_JSON_NULL) return true; /* the zero value */
    switch (t->kind) {
    case NWT_STRING:
        if (j->type != NW_JSON_STRING) return fail_at(err, path, "a string");
        *(policy_string_t *)dst = str_of(j->string, j->len);
        return true;
    case NWT_BOOL:
        if (j->type != NW_JSON_BOOL) return fail_at(err, path, "true or false");
        *(bool *)dst = j->boolean;
        return true;
    case NWT_INT: {
        int64_t v;
        if (!integer(j, &v) || (!t->is_signed && v < 0)) return fail_at(err, path, "an integer");
        switch (t->size) {
        case 1: *(uint8_t *)dst = (uint8_t)v; break;
        case 2: *(uint16_t *)dst = (uint16_t)v; break;
        case 4: *(uint32_t *)dst = (uint32_t)v; break;
        default: *(uint64_t *)dst = (uint64_t)v; break;
        }
        return true;
    }
    case NWT_ENUM: {
        int64_t v;
        if (integer(j, &v) && j->type == NW_JSON_NUMBER) {
            if (v < 0 || (size_t)v >= t->count) return fail_at(err, path, xprintf("a case of %s", t->name));
            *(uint8_t *)dst = (uint8_t)v;
            return true;
        }
        if (j->type != NW_JSON_STRING) return fail_at(err, path, xprintf("a case of %s", t->name));
        /* NRI's names carry the enum's prefix: CONTAINER_RUNNING is `running`. */
        size_t best = t->count, best_len = 0;
        for (size_t k = 0; k < t->count; k++) {
            size_t n = strlen(t->cases[k]);
            if (n > j->len || n < best_len) continue;
            const char *tail = j->string + j->len - n;
            if ((tail == j->string || tail[-1] == '_') && same_name(tail, t->cases[k])) best = k, best_len = n;
        }
        if (best == t->count) return fail_at(err, path, xprintf("a case of %s", t->name));
        *(uint8_t *)dst = (uint8_t)best;
        return true;
    }
    case NWT_RECORD:
        return walk_record(j, t, dst, path, err);
    case NWT_OPTION: {
        *(bool *)dst = true;
        void *val = (char *)dst + t->val_offset;
        if (t->inner->kind != NWT_RECORD && j->type == NW_JSON_OBJECT) {
            /* An optional wrapper: {"value": x}, {} meaning present, zero. */
            for (size_t i = 0; i < j->count; i++) {
                if (strcmp(j->keys[i], "value") != 0) return fail_at(err, path, "an optional value {\"value\": ...}");
            }
            const nw_json_t *v = nw_json_get(j, "value");
            return v ? walk(v, t->inner, val, xprintf("%s.value", path), err) : true;
        }
        return walk(j, t->inner, val, path, err);
    }
    case NWT_LIST: {
        const nwt_type *item = t->inner;
        void **ptr = (void **)dst;
        size_t *len = (size_t *)((char *)dst + sizeof(void *));
        if (j->type == NW_JSON_ARRAY) {
            *ptr = xcalloc(j->count, item->size);
            *len = j->count;
            for (size_t i = 0; i < j->count; i++) {
                const nw_json_t *x = &j->items[i];
                /* CDI devices are messages of one field in NRI, strings in the world. */
                if (item->kind == NWT_STRING && x->type == NW_JSON_OBJECT && x->count == 1) x = &x->items[0];
                if (!walk(x, item, (char *)*ptr + i * item->size, xprintf("%s[%zu]", path, i), err)) return false;
            }
            return true;
        }
        if (j->type == NW_JSON_OBJECT && item->kind == NWT_RECORD && item->count == 2) {
            /* A map: its entries, sorted by key, as records of (key, value). */
            size_t *order = xcalloc(j->count, sizeof *order);
            for (size_t i = 0; i < j->count; i++) {
                size_t k = i;
                while (k > 0 && strcmp(j->keys[order[k - 1]], j->keys[i]) > 0) order[k] = order[k - 1], k--;
                order[k] = i;
            }
            *ptr = xcalloc(j->count, item->size);
            *len = j->count;
            for (size_t i = 0; i < j->count; i++) {
                char *entry = (char *)*ptr + i * item->size;
                const char *key = j->keys[order[i]];
                *(policy_string_t *)(entry + item->fields[0].offset) = str_of(key, strlen(key));
                const nw_json_t *v = &j->items[order[i]];
                if (v->type == NW_JSON_OBJECT) {
                    const nw_json_t *inner = NULL;
                    for (size_t m = 0; m < v->count; m++) {
                        if (same_name(v->keys[m], item->fields[1].name)) inner = &v->items[m];
                    }
                    if (!inner) continue;
                    v = inner;
                }
                char *sub = xprintf("%s[\"%s\"]", path, key);
                if (!walk(v, item->fields[1].type, entry + item->fields[1].offset, sub, err)) return false;
            }
            return true;
        }
        return fail_at(err, path, "a list");
    }
    }
    return fail_at(err, path, "a known type");
}

struct nwt_event {
    nri_wasm_policy_types_event_t whole;
};

nwt_event *nwt_event_from_json(const char *text, char **error) {
    char *why = NULL;
    nw_json_t *doc = nw_json_parse(text, &why);
    if (!doc) {
        *error = xprintf("not JSON: %s", why ? why : "?");
        return NULL;
    }
    const nw_json_t *event = doc->type == NW_JSON_OBJECT ? nw_json_get(doc, "event") : NULL;
    const nw_json_t *request = doc->type == NW_JSON_OBJECT ? nw_json_get(doc, "request") : NULL;
    if (!event || event->type != NW_JSON_STRING || !request) {
        *error = xprintf("expected {\"event\": \"<RPC name>\", \"request\": {...}}");
        return NULL;
    }
    /* CreateContainer is create-container. */
    char kind[64] = {0};
    size_t n = 0;
    for (const char *p = event->string; *p && n + 2 < sizeof kind; p++) {
        if (isupper((unsigned char)*p) && p != event->string) kind[n++] = '-';
        kind[n++] = (char)tolower((unsigned char)*p);
    }
    size_t tag = nwt_event_case_count;
    for (size_t i = 0; i < nwt_event_case_count; i++) {
        if (strcmp(nwt_event_cases[i].kind, kind) == 0) tag = i;
    }
    if (tag == nwt_event_case_count) {
        *error = xprintf("unknown event \"%s\"", event->string);
        return NULL;
    }
    nwt_event *e = xcalloc(1, sizeof *e);
    e->whole.tag = (uint8_t)tag;
    const nwt_type *record = nwt_event_cases[tag].record;
    if (record && !walk(request, record, &e->whole.val, xprintf("%sRequest", event->string), error)) {
        return NULL;
    }
    return e;
}

nwt_event *nwt_fixture(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) nwt_fail(path, 0, "cannot read the fixture");
    size_t cap = 1 << 16, len = 0;
    char *text = xcalloc(cap, 1);
    size_t got;
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) text = realloc(text, cap *= 2);
    }
    fclose(f);
    text[len] = '\0';
    char *error = NULL;
    nwt_event *e = nwt_event_from_json(text, &error);
    if (!e) nwt_fail(path, 0, "%s", error);
    return e;
}

/* The payload's pod and container: every payload record starts with its pod,
 * and those of container events have the container next (schema.c). */
nw_pod_t *nwt_pod(nwt_event *e) {
    const nwt_type *r = nwt_event_cases[e->whole.tag].record;
    if (!r) return NULL;
    for (size_t i = 0; i < r->count; i++) {
        if (strcmp(r->fields[i].name, "pod") == 0) return (nw_pod_t *)((char *)&e->whole.val + r->fields[i].offset);
    }
    return NULL;
}

nw_container_t *nwt_container(nwt_event *e) {
    const nwt_type *r = nwt_event_cases[e->whole.tag].record;
    if (!r) return NULL;
    for (size_t i = 0; i < r->count; i++) {
        if (strcmp(r->fields[i].name, "container") == 0) {
            return (nw_container_t *)((char *)&e->whole.val + r->fields[i].offset);
        }
    }
    return NULL;
}

/* Sets (or removes, value NULL) a key of a sorted key-value list. */
static void set_kv(nw_key_values_t *list, const char *key, const char *value) {
    size_t n = 0;
    nw_key_value_t *out = xcalloc(list->len + 1, sizeof *out);
    bool placed = false;
    for (size_t i = 0; i < list->len; i++) {
        nw_key_value_t kv = list->ptr[i];
        int c = strncmp((const char *)kv.key.ptr, key, kv.key.len);
        if (c == 0 && strlen(key) != kv.key.len) c = kv.key.len < strlen(key) ? -1 : 1;
        if (c == 0) continue;
        if (c > 0 && !placed && value) {
            out[n++] = (nw_key_value_t){str_of(key, strlen(key)), str_of(value, strlen(value))};
            placed = true;
        }
        out[n++] = kv;
    }
    if (!placed && value) out[n++] = (nw_key_value_t){str_of(key, strlen(key)), str_of(value, strlen(value))};
    list->ptr = out;
    list->len = n;
}

static nwt_event *copy_of(const nwt_event *e) {
    /* Lists are replaced, never written in place, so a shallow copy is a copy. */
    nwt_event *c = xcalloc(1, sizeof *c);
    *c = *e;
    return c;
}

nwt_event *nwt_with_pod_label(const nwt_event *e, const char *key, const char *value) {
    nwt_event *c = copy_of(e);
    if (!nwt_pod(c)) nwt_fail(__FILE__, __LINE__, "the event has no pod");
    set_kv((nw_key_values_t *)&nwt_pod(c)->labels, key, value);
    return c;
}

nwt_event *nwt_with_pod_annotation(const nwt_event *e, const char *key, const char *value) {
    nwt_event *c = copy_of(e);
    if (!nwt_pod(c)) nwt_fail(__FILE__, __LINE__, "the event has no pod");
    set_kv((nw_key_values_t *)&nwt_pod(c)->annotations, key, value);
    return c;
}

nwt_event *nwt_with_container_annotation(const nwt_event *e, const char *key, const char *value) {
    nwt_event *c = copy_of(e);
    if (!nwt_container(c)) nwt_fail(__FILE__, __LINE__, "the event has no container");
    set_kv((nw_key_values_t *)&nwt_container(c)->annotations, key, value);
    return c;
}

/* ---- the world's imported functions, answered from the call in progress ---- */

static const nwt_event *current;
static const char *current_settings = "";

typedef struct {
    char *key, *value;
} state_entry;
static state_entry *state;
static size_t state_len;

static bool find(const nw_key_values_t *list, const policy_string_t *key, policy_string_t *ret) {
    for (size_t i = 0; list && i < list->len; i++) {
        if (list->ptr[i].key.len == key->len && memcmp(list->ptr[i].key.ptr, key->ptr, key->len) == 0) {
            *ret = list->ptr[i].value;
            return true;
        }
    }
    return false;
}

static nw_pod_t *pod_now(void) { return current ? nwt_pod((nwt_event *)current) : NULL; }
static nw_container_t *container_now(void) { return current ? nwt_container((nwt_event *)current) : NULL; }

void nri_wasm_policy_host_log(nri_wasm_policy_host_log_level_t level, policy_string_t *message) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "%s: %.*s\n", level < 4 ? names[level] : "?", (int)message->len, (const char *)message->ptr);
}
void nri_wasm_policy_host_settings(policy_string_t *ret) { *ret = str_of(current_settings, strlen(current_settings)); }
void nri_wasm_policy_host_runtime(nri_wasm_policy_host_runtime_info_t *ret) { memset(ret, 0, sizeof *ret); }
void nri_wasm_policy_host_node(nri_wasm_policy_host_node_info_t *ret) {
    memset(ret, 0, sizeof *ret);
    ret->hostname = str_of("node-1", 6);
    ret->arch = str_of("x86_64", 6);
    ret->cpus = 8;
    ret->memory_bytes = 16ull << 30;
}

void nri_wasm_policy_event_whole(nri_wasm_policy_event_event_t *ret) {
    if (!current) nw_panic("event.whole was called in configure, where there is no event");
    memcpy(ret, &current->whole, sizeof *ret);
}
bool nri_wasm_policy_event_pod(nri_wasm_policy_event_pod_sandbox_t *ret) {
    nw_pod_t *p = pod_now();
    if (p) *ret = *p;
    return p != NULL;
}
bool nri_wasm_policy_event_pod_metadata(nri_wasm_policy_event_pod_meta_t *ret) {
    nw_pod_t *p = pod_now();
    if (!p) return false;
    *ret = (nri_wasm_policy_event_pod_meta_t){p->id, p->name, p->uid, p->namespace_, p->runtime_handler, p->pid};
    return true;
}
bool nri_wasm_policy_event_pod_label(policy_string_t *key, policy_string_t *ret) {
    nw_pod_t *p = pod_now();
    return p && find((nw_key_values_t *)&p->labels, key, ret);
}
void nri_wasm_policy_event_pod_labels(nri_wasm_policy_event_list_key_value_t *ret) {
    nw_pod_t *p = pod_now();
    memset(ret, 0, sizeof *ret);
    if (p) memcpy(ret, &p->labels, sizeof *ret);
}
bool nri_wasm_policy_event_pod_annotation(policy_string_t *key, policy_string_t *ret) {
    nw_pod_t *p = pod_now();
    return p && find((nw_key_values_t *)&p->annotations, key, ret);
}
void nri_wasm_policy_event_pod_annotations(nri_wasm_policy_event_list_key_value_t *ret) {
    nw_pod_t *p = pod_now();
    memset(ret, 0, sizeof *ret);
    if (p) memcpy(ret, &p->annotations, sizeof *ret);
}
bool nri_wasm_policy_event_container(nri_wasm_policy_event_container_record_t *ret) {
    nw_container_t *c = container_now();
    if (c) *ret = *c;
    return c != NULL;
}
bool nri_wasm_policy_event_container_metadata(nri_wasm_policy_event_container_meta_t *ret) {
    nw_container_t *c = container_now();
    if (!c) return false;
    *ret = (nri_wasm_policy_event_container_meta_t){c->id, c->pod_sandbox_id, c->name, c->state, c->pid};
    return true;
}
bool nri_wasm_policy_event_container_label(policy_string_t *key, policy_string_t *ret) {
    nw_container_t *c = container_now();
    return c && find((nw_key_values_t *)&c->labels, key, ret);
}
void nri_wasm_policy_event_container_labels(nri_wasm_policy_event_list_key_value_t *ret) {
    nw_container_t *c = container_now();
    memset(ret, 0, sizeof *ret);
    if (c) memcpy(ret, &c->labels, sizeof *ret);
}
bool nri_wasm_policy_event_container_annotation(policy_string_t *key, policy_string_t *ret) {
    nw_container_t *c = container_now();
    return c && find((nw_key_values_t *)&c->annotations, key, ret);
}
void nri_wasm_policy_event_container_annotations(nri_wasm_policy_event_list_key_value_t *ret) {
    nw_container_t *c = container_now();
    memset(ret, 0, sizeof *ret);
    if (c) memcpy(ret, &c->annotations, sizeof *ret);
}
void nri_wasm_policy_event_container_env(policy_list_string_t *ret) {
    nw_container_t *c = container_now();
    memset(ret, 0, sizeof *ret);
    if (c) *ret = c->env;
}
bool nri_wasm_policy_event_container_env_var(policy_string_t *name, policy_string_t *ret) {
    nw_container_t *c = container_now();
    for (size_t i = 0; c && i < c->env.len; i++) {
        policy_string_t e = c->env.ptr[i];
        if (e.len > name->len && memcmp(e.ptr, name->ptr, name->len) == 0 && e.ptr[name->len] == '=') {
            *ret = (policy_string_t){e.ptr + name->len + 1, e.len - name->len - 1};
            return true;
        }
    }
    return false;
}
bool nri_wasm_policy_event_container_resources(nri_wasm_policy_event_linux_resources_t *ret) {
    nw_container_t *c = container_now();
    if (!c || !c->linux.is_some || !c->linux.val.resources.is_some) return false;
    memcpy(ret, &c->linux.val.resources.val, sizeof *ret);
    return true;
}
bool nri_wasm_policy_event_requested_resources(nri_wasm_policy_event_linux_resources_t *ret) {
    if (!current || current->whole.tag != NRI_WASM_POLICY_TYPES_EVENT_UPDATE_CONTAINER) return false;
    const nri_wasm_policy_types_update_container_event_t *u = &current->whole.val.update_container;
    if (!u->linux_resources.is_some) return false;
    memcpy(ret, &u->linux_resources.val, sizeof *ret);
    return true;
}

/* An empty node view: the C test host does not model one yet. */
void nri_wasm_policy_node_pods(nri_wasm_policy_node_list_pod_info_t *ret) { memset(ret, 0, sizeof *ret); }
bool nri_wasm_policy_node_pod(policy_string_t *id, nri_wasm_policy_node_pod_info_t *ret) { return false; }
void nri_wasm_policy_node_containers(nri_wasm_policy_node_container_filter_t *filter,
                                     nri_wasm_policy_node_list_container_info_t *ret) {
    memset(ret, 0, sizeof *ret);
}
void nri_wasm_policy_node_container_ids(nri_wasm_policy_node_container_filter_t *filter,
                                        nri_wasm_policy_node_id_list_t *ret) {
    memset(ret, 0, sizeof *ret);
}
bool nri_wasm_policy_node_container(policy_string_t *id, nri_wasm_policy_node_container_info_t *ret) {
    return false;
}
void nri_wasm_policy_node_topology(nri_wasm_policy_node_node_topology_t *ret) {
    static uint32_t cpus[] = {0, 1, 2, 3, 4, 5, 6, 7};
    memset(ret, 0, sizeof *ret);
    ret->online_cpus.ptr = cpus;
    ret->online_cpus.len = 8;
    ret->memory_bytes = 16ull << 30;
}

static state_entry *state_find(const policy_string_t *key) {
    for (size_t i = 0; i < state_len; i++) {
        if (strlen(state[i].key) == key->len && memcmp(state[i].key, key->ptr, key->len) == 0) return &state[i];
    }
    return NULL;
}
bool nri_wasm_policy_state_get(policy_string_t *key, policy_string_t *ret) {
    state_entry *e = state_find(key);
    if (e) *ret = str_of(e->value, strlen(e->value));
    return e != NULL;
}
bool nri_wasm_policy_state_set(policy_string_t *key, policy_string_t *value, nri_wasm_policy_state_state_error_t *err) {
    if (key->len == 0 || key->len > 256) {
        err->tag = NRI_WASM_POLICY_STATE_STATE_ERROR_INVALID_KEY;
        char *why = xprintf("key of %zu bytes; keys are 1 to 256 bytes", key->len);
        err->val.invalid_key = str_of(why, strlen(why));
        return false;
    }
    state_entry *e = state_find(key);
    if (!e) {
        state = realloc(state, (state_len + 1) * sizeof *state);
        e = &state[state_len++];
        e->key = xcalloc(key->len + 1, 1);
        memcpy(e->key, key->ptr, key->len);
    }
    e->value = xcalloc(value->len + 1, 1);
    memcpy(e->value, value->ptr, value->len);
    return true;
}
void nri_wasm_policy_state_remove(policy_string_t *key) {
    state_entry *e = state_find(key);
    if (e) *e = state[--state_len];
}
void nri_wasm_policy_state_keys(policy_string_t *prefix, policy_list_string_t *ret) {
    ret->ptr = xcalloc(state_len, sizeof *ret->ptr);
    ret->len = 0;
    for (size_t i = 0; i < state_len; i++) {
        if (strncmp(state[i].key, (const char *)prefix->ptr, prefix->len) == 0) {
            ret->ptr[ret->len++] = str_of(state[i].key, strlen(state[i].key));
        }
    }
}

/* ---- replies as lines (the format of `nri-wasm eval`) ---- */

typedef struct {
    char **lines;
    size_t len;
} lines_t;

static void add(lines_t *out, char *line) {
    out->lines = realloc(out->lines, (out->len + 1) * sizeof *out->lines);
    out->lines[out->len++] = line;
}

#define S(s) (int)(s).len, (const char *)(s).ptr

/* A list of strings as ["a", "b"]. */
static char *q(const policy_list_string_t *l) {
    char *out = xprintf("[");
    for (size_t i = 0; i < l->len; i++) {
        char *next = xprintf("%s%s\"%.*s\"", out, i ? ", " : "", S(l->ptr[i]));
        free(out);
        out = next;
    }
    char *done = xprintf("%s]", out);
    free(out);
    return done;
}

static char *opt_s64(policy_option_s64_t v) { return v.is_some ? xprintf("%" PRId64, v.val) : xprintf("-"); }
static char *opt_u32(policy_option_u32_t v) { return v.is_some ? xprintf("%" PRIu32, v.val) : xprintf("-"); }

static void resources(lines_t *out, const char *prefix, const nri_wasm_policy_types_linux_resources_t *r) {
    if (r->memory.is_some) {
        const nri_wasm_policy_types_linux_memory_t *m = &r->memory.val;
        const struct { const char *name; policy_option_s64_t v; } ints[] = {
            {"limit", m->limit}, {"reservation", m->reservation}, {"swap", m->swap}, {"kernel", m->kernel},
            {"kernel_tcp", m->kernel_tcp}};
        for (size_t i = 0; i < 5; i++) {
            if (ints[i].v.is_some) add(out, xprintf("%s.memory.%s=%" PRId64, prefix, ints[i].name, ints[i].v.val));
        }
        if (m->swappiness.is_some) add(out, xprintf("%s.memory.swappiness=%" PRIu64, prefix, m->swappiness.val));
        if (m->disable_oom_killer.is_some) {
            add(out, xprintf("%s.memory.disable_oom_killer=%s", prefix, m->disable_oom_killer.val ? "true" : "false"));
        }
        if (m->use_hierarchy.is_some) {
            add(out, xprintf("%s.memory.use_hierarchy=%s", prefix, m->use_hierarchy.val ? "true" : "false"));
        }
    }
    if (r->cpu.is_some) {
        const nri_wasm_policy_types_linux_cpu_t *c = &r->cpu.val;
        if (c->shares.is_some) add(out, xprintf("%s.cpu.shares=%" PRIu64, prefix, c->shares.val));
        if (c->period.is_some) add(out, xprintf("%s.cpu.period=%" PRIu64, prefix, c->period.val));
        if (c->realtime_period.is_some) add(out, xprintf("%s.cpu.realtime_period=%" PRIu64, prefix, c->realtime_period.val));
        if (c->quota.is_some) add(out, xprintf("%s.cpu.quota=%" PRId64, prefix, c->quota.val));
        if (c->realtime_runtime.is_some) add(out, xprintf("%s.cpu.realtime_runtime=%" PRId64, prefix, c->realtime_runtime.val));
        if (c->cpus.len) add(out, xprintf("%s.cpu.cpus=%.*s", prefix, S(c->cpus)));
        if (c->mems.len) add(out, xprintf("%s.cpu.mems=%.*s", prefix, S(c->mems)));
    }
    for (size_t i = 0; i < r->hugepage_limits.len; i++) {
        add(out, xprintf("%s.hugepage %.*s=%" PRIu64, prefix, S(r->hugepage_limits.ptr[i].page_size),
                         r->hugepage_limits.ptr[i].limit));
    }
    if (r->blockio_class.is_some) add(out, xprintf("%s.blockio_class=%.*s", prefix, S(r->blockio_class.val)));
    if (r->rdt_class.is_some) add(out, xprintf("%s.rdt_class=%.*s", prefix, S(r->rdt_class.val)));
    for (size_t i = 0; i < r->unified.len; i++) {
        add(out, xprintf("%s.unified %.*s=%.*s", prefix, S(r->unified.ptr[i].key), S(r->unified.ptr[i].value)));
    }
    for (size_t i = 0; i < r->devices.len; i++) {
        const nri_wasm_policy_types_linux_device_cgroup_t *d = &r->devices.ptr[i];
        add(out, xprintf("%s.devices[%zu] allow=%s type=%.*s major=%s minor=%s access=%.*s", prefix, i,
                         d->allow ? "true" : "false", S(d->type), opt_s64(d->major), opt_s64(d->minor), S(d->access)));
    }
    if (r->pids.is_some) add(out, xprintf("%s.pids.limit=%" PRId64, prefix, r->pids.val.limit));
}

static void linux_part(lines_t *out, const nri_wasm_policy_types_linux_container_adjustment_t *l) {
    for (size_t i = 0; i < l->devices.len; i++) {
        const nri_wasm_policy_types_linux_device_t *d = &l->devices.ptr[i];
        char *mode = d->file_mode.is_some ? xprintf("%o", d->file_mode.val) : xprintf("-");
        add(out, xprintf("device %.*s type=%.*s major=%" PRId64 " minor=%" PRId64 " mode=%s uid=%s gid=%s", S(d->path),
                         S(d->type), d->major, d->minor, mode, opt_u32(d->uid), opt_u32(d->gid)));
    }
    if (l->resources.is_some) resources(out, "resources", &l->resources.val);
    if (l->cgroups_path.len) add(out, xprintf("cgroups_path=%.*s", S(l->cgroups_path)));
    if (l->oom_score_adj.is_some) add(out, xprintf("oom_score_adj=%" PRId64, l->oom_score_adj.val));
    if (l->io_priority.is_some) {
        add(out, xprintf("io_priority class=%d priority=%d", l->io_priority.val.class_, l->io_priority.val.priority));
    }
    if (l->seccomp_policy.is_some) {
        const nri_wasm_policy_types_linux_seccomp_t *s = &l->seccomp_policy.val;
        add(out, xprintf("seccomp default_action=%.*s default_errno=%s architectures=%s flags=%s listener_path=%.*s "
                         "listener_metadata=%.*s",
                         S(s->default_action), opt_u32(s->default_errno), q(&s->architectures), q(&s->flags),
                         S(s->listener_path), S(s->listener_metadata)));
        for (size_t i = 0; i < s->syscalls.len; i++) {
            const nri_wasm_policy_types_linux_syscall_t *c = &s->syscalls.ptr[i];
            policy_list_string_t args = {xcalloc(c->args.len, sizeof(policy_string_t)), c->args.len};
            for (size_t k = 0; k < c->args.len; k++) {
                char *a = xprintf("%" PRIu32 ":%" PRIu64 ":%" PRIu64 ":%.*s", c->args.ptr[k].index, c->args.ptr[k].value,
                                  c->args.ptr[k].value_two, S(c->args.ptr[k].op));
                args.ptr[k] = str_of(a, strlen(a));
            }
            add(out, xprintf("seccomp.syscalls[%zu] names=%s action=%.*s errno=%s args=%s", i, q(&c->names), S(c->action),
                             opt_u32(c->errno_ret), q(&args)));
        }
    }
    for (size_t i = 0; i < l->namespaces.len; i++) {
        add(out, xprintf("namespace %.*s path=%.*s", S(l->namespaces.ptr[i].type), S(l->namespaces.ptr[i].path)));
    }
    for (size_t i = 0; i < l->sysctl.len; i++) {
        add(out, xprintf("sysctl %.*s=%.*s", S(l->sysctl.ptr[i].key), S(l->sysctl.ptr[i].value)));
    }
    for (size_t i = 0; i < l->net_devices.len; i++) {
        add(out, xprintf("net_device %.*s=%.*s", S(l->net_devices.ptr[i].host_name), S(l->net_devices.ptr[i].name)));
    }
    if (l->scheduler.is_some) {
        const nri_wasm_policy_types_linux_scheduler_t *s = &l->scheduler.val;
        char *flags = xprintf("[");
        for (size_t i = 0; i < s->flags.len; i++) flags = xprintf("%s%s%d", flags, i ? ", " : "", s->flags.ptr[i]);
        add(out, xprintf("scheduler policy=%d nice=%d priority=%d flags=%s] runtime=%" PRIu64 " deadline=%" PRIu64
                         " period=%" PRIu64,
                         s->policy, s->nice, s->priority, flags, s->runtime, s->deadline, s->period));
    }
    if (l->rdt.is_some) {
        const nri_wasm_policy_types_linux_rdt_t *r = &l->rdt.val;
        char *clos = r->clos_id.is_some ? xprintf("%.*s", S(r->clos_id.val)) : xprintf("-");
        char *mon = r->enable_monitoring.is_some ? xprintf("%s", r->enable_monitoring.val ? "true" : "false") : xprintf("-");
        add(out, xprintf("rdt clos_id=%s schemata=%s monitoring=%s remove=%s", clos,
                         r->schemata.is_some ? q(&r->schemata.val) : "-", mon, r->remove ? "true" : "false"));
    }
    if (l->memory_policy.is_some) {
        const nri_wasm_policy_types_linux_memory_policy_t *m = &l->memory_policy.val;
        char *flags = xprintf("[");
        for (size_t i = 0; i < m->flags.len; i++) flags = xprintf("%s%s%d", flags, i ? ", " : "", m->flags.ptr[i]);
        add(out, xprintf("memory_policy mode=%d nodes=%.*s flags=%s]", m->mode, S(m->nodes), flags));
    }
}

static int by_bytes(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static lines_t describe(const nri_wasm_policy_types_reply_t *r) {
    lines_t out = {0};
    if (r->adjust.is_some) {
        const nri_wasm_policy_types_container_adjustment_t *a = &r->adjust.val;
        for (size_t i = 0; i < a->annotations.len; i++) {
            add(&out, xprintf("annotation %.*s=%.*s", S(a->annotations.ptr[i].key), S(a->annotations.ptr[i].value)));
        }
        for (size_t i = 0; i < a->mounts.len; i++) {
            const nri_wasm_policy_types_mount_t *m = &a->mounts.ptr[i];
            add(&out, xprintf("mount %.*s type=%.*s source=%.*s options=%s", S(m->destination), S(m->type), S(m->source),
                              q(&m->options)));
        }
        for (size_t i = 0; i < a->env.len; i++) {
            add(&out, xprintf("env %.*s=%.*s", S(a->env.ptr[i].key), S(a->env.ptr[i].value)));
        }
        if (a->hooks.is_some) {
            const nri_wasm_policy_types_hooks_t *h = &a->hooks.val;
            const struct { const char *name; const nri_wasm_policy_types_list_hook_t *hooks; } stages[] = {
                {"prestart", &h->prestart},   {"createRuntime", &h->create_runtime},
                {"createContainer", &h->create_container}, {"startContainer", &h->start_container},
                {"poststart", &h->poststart}, {"poststop", &h->poststop}};
            for (size_t s = 0; s < 6; s++) {
                for (size_t i = 0; i < stages[s].hooks->len; i++) {
                    const nri_wasm_policy_types_hook_t *k = &stages[s].hooks->ptr[i];
                    add(&out, xprintf("hook %s[%zu] %.*s args=%s env=%s timeout=%s", stages[s].name, i, S(k->path),
                                      q(&k->args), q(&k->env), opt_s64(k->timeout)));
                }
            }
        }
        for (size_t i = 0; i < a->rlimits.len; i++) {
            add(&out, xprintf("rlimit %.*s soft=%" PRIu64 " hard=%" PRIu64, S(a->rlimits.ptr[i].type),
                              a->rlimits.ptr[i].soft, a->rlimits.ptr[i].hard));
        }
        for (size_t i = 0; i < a->cdi_devices.len; i++) add(&out, xprintf("cdi %.*s", S(a->cdi_devices.ptr[i])));
        if (a->args.len) add(&out, xprintf("args %s", q(&a->args)));
        if (a->linux.is_some) linux_part(&out, &a->linux.val);
    }
    for (size_t i = 0; i < r->update.len; i++) {
        const nri_wasm_policy_types_container_update_t *u = &r->update.ptr[i];
        add(&out, xprintf("update %.*s ignore_failure=%s", S(u->container_id), u->ignore_failure ? "true" : "false"));
        if (u->resources.is_some) resources(&out, xprintf("update %.*s resources", S(u->container_id)), &u->resources.val);
    }
    for (size_t i = 0; i < r->evict.len; i++) {
        add(&out, xprintf("evict %.*s reason=%.*s", S(r->evict.ptr[i].container_id), S(r->evict.ptr[i].reason)));
    }
    if (out.len) qsort(out.lines, out.len, sizeof *out.lines, by_bytes);
    return out;
}

/* ---- a call, in a process of its own ---- */

/* The child's report, one field per line: the result, then lines or a
 * reason (newlines in them escaped as \n). */
static void put(FILE *f, const char *tag, const char *text, size_t len) {
    fprintf(f, "%s ", tag);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n') fputs("\\n", f);
        else if (text[i] == '\\') fputs("\\\\", f);
        else fputc(text[i], f);
    }
    fputc('\n', f);
}

static char *get(const char *line) {
    char *out = xcalloc(strlen(line) + 1, 1), *o = out;
    for (const char *p = line; *p && *p != '\n'; p++) {
        if (*p == '\\' && p[1]) *o++ = *++p == 'n' ? '\n' : *p;
        else *o++ = *p;
    }
    return out;
}

/* The rest of `f`, NUL-terminated. */
static char *slurp_file(FILE *f) {
    size_t len = 0, cap = 256;
    char *out = xcalloc(cap, 1);
    for (size_t n; (n = fread(out + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (len + 1 == cap) {
            cap *= 2;
            char *more = realloc(out, cap);
            if (!more) abort();
            out = more;
        }
    }
    out[len] = '\0';
    return out;
}

/* Whether `name` is one of the names of `text` (separated by white space or
 * commas, `#` starting a comment), the text of the file `events`. */
static bool listed(const char *text, const char *name) {
    size_t n = strlen(name);
    bool comment = false;
    for (const char *p = text; *p;) {
        if (*p == '#') comment = true;
        if (*p == '\n') comment = false;
        if (comment || *p == ',' || isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        size_t len = strcspn(p, ", \t\r\n#");
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len;
    }
    return false;
}

/* What the host says of a subscription beyond the policy's declaration: the
 * events configure answered that the file `events` of the policy's directory
 * (the current one: test.sh runs there), which build.sh records in the
 * component, does not list; NULL when all are listed, or without the file
 * (the component then declares nothing). */
static char *beyond_declaration(const policy_list_event_kind_t *kinds) {
    FILE *f = fopen("events", "r");
    if (!f) return NULL;
    char *text = slurp_file(f);
    fclose(f);
    char *undeclared = xprintf("%s", "");
    for (size_t i = 0; i < kinds->len; i++) {
        size_t k = kinds->ptr[i];
        const char *name = k < nwt_event_case_count ? nwt_event_cases[k].kind : "?";
        if (listed(text, name) || listed(undeclared, name)) continue;
        char *more = xprintf("%s%s%s", undeclared, *undeclared ? ", " : "", name);
        free(undeclared);
        undeclared = more;
    }
    if (!*undeclared) {
        free(undeclared);
        free(text);
        return NULL;
    }
    char *out = xprintf("configure subscribes to %s, which the file events does not declare: add them to events",
                        undeclared);
    free(undeclared);
    free(text);
    return out;
}

static void child(const char *settings, const nwt_event *e, bool configure_only, FILE *report) {
    current = NULL;
    current_settings = settings;
    policy_string_t text = str_of(settings, strlen(settings)), err = {0};
    policy_list_event_kind_t kinds = {0};
    if (!exports_policy_configure(&text, &kinds, &err)) {
        put(report, "invalid", (const char *)err.ptr, err.len);
        return;
    }
    char *undeclared = beyond_declaration(&kinds);
    if (undeclared) {
        put(report, "invalid", undeclared, strlen(undeclared));
        return;
    }
    if (configure_only) {
        for (size_t i = 0; i < kinds.len; i++) fprintf(report, "kind %d\n", kinds.ptr[i]);
        fputs("replied\n", report);
        return;
    }
    bool subscribed = false;
    for (size_t i = 0; i < kinds.len; i++) subscribed = subscribed || kinds.ptr[i] == e->whole.tag;
    if (!subscribed) {
        fputs("replied\n", report);
        return;
    }
    fputs("called\n", report);
    current = e;
    nri_wasm_policy_types_reply_t reply;
    memset(&reply, 0, sizeof reply);
    if (!exports_policy_handle((policy_event_kind_t)e->whole.tag, &reply, &err)) {
        put(report, "denied", (const char *)err.ptr, err.len);
        return;
    }
    lines_t lines = describe(&reply);
    for (size_t i = 0; i < lines.len; i++) put(report, "line", lines.lines[i], strlen(lines.lines[i]));
    fputs("replied\n", report);
}

static char *slurp(FILE *f) {
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *out = xcalloc((size_t)(n > 0 ? n : 0) + 1, 1);
    if (n > 0 && fread(out, 1, (size_t)n, f) != (size_t)n) abort();
    return out;
}

static nwt_outcome call(const char *settings, const nwt_event *e, bool configure_only) {
    FILE *report = tmpfile(), *errors = tmpfile();
    if (!report || !errors) abort();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        dup2(fileno(errors), 2);
        child(settings, e, configure_only, report);
        fflush(report);
        fflush(stderr);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    nwt_outcome out = {0};
    out.logs = slurp(errors);
    fseek(report, 0, SEEK_END);
    char *text = slurp(report);
    fclose(report);
    fclose(errors);
    bool finished = false;
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (strncmp(line, "line ", 5) == 0) {
            out.lines = realloc(out.lines, (out.count + 1) * sizeof *out.lines);
            out.lines[out.count++] = get(line + 5);
        } else if (strncmp(line, "denied ", 7) == 0) {
            out.result = NWT_DENIED, out.reason = get(line + 7), finished = true;
        } else if (strncmp(line, "invalid ", 8) == 0) {
            out.result = NWT_INVALID_SETTINGS, out.reason = get(line + 8), finished = true;
        } else if (strcmp(line, "called") == 0) {
            out.called = true;
        } else if (strcmp(line, "replied") == 0) {
            out.result = NWT_REPLIED, finished = true;
        }
        line = next;
    }
    if (!finished || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        out.result = NWT_FAILED;
        out.failure = WIFSIGNALED(status) ? xprintf("%s(ended by signal %d: %s)", out.logs, WTERMSIG(status),
                                                    strsignal(WTERMSIG(status)))
                                          : xprintf("%s(exited with %d)", out.logs, WEXITSTATUS(status));
    }
    return out;
}

nwt_outcome nwt_run(const char *settings, const nwt_event *e) { return call(settings ? settings : "", e, false); }
nwt_outcome nwt_configure(const char *settings) { return call(settings ? settings : "", NULL, true); }

/* ---- the runner ---- */

typedef struct {
    const char *name;
    nwt_test_fn fn;
} test_t;
static test_t *tests;
static size_t test_count;

void nwt_register(const char *name, nwt_test_fn fn) {
    tests = realloc(tests, (test_count + 1) * sizeof *tests);
    tests[test_count++] = (test_t){name, fn};
}

_Noreturn void nwt_fail(const char *file, int line, const char *format, ...) {
    va_list args;
    va_start(args, format);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    exit(1);
}

static const char *result_name(nwt_result r) {
    switch (r) {
    case NWT_REPLIED: return "replied";
    case NWT_DENIED: return "denied";
    case NWT_FAILED: return "failed";
    default: return "refused the settings";
    }
}

static void explain(const char *file, int line, nwt_outcome out, const char *wanted) {
    if (out.result == NWT_FAILED) nwt_fail(file, line, "the call failed (wanted %s):\n%s", wanted, out.failure);
    nwt_fail(file, line, "the policy %s%s%s (wanted %s)", result_name(out.result), out.reason ? ": " : "",
             out.reason ? out.reason : "", wanted);
}

void nwt_expect_lines(const char *file, int line, nwt_outcome out, const char *const *want) {
    if (out.result != NWT_REPLIED) explain(file, line, out, "a reply");
    size_t n = 0;
    while (want[n]) n++;
    bool same = n == out.count;
    for (size_t i = 0; same && i < n; i++) same = strcmp(want[i], out.lines[i]) == 0;
    if (same) return;
    fprintf(stderr, "%s:%d: the reply's lines differ\n  got:\n", file, line);
    for (size_t i = 0; i < out.count; i++) fprintf(stderr, "    %s\n", out.lines[i]);
    fprintf(stderr, "  want:\n");
    for (size_t i = 0; i < n; i++) fprintf(stderr, "    %s\n", want[i]);
    exit(1);
}

void nwt_expect_denial(const char *file, int line, nwt_outcome out, const char *want) {
    if (out.result != NWT_DENIED) explain(file, line, out, "a denial");
    if (strcmp(out.reason, want) != 0) nwt_fail(file, line, "denied \"%s\", want \"%s\"", out.reason, want);
}

/* Runs every test (or those named on the command line), each in a process
 * of its own; exits 1 if any failed. */
int main(int argc, char **argv) {
    size_t failed = 0, ran = 0;
    for (size_t i = 0; i < test_count; i++) {
        bool chosen = argc < 2;
        for (int a = 1; a < argc; a++) chosen = chosen || strstr(tests[i].name, argv[a]);
        if (!chosen) continue;
        ran++;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            tests[i].fn();
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        printf("%s %s\n", ok ? "ok  " : "FAIL", tests[i].name);
        failed += !ok;
    }
    printf("%zu tests, %zu failed\n", ran, failed);
    return failed ? 1 : 0;
}
