//! The two macros a policy uses once each: [`capabilities!`] records what
//! the component may change, [`export_policy!`] turns a [`Policy`] type into
//! the component's exports and records the events it may subscribe to.
//!
//! They are macros because both must expand in the policy's own crate: a
//! custom section and the generated export glue belong to the component
//! being built, not to this library.
//!
//! [`Policy`]: crate::Policy
//! [`capabilities!`]: crate::capabilities
//! [`export_policy!`]: crate::export_policy

/// Declares what the policy may change and read: capability names, as the
/// host knows them (`env`, `annotations`, `args`, `rlimits`, `cpu`,
/// `memory`, `hugepages`, `blockio`, `rdt`, `unified`, `pids`,
/// `oom-score-adj`, `io-priority`, `scheduler`, `memory-policy`, `deny`,
/// `node`, and the dangerous `mounts`, `hooks`, `devices`, `cdi-devices`,
/// `namespaces`, `seccomp`, `sysctl`, `net-devices`, `cgroups-path`,
/// `updates`, `evictions`, and past the default grant's bounds
/// `cgroup-files`, `oom-protect`, `rlimits-raise`, `realtime`,
/// `runtime-annotations`, `resctrl`, `swap-raise`, `cpuset-any`). The list is recorded in the component, in the
/// custom section `nri-wasm:capabilities`, where `nri-wasm check` shows it
/// and the host enforces it. Use it once per component; a component
/// without it is taken to declare nothing dangerous.
///
/// ```ignore
/// nri_wasm_sdk::capabilities!("env", "hooks");
/// ```
#[macro_export]
macro_rules! capabilities {
    ($($name:literal),* $(,)?) => {
        const __NRI_WASM_CAPABILITIES_TEXT: &str = concat!($($name, " ",)*);
        // A custom section only in the component: native builds (the
        // policy's own tests) keep a plain static, since other object
        // formats name sections differently.
        #[doc(hidden)]
        #[used]
        #[cfg_attr(target_arch = "wasm32", link_section = "nri-wasm:capabilities")]
        static __NRI_WASM_CAPABILITIES: [u8; __NRI_WASM_CAPABILITIES_TEXT.len()] = {
            let text = __NRI_WASM_CAPABILITIES_TEXT.as_bytes();
            let mut out = [0u8; __NRI_WASM_CAPABILITIES_TEXT.len()];
            let mut i = 0;
            while i < text.len() {
                out[i] = text[i];
                i += 1;
            }
            out
        };
    };
}

/// Exports a [`Policy`] implementation as the component's `configure` and
/// `handle`, and records its [`Policy::EVENTS`] in the component (custom
/// section `nri-wasm:events`), where the host reads what the policy may
/// subscribe to without compiling it.
///
/// [`Policy::EVENTS`]: crate::Policy::EVENTS
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        const __NRI_WASM_EVENTS_LEN: usize = $crate::__events_len(<$policy as $crate::Policy>::EVENTS);
        // Made at compile time from the constant the code subscribes with.
        // As for capabilities: a custom section only in the component.
        #[doc(hidden)]
        #[used]
        #[cfg_attr(target_arch = "wasm32", link_section = "nri-wasm:events")]
        static __NRI_WASM_EVENTS: [u8; __NRI_WASM_EVENTS_LEN] =
            $crate::__events_text::<__NRI_WASM_EVENTS_LEN>(<$policy as $crate::Policy>::EVENTS);

        #[doc(hidden)]
        pub struct __NriWasmExports;

        impl $crate::bindings::Guest for __NriWasmExports {
            fn configure(settings: String) -> Result<Vec<$crate::EventKind>, String> {
                $crate::__init::<$policy>(settings)
            }

            fn handle(kind: $crate::EventKind) -> Result<$crate::Reply, String> {
                $crate::__handle::<$policy>(kind)
            }
        }

        $crate::bindings::__export_policy_world!(__NriWasmExports);
    };
}
