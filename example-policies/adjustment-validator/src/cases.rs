// The cases of `adjustment-validator`, plain data: run natively by
// `tests.rs` and through the real host by `tests/e2e/tests/examples.rs`,
// which both include this file with their own `Case`, `Edit` and `Expect`
// in scope. The `Earlier*` edits are policies before it in the chain.

/// The policy's name in the chain.
pub const POLICY: &str = "90-adjustment-validator";

/// The settings of README.md's example.
pub const SETTINGS: &str =
    r#"{"opt-in-annotation": "adjustments.example.com/allow", "privileged-paths": ["/srv/secrets"]}"#;

pub const CASES: &[Case] = &[
    Case {
        name: "nothing changed",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "a hook added by an earlier policy",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::EarlierHook { policy: "10-hooks", stage: "prestart", path: "/usr/local/bin/trace" }],
        expect: Expect::Deny(
            "10-hooks added OCI hooks (prestart /usr/local/bin/trace); pod payments/billing-worker-7f9c5 has not \
             opted in (adjustments.example.com/allow: hooks)",
        ),
    },
    Case {
        name: "hooks of two policies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::EarlierHook { policy: "10-a", stage: "create-runtime", path: "/bin/a" },
            Edit::EarlierHook { policy: "20-b", stage: "prestart", path: "/bin/b" },
        ],
        expect: Expect::Deny(
            "10-a,20-b added OCI hooks (prestart /bin/b, createRuntime /bin/a); pod payments/billing-worker-7f9c5 \
             has not opted in (adjustments.example.com/allow: hooks)",
        ),
    },
    Case {
        name: "a pod that accepts hooks",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::EarlierHook { policy: "10-hooks", stage: "prestart", path: "/usr/local/bin/trace" },
            Edit::PodAnnotation("adjustments.example.com/allow", "hooks"),
        ],
        expect: Expect::Lines(&["hook prestart[0] /usr/local/bin/trace args=[] env=[] timeout=-"]),
    },
    Case {
        name: "a mount of /proc",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::EarlierMount {
            policy: "20-mounts",
            destination: "/host/proc",
            source: "/proc",
            options: &["rbind", "ro"],
        }],
        expect: Expect::Deny(
            "20-mounts mounted privileged host path /proc at /host/proc; pod payments/billing-worker-7f9c5 has not \
             opted in (adjustments.example.com/allow: mounts)",
        ),
    },
    Case {
        name: "a mount beneath a path the settings add",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::EarlierMount { policy: "20-mounts", destination: "/db", source: "/srv/secrets/db", options: &[] }],
        expect: Expect::Deny(
            "20-mounts mounted privileged host path /srv/secrets/db (under /srv/secrets) at /db; pod \
             payments/billing-worker-7f9c5 has not opted in (adjustments.example.com/allow: mounts)",
        ),
    },
    Case {
        name: "an ordinary mount and an annotation pass",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::EarlierMount { policy: "20-mounts", destination: "/data", source: "/srv/data", options: &["rbind"] },
            Edit::EarlierAnnotation { policy: "10-notes", key: "example.com/checked", value: "yes" },
        ],
        expect: Expect::Lines(&[
            "annotation example.com/checked=yes",
            "mount /data type=bind source=/srv/data options=[\"rbind\"]",
        ]),
    },
    Case {
        name: "a pod that accepts everything",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::EarlierHook { policy: "10-hooks", stage: "poststop", path: "/bin/cleanup" },
            Edit::EarlierMount { policy: "20-mounts", destination: "/host/sys", source: "/sys", options: &["rbind"] },
            Edit::PodAnnotation("adjustments.example.com/allow", "all"),
        ],
        expect: Expect::Lines(&[
            "hook poststop[0] /bin/cleanup args=[] env=[] timeout=-",
            "mount /host/sys type=bind source=/sys options=[\"rbind\"]",
        ]),
    },
    Case {
        name: "opting in to hooks does not open mounts",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::EarlierMount { policy: "20-mounts", destination: "/host", source: "/", options: &["rbind"] },
            Edit::PodAnnotation("adjustments.example.com/allow", "hooks"),
        ],
        expect: Expect::Deny(
            "20-mounts mounted privileged host path / at /host; pod payments/billing-worker-7f9c5 has not opted in \
             (adjustments.example.com/allow: mounts)",
        ),
    },
    Case {
        name: "no opt-in annotation",
        settings: "{}",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: missing field `opt-in-annotation` at line 1 column 2"),
    },
    Case {
        name: "no settings at all",
        settings: "",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: missing field `opt-in-annotation`"),
    },
    Case {
        name: "an opt-in annotation that is not a key",
        settings: r#"{"opt-in-annotation": "allow"}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: opt-in-annotation \"allow\" is not an annotation key such as example.com/allow",
        ),
    },
    Case {
        name: "every check off",
        settings: r#"{"opt-in-annotation": "a.b/c", "check-hooks": false, "check-seccomp": false,
                      "check-mounts": false}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: every check is off, so this policy would accept everything"),
    },
];
