// The cases of `deny-host-sockets`, plain data: run natively by `tests.rs`
// and through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.

/// The policy's name in the chain.
pub const POLICY: &str = "10-deny-host-sockets";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{"paths": ["/etc/kubernetes", "/var/lib/kubelet/pki"],
    "exceptions": {"monitoring": ["/proc", "/sys"], "kube-system": ["*"]}}"#;

pub const CASES: &[Case] = &[
    Case {
        name: "the captured container mounts nothing protected",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "containerd's socket",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount {
            destination: "/run/containerd/containerd.sock",
            source: "/run/containerd/containerd.sock",
            options: &["rbind", "rw"],
        }],
        expect: Expect::Deny(
            "mount of host path /run/containerd/containerd.sock at /run/containerd/containerd.sock is not allowed \
             (protected host path; namespace payments has no exception for it)",
        ),
    },
    Case {
        name: "NRI's socket",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/nri.sock", source: "/var/run/nri/nri.sock", options: &["rbind"] }],
        expect: Expect::Deny(
            "mount of host path /var/run/nri/nri.sock at /nri.sock is not allowed (protected host path; namespace \
             payments has no exception for it)",
        ),
    },
    Case {
        name: "a directory holding sockets",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/host-run", source: "/var/run/", options: &["rbind", "ro"] }],
        expect: Expect::Deny(
            "mount of host path /var/run/ at /host-run, which exposes /var/run/containerd/containerd.sock, is not \
             allowed (protected host path; namespace payments has no exception for it)",
        ),
    },
    Case {
        name: "a path beneath /proc, written with ..",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/host-ns", source: "/srv/../proc/1/ns", options: &["rbind"] }],
        expect: Expect::Deny(
            "mount of host path /srv/../proc/1/ns at /host-ns, which exposes /proc, is not allowed (protected host \
             path; namespace payments has no exception for it)",
        ),
    },
    Case {
        name: "the host's root",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/host", source: "/", options: &["rbind", "ro"] }],
        expect: Expect::Deny(
            "mount of host path / at /host is not allowed (protected host path; namespace payments has no exception \
             for it)",
        ),
    },
    Case {
        name: "a path the settings protect",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/pki", source: "/etc/kubernetes/pki", options: &["rbind", "ro"] }],
        expect: Expect::Deny(
            "mount of host path /etc/kubernetes/pki at /pki, which exposes /etc/kubernetes, is not allowed (protected \
             host path; namespace payments has no exception for it)",
        ),
    },
    Case {
        name: "an unprotected host path",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/logs", source: "/var/log/pods", options: &["rbind", "ro"] }],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "the monitoring namespace may mount /proc",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::Namespace("monitoring"),
            Edit::Mount { destination: "/host/proc", source: "/proc", options: &["rbind", "ro"] },
        ],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "but not docker's socket",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::Namespace("monitoring"),
            Edit::Mount { destination: "/host/proc", source: "/proc", options: &["rbind", "ro"] },
            Edit::Mount { destination: "/docker.sock", source: "/var/run/docker.sock", options: &["rbind"] },
        ],
        expect: Expect::Deny(
            "mount of host path /var/run/docker.sock at /docker.sock is not allowed (protected host path; namespace \
             monitoring has no exception for it)",
        ),
    },
    Case {
        name: "kube-system may mount anything",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::Namespace("kube-system"),
            Edit::Mount { destination: "/run/crio/crio.sock", source: "/run/crio/crio.sock", options: &["rbind"] },
        ],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "an exception for one of containerd's sockets does not open the directory holding both",
        settings: r#"{"exceptions": {"monitoring": ["/run/containerd/containerd.sock"]}}"#,
        fixture: "CreateContainer",
        edits: &[
            Edit::Namespace("monitoring"),
            Edit::Mount { destination: "/run/containerd", source: "/run/containerd", options: &["rbind"] },
        ],
        expect: Expect::Deny(
            "mount of host path /run/containerd at /run/containerd, which exposes \
             /run/containerd/containerd.sock.ttrpc, is not allowed (protected host path; namespace monitoring has no \
             exception for it)",
        ),
    },
    Case {
        name: "the exception for that socket allows the socket itself",
        settings: r#"{"exceptions": {"monitoring": ["/run/containerd/containerd.sock"]}}"#,
        fixture: "CreateContainer",
        edits: &[
            Edit::Namespace("monitoring"),
            Edit::Mount {
                destination: "/run/containerd/containerd.sock",
                source: "/run/containerd/containerd.sock",
                options: &["rbind"],
            },
        ],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "an exception is read as a path, like the paths it names",
        settings: r#"{"exceptions": {"monitoring": ["/proc/", "/sys/./"]}}"#,
        fixture: "CreateContainer",
        edits: &[
            Edit::Namespace("monitoring"),
            Edit::Mount { destination: "/host/proc", source: "/proc", options: &["rbind", "ro"] },
            Edit::Mount { destination: "/host/sys", source: "/sys/fs/cgroup", options: &["rbind", "ro"] },
        ],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "with the built-in paths off, the host's root still holds the protected ones",
        settings: r#"{"builtin": false, "paths": ["/etc/kubernetes"]}"#,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/host", source: "/", options: &["rbind", "ro"] }],
        expect: Expect::Deny(
            "mount of host path / at /host, which exposes /etc/kubernetes, is not allowed (protected host path; \
             namespace payments has no exception for it)",
        ),
    },
    Case {
        name: "a protected path written with a trailing slash is that path",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Mount { destination: "/host/sys", source: "/sys/", options: &["rbind", "ro"] }],
        expect: Expect::Deny(
            "mount of host path /sys/ at /host/sys is not allowed (protected host path; namespace payments has no \
             exception for it)",
        ),
    },
    Case {
        name: "a relative path",
        settings: r#"{"paths": ["etc/secrets"]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: paths: \"etc/secrets\" is not an absolute path"),
    },
    Case {
        name: "an exception for a path that is not protected",
        settings: r#"{"exceptions": {"monitoring": ["/var/log"]}}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: exceptions.monitoring: \"/var/log\" is not a protected path (or \"*\")",
        ),
    },
    Case {
        name: "nothing protected",
        settings: r#"{"builtin": false}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: builtin = false and no paths: nothing would be protected"),
    },
];
