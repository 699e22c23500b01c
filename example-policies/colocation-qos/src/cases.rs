// The cases of `colocation-qos`, plain data: run natively by `tests.rs` and
// through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.
//
// A case starts from an empty state: no latency-critical container runs,
// so a create changes nothing. Throttling and restoring, which need
// containers starting and stopping, are tested in `tests.rs` and in the
// host's tests with a runtime.

/// The policy's name in the chain.
pub const POLICY: &str = "70-colocation-qos";

/// The settings of policy.toml.
pub const SETTINGS: &str = "cpu-percent=20";

pub const CASES: &[Case] = &[
    Case {
        name: "the captured pod has no class",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "an offline container while no latency-critical one runs is created as it is",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodLabel("qos.nri-wasm.io/class", "offline")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "a latency-critical container is created as it is (it counts once it starts)",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodLabel("qos.nri-wasm.io/class", "latency-critical")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "a share of 0 %",
        settings: "cpu-percent=0",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: cpu-percent 0 is outside 1..=100"),
    },
    Case {
        name: "a share that is not a number",
        settings: "cpu-percent=20%",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: cpu-percent: \"20%\" is not a number"),
    },
    Case {
        name: "a period the kernel refuses",
        settings: "period=500",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: period 500 is outside 1000..=1000000 microseconds"),
    },
    Case {
        name: "a memory.high the kernel refuses",
        settings: "memory-high=256MiB",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: memory-high \"256MiB\" is neither max nor a size such as 256M (bytes, or K, M, G, T)",
        ),
    },
    Case {
        name: "an empty label",
        settings: "label=",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: label needs a pod label key"),
    },
    Case {
        name: "a word without =",
        settings: "cpu-percent=20 strict",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: \"strict\" is not key=value"),
    },
    Case {
        name: "an unknown setting",
        settings: "memory-max=1G",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: unknown field `memory-max`, expected one of `cpu-percent`, `period`, `memory-high`, `label`",
        ),
    },
];
