// The cases of `device-injector`, plain data: run natively by `tests.rs` and
// through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.

/// The policy's name in the chain.
pub const POLICY: &str = "40-device-injector";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{
    "devices": {
        "/dev/fuse": {"type": "c", "major": 10, "minor": 229, "file-mode": 438, "uid": 0, "gid": 0},
        "/dev/net/tun": {"type": "c", "major": 10, "minor": 200, "access": "rw"}
    },
    "mounts": {"shared-cache": {"source": "/var/cache/shared", "destination": "/cache"}},
    "cdi-devices": ["vendor.com/gpu=*", "example.com/fpga=fpga0"]
}"#;

pub const CASES: &[Case] = &[
    Case {
        name: "the captured pod asks for nothing",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "two allowed devices, with their cgroup rules",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.devices", "/dev/fuse, /dev/net/tun,/dev/fuse")],
        expect: Expect::Lines(&[
            "device /dev/fuse type=c major=10 minor=229 mode=666 uid=0 gid=0",
            "device /dev/net/tun type=c major=10 minor=200 mode=- uid=- gid=-",
            "resources.devices[0] allow=true type=c major=10 minor=229 access=rwm",
            "resources.devices[1] allow=true type=c major=10 minor=200 access=rw",
        ]),
    },
    Case {
        name: "an allowed mount",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.mounts", "shared-cache")],
        expect: Expect::Lines(&["mount /cache type=bind source=/var/cache/shared options=[\"rbind\", \"ro\"]"]),
    },
    Case {
        name: "CDI devices: one of an allowed class, one allowed by name",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.cdi", "vendor.com/gpu=0,example.com/fpga=fpga0")],
        expect: Expect::Lines(&["cdi example.com/fpga=fpga0", "cdi vendor.com/gpu=0"]),
    },
    Case {
        name: "another container's request is left to it",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/worker.devices", "/dev/kvm")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "a device outside the allow-list denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.devices", "/dev/fuse,/dev/kvm")],
        expect: Expect::Deny(
            "annotation devices.example.com/log-shipper.devices: /dev/kvm is not in this node's allow-list (allowed: \
             /dev/fuse, /dev/net/tun)",
        ),
    },
    Case {
        name: "a mount outside the allow-list denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.mounts", "host-root")],
        expect: Expect::Deny(
            "annotation devices.example.com/log-shipper.mounts: host-root is not in this node's allow-list (allowed: \
             shared-cache)",
        ),
    },
    Case {
        name: "a CDI device outside the allow-list denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.cdi", "example.com/fpga=fpga1")],
        expect: Expect::Deny(
            "annotation devices.example.com/log-shipper.cdi: example.com/fpga=fpga1 is not in this node's allow-list \
             (allowed: vendor.com/gpu=*, example.com/fpga=fpga0)",
        ),
    },
    Case {
        name: "an unknown kind of request denies",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("devices.example.com/log-shipper.gpus", "1")],
        expect: Expect::Deny(
            "annotation devices.example.com/log-shipper.gpus: \"gpus\" is not something this policy injects \
             (devices, mounts, cdi)",
        ),
    },
    Case {
        name: "an empty allow-list",
        settings: "",
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: the allow-list is empty (devices, mounts, cdi-devices), so every request would be \
             denied",
        ),
    },
    Case {
        name: "a relative device path",
        settings: r#"{"devices": {"dev/fuse": {"type": "c", "major": 10, "minor": 229}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: devices.\"dev/fuse\": \"dev/fuse\" is not an absolute path without \"..\" or \",\"",
        ),
    },
    Case {
        name: "a device type",
        settings: r#"{"devices": {"/dev/fuse": {"type": "char", "major": 10, "minor": 229}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: devices.\"/dev/fuse\".type: \"char\" is not one of c, b, u, p"),
    },
    Case {
        name: "a mount escaping with ..",
        settings: r#"{"mounts": {"logs": {"source": "/var/log/../../etc", "destination": "/logs"}}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: mounts.logs.source: \"/var/log/../../etc\" is not an absolute path without \"..\" or \
             \",\"",
        ),
    },
    Case {
        name: "another prefix",
        settings: r#"{"prefix": "hw.corp", "cdi-devices": ["vendor.com/gpu=*"]}"#,
        fixture: "CreateContainer",
        edits: &[
            Edit::PodAnnotation("hw.corp/log-shipper.cdi", "vendor.com/gpu=1"),
            Edit::PodAnnotation("devices.example.com/log-shipper.cdi", "vendor.com/gpu=2"),
        ],
        expect: Expect::Lines(&["cdi vendor.com/gpu=1"]),
    },
    Case {
        name: "a prefix with a slash",
        settings: r#"{"prefix": "hw.corp/devices", "cdi-devices": ["vendor.com/gpu=*"]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: prefix \"hw.corp/devices\" is not a DNS name such as devices.example.com",
        ),
    },
    Case {
        name: "a CDI name without a class",
        settings: r#"{"cdi-devices": ["gpu0"]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: cdi-devices: \"gpu0\" is not vendor.com/class=name"),
    },
];
