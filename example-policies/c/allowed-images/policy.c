/*
 * `allowed-images`, in C: a container runs only an image from an allowed
 * registry, pinned by digest, unless its pod carries the exception
 * annotation. The image is NRI 0.12.2's field when the runtime sends it,
 * else the CRI annotation io.kubernetes.cri.image-name (NRI 0.12.0, e.g.
 * containerd 2.3.4). The same policy as example-policies/allowed-images
 * (Rust), held to the same cases; its README explains the rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nriwasm.h"

#define CRI_IMAGE_NAME "io.kubernetes.cri.image-name"

typedef struct {
    const char **registries;
    size_t count;
    bool require_digest;
    const char *exception;
} settings_t;

/* A string in double quotes, escaped, as the Rust version writes it. */
static char *quote(const char *s) {
    size_t n = 2;
    for (const char *p = s; *p; p++) n += (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? 8 : 1;
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

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* ASCII case-insensitive equality of `a` and the first `n` bytes of `b`. */
static bool eq_ignore_case_n(const char *a, const char *b, size_t n) {
    if (strlen(a) != n) return false;
    for (size_t i = 0; i < n; i++) {
        if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
}

static bool eq_ignore_case(const char *a, const char *b) { return eq_ignore_case_n(a, b, strlen(b)); }

static bool parse_settings(settings_t *s) {
    memset(s, 0, sizeof *s);
    char *error = NULL;
    const nw_json_t *doc = nw_settings_json(&error);
    if (!doc) return nw_invalid("%s", error);
    if (doc->type != NW_JSON_OBJECT) return nw_invalid("expected a table");
    for (size_t i = 0; i < doc->count; i++) {
        const char *k = doc->keys[i];
        if (strcmp(k, "registries") && strcmp(k, "require-digest") && strcmp(k, "exception-annotation")) {
            return nw_invalid("unknown field `%s`, expected one of `registries`, `require-digest`, "
                              "`exception-annotation`",
                              k);
        }
    }
    const nw_json_t *list = nw_json_get(doc, "registries");
    if (!list) return nw_invalid("missing field `registries`");
    if (list->type != NW_JSON_ARRAY) return nw_invalid("registries: expected a list of strings");
    s->registries = calloc(list->count + 1, sizeof *s->registries);
    for (size_t i = 0; i < list->count; i++) {
        if (list->items[i].type != NW_JSON_STRING) return nw_invalid("registries: expected a list of strings");
        s->registries[s->count++] = list->items[i].string;
    }
    s->require_digest = true;
    const nw_json_t *v = nw_json_get(doc, "require-digest");
    if (v) {
        if (v->type != NW_JSON_BOOL) return nw_invalid("require-digest: expected true or false");
        s->require_digest = v->boolean;
    }
    s->exception = "images.example.com/exception";
    if ((v = nw_json_get(doc, "exception-annotation"))) {
        if (v->type != NW_JSON_STRING) return nw_invalid("exception-annotation: expected a string");
        s->exception = v->string;
    }
    if (s->count == 0) return nw_invalid("registries is empty, so every image would be refused");
    for (size_t i = 0; i < s->count; i++) {
        const char *r = s->registries[i];
        size_t n = strlen(r);
        if (n == 0 || r[n - 1] == '/' || strstr(r, "://") || strpbrk(r, "@ ")) {
            return nw_invalid("registries: %s is not a registry host or host/path (e.g. ghcr.io/example)", quote(r));
        }
    }
    if (!*s->exception) return nw_invalid("exception-annotation is empty");
    return true;
}

/* A reference split into registry host, repository path and digest (NULL
 * when it names none), each a copy. */
typedef struct {
    char *host;
    char *path;
    char *digest;
} reference_t;

/* Reads a reference as the runtimes do: the first component is a registry
 * host if it has a `.` or a `:` or is `localhost`; otherwise the image is
 * Docker Hub's. */
static reference_t parse_reference(const char *name) {
    reference_t r = {0};
    char *rest = nw_format("%s", name);
    char *at = strchr(rest, '@');
    if (at) {
        *at = 0;
        r.digest = at + 1;
    }
    char *slash = strchr(rest, '/');
    r.host = "docker.io";
    r.path = rest;
    if (slash) {
        *slash = 0;
        if (strpbrk(rest, ".:") || strcmp(rest, "localhost") == 0) {
            r.host = rest;
            r.path = slash + 1;
        } else {
            *slash = '/';
        }
    }
    /* The tag is not part of the path. */
    char *colon = strrchr(r.path, ':');
    if (colon && !strchr(colon + 1, '/')) *colon = 0;
    return r;
}

static bool valid_digest(const char *d) {
    if (strncmp(d, "sha256:", 7) != 0) return false;
    const char *hex = d + 7;
    if (strlen(hex) != 64) return false;
    for (const char *p = hex; *p; p++) {
        if (!strchr("0123456789abcdefABCDEF", *p)) return false;
    }
    return true;
}

/* Whether `entry` (a host, or host/path prefix) allows `r`. */
static bool allows(const char *entry, const reference_t *r) {
    const char *slash = strchr(entry, '/');
    if (!slash) return eq_ignore_case(r->host, entry);
    if (!eq_ignore_case_n(r->host, entry, (size_t)(slash - entry))) return false;
    const char *prefix = slash + 1;
    size_t n = strlen(prefix);
    if (strncmp(r->path, prefix, n) != 0) return false;
    return r->path[n] == 0 || r->path[n] == '/';
}

/* Why the image is refused, or NULL. */
static char *judge(const settings_t *s, const char *name, const char *resolved) {
    reference_t r = parse_reference(name);
    bool allowed = false;
    for (size_t i = 0; i < s->count && !allowed; i++) allowed = allows(s->registries[i], &r);
    if (!allowed) {
        size_t n = 1;
        for (size_t i = 0; i < s->count; i++) n += strlen(s->registries[i]) + 2;
        char *joined = calloc(n, 1);
        for (size_t i = 0; i < s->count; i++) {
            if (i) strcat(joined, ", ");
            strcat(joined, s->registries[i]);
        }
        return nw_format("image %s is not from an allowed registry (allowed: %s)", name, joined);
    }
    if (r.digest && !valid_digest(r.digest)) return nw_format("image %s: %s is not a sha256 digest", name, quote(r.digest));
    if (!r.digest && s->require_digest) {
        return nw_format("image %s is not pinned by digest (use %s/%s@sha256:\u2026)", name, r.host, r.path);
    }
    if (r.digest && resolved && !eq_ignore_case(r.digest, resolved)) {
        return nw_format("image %s: the runtime resolved it to %s, not the pinned digest", name, resolved);
    }
    return NULL;
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
    const nw_container_t *c = nw_container();
    if (!c) nw_panic("a CreateContainer without a container");
    char *container = nw_cstr(c->name);
    char *name = NULL, *resolved = NULL;
    if (c->image.is_some && c->image.val.name.len > 0) {
        name = nw_cstr(c->image.val.name);
        if (c->image.val.digest.len > 0) resolved = nw_cstr(c->image.val.digest);
    } else {
        name = nw_container_annotation(CRI_IMAGE_NAME);
        if (!name || !*name) return nw_deny("container %s: the runtime names no image, so it cannot be checked", container);
    }
    char *why = judge(&s, name, resolved);
    if (!why) return true;
    char *reason = nw_pod_annotation(s.exception);
    if (reason && *reason) {
        nw_log(NW_INFO, "%s: allowed by exception (%s): %s", container, reason, why);
        return true;
    }
    return nw_deny("container %s: %s", container, why);
}
