/* Fails on purpose, as the settings text says (see ../README.md). */
#include <assert.h>
#include <string.h>

#include "nriwasm.h"

/* The recursion is the point. */
#pragma clang diagnostic ignored "-Winfinite-recursion"

static volatile int depth;

static int down(int n) {
    volatile char frame[256];
    frame[0] = (char)n;
    depth = n;
    return down(n + 1) + frame[0];
}

bool policy_configure(const char *settings, nw_events_t *events) {
    nw_subscribe(events, NW_CREATE_CONTAINER);
    return true;
}

bool policy_handle(nw_event_kind_t kind, nw_reply_t *reply) {
    const char *mode = nw_settings();
    if (strcmp(mode, "exception") == 0) {
        assert(!"fault injected: exception");
    } else if (strcmp(mode, "panic") == 0) {
        nw_panic("fault injected: %s", mode);
    } else if (strcmp(mode, "trap") == 0) {
        __builtin_trap();
    } else if (strcmp(mode, "recursion") == 0) {
        return down(0) != 0;
    } else if (strcmp(mode, "loop") == 0) {
        for (volatile int i = 0;; i++) {
        }
    } else if (strcmp(mode, "deny") == 0) {
        return nw_deny("fault injected: denial");
    }
    return true;
}
