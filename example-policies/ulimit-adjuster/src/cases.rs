// The cases of `ulimit-adjuster`, plain data: run natively by `tests.rs` and
// through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.

/// The policy's name in the chain.
pub const POLICY: &str = "50-ulimit-adjuster";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{"max": {"nofile": {"soft": 65536, "hard": 65536}, "nproc": {"soft": 4096, "hard": 8192}}}"#;

pub const CASES: &[Case] = &[
    Case {
        name: "the captured annotations name container \"container\", so log-shipper is left alone",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "the container named \"container\" gets both captured limits",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::ContainerName("container")],
        expect: Expect::Lines(&["rlimit RLIMIT_NOFILE soft=1024 hard=4096", "rlimit RLIMIT_NPROC soft=512 hard=1024"]),
    },
    Case {
        name: "an annotation naming log-shipper applies to it, hard before soft",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("ulimits.example.com/log-shipper.nofile", "hard=8192,soft=2048")],
        expect: Expect::Lines(&["rlimit RLIMIT_NOFILE soft=2048 hard=8192"]),
    },
    Case {
        name: "a value that is not soft=,hard= denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::ContainerName("container"), Edit::PodAnnotation("ulimits.example.com/container.nofile", "1024")],
        expect: Expect::Deny(
            "annotation ulimits.example.com/container.nofile: \"1024\" is not soft=<number>,hard=<number>",
        ),
    },
    Case {
        name: "a soft limit above the hard one denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::ContainerName("container"),
            Edit::PodAnnotation("ulimits.example.com/container.nproc", "soft=2048,hard=1024"),
        ],
        expect: Expect::Deny("annotation ulimits.example.com/container.nproc: soft limit 2048 is above the hard limit 1024"),
    },
    Case {
        name: "a limit above the node's bound denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("ulimits.example.com/log-shipper.nofile", "soft=1024,hard=1048576")],
        expect: Expect::Deny(
            "annotation ulimits.example.com/log-shipper.nofile: soft=1024,hard=1048576 exceeds the node's maximum \
             soft=65536,hard=65536",
        ),
    },
    Case {
        name: "a resource the settings do not bound denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("ulimits.example.com/log-shipper.core", "soft=0,hard=0")],
        expect: Expect::Deny(
            "annotation ulimits.example.com/log-shipper.core: core limits may not be set on this node (allowed: nofile, \
             nproc)",
        ),
    },
    Case {
        name: "a resource Linux does not limit denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("ulimits.example.com/log-shipper.files", "soft=1,hard=1")],
        expect: Expect::Deny(
            "annotation ulimits.example.com/log-shipper.files: \"files\" is not a resource Linux limits (known: as, \
             core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, \
             stack)",
        ),
    },
    Case {
        name: "a key without a container name denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("ulimits.example.com/nofile", "soft=1,hard=1")],
        expect: Expect::Deny(
            "annotation ulimits.example.com/nofile: the key must be ulimits.example.com/<container-name>.<resource>",
        ),
    },
    Case {
        name: "another prefix",
        settings: r#"{"prefix": "limits.corp", "max": {"nofile": {"soft": 100, "hard": 200}}}"#,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("limits.corp/log-shipper.nofile", "soft=100,hard=200")],
        expect: Expect::Lines(&["rlimit RLIMIT_NOFILE soft=100 hard=200"]),
    },
    Case {
        name: "no settings",
        settings: "",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: max bounds no resource, so no annotation could ever apply (e.g. max = { nofile = { \
             soft = 65536, hard = 65536 } })",
        ),
    },
    Case {
        name: "a bound of an unknown resource",
        settings: r#"{"max": {"files": {"soft": 1, "hard": 1}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: max.files: not a resource Linux limits (known: as, core, cpu, data, fsize, locks, \
             memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack)",
        ),
    },
    Case {
        name: "a bound whose soft limit is above its hard one",
        settings: r#"{"max": {"nofile": {"soft": 10, "hard": 1}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: max.nofile: soft 10 is above hard 1"),
    },
    Case {
        name: "a misspelt key",
        settings: r#"{"maximum": {}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: unknown field `maximum`, expected `prefix` or `max`"),
    },
];
