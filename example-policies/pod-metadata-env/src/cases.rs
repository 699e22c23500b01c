// The cases of `pod-metadata-env`, plain data: run natively by `tests.rs`
// and through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.

/// The policy's name in the chain.
pub const POLICY: &str = "60-pod-metadata-env";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{"labels": {"app": "APP_NAME", "tier": "", "app.kubernetes.io/version": ""},
    "annotations": {"example.com/owner": "TEAM"}}"#;

pub const CASES: &[Case] = &[
    Case {
        name: "the captured pod's app, tier and owner",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&["env APP_NAME=billing", "env POD_TIER=backend", "env TEAM=team-payments"]),
    },
    Case {
        name: "a name made from a key with dots and a slash",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodLabel("app.kubernetes.io/version", "1.4.2")],
        expect: Expect::Lines(&[
            "env APP_NAME=billing",
            "env POD_APP_KUBERNETES_IO_VERSION=1.4.2",
            "env POD_TIER=backend",
            "env TEAM=team-payments",
        ]),
    },
    Case {
        name: "a pod without the annotation",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::RemovePodAnnotation("example.com/owner")],
        expect: Expect::Lines(&["env APP_NAME=billing", "env POD_TIER=backend"]),
    },
    Case {
        name: "a variable the container sets is left alone",
        settings: r#"{"labels": {"app": "TZ", "tier": "TIER"}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&["env TIER=backend"]),
    },
    Case {
        name: "unless overwrite is on",
        settings: r#"{"labels": {"app": "TZ", "tier": "TIER"}, "overwrite": true}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&["env TIER=backend", "env TZ=billing"]),
    },
    Case {
        name: "no prefix",
        settings: r#"{"labels": {"component": ""}, "prefix": ""}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&["env COMPONENT=worker"]),
    },
    Case {
        name: "a name that is not a variable name",
        settings: r#"{"labels": {"app": "APP-NAME"}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: labels.\"app\": \"APP-NAME\" is not a variable name (letters, digits, _; not starting \
             with a digit)",
        ),
    },
    Case {
        name: "two keys for one name",
        settings: r#"{"labels": {"team": "TEAM"}, "annotations": {"example.com/owner": "TEAM"}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: \"example.com/owner\" and \"team\" would both set TEAM"),
    },
    Case {
        name: "nothing to map",
        settings: "",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: no labels or annotations to map, so this policy would do nothing"),
    },
];
