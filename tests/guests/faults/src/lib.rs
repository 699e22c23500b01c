//! Misbehaves on CreateContainer in the way its settings name, for the fault
//! tests: `loop`, `grow`, `unreachable`, `panic`, `stack` (the shadow stack
//! in linear memory), `native-stack` (the engine's call stack), `huge` or
//! `huge:N` (N env entries, a million by default), `invalid`, `deny`,
//! `init-loop`, `ok`, `random` (an annotation that depends on the random
//! keys of a hash map); and `validate`: subscribes to the validation step only
//! and rejects a merged adjustment that sets `example.com/forbidden`, naming
//! the policy that set it.
use nri_wasm_sdk::*;

struct Faults;

#[allow(unconditional_recursion)]
fn recurse(n: u64, sink: &mut [u64; 64]) -> u64 {
    sink[(n % 64) as usize] = n;
    let mut local = [n; 64];
    local[0] = recurse(n + 1, sink);
    local.iter().sum()
}

/// Recursion that keeps nothing in linear memory: only the engine's stack grows.
fn native(n: u64) -> u64 {
    if n == u64::MAX {
        return 0;
    }
    native(std::hint::black_box(n + 1)).wrapping_mul(3).wrapping_add(n)
}

impl Policy for Faults {
    fn events() -> Vec<EventKind> {
        match settings() {
            "validate" => vec![EventKind::ValidateContainerAdjustment],
            _ => vec![EventKind::CreateContainer],
        }
    }

    fn validate_container_adjustment(e: &Event) -> Result<Reply, String> {
        let e = e.validation().ok_or("no validation in a validation event")?;
        let key = "example.com/forbidden";
        let set = e.adjust.as_ref().is_some_and(|a| a.annotations.iter().any(|kv| kv.key == key));
        if !set {
            return Ok(Reply::none());
        }
        let owner = e.owners.iter().find(|o| o.key == key).map_or("an unknown plugin", |o| o.plugin.as_str());
        Err(format!("annotation {key} set by {owner} is not allowed"))
    }

    fn init(settings: &str) -> Result<(), String> {
        if settings == "init-loop" {
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        Ok(())
    }

    fn create_container(e: &Event) -> Result<Reply, String> {
        match settings() {
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "unreachable" => core::arch::wasm32::unreachable(),
            "panic" => panic!("policy panicked on purpose for {}", e.container_meta().name),
            "stack" => {
                let mut sink = [0u64; 64];
                let v = recurse(0, &mut sink);
                Ok(Reply::none().with_eviction(&v.to_string(), "unreachable"))
            }
            "native-stack" => Ok(Reply::none().with_eviction(&native(0).to_string(), "unreachable")),
            huge if huge.starts_with("huge") => {
                let n: usize = huge.strip_prefix("huge:").and_then(|n| n.parse().ok()).unwrap_or(1_000_000);
                let mut adjust = ContainerAdjustment::new();
                adjust.env.reserve(n);
                for i in 0..n {
                    adjust.env.push(KeyValue { key: format!("V{i}"), value: "x".into() });
                }
                Ok(Reply::adjust(adjust))
            }
            "invalid" => Ok(Reply::adjust(ContainerAdjustment::new().add_mount(Mount {
                destination: String::new(),
                type_: "bind".into(),
                source: "/etc".into(),
                options: vec![],
            }))),
            "deny" => Err("denied on purpose".into()),
            "random" => {
                // std's HashMap draws its keys from wasi:random.
                let map: std::collections::HashMap<u32, u32> = (0..32).map(|i| (i, i)).collect();
                let order: Vec<String> = map.keys().map(|k| k.to_string()).collect();
                Ok(Reply::adjust(ContainerAdjustment::new().set_annotation("example.com/order", &order.join(","))))
            }
            _ => Ok(Reply::adjust(ContainerAdjustment::new().set_annotation("example.com/faults", "ok"))),
        }
    }
}

export_policy!(Faults);
