/*
 * The policy natively (guest-sdk/c/test.sh example-policies/c/allowed-images):
 * the fixture is containerd 2.3.4's CreateContainer, whose CRI annotation
 * names a pinned image of an allowed registry.
 */
#include <string.h>

#include "nwtest.h"

#define SETTINGS "{\"registries\": [\"registry.example.com\", \"ghcr.io/example\"]}"
#define IMAGE "io.kubernetes.cri.image-name"
#define A64 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define B64 "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define PINNED "registry.example.com/billing/worker@sha256:" A64

static nwt_event *event(void) { return nwt_fixture("fixtures/create-container.json"); }

NWT_TEST(a_pinned_image_of_an_allowed_registry_runs) { NWT_EXPECT_LINES(nwt_run(SETTINGS, event()), NULL); }

NWT_TEST(an_image_of_another_registry_is_denied) {
    nwt_event *e = nwt_with_container_annotation(event(), IMAGE, "docker.io/library/nginx:1.27");
    NWT_EXPECT_DENIAL(nwt_run(SETTINGS, e),
                      "container worker: image docker.io/library/nginx:1.27 is not from an allowed registry "
                      "(allowed: registry.example.com, ghcr.io/example)");
}

NWT_TEST(an_image_by_tag_is_denied_unless_digests_are_not_required) {
    nwt_event *tagged = nwt_with_container_annotation(event(), IMAGE, "registry.example.com/billing/worker:1.4.2");
    NWT_EXPECT_DENIAL(nwt_run(SETTINGS, tagged),
                      "container worker: image registry.example.com/billing/worker:1.4.2 is not pinned by digest "
                      "(use registry.example.com/billing/worker@sha256:\u2026)");
    NWT_EXPECT_LINES(nwt_run("{\"registries\": [\"registry.example.com\"], \"require-digest\": false}", tagged), NULL);
}

NWT_TEST(the_image_field_wins_over_the_annotation) {
    nwt_event *e = event();
    nw_container_t *c = nwt_container(e);
    c->image.is_some = true;
    c->image.val.name = nw_str("quay.io/other/app@sha256:" A64);
    c->image.val.digest = nw_str("");
    nwt_outcome out = nwt_run(SETTINGS, e);
    NWT_ASSERT(out.result == NWT_DENIED && strstr(out.reason, "image quay.io/other/app@sha256:"));
    c->image.val.name = nw_str(PINNED);
    c->image.val.digest = nw_str("sha256:" B64);
    NWT_EXPECT_DENIAL(nwt_run(SETTINGS, e), "container worker: image " PINNED
                                            ": the runtime resolved it to sha256:" B64 ", not the pinned digest");
}

NWT_TEST(the_exception_annotation_lets_a_pod_through_and_is_logged) {
    nwt_event *e = nwt_with_container_annotation(event(), IMAGE, "docker.io/library/nginx:1.27");
    e = nwt_with_pod_annotation(e, "images.example.com/exception", "INC-4711");
    nwt_outcome out = nwt_run(SETTINGS, e);
    NWT_EXPECT_LINES(out, NULL);
    NWT_ASSERT(strstr(out.logs, "worker: allowed by exception (INC-4711)"));
    nwt_event *empty = nwt_with_pod_annotation(e, "images.example.com/exception", "");
    out = nwt_run(SETTINGS, empty);
    NWT_ASSERT(out.result == NWT_DENIED && strstr(out.reason, "is not from an allowed registry"));
}

NWT_TEST(settings_are_checked_when_the_policy_loads) {
    nwt_outcome empty = nwt_configure("{\"registries\": []}");
    NWT_ASSERT(empty.result == NWT_INVALID_SETTINGS);
    NWT_EXPECT_STR(empty.reason, "invalid settings: registries is empty, so every image would be refused");
    nwt_outcome url = nwt_configure("{\"registries\": [\"https://registry.example.com\"]}");
    NWT_EXPECT_STR(url.reason, "invalid settings: registries: \"https://registry.example.com\" is not a registry "
                               "host or host/path (e.g. ghcr.io/example)");
    NWT_ASSERT(nwt_configure(SETTINGS).result == NWT_REPLIED);
}
