/* A small JSON reader for settings (an operator's [settings] table reaches
 * a policy as JSON): the whole text into a tree of nw_json_t, objects
 * keeping their keys in order. Strict RFC 8259, nesting at most 64 deep. */
#include "nriwasm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p, *start;
    char *error;
    int depth;
} reader_t;

static void *json_alloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        nw_panic("out of memory");
    }
    return p;
}

static bool fail(reader_t *r, const char *what) {
    if (!r->error) {
        r->error = nw_format("%s at byte %zu", what, (size_t)(r->p - r->start));
    }
    return false;
}

static void skip_space(reader_t *r) {
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r') {
        r->p++;
    }
}

static bool parse_value(reader_t *r, nw_json_t *out);

static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex4(reader_t *r, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex(r->p[i]);
        if (h < 0) {
            return fail(r, "bad \\u escape");
        }
        v = v * 16 + (unsigned)h;
    }
    r->p += 4;
    *out = v;
    return true;
}

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string (after its opening quote): NUL-terminated, with its length
 * (it may hold NUL bytes written as \u0000). */
static bool parse_string(reader_t *r, char **out, size_t *len) {
    const char *s = r->p;
    size_t cap = 0;
    while (s[cap] && s[cap] != '"') {
        cap += s[cap] == '\\' && s[cap + 1] ? 2 : 1;
    }
    char *buf = json_alloc(cap + 1);
    size_t n = 0;
    for (;;) {
        unsigned char c = (unsigned char)*r->p;
        if (c == 0) {
            return fail(r, "unterminated string");
        }
        if (c < 0x20) {
            return fail(r, "control character in string");
        }
        r->p++;
        if (c == '"') {
            break;
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            continue;
        }
        char e = *r->p++;
        switch (e) {
            case '"': buf[n++] = '"'; break;
            case '\\': buf[n++] = '\\'; break;
            case '/': buf[n++] = '/'; break;
            case 'b': buf[n++] = '\b'; break;
            case 'f': buf[n++] = '\f'; break;
            case 'n': buf[n++] = '\n'; break;
            case 'r': buf[n++] = '\r'; break;
            case 't': buf[n++] = '\t'; break;
            case 'u': {
                unsigned cp;
                if (!read_hex4(r, &cp)) {
                    return false;
                }
                if (cp >= 0xD800 && cp < 0xDC00) {
                    unsigned low;
                    if (r->p[0] != '\\' || r->p[1] != 'u') {
                        return fail(r, "lone surrogate");
                    }
                    r->p += 2;
                    if (!read_hex4(r, &low) || low < 0xDC00 || low >= 0xE000) {
                        return fail(r, "lone surrogate");
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    return fail(r, "lone surrogate");
                }
                /* An escape takes 6 or 12 bytes of input, its UTF-8 at most 4. */
                n += put_utf8(buf + n, cp);
                break;
            }
            default:
                return fail(r, "bad escape");
        }
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return true;
}

static bool parse_number(reader_t *r, nw_json_t *out) {
    const char *s = r->p;
    const char *p = s;
    if (*p == '-') p++;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9') p++;
    } else {
        return fail(r, "bad number");
    }
    bool integer = true;
    if (*p == '.') {
        integer = false;
        p++;
        if (!(*p >= '0' && *p <= '9')) return fail(r, "bad number");
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        integer = false;
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return fail(r, "bad number");
        while (*p >= '0' && *p <= '9') p++;
    }
    out->type = NW_JSON_NUMBER;
    out->number = strtod(s, NULL);
    if (integer) {
        errno = 0;
        long long v = strtoll(s, NULL, 10);
        out->is_integer = errno == 0;
        out->integer = (int64_t)v;
    }
    r->p = p;
    return true;
}

static bool literal(reader_t *r, const char *word) {
    size_t n = strlen(word);
    if (strncmp(r->p, word, n) != 0) {
        return fail(r, "unexpected character");
    }
    r->p += n;
    return true;
}

static bool parse_value(reader_t *r, nw_json_t *out) {
    skip_space(r);
    if (++r->depth > 64) {
        return fail(r, "nested too deep");
    }
    bool ok = true;
    char c = *r->p;
    if (c == '{') {
        r->p++;
        out->type = NW_JSON_OBJECT;
        size_t cap = 0;
        skip_space(r);
        if (*r->p == '}') {
            r->p++;
        } else {
            for (;;) {
                skip_space(r);
                if (*r->p != '"') {
                    ok = fail(r, "expected a key");
                    break;
                }
                r->p++;
                char *key;
                size_t key_len;
                if (!(ok = parse_string(r, &key, &key_len))) break;
                skip_space(r);
                if (*r->p != ':') {
                    ok = fail(r, "expected ':'");
                    break;
                }
                r->p++;
                if (out->count == cap) {
                    cap = cap ? cap * 2 : 4;
                    out->keys = realloc(out->keys, cap * sizeof *out->keys);
                    out->items = realloc(out->items, cap * sizeof *out->items);
                    if (!out->keys || !out->items) nw_panic("out of memory");
                }
                memset(&out->items[out->count], 0, sizeof *out->items);
                out->keys[out->count] = key;
                if (!(ok = parse_value(r, &out->items[out->count]))) break;
                out->count++;
                skip_space(r);
                if (*r->p == ',') {
                    r->p++;
                    continue;
                }
                if (*r->p == '}') {
                    r->p++;
                    break;
                }
                ok = fail(r, "expected ',' or '}'");
                break;
            }
        }
    } else if (c == '[') {
        r->p++;
        out->type = NW_JSON_ARRAY;
        size_t cap = 0;
        skip_space(r);
        if (*r->p == ']') {
            r->p++;
        } else {
            for (;;) {
                if (out->count == cap) {
                    cap = cap ? cap * 2 : 4;
                    out->items = realloc(out->items, cap * sizeof *out->items);
                    if (!out->items) nw_panic("out of memory");
                }
                memset(&out->items[out->count], 0, sizeof *out->items);
                if (!(ok = parse_value(r, &out->items[out->count]))) break;
                out->count++;
                skip_space(r);
                if (*r->p == ',') {
                    r->p++;
                    continue;
                }
                if (*r->p == ']') {
                    r->p++;
                    break;
                }
                ok = fail(r, "expected ',' or ']'");
                break;
            }
        }
    } else if (c == '"') {
        r->p++;
        out->type = NW_JSON_STRING;
        ok = parse_string(r, &out->string, &out->len);
    } else if (c == 't') {
        out->type = NW_JSON_BOOL;
        out->boolean = true;
        ok = literal(r, "true");
    } else if (c == 'f') {
        out->type = NW_JSON_BOOL;
        ok = literal(r, "false");
    } else if (c == 'n') {
        out->type = NW_JSON_NULL;
        ok = literal(r, "null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        ok = parse_number(r, out);
    } else {
        ok = fail(r, c ? "unexpected character" : "unexpected end of text");
    }
    r->depth--;
    return ok;
}

nw_json_t *nw_json_parse(const char *text, char **error) {
    reader_t r = {text, text, NULL, 0};
    nw_json_t *root = json_alloc(sizeof *root);
    if (parse_value(&r, root)) {
        skip_space(&r);
        if (*r.p == 0) {
            return root;
        }
        fail(&r, "text after the value");
    }
    if (error) {
        *error = r.error;
    }
    return NULL;
}

const nw_json_t *nw_json_get(const nw_json_t *object, const char *key) {
    if (!object || object->type != NW_JSON_OBJECT) {
        return NULL;
    }
    /* The last of duplicate keys wins, as in most JSON readers. */
    for (size_t i = object->count; i-- > 0;) {
        if (strcmp(object->keys[i], key) == 0) {
            return &object->items[i];
        }
    }
    return NULL;
}

const nw_json_t *nw_settings_json(char **error) {
    static nw_json_t empty = {.type = NW_JSON_OBJECT};
    const char *text = nw_settings();
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p == 0) {
        return &empty;
    }
    return nw_json_parse(text, error);
}
