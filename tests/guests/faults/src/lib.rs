//! Misbehaves on CreateContainer in the way its settings name, for the fault
//! tests: `loop`, `grow`, `unreachable`, `panic`, `stack` (the shadow stack
//! in linear memory), `native-stack` (the engine's call stack), `huge` or
//! `huge:N` (N env entries, a million by default), `flood` (tens of
//! thousands of removal markers, updates and evictions within the reply
//! limit, ending in a conflict), `invalid`, `deny`,
//! `chatty` (200 KiB to stdout and stderr, then an answer), `chatty-panic`
//! (the same, then a panic), `init-loop`, `ok`, `random` (an annotation that depends on the random
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
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer, EventKind::ValidateContainerAdjustment];

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
            chatty @ ("chatty" | "chatty-panic") => {
                // 200 KiB to each stream, far past what the host keeps.
                for i in 0..4000 {
                    println!("line {i} of a policy that logs far too much ........................");
                    eprintln!("line {i} of a policy that logs far too much ........................");
                }
                if chatty == "chatty-panic" {
                    panic!("policy panicked on purpose after logging too much");
                }
                Ok(Reply::adjust(ContainerAdjustment::new().set_annotation("example.com/faults", "ok")))
            }
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
            "flood" => {
                // Just under the host's 1 MiB reply limit: thousands of
                // removal markers, updates of distinct containers and
                // evictions (as many as a reply may carry), which the merge
                // must take in linear time, then two updates of one field of
                // one container, which contradict each other.
                const N: usize = 15_000;
                const UPDATES: usize = 4_000;
                let mut adjust = ContainerAdjustment::new();
                adjust.env = (0..N).map(|i| KeyValue { key: format!("-V{i:05}"), value: String::new() }).collect();
                adjust.mounts = (0..N)
                    .map(|i| Mount {
                        destination: format!("-/m{i:05}"),
                        type_: String::new(),
                        source: String::new(),
                        options: vec![],
                    })
                    .collect();
                let mut reply = Reply::adjust(adjust);
                reply.update = (0..UPDATES - 1)
                    .map(|i| ContainerUpdate {
                        container_id: format!("c{i:05}"),
                        resources: None,
                        ignore_failure: false,
                    })
                    .collect();
                reply.evict = (0..UPDATES)
                    .map(|i| ContainerEviction { container_id: format!("c{i:05}"), reason: String::new() })
                    .collect();
                let memory = |limit| LinuxResources {
                    memory: Some(LinuxMemory { limit: Some(limit), ..LinuxMemory::default() }),
                    ..LinuxResources::default()
                };
                Ok(reply
                    .with_update(ContainerUpdate::new("c-twice", memory(1 << 30)))
                    .with_update(ContainerUpdate::new("c-twice", memory(2 << 30))))
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
