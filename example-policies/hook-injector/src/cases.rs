// The cases of `hook-injector`, plain data: run natively by `tests.rs` and
// through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.

/// The policy's name in the chain.
pub const POLICY: &str = "30-hook-injector";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{"hooks": [
    {"name": "audit", "stage": "prestart", "path": "/usr/local/bin/audit-hook",
     "args": ["audit-hook", "--event", "prestart"], "env": {"LOG_LEVEL": "info", "AUDIT_DIR": "/var/log/audit"},
     "timeout": 5, "namespaces": ["payments"], "labels": {"tier": "backend"}},
    {"name": "gpu-setup", "stage": "createRuntime", "path": "/usr/local/bin/gpu-hook",
     "labels": {"gpu": "true"}, "exclude-namespaces": ["kube-system"]}
]}"#;

pub const CASES: &[Case] = &[
    Case {
        name: "the captured backend pod of payments gets the audit hook",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[
            "hook prestart[0] /usr/local/bin/audit-hook args=[\"audit-hook\", \"--event\", \"prestart\"] \
             env=[\"AUDIT_DIR=/var/log/audit\", \"LOG_LEVEL=info\"] timeout=5",
        ]),
    },
    Case {
        name: "a GPU pod gets both hooks",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodLabel("gpu", "true")],
        expect: Expect::Lines(&[
            "hook createRuntime[0] /usr/local/bin/gpu-hook args=[] env=[] timeout=-",
            "hook prestart[0] /usr/local/bin/audit-hook args=[\"audit-hook\", \"--event\", \"prestart\"] \
             env=[\"AUDIT_DIR=/var/log/audit\", \"LOG_LEVEL=info\"] timeout=5",
        ]),
    },
    Case {
        name: "another namespace is not selected",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Namespace("shop")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "an excluded namespace is not selected",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Namespace("kube-system"), Edit::PodLabel("gpu", "true")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "a label with another value is not selected",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodLabel("tier", "frontend")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "no rules",
        settings: r#"{"hooks": []}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: hooks is empty, so this policy would do nothing"),
    },
    Case {
        name: "a relative path",
        settings: r#"{"hooks": [{"name": "h", "stage": "prestart", "path": "bin/hook"}]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: hooks[0] (\"h\").path: \"bin/hook\" is not an absolute path without \"..\"",
        ),
    },
    Case {
        name: "an unknown stage",
        settings: r#"{"hooks": [{"name": "h", "stage": "prestop", "path": "/bin/hook"}]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: hooks[0] (\"h\").stage: \"prestop\" is not one of prestart, createRuntime, \
             createContainer, startContainer, poststart, poststop",
        ),
    },
    Case {
        name: "a timeout of zero",
        settings: r#"{"hooks": [{"name": "h", "stage": "poststop", "path": "/bin/hook", "timeout": 0}]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: hooks[0] (\"h\").timeout: 0 is not a positive number of seconds"),
    },
    Case {
        name: "a name used twice",
        settings: r#"{"hooks": [{"name": "h", "stage": "poststop", "path": "/a"},
                                {"name": "h", "stage": "poststop", "path": "/b"}]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: hooks[1] (\"h\"): the name is used twice"),
    },
];
