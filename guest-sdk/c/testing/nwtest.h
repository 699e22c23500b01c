/*
 * Native tests of a C policy: the handler on this machine, no WebAssembly
 * build (guest-sdk/c/test.sh compiles the policy, the SDK and this test
 * host for the host machine and runs the tests).
 *
 *   #include "nwtest.h"
 *
 *   NWT_TEST(the_label_becomes_a_variable) {
 *       nwt_event *e = nwt_fixture("fixtures/create-container.json");
 *       nwt_outcome out = nwt_run("", e);
 *       NWT_EXPECT_LINES(out, "env TEAM=payments");
 *   }
 *
 * Every call runs in a process of its own (forked), as the host runs every
 * call in a fresh instance: the SDK's and the policy's statics start anew,
 * and a crash (nw_panic, assert, a bad pointer) is the call's failure, with
 * what it wrote to stderr. The world's imported functions answer from the
 * event (read from NRI's JSON, the fixtures `nri-wasm eval --input` reads),
 * the settings, an empty node view and an in-memory state; the reply is
 * described in the lines `eval` prints.
 */
#ifndef NWTEST_H
#define NWTEST_H

#include <stdbool.h>
#include <stddef.h>

#include "nriwasm.h"

/* An event as the host shows it to a policy. */
typedef struct nwt_event nwt_event;

/* The event of a file in NRI's JSON ({"event": "<RPC name>", "request":
 * {...}}); a file that is not one fails the test, naming the field. */
nwt_event *nwt_fixture(const char *path);
/* The same from text; NULL and *error if it is not an event. */
nwt_event *nwt_event_from_json(const char *text, char **error);
/* The event's pod and container, to change before a run (NULL when absent). */
nw_pod_t *nwt_pod(nwt_event *e);
nw_container_t *nwt_container(nwt_event *e);
/* Sets or removes (value NULL) a pod label of a copy of the event. */
nwt_event *nwt_with_pod_label(const nwt_event *e, const char *key, const char *value);
nwt_event *nwt_with_pod_annotation(const nwt_event *e, const char *key, const char *value);
nwt_event *nwt_with_container_annotation(const nwt_event *e, const char *key, const char *value);

typedef enum { NWT_REPLIED, NWT_DENIED, NWT_FAILED, NWT_INVALID_SETTINGS } nwt_result;

typedef struct {
    nwt_result result;
    bool called;   /* the policy subscribed to the event's kind */
    char **lines;  /* the reply as `eval` prints it, sorted */
    size_t count;
    char *reason;  /* a denial's, or why the settings are invalid */
    char *failure; /* what a failed call wrote to stderr and logged */
    char *logs;    /* "level: message" lines, one per line */
} nwt_outcome;

/* Runs configure with the settings, then the handler of the event's kind if
 * the policy subscribed to it, in a process of its own. */
nwt_outcome nwt_run(const char *settings, const nwt_event *e);
/* Runs configure only: NWT_REPLIED (the settings are fine) or
 * NWT_INVALID_SETTINGS with the reason. */
nwt_outcome nwt_configure(const char *settings);

/* ---- tests ---- */

typedef void (*nwt_test_fn)(void);
void nwt_register(const char *name, nwt_test_fn fn);
/* Fails the test in progress: prints where and why, and ends it. */
_Noreturn void nwt_fail(const char *file, int line, const char *format, ...) __attribute__((format(printf, 3, 4)));
/* Whether out replied exactly these lines (a NULL-terminated list); fails the test otherwise. */
void nwt_expect_lines(const char *file, int line, nwt_outcome out, const char *const *want);
void nwt_expect_denial(const char *file, int line, nwt_outcome out, const char *want);

#define NWT_TEST(name)                                                            \
    static void name(void);                                                       \
    __attribute__((constructor)) static void nwt_register_##name(void) {          \
        nwt_register(#name, name);                                                \
    }                                                                             \
    static void name(void)

/* NWT_EXPECT_LINES(out, "env A=1", "env B=2"); NWT_EXPECT_LINES(out, NULL) for none. */
#define NWT_EXPECT_LINES(out, ...) \
    nwt_expect_lines(__FILE__, __LINE__, (out), (const char *const[]){__VA_ARGS__, NULL})
#define NWT_EXPECT_DENIAL(out, reason) nwt_expect_denial(__FILE__, __LINE__, (out), (reason))
#define NWT_ASSERT(cond)                                          \
    do {                                                          \
        if (!(cond)) nwt_fail(__FILE__, __LINE__, "%s", #cond);   \
    } while (0)
#define NWT_EXPECT_STR(got, want)                                                                      \
    do {                                                                                               \
        const char *nwt_g = (got), *nwt_w = (want);                                                    \
        if (!nwt_g || strcmp(nwt_g, nwt_w) != 0)                                                       \
            nwt_fail(__FILE__, __LINE__, "got \"%s\", want \"%s\"", nwt_g ? nwt_g : "(null)", nwt_w); \
    } while (0)

#endif
