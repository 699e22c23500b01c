/*
 * `{{name}}`: an nri-wasm policy.
 *
 * As generated (make it your own): every container of a pod labelled
 * `team=<value>` gets the environment variable `TEAM=<value>`; with
 * `"required": true`, a container whose pod has no such label is refused.
 *
 * Settings are JSON (the `[settings]` table of the policy file an operator
 * installs as `NN-{{name}}.toml`); every key is optional:
 *
 *   {"label": "team", "env": "TEAM", "required": false}
 *
 * The host calls the policy in a fresh instance for every event: nothing
 * kept in memory survives to the next call. policy_configure runs once,
 * when the host loads the policy, and refuses settings it cannot use;
 * policy_handle reads the settings again.
 */
#include <ctype.h>
#include <string.h>

#include "nriwasm.h"

typedef struct {
    const char *label;
    const char *env;
    bool required;
} settings_t;

static bool valid_name(const char *name) {
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_')) return false;
    for (const char *p = name; *p; p++) {
        if (!(isalnum((unsigned char)*p) || *p == '_')) return false;
    }
    return true;
}

/* Reads and checks the settings; false with the reason set (nw_invalid). */
static bool parse_settings(settings_t *s) {
    *s = (settings_t){"team", "TEAM", false};
    char *error = NULL;
    const nw_json_t *doc = nw_settings_json(&error);
    if (!doc) return nw_invalid("%s", error);
    if (doc->type != NW_JSON_OBJECT) return nw_invalid("expected a table");
    for (size_t i = 0; i < doc->count; i++) {
        const char *key = doc->keys[i];
        const nw_json_t *v = &doc->items[i];
        if (strcmp(key, "label") == 0 || strcmp(key, "env") == 0) {
            if (v->type != NW_JSON_STRING) return nw_invalid("%s: expected a string", key);
            *(key[0] == 'l' ? &s->label : &s->env) = v->string;
        } else if (strcmp(key, "required") == 0) {
            if (v->type != NW_JSON_BOOL) return nw_invalid("required: expected true or false");
            s->required = v->boolean;
        } else {
            return nw_invalid("unknown field `%s`, expected one of `label`, `env`, `required`", key);
        }
    }
    if (!*s->label) return nw_invalid("label is empty");
    if (!valid_name(s->env)) return nw_invalid("env \"%s\" is not a variable name", s->env);
    return true;
}

bool policy_configure(const char *text, nw_events_t *events) {
    settings_t s;
    if (!parse_settings(&s)) return false;
    /* The events the host sends this policy; every other one gets the
     * empty reply. */
    nw_subscribe(events, NW_CREATE_CONTAINER);
    return true;
}

bool policy_handle(nw_event_kind_t kind, nw_reply_t *reply) {
    settings_t s;
    if (!parse_settings(&s)) nw_panic("the settings changed after configure");
    /* One label asked of the host, not the whole pod. */
    char *value = nw_pod_label(s.label);
    if (value) {
        nw_adjustment_t a = {0};
        nw_set_env(&a, s.env, value);
        *reply = nw_adjust(&a);
        return true;
    }
    if (s.required) {
        const nw_pod_meta_t *pod = nw_pod_meta();
        return nw_deny("pod %s/%s has no label %s", nw_cstr(pod->namespace_), nw_cstr(pod->name), s.label);
    }
    return true;
}
