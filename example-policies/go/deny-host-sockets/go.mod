module nri-wasm.local/deny-host-sockets

go 1.27

require nri-wasm.local/nriwasm v0.0.0
