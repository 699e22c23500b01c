/* The shape of the world's records for the C test host: what
 * schema.c (generated) describes and nwtest.c walks. */
#ifndef NWTEST_SCHEMA_H
#define NWTEST_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

typedef enum { NWT_STRING, NWT_BOOL, NWT_INT, NWT_ENUM, NWT_RECORD, NWT_OPTION, NWT_LIST } nwt_kind;

typedef struct nwt_type nwt_type;

typedef struct {
    const char *name; /* the WIT name, e.g. "pod-sandbox-id" */
    size_t offset;
    const nwt_type *type;
} nwt_field;

struct nwt_type {
    nwt_kind kind;
    size_t size;      /* bytes of a value */
    bool is_signed;   /* integers */
    const char *name; /* named types */
    const char *const *cases; /* enums: case names, in order */
    const nwt_field *fields;  /* records */
    size_t count;             /* cases or fields */
    const nwt_type *inner;    /* options and lists: the element's type */
    size_t val_offset;        /* options: where the value is (is_some at 0) */
};

typedef struct {
    const char *kind;       /* "create-container" */
    const nwt_type *record; /* its payload, NULL for synchronize */
} nwt_case;

extern const nwt_type nwt_string, nwt_bool, nwt_u8, nwt_u16, nwt_u32, nwt_u64, nwt_s8, nwt_s16, nwt_s32, nwt_s64;
extern const nwt_case nwt_event_cases[];
extern const size_t nwt_event_case_count;

#endif
