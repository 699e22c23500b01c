//! Feeds arbitrary bytes, in arbitrary chunkings, to the mux frame decoder.
//! It must never panic, never hand out a frame larger than the cap or for a
//! conn other than 1 and 2, and must either decode everything or stop at the
//! first error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_wasm::nri::mux::{FrameDecoder, MAX_FRAME_PAYLOAD, PLUGIN_CONN, RUNTIME_CONN};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let chunk = usize::from(split).max(1);
    let mut decoder = FrameDecoder::new();
    for part in rest.chunks(chunk) {
        decoder.extend(part);
        loop {
            match decoder.decode() {
                Ok(Some(frame)) => {
                    assert!(frame.conn == PLUGIN_CONN || frame.conn == RUNTIME_CONN);
                    assert!(frame.payload.len() <= MAX_FRAME_PAYLOAD);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = decoder.finish();
});
