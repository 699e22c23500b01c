//! Generates the NRI messages and ttrpc services from `host/proto/nri.proto`
//! into `OUT_DIR` with the pure-Rust protobuf parser (no `protoc` needed).

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let proto_dir = manifest.join("../proto");
    let proto = proto_dir.join("nri.proto");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed={}", proto.display());

    ttrpc_codegen::Codegen::new()
        .out_dir(&out)
        .inputs([&proto])
        .include(&proto_dir)
        .rust_protobuf()
        .customize(ttrpc_codegen::Customize { async_all: true, ..Default::default() })
        .run()
        .expect("generating NRI code from nri.proto");

    // The generator's own mod.rs lists only the message module; name both.
    std::fs::write(out.join("generated.rs"), "#[doc(hidden)]\npub mod nri;\n#[doc(hidden)]\npub mod nri_ttrpc;\n")
        .expect("writing generated.rs");
}
