// The cases of `allowed-images`, plain data: run natively by `tests.rs`
// and through the real host by `tests/e2e/tests/examples.rs`, which both
// include this file with their own `Case`, `Edit` and `Expect` in scope.
// The captured container (containerd 2.3.4, NRI 0.12.0) has no image
// field; its CRI annotation names docker.io/local/envsleep:1.

/// The policy's name in the chain.
pub const POLICY: &str = "10-allowed-images";

/// The settings of README.md's example.
pub const SETTINGS: &str = r#"{"registries": ["registry.example.com", "ghcr.io/example"]}"#;

const PINNED: &str = "registry.example.com/billing/worker@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

pub const CASES: &[Case] = &[
    Case {
        name: "the captured image (from the CRI annotation) is Docker Hub's",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Deny(
            "container log-shipper: image docker.io/local/envsleep:1 is not from an allowed registry (allowed: \
             registry.example.com, ghcr.io/example)",
        ),
    },
    Case {
        name: "an allowed registry, pinned, named by the annotation",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::ContainerAnnotation("io.kubernetes.cri.image-name", PINNED)],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "an allowed registry, by tag",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::ContainerAnnotation("io.kubernetes.cri.image-name", "registry.example.com/billing/worker:1.4.2")],
        expect: Expect::Deny(
            "container log-shipper: image registry.example.com/billing/worker:1.4.2 is not pinned by digest (use \
             registry.example.com/billing/worker@sha256:…)",
        ),
    },
    Case {
        name: "a path prefix matches at a slash only",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::ContainerAnnotation(
            "io.kubernetes.cri.image-name",
            "ghcr.io/examples/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        )],
        expect: Expect::Deny(
            "container log-shipper: image ghcr.io/examples/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa is not from an \
             allowed registry (allowed: registry.example.com, ghcr.io/example)",
        ),
    },
    Case {
        name: "the image field wins over the annotation",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Image { name: PINNED, digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" }],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "the image field names a registry the annotation hides",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[
            Edit::ContainerAnnotation("io.kubernetes.cri.image-name", PINNED),
            Edit::Image { name: "quay.io/other/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", digest: "" },
        ],
        expect: Expect::Deny(
            "container log-shipper: image quay.io/other/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa is not from an allowed \
             registry (allowed: registry.example.com, ghcr.io/example)",
        ),
    },
    Case {
        name: "the runtime resolved another digest than the pinned one",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::Image { name: PINNED, digest: "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" }],
        expect: Expect::Deny(
            "container log-shipper: image registry.example.com/billing/worker@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: the \
             runtime resolved it to sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb, not the pinned digest",
        ),
    },
    Case {
        name: "a pod with the exception annotation",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("images.example.com/exception", "INC-4711: vendor hotfix")],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "an empty exception is none",
        settings: SETTINGS,
        fixture: "CreateContainer",
        edits: &[Edit::PodAnnotation("images.example.com/exception", "")],
        expect: Expect::Deny(
            "container log-shipper: image docker.io/local/envsleep:1 is not from an allowed registry (allowed: \
             registry.example.com, ghcr.io/example)",
        ),
    },
    Case {
        name: "tags allowed when digests are not required",
        settings: r#"{"registries": ["docker.io/local"], "require-digest": false}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Lines(&[]),
    },
    Case {
        name: "no registries",
        settings: r#"{"registries": []}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings("invalid settings: registries is empty, so every image would be refused"),
    },
    Case {
        name: "a URL is not a registry",
        settings: r#"{"registries": ["https://registry.example.com"]}"#,
        fixture: "CreateContainer",
        edits: &[],
        expect: Expect::Settings(
            "invalid settings: registries: \"https://registry.example.com\" is not a registry host or host/path \
             (e.g. ghcr.io/example)",
        ),
    },
];
