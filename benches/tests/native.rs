//! The native baseline must do what the realistic guest does, or the ratio
//! in docs/performance.md compares different work.

use std::time::Duration;

use nri_wasm_benches::{native_chain, request, Bench};

#[test]
fn native_chain_answers_like_the_wasm_chain() {
    let bench = Bench::new();
    let req = request();
    for n in [1, 10] {
        let wasm = bench.create(&bench.realistic(n), Duration::from_secs(10), &req).unwrap().value;
        let native = native_chain(n, &req).unwrap();
        assert_eq!(wasm, native, "{n} policies");
        // Reading the whole records instead of single fields changes nothing
        // but the cost.
        let full = bench.create(&bench.realistic_full(n), Duration::from_secs(10), &req).unwrap().value;
        assert_eq!(full, native, "{n} policies reading everything");
        // The lean guest does the same work without std, WASI or the SDK;
        // without reading the environment it counts no `APP_` variables.
        let lean = bench.create(&bench.lean(n, ""), Duration::from_secs(10), &req).unwrap().value;
        assert_eq!(lean, native, "{n} lean policies");
        let noenv = bench.create(&bench.lean(n, "e"), Duration::from_secs(10), &req).unwrap().value;
        let summary = noenv.adjust.as_ref().unwrap().annotations.values().next().unwrap();
        assert!(summary.contains(" env=0 "), "{summary}");
        let read = native.adjust.as_ref().unwrap().annotations.values().next().unwrap();
        assert!(!read.contains(" env=0 "), "the request has `APP_` variables to count: {read}");
        let adjust = wasm.adjust.as_ref().unwrap();
        assert_eq!((adjust.annotations.len(), adjust.env.len()), (n, n));
        let shares = adjust.linux.resources.cpu.shares.value;
        assert_eq!(shares, 1024, "settings 0 raises the CPU shares");
    }
}
