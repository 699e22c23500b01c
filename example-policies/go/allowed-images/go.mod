module nri-wasm.local/allowed-images

go 1.27

require nri-wasm.local/nriwasm v0.0.0
