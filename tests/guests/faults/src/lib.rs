//! Misbehaves on CreateContainer in the way its settings name, for the fault
//! tests: `loop`, `grow`, `unreachable`, `panic`, `stack`, `huge`,
//! `invalid`, `deny`, `init-loop`, `ok`.
use nri_wasm_sdk::*;

struct Faults;

#[allow(unconditional_recursion)]
fn recurse(n: u64, sink: &mut [u64; 64]) -> u64 {
    sink[(n % 64) as usize] = n;
    let mut local = [n; 64];
    local[0] = recurse(n + 1, sink);
    local.iter().sum()
}

impl Policy for Faults {
    fn events() -> Vec<EventKind> {
        vec![EventKind::CreateContainer]
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

    fn create_container(e: ContainerEvent) -> Result<Reply, String> {
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
            "panic" => panic!("policy panicked on purpose for {}", e.container.name),
            "stack" => {
                let mut sink = [0u64; 64];
                let v = recurse(0, &mut sink);
                Ok(Reply::none().with_eviction(&v.to_string(), "unreachable"))
            }
            "huge" => {
                let mut adjust = ContainerAdjustment::new();
                for i in 0..1_000_000 {
                    adjust = adjust.set_env(&format!("V{i}"), "x");
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
            _ => Ok(Reply::adjust(ContainerAdjustment::new().set_annotation("example.com/faults", "ok"))),
        }
    }
}

export_policy!(Faults);
