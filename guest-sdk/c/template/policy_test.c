/*
 * The handlers, natively: `./test.sh` on this machine, no WebAssembly
 * build. The test host runs a call as the real one does (configure with
 * the settings, then the handler, in a fresh process), on the same fixture
 * `nri-wasm eval` reads, and describes the reply in the lines `eval` prints.
 */
#include <string.h>

#include "nwtest.h"

/* A CreateContainer as containerd sends it, in NRI's protobuf JSON
 * (`nri-wasm eval --input` reads it too). */
static nwt_event *event(void) { return nwt_fixture("fixtures/create-container.json"); }

NWT_TEST(the_pod_label_becomes_an_environment_variable) {
    NWT_EXPECT_LINES(nwt_run("", event()), "env TEAM=payments");
    NWT_EXPECT_LINES(nwt_run("{\"label\": \"app\", \"env\": \"APP\"}", event()), "env APP=billing");
}

NWT_TEST(a_pod_without_the_label_is_refused_only_when_required) {
    nwt_event *unlabelled = nwt_with_pod_label(event(), "team", NULL);
    NWT_EXPECT_LINES(nwt_run("", unlabelled), NULL);
    NWT_EXPECT_DENIAL(nwt_run("{\"required\": true}", unlabelled), "pod payments/billing-worker-7f9c5 has no label team");
}

NWT_TEST(settings_are_checked_when_the_policy_loads) {
    nwt_outcome bad = nwt_configure("{\"env\": \"NOT A NAME\"}");
    NWT_ASSERT(bad.result == NWT_INVALID_SETTINGS);
    NWT_EXPECT_STR(bad.reason, "invalid settings: env \"NOT A NAME\" is not a variable name");
    nwt_outcome typo = nwt_configure("{\"lable\": \"team\"}");
    NWT_ASSERT(typo.result == NWT_INVALID_SETTINGS && strstr(typo.reason, "unknown field `lable`"));
    NWT_ASSERT(nwt_configure("").result == NWT_REPLIED);
}
