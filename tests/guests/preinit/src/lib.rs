//! For pre-initialisation (`host/src/policy/load/snapshot.rs`): says, in
//! the annotations of its reply, what a call sees of the state `configure`
//! left and of earlier calls. `configure` stores a mark in memory (the
//! length of its settings plus one) and, by settings, also:
//!
//! - `hold-stdout`: keeps a WASI stdout stream in a global (a snapshot
//!   cannot carry a host handle, so the host must refuse one);
//! - `fill`: fills 2 MiB of memory with bytes that do not compress into a
//!   few data segments (a snapshot over `max-component-mib` is refused);
//! - `sparse`: leaves 12 MiB in which every other byte is not zero: 6.3
//!   million separate runs, which the host must refuse before the rewrite
//!   keeps a record of each;
//! - `runs`: leaves 12 MiB in which every fourth byte is not zero: 3.1
//!   million runs, under the host's limit, whose rewrite needs more memory
//!   than a compiling child of 256 MiB has;
//! - `full`: grows its memory to 16 MiB, the cap the test gives it (the
//!   instrumentation's memory accessor needs a page more to answer).
//!
//! Each call counts itself in a static and on the heap, and answers the
//! counts it found: `calls` is 1 in every fresh instance, `heap` 1 as
//! built and 2 after `configure`'s entry, so more is a call that saw
//! another call's writes.
use std::sync::atomic::{AtomicU32, Ordering};

use nri_wasm_sdk::*;

struct Preinit;

static CONFIGURED: AtomicU32 = AtomicU32::new(0);
static CALLS: AtomicU32 = AtomicU32::new(0);
static HEAP: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
static HELD: std::sync::Mutex<Vec<wasip2::io::streams::OutputStream>> = std::sync::Mutex::new(Vec::new());
static FILLED: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

impl Policy for Preinit {
    const EVENTS: &'static [EventKind] = &[EventKind::CreateContainer];

    fn init(settings: &str) -> Result<(), String> {
        CONFIGURED.store(settings.len() as u32 + 1, Ordering::SeqCst);
        HEAP.lock().map_err(|e| e.to_string())?.push(0);
        match settings {
            "hold-stdout" => HELD.lock().map_err(|e| e.to_string())?.push(wasip2::cli::stdout::get_stdout()),
            "fill" => {
                let mut x: u32 = 0x9e37_79b9;
                let bytes = (0..2 << 20)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        (x as u8) | 1
                    })
                    .collect();
                *FILLED.lock().map_err(|e| e.to_string())? = bytes;
            }
            "sparse" => *FILLED.lock().map_err(|e| e.to_string())? = every::<2>(),
            "runs" => *FILLED.lock().map_err(|e| e.to_string())? = every::<4>(),
            "full" => {
                let have = core::arch::wasm32::memory_size(0);
                if have < 256 && core::arch::wasm32::memory_grow(0, 256 - have) == usize::MAX {
                    return Err("cannot grow to 16 MiB".into());
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn create_container(_e: &Event) -> Result<Reply, String> {
        let calls = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        let heap = {
            let mut heap = HEAP.lock().map_err(|e| e.to_string())?;
            heap.push(calls);
            heap.len()
        };
        let configured = CONFIGURED.load(Ordering::SeqCst);
        Ok(Reply::adjust(
            ContainerAdjustment::new()
                .set_annotation("preinit/configured", &configured.to_string())
                .set_annotation("preinit/calls", &calls.to_string())
                .set_annotation("preinit/heap", &heap.to_string()),
        ))
    }
}

/// 12 MiB in which every `STEP`th byte is not zero (a constant step keeps
/// the loop within the default fuel).
fn every<const STEP: usize>() -> Vec<u8> {
    let mut bytes = vec![0u8; 12 << 20];
    for byte in bytes.iter_mut().step_by(STEP) {
        *byte = 1;
    }
    bytes
}

export_policy!(Preinit);
