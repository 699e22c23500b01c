/*
 * `pod-metadata-env`, in C: selected pod labels and annotations as
 * environment variables of every container of the pod.
 *
 * The settings map label and annotation keys to variable names; a key
 * mapped to "" gets a name made from the key (with the settings' `prefix`):
 * upper case, every character other than a letter, digit or `_` written as
 * `_`, and a `_` in front of a leading digit, so `app.kubernetes.io/name`
 * becomes `POD_APP_KUBERNETES_IO_NAME`. A pod without the label or
 * annotation gets no variable; a variable the container already sets is
 * left alone unless `overwrite` is true. Nothing is denied. The same policy
 * as example-policies/pod-metadata-env (Rust), held to the same cases.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nriwasm.h"

typedef struct {
    bool label;
    const char *key;
    char *name;
} mapping_t;

typedef struct {
    mapping_t *mappings;
    size_t count;
    bool overwrite;
} settings_t;

/* A string in double quotes, escaped, as the Rust version writes it. */
static char *quote(const char *s) {
    size_t n = 2;
    for (const char *p = s; *p; p++) n += (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? 6 : 1;
    char *out = malloc(n + 1), *o = out;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            *o++ = '\\';
            *o++ = (char)*p;
        } else if (*p == '\n') {
            o += sprintf(o, "\\n");
        } else if (*p == '\t') {
            o += sprintf(o, "\\t");
        } else if (*p == '\r') {
            o += sprintf(o, "\\r");
        } else if (*p < 0x20) {
            o += sprintf(o, "\\u{%x}", *p);
        } else {
            *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = 0;
    return out;
}

/* A variable name from any key, character by character (not byte by byte). */
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

static bool parse_settings(settings_t *s) {
    memset(s, 0, sizeof *s);
    char *error = NULL;
    const nw_json_t *doc = nw_settings_json(&error);
    if (!doc) return nw_invalid("%s", error);
    if (doc->type != NW_JSON_OBJECT) return nw_invalid("expected a table");
    for (size_t i = 0; i < doc->count; i++) {
        const char *k = doc->keys[i];
        if (strcmp(k, "labels") && strcmp(k, "annotations") && strcmp(k, "prefix") && strcmp(k, "overwrite")) {
            return nw_invalid("unknown field `%s`, expected one of `labels`, `annotations`, `prefix`, `overwrite`", k);
        }
    }
    const char *prefix = "POD_";
    const nw_json_t *v = nw_json_get(doc, "prefix");
    if (v) {
        if (v->type != NW_JSON_STRING) return nw_invalid("prefix: expected a string");
        prefix = v->string;
    }
    if ((v = nw_json_get(doc, "overwrite"))) {
        if (v->type != NW_JSON_BOOL) return nw_invalid("overwrite: expected true or false");
        s->overwrite = v->boolean;
    }
    if (*prefix && !valid_name(prefix)) return nw_invalid("prefix %s cannot start a variable name", quote(prefix));
    static const char *const WHAT[] = {"labels", "annotations"};
    size_t total = 0;
    for (int w = 0; w < 2; w++) {
        const nw_json_t *t = nw_json_get(doc, WHAT[w]);
        total += t ? t->count : 0;
    }
    s->mappings = calloc(total + 1, sizeof *s->mappings);
    for (int w = 0; w < 2; w++) {
        const nw_json_t *table = nw_json_get(doc, WHAT[w]);
        if (!table) continue;
        if (table->type != NW_JSON_OBJECT) return nw_invalid("%s: expected a table of strings", WHAT[w]);
        const char **keys = malloc((table->count + 1) * sizeof *keys);
        for (size_t i = 0; i < table->count; i++) {
            if (table->items[i].type != NW_JSON_STRING) return nw_invalid("%s: expected a table of strings", WHAT[w]);
            keys[i] = table->keys[i];
        }
        qsort(keys, table->count, sizeof *keys, by_key);
        for (size_t i = 0; i < table->count; i++) {
            const char *key = keys[i];
            if (!*key) return nw_invalid("%s: an empty key", WHAT[w]);
            const char *mapped = nw_json_get(table, key)->string;
            char *name = *mapped ? nw_format("%s", mapped) : sanitize(prefix, key);
            if (!valid_name(name)) {
                return nw_invalid("%s.%s: %s is not a variable name (letters, digits, _; not starting with a digit)",
                                  WHAT[w], quote(key), quote(name));
            }
            for (size_t m = 0; m < s->count; m++) {
                if (strcmp(s->mappings[m].name, name) == 0) {
                    return nw_invalid("%s and %s would both set %s", quote(key), quote(s->mappings[m].key), name);
                }
            }
            s->mappings[s->count++] = (mapping_t){w == 0, key, name};
        }
    }
    if (s->count == 0) return nw_invalid("no labels or annotations to map, so this policy would do nothing");
    return true;
}

bool policy_configure(const char *text, nw_events_t *events) {
    settings_t s;
    if (!parse_settings(&s)) return false;
    nw_subscribe(events, NW_CREATE_CONTAINER);
    return true;
}

bool policy_handle(nw_event_kind_t kind, nw_reply_t *reply) {
    settings_t s;
    if (!parse_settings(&s)) nw_panic("the settings changed after configure");
    const nw_container_meta_t *meta = nw_container_meta();
    char *container = nw_cstr(meta->name);
    nw_adjustment_t a = {0};
    for (size_t i = 0; i < s.count; i++) {
        const mapping_t *m = &s.mappings[i];
        /* Asked of the host one by one: only the labels mapped are copied. */
        nw_string_t key = nw_str(m->key), value;
        bool found = m->label ? nri_wasm_policy_event_pod_label(&key, &value)
                              : nri_wasm_policy_event_pod_annotation(&key, &value);
        if (!found) continue;
        if (memchr(value.ptr, 0, value.len)) {
            nw_log(NW_WARN, "%s: %s has a NUL byte; %s not set", container, m->key, m->name);
            continue;
        }
        if (!s.overwrite && nw_env_var(m->name)) {
            nw_log(NW_DEBUG, "%s: sets %s itself; left alone", container, m->name);
            continue;
        }
        nw_set_env(&a, m->name, nw_cstr(value));
    }
    if (!nw_adjustment_is_empty(&a)) *reply = nw_adjust(&a);
    return true;
}
