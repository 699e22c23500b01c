//! The snapshot's steps that work on bytes alone: instrumenting a component
//! and rewriting it with the state read from its configured instance
//! (`wasmtime-wizer`'s component path).
//!
//! Why a file of their own: both steps parse and rebuild a file the
//! operator dropped in, with state a policy computed, so they are bounded
//! like a compile. The host binary runs them in a child like the compiler's
//! (`nri-wasm internal-snapshot`, `compile.rs`) under the same address-space
//! and CPU limits; an embedder without the binary runs them on a blocking
//! thread. Either way they take and give bytes only, so the two paths run
//! the same code on the same input: a component (instrument), or a
//! [`State`] with the component appended (rewrite).
//!
//! The rewrite keeps a record of about a hundred bytes, for an instant,
//! per run of non-zero bytes in the memories; [`State::measure`] counts the
//! runs before the rewrite is started, so that a refusal says why instead
//! of only that the child ran out of memory.

use std::collections::HashMap;

use wasmtime_wizer::{ComponentInstanceState, Wizer};

/// One of the snapshot's steps on bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SnapshotStep {
    /// The component in, the component with accessors for its memories and
    /// mutable globals out.
    Instrument,
    /// A [`State`] in, the snapshot out.
    Rewrite,
}

impl SnapshotStep {
    /// The step's name on the child's command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Instrument => "instrument",
            Self::Rewrite => "rewrite",
        }
    }

    /// Runs the step on `input`.
    pub fn run(self, input: &[u8]) -> Result<Vec<u8>, String> {
        let failed = |e: wasmtime::Error| crate::text::one_line(&e);
        match self {
            Self::Instrument => wizer().instrument_component(input).map(|(_, wasm)| wasm).map_err(failed),
            Self::Rewrite => {
                let (component, answers) = decode(input)?;
                // Instrumented again (it is deterministic): the context the
                // rewrite needs borrows the component, and the step that
                // made the instrumented copy ran in another process.
                let wizer = wizer();
                let (cx, _) = wizer.instrument_component(component).map_err(failed)?;
                let mut replay = Replay { answers, missing: None };
                let written = futures::executor::block_on(wizer.snapshot_component(&cx, &mut replay));
                match replay.missing {
                    Some(missing) => Err(format!("the instance has no accessor {missing}")),
                    None => written.map_err(failed),
                }
            }
        }
    }
}

/// The rewrite's settings: the instrumentation's own names, and any export
/// of the component left as it is (by default the rewrite removes an export
/// named `wizer-initialize`).
fn wizer() -> Wizer {
    let mut wizer = Wizer::new();
    wizer.keep_init_func(true);
    wizer
}

/// Tags of [`State`]'s entries.
const BYTES: u8 = 0;
const S32: u8 = 1;
const S64: u8 = 2;
const F32: u8 = 3;
const F64: u8 = 4;
const COMPONENT: u8 = 5;

/// A number an accessor answered (floats as their bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// An `i32` global.
    S32(i32),
    /// An `i64` global.
    S64(i64),
    /// An `f32` global's bits.
    F32(u32),
    /// An `f64` global's bits.
    F64(u64),
}

/// What the accessors of a configured instance answered, encoded as the
/// rewrite's input: entries of a name (u32 length, UTF-8), a tag and the
/// answer (a u64 length and the bytes of a memory, or a number's 4 or 8
/// bytes), little-endian, the component last. Memories are copied once,
/// straight from the instance.
#[derive(Debug, Default)]
pub struct State {
    buf: Vec<u8>,
    /// Where each memory's bytes are in `buf`.
    memories: Vec<std::ops::Range<usize>>,
}

impl State {
    fn name(&mut self, name: &str, tag: u8) {
        self.buf.extend_from_slice(&(name.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(tag);
    }

    /// Adds what accessor `name` answered for a memory.
    pub fn memory(&mut self, name: &str, bytes: &[u8]) {
        self.name(name, BYTES);
        self.buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        let start = self.buf.len();
        self.buf.extend_from_slice(bytes);
        self.memories.push(start..self.buf.len());
    }

    /// Adds what accessor `name` answered for a global.
    pub fn number(&mut self, name: &str, number: Number) {
        match number {
            Number::S32(v) => {
                self.name(name, S32);
                self.buf.extend_from_slice(&v.to_le_bytes());
            }
            Number::S64(v) => {
                self.name(name, S64);
                self.buf.extend_from_slice(&v.to_le_bytes());
            }
            Number::F32(v) => {
                self.name(name, F32);
                self.buf.extend_from_slice(&v.to_le_bytes());
            }
            Number::F64(v) => {
                self.name(name, F64);
                self.buf.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// The memories' runs of non-zero bytes as the rewrite counts them
    /// (counting stops past `max`), and their non-zero bytes.
    pub fn measure(&self, max: usize) -> (usize, usize) {
        let (mut runs, mut data) = (0, 0);
        for range in &self.memories {
            let (r, d) = count_runs(&self.buf[range.clone()], max + 1 - runs);
            (runs, data) = (runs + r, data + d);
            if runs > max {
                break;
            }
        }
        (runs, data)
    }

    /// The rewrite's input: this state and `component`.
    pub fn finish(mut self, component: &[u8]) -> Vec<u8> {
        self.name("", COMPONENT);
        self.buf.extend_from_slice(&(component.len() as u64).to_le_bytes());
        self.buf.extend_from_slice(component);
        self.buf
    }
}

/// Runs of non-zero bytes in `memory` as the rewrite counts them (a run
/// also ends at every 64 KiB page's end: the engine takes no custom page
/// sizes), stopping once `max` are counted; and its non-zero bytes.
fn count_runs(memory: &[u8], max: usize) -> (usize, usize) {
    let (mut runs, mut data) = (0, 0);
    for page in memory.chunks(1 << 16) {
        let mut previous = 0u8;
        for &byte in page {
            if byte != 0 {
                data += 1;
                if previous == 0 {
                    runs += 1;
                    if runs >= max {
                        return (runs, data);
                    }
                }
            }
            previous = byte;
        }
    }
    (runs, data)
}

/// One accessor's answer, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer<'a> {
    Bytes(&'a [u8]),
    Number(Number),
}

/// Reads a [`State`]'s encoding: the component and every answer by
/// accessor name.
fn decode(mut input: &[u8]) -> Result<(&[u8], HashMap<&str, Answer<'_>>), String> {
    fn take<'a>(input: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if input.len() < n {
            return Err(format!("the state ends {} bytes early", n - input.len()));
        }
        let (head, rest) = input.split_at(n);
        *input = rest;
        Ok(head)
    }
    fn array<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], String> {
        Ok(take(input, N)?.try_into().expect("N bytes taken"))
    }
    let mut answers = HashMap::new();
    loop {
        let len = u32::from_le_bytes(array(&mut input)?) as usize;
        let name = std::str::from_utf8(take(&mut input, len)?).map_err(|_| "an accessor name is not UTF-8")?;
        let [tag] = array(&mut input)?;
        let answer = match tag {
            BYTES | COMPONENT => {
                let len = usize::try_from(u64::from_le_bytes(array(&mut input)?)).map_err(|_| "a length overflows")?;
                let bytes = take(&mut input, len)?;
                if tag == COMPONENT {
                    if !input.is_empty() {
                        return Err(format!("{} bytes follow the component", input.len()));
                    }
                    return Ok((bytes, answers));
                }
                Answer::Bytes(bytes)
            }
            S32 => Answer::Number(Number::S32(i32::from_le_bytes(array(&mut input)?))),
            S64 => Answer::Number(Number::S64(i64::from_le_bytes(array(&mut input)?))),
            F32 => Answer::Number(Number::F32(u32::from_le_bytes(array(&mut input)?))),
            F64 => Answer::Number(Number::F64(u64::from_le_bytes(array(&mut input)?))),
            other => return Err(format!("unknown tag {other} for {name}")),
        };
        if answers.insert(name, answer).is_some() {
            return Err(format!("accessor {name} answered twice"));
        }
    }
}

/// The instance as it was read: the rewrite asks its accessors again and
/// gets the answers. An accessor that was not read is a defect of ours,
/// kept and reported (the trait has no errors).
struct Replay<'a> {
    answers: HashMap<&'a str, Answer<'a>>,
    missing: Option<String>,
}

impl<'a> Replay<'a> {
    fn get(&mut self, func: &str) -> Option<Answer<'a>> {
        let answer = self.answers.get(func).copied();
        if answer.is_none() && self.missing.is_none() {
            self.missing = Some(func.to_string());
        }
        answer
    }

    fn number(&mut self, func: &str) -> Option<Number> {
        match self.get(func) {
            Some(Answer::Number(n)) => Some(n),
            _ => None,
        }
    }
}

impl ComponentInstanceState for Replay<'_> {
    async fn call_func_ret_list_u8(&mut self, _instance: &str, func: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.get(func) {
            Some(Answer::Bytes(bytes)) => contents(bytes),
            _ => contents(&[]),
        }
    }

    async fn call_func_ret_s32(&mut self, _instance: &str, func: &str) -> i32 {
        match self.number(func) {
            Some(Number::S32(v)) => v,
            _ => 0,
        }
    }

    async fn call_func_ret_s64(&mut self, _instance: &str, func: &str) -> i64 {
        match self.number(func) {
            Some(Number::S64(v)) => v,
            _ => 0,
        }
    }

    async fn call_func_ret_f32(&mut self, _instance: &str, func: &str) -> u32 {
        match self.number(func) {
            Some(Number::F32(v)) => v,
            _ => 0,
        }
    }

    async fn call_func_ret_f64(&mut self, _instance: &str, func: &str) -> u64 {
        match self.number(func) {
            Some(Number::F64(v)) => v,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_counted_as_the_rewrite_counts_them() {
        assert_eq!(count_runs(&[], 10), (0, 0));
        assert_eq!(count_runs(&[0, 0, 0], 10), (0, 0));
        assert_eq!(count_runs(&[1, 2, 0, 3, 0, 0, 4], 10), (3, 4));
        // A run across a page's end is two.
        let mut two_pages = vec![0u8; 2 << 16];
        two_pages[(1 << 16) - 1] = 1;
        two_pages[1 << 16] = 1;
        assert_eq!(count_runs(&two_pages, 10), (2, 2));
        // One non-zero byte in six, over 6 MiB: a million runs, counted
        // only up to the limit given.
        let sparse: Vec<u8> = (0..6 << 20).map(|i| u8::from(i % 6 == 0)).collect();
        assert_eq!(count_runs(&sparse, usize::MAX), ((6 << 20) / 6, (6 << 20) / 6));
        assert_eq!(count_runs(&sparse, 1000).0, 1000);
    }

    #[test]
    fn a_state_is_read_back_as_written_and_measured_across_memories() {
        let mut state = State::default();
        state.memory("m0", &[1, 0, 2]);
        state.number("g0", Number::S32(-7));
        state.number("g1", Number::S64(1 << 40));
        state.number("g2", Number::F32(1.5f32.to_bits()));
        state.number("g3", Number::F64(2.5f64.to_bits()));
        state.memory("m1", &[0, 3, 3, 0, 4]);
        assert_eq!(state.measure(100), (4, 5));
        // Counting stops past the limit, across memories too.
        assert_eq!(state.measure(2).0, 3);
        let input = state.finish(b"component");
        let (component, answers) = decode(&input).unwrap();
        assert_eq!(component, b"component");
        assert_eq!(answers.len(), 6);
        assert_eq!(answers["m0"], Answer::Bytes(&[1, 0, 2]));
        assert_eq!(answers["m1"], Answer::Bytes(&[0, 3, 3, 0, 4]));
        assert_eq!(answers["g0"], Answer::Number(Number::S32(-7)));
        assert_eq!(answers["g1"], Answer::Number(Number::S64(1 << 40)));
        assert_eq!(answers["g2"], Answer::Number(Number::F32(1.5f32.to_bits())));
        assert_eq!(answers["g3"], Answer::Number(Number::F64(2.5f64.to_bits())));
    }

    #[test]
    fn a_damaged_state_is_an_error_not_a_panic() {
        let mut state = State::default();
        state.memory("m0", &[1; 10]);
        state.number("g0", Number::S32(1));
        let input = state.finish(b"component");
        // Every truncation, and a length that points past the end.
        for end in 0..input.len() {
            assert!(decode(&input[..end]).is_err(), "truncated at {end}");
        }
        let mut long = input.clone();
        long[7..15].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&long).is_err());
        let mut tagged = input.clone();
        tagged[6] = 9;
        assert!(decode(&tagged).unwrap_err().contains("unknown tag 9"), "{:?}", decode(&tagged));
        let mut twice = State::default();
        twice.number("g", Number::S32(1));
        twice.number("g", Number::S32(2));
        assert!(decode(&twice.finish(b"")).unwrap_err().contains("twice"));
        let mut trailing = input;
        trailing.push(0);
        assert!(decode(&trailing).unwrap_err().contains("follow the component"));
    }

    #[test]
    fn the_rewrite_refuses_a_state_it_cannot_read() {
        let err = SnapshotStep::Rewrite.run(&[1, 2, 3]).unwrap_err();
        assert!(err.contains("ends"), "{err}");
        let err = SnapshotStep::Instrument.run(b"not a component").unwrap_err();
        assert!(!err.is_empty());
    }
}
