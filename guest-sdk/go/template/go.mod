module nri-wasm.local/{{name}}

go 1.27

// The SDK is in {{sdk}}; build.sh builds in a Go workspace with it, so
// nothing is fetched from a module proxy.
require nri-wasm.local/nriwasm v0.0.0
