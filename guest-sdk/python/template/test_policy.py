"""The handlers, natively: `./test.sh` on this machine, no WebAssembly
build. The test host runs a call as the real one does (`configure` with the
settings, then the handler), on the same fixture `nri-wasm eval` reads, and
describes the reply in the lines `eval` prints."""

import unittest

import policy  # noqa: F401  (registers the policy's handlers)
from nriwasm import types
from nriwasm.testing import TestEvent, TestHost


def event() -> TestEvent:
    """A CreateContainer as containerd sends it, in NRI's protobuf JSON (`eval --input` reads it too)."""
    return TestEvent.fixture("fixtures/create-container.json")


class PolicyTests(unittest.TestCase):
    def test_the_pod_label_becomes_an_environment_variable(self) -> None:
        self.assertEqual(TestHost().run(event()).lines(), ["env TEAM=payments"])
        out = TestHost().with_settings({"label": "app", "env": "APP"}).run(event())
        self.assertEqual(out.lines(), ["env APP=billing"])

    def test_a_pod_without_the_label_is_refused_only_when_required(self) -> None:
        unlabelled = event().without_pod_label("team")
        self.assertEqual(TestHost().run(unlabelled).lines(), [])
        out = TestHost().with_settings({"required": True}).run(unlabelled)
        self.assertEqual(out.denial(), "pod payments/billing-worker-7f9c5 has no label team")

    def test_settings_are_checked_when_the_policy_loads(self) -> None:
        bad = TestHost().with_settings({"env": "NOT A NAME"}).configure()
        self.assertEqual(bad, 'invalid settings: env "NOT A NAME" is not a variable name')
        typo = TestHost().with_settings({"lable": "team"}).configure()
        self.assertIn("unknown field `lable`", typo)
        self.assertEqual(TestHost().configure(), [types.EventKind.CREATE_CONTAINER])


if __name__ == "__main__":
    unittest.main()
