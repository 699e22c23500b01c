/* The parity reference policy (see ../README.md), in C. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "nriwasm.h"

static const char *const KNOWN[] = {"labels", "annotations", "prefix", "deny-namespaces", "deny-annotation", "memory-cap"};

typedef struct {
    bool label;
    const char *key;
    char *name;
} mapping_t;

typedef struct {
    mapping_t mappings[256];
    size_t count;
    const nw_json_t *deny_namespaces;
    const char *deny_annotation;
    bool has_cap;
    int64_t memory_cap;
} settings_t;

/* A variable name from a key: letters and digits in upper case, anything
 * else (each character, not each byte) as `_`, `_` before a leading digit. */
static char *sanitize(const char *prefix, const char *key) {
    size_t n = strlen(prefix);
    char *out = malloc(n + strlen(key) + 2);
    memcpy(out, prefix, n);
    size_t start = n;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p >= 0x80 && *p < 0xC0) continue; /* a UTF-8 continuation byte */
        out[n++] = *p < 0x80 && isalnum(*p) ? (char)toupper(*p) : '_';
    }
    out[n] = 0;
    if (n > start && isdigit((unsigned char)out[start])) {
        memmove(out + start + 1, out + start, n - start + 1);
        out[start] = '_';
    }
    return out;
}

static bool valid_name(const char *name) {
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_')) return false;
    for (const char *p = name; *p; p++) {
        if (!((unsigned char)*p < 0x80 && (isalnum((unsigned char)*p) || *p == '_'))) return false;
    }
    return true;
}

static int by_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

typedef struct {
    const char *key;
    const char *value;
} pair_t;

static int pair_by_key(const void *a, const void *b) {
    return strcmp(((const pair_t *)a)->key, ((const pair_t *)b)->key);
}

/* Parses the settings; false with nw_invalid's reason set. */
static bool parse(settings_t *s) {
    memset(s, 0, sizeof *s);
    char *error = NULL;
    const nw_json_t *doc = nw_settings_json(&error);
    if (!doc) return nw_invalid("not JSON: %s", error);
    if (doc->type != NW_JSON_OBJECT) return nw_invalid("expected an object");
    const char **keys = malloc((doc->count + 1) * sizeof *keys);
    memcpy(keys, doc->keys, doc->count * sizeof *keys);
    qsort(keys, doc->count, sizeof *keys, by_key);
    for (size_t i = 0; i < doc->count; i++) {
        bool known = false;
        for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++) known |= strcmp(keys[i], KNOWN[k]) == 0;
        if (!known) return nw_invalid("unknown field %s", keys[i]);
    }
    const char *prefix = "POD_";
    const nw_json_t *v = nw_json_get(doc, "prefix");
    if (v) {
        if (v->type != NW_JSON_STRING) return nw_invalid("prefix: expected a string");
        prefix = v->string;
    }
    if (*prefix && !valid_name(prefix)) return nw_invalid("prefix %s cannot start a variable name", prefix);
    s->deny_annotation = "parity.example.com/deny";
    if ((v = nw_json_get(doc, "deny-annotation"))) {
        if (v->type != NW_JSON_STRING) return nw_invalid("deny-annotation: expected a string");
        s->deny_annotation = v->string;
    }
    if ((v = nw_json_get(doc, "deny-namespaces"))) {
        bool ok = v->type == NW_JSON_ARRAY;
        for (size_t i = 0; ok && i < v->count; i++) ok = v->items[i].type == NW_JSON_STRING;
        if (!ok) return nw_invalid("deny-namespaces: expected a list of strings");
        s->deny_namespaces = v;
    }
    if ((v = nw_json_get(doc, "memory-cap"))) {
        if (v->type != NW_JSON_NUMBER || !v->is_integer || v->integer <= 0 || v->integer >= (int64_t)1 << 53) {
            return nw_invalid("memory-cap: expected a positive integer");
        }
        s->has_cap = true;
        s->memory_cap = v->integer;
    }
    static const char *const WHAT[] = {"labels", "annotations"};
    for (int w = 0; w < 2; w++) {
        const nw_json_t *object = nw_json_get(doc, WHAT[w]);
        if (!object) continue;
        if (object->type != NW_JSON_OBJECT) return nw_invalid("%s: expected an object of strings", WHAT[w]);
        pair_t *pairs = malloc((object->count + 1) * sizeof *pairs);
        for (size_t i = 0; i < object->count; i++) {
            if (object->items[i].type != NW_JSON_STRING) return nw_invalid("%s: expected an object of strings", WHAT[w]);
            pairs[i].key = object->keys[i];
            pairs[i].value = object->items[i].string;
        }
        qsort(pairs, object->count, sizeof *pairs, pair_by_key);
        for (size_t i = 0; i < object->count; i++) {
            const char *key = pairs[i].key;
            char *name = *pairs[i].value ? nw_format("%s", pairs[i].value) : sanitize(prefix, key);
            if (!valid_name(name)) return nw_invalid("%s %s: %s is not a variable name", WHAT[w], key, name);
            for (size_t m = 0; m < s->count; m++) {
                if (strcmp(s->mappings[m].name, name) == 0) {
                    return nw_invalid("%s and %s would both set %s", s->mappings[m].key, key, name);
                }
            }
            if (s->count == sizeof s->mappings / sizeof s->mappings[0]) return nw_invalid("more than 256 mappings");
            s->mappings[s->count++] = (mapping_t){w == 0, key, name};
        }
    }
    return true;
}

/* The settings configure parsed: found by every call of a pre-initialised
   instance (preinitialize = true), never by a call of one as built. */
static settings_t kept;
static bool have_kept;

bool policy_configure(const char *text, nw_events_t *events) {
    if (!parse(&kept)) return false;
    have_kept = true;
    nw_subscribe(events, NW_CREATE_CONTAINER);
    return true;
}

bool policy_handle(nw_event_kind_t kind, nw_reply_t *reply) {
    static settings_t s;
    if (have_kept) s = kept;
    else if (!parse(&s)) nw_panic("the settings changed after configure");
    const nw_pod_meta_t *pod = nw_pod_meta();
    char *ns = nw_cstr(pod->namespace_), *name = nw_cstr(pod->name);
    for (size_t i = 0; s.deny_namespaces && i < s.deny_namespaces->count; i++) {
        if (strcmp(s.deny_namespaces->items[i].string, ns) == 0) {
            return nw_deny("pod %s/%s: namespace %s is not allowed", ns, name, ns);
        }
    }
    if (*s.deny_annotation) {
        char *v = nw_pod_annotation(s.deny_annotation);
        if (v) return nw_deny("pod %s/%s is marked %s=%s", ns, name, s.deny_annotation, v);
    }
    nw_adjustment_t a = {0};
    for (size_t i = 0; i < s.count; i++) {
        const mapping_t *m = &s.mappings[i];
        char *value = m->label ? nw_pod_label(m->key) : nw_pod_annotation(m->key);
        if (!value || nw_env_var(m->name)) continue;
        nw_set_env(&a, m->name, value);
    }
    if (s.has_cap) {
        int64_t limit;
        if (!nw_memory_limit(&limit) || limit > s.memory_cap) nw_set_memory_limit(&a, s.memory_cap);
    }
    char *seen = nw_format("%zu/%zu/%zu", nw_pod_labels()->len, nw_pod_annotations()->len, nw_container_env()->len);
    nw_set_annotation(&a, "parity.example.com/seen", seen);
    const nw_container_meta_t *c = nw_container_meta();
    nw_log(NW_INFO, "%.*s: %zu variables", (int)c->name.len, (const char *)c->name.ptr, a.env.len);
    *reply = nw_adjust(&a);
    return true;
}
