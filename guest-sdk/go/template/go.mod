module nri-wasm.local/{{name}}

go 1.27

// The SDK (nri-wasm:policy@0.3.0) is found by sdk.sh; build.sh and
// test.sh work in a Go workspace with it, so nothing is fetched from a
// module proxy.
require nri-wasm.local/nriwasm v0.3.0
