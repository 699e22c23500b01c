module nri-wasm.local/nriwasm

go 1.27
