// The cases of `qos-class`, plain data: run natively by `tests.rs` and
// through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.

/// The policy's name in the chain.
pub const POLICY: &str = "20-qos-class";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{"classes": {
    "latency-critical": {"cpu-shares": 2048, "cpuset": "2,3", "cpuset-mems": "0",
                         "unified": {"cpu.weight": "10000"}, "oom-score-adj": -900},
    "offline": {"cpu-shares": 2, "cpu-quota": 20000, "cpu-period": 100000, "memory-limit": 268435456,
                "unified": {"cpu.weight": "1", "cpu.idle": "1", "memory.high": "201326592"}, "oom-score-adj": 1000}
}}"#;

const OFFLINE: &[&str] = &[
    "oom_score_adj=1000",
    "resources.cpu.period=100000",
    "resources.cpu.quota=20000",
    "resources.cpu.shares=2",
    "resources.memory.limit=268435456",
    "resources.memory.swap=268435456",
    "resources.unified cpu.idle=1",
    "resources.unified cpu.weight=1",
    "resources.unified memory.high=201326592",
];

pub const CASES: &[Case] = &[
    Case {
        name: "the captured pod is offline",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(OFFLINE),
    },
    Case {
        name: "a latency-critical pod gets its CPUs and memory node",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("qos.example.com/class", "latency-critical")],
        expect: Expect::Lines(&[
            "oom_score_adj=-900",
            "resources.cpu.cpus=2-3",
            "resources.cpu.mems=0",
            "resources.cpu.shares=2048",
            "resources.unified cpu.weight=10000",
        ]),
    },
    Case {
        name: "the container's own class wins over the pod's",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::ContainerAnnotation("qos.example.com/container-class", "latency-critical")],
        expect: Expect::Lines(&[
            "oom_score_adj=-900",
            "resources.cpu.cpus=2-3",
            "resources.cpu.mems=0",
            "resources.cpu.shares=2048",
            "resources.unified cpu.weight=10000",
        ]),
    },
    Case {
        name: "a pod without a class is left alone",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::RemovePodAnnotation("qos.example.com/class")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "a pod without a class gets the default one",
        settings: r#"{"default": "batch", "classes": {"batch": {"cpu-shares": 512}}}"#,
        fixture: "CreateContainer",
        edits: &[Edit::RemovePodAnnotation("qos.example.com/class")],
        expect: Expect::Lines(&["resources.cpu.shares=512"]),
    },
    Case {
        name: "an unknown class denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("qos.example.com/class", "gold")],
        expect: Expect::Deny(
            "pod annotation qos.example.com/class: unknown QoS class \"gold\" (known: latency-critical, offline)",
        ),
    },
    Case {
        name: "no classes",
        settings: r#"{"classes": {}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: classes describes no class"),
    },
    Case {
        name: "a quota below what the kernel takes",
        settings: r#"{"classes": {"offline": {"cpu-quota": 500, "cpu-period": 100000}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: classes.offline.cpu-quota: 500 is neither at least 1000 microseconds nor -1 (no quota)",
        ),
    },
    Case {
        name: "a quota without a period",
        settings: r#"{"classes": {"offline": {"cpu-quota": 20000}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: classes.offline: cpu-quota needs cpu-period (the quota is per period)"),
    },
    Case {
        name: "a cpuset that is not a list",
        settings: r#"{"classes": {"lc": {"cpuset": "2-x"}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: classes.lc.cpuset: bad CPU number in \"2-x\""),
    },
    Case {
        name: "a unified file outside the cgroup",
        settings: r#"{"classes": {"lc": {"unified": {"../cpu.weight": "1"}}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: classes.lc.unified: \"../cpu.weight\" is not a cgroup file name such as cpu.weight",
        ),
    },
    Case {
        name: "a default that is not a class",
        settings: r#"{"default": "gold", "classes": {"lc": {"cpu-shares": 1024}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: default \"gold\" is not one of the classes (lc)"),
    },
];
