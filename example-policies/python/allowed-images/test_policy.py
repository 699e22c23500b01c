"""The policy natively (`guest-sdk/python/test.sh example-policies/python/allowed-images`):
the fixture is containerd 2.3.4's CreateContainer, whose CRI annotation
names a pinned image of an allowed registry."""

import unittest

import policy  # noqa: F401  (registers the policy's handlers)
from nriwasm import types
from nriwasm.testing import TestEvent, TestHost

SETTINGS = {"registries": ["registry.example.com", "ghcr.io/example"]}
IMAGE = "io.kubernetes.cri.image-name"
PINNED = "registry.example.com/billing/worker@sha256:" + "a" * 64


def event() -> TestEvent:
    return TestEvent.fixture("fixtures/create-container.json")


def host() -> TestHost:
    return TestHost().with_settings(SETTINGS)


class AllowedImagesTests(unittest.TestCase):
    def test_a_pinned_image_of_an_allowed_registry_runs(self) -> None:
        self.assertEqual(host().run(event()).lines(), [])

    def test_an_image_of_another_registry_is_denied(self) -> None:
        out = host().run(event().with_container_annotation(IMAGE, "docker.io/library/nginx:1.27"))
        self.assertEqual(
            out.denial(),
            "container worker: image docker.io/library/nginx:1.27 is not from an allowed registry "
            "(allowed: registry.example.com, ghcr.io/example)",
        )

    def test_an_image_by_tag_is_denied_unless_digests_are_not_required(self) -> None:
        tagged = event().with_container_annotation(IMAGE, "registry.example.com/billing/worker:1.4.2")
        self.assertEqual(
            host().run(tagged).denial(),
            "container worker: image registry.example.com/billing/worker:1.4.2 is not pinned by digest "
            "(use registry.example.com/billing/worker@sha256:…)",
        )
        lenient = TestHost().with_settings({**SETTINGS, "require-digest": False})
        self.assertEqual(lenient.run(tagged).lines(), [])

    def test_the_image_field_wins_over_the_annotation(self) -> None:
        e = event().clone()
        e.container.image = types.Image("quay.io/other/app@sha256:" + "a" * 64, "", "")
        self.assertRegex(host().run(e).denial(), r"^container worker: image quay\.io/other/app@sha256:a+ is not from an allowed registry")
        e.container.image = types.Image(PINNED, "sha256:" + "b" * 64, "")
        self.assertRegex(host().run(e).denial(), r"the runtime resolved it to sha256:b+, not the pinned digest$")

    def test_the_exception_annotation_lets_a_pod_through_and_is_logged(self) -> None:
        e = event().with_container_annotation(IMAGE, "docker.io/library/nginx:1.27").with_pod_annotation(
            "images.example.com/exception", "INC-4711"
        )
        out = host().run(e)
        self.assertEqual(out.lines(), [])
        self.assertTrue(out.logged("worker: allowed by exception (INC-4711)"), out.logs)
        empty = e.with_pod_annotation("images.example.com/exception", "")
        self.assertIn("is not from an allowed registry", host().run(empty).denial())

    def test_settings_are_checked_when_the_policy_loads(self) -> None:
        empty = TestHost().with_settings({"registries": []}).configure()
        self.assertEqual(empty, "invalid settings: registries is empty, so every image would be refused")
        url = TestHost().with_settings({"registries": ["https://registry.example.com"]}).configure()
        self.assertEqual(
            url,
            'invalid settings: registries: "https://registry.example.com" is not a registry host or host/path '
            "(e.g. ghcr.io/example)",
        )
        self.assertEqual(host().configure(), [types.EventKind.CREATE_CONTAINER])


if __name__ == "__main__":
    unittest.main()
