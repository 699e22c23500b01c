// Fails on purpose, as the settings text says (see ../README.md).
package main

import (
	nri "nri-wasm.local/nriwasm"
)

var sink map[string]int

func down(n int) int {
	var frame [64]int
	frame[n%64] = n
	return down(n+1) + frame[0]
}

func create(e *nri.Event) (nri.Reply, error) {
	switch nri.Settings() {
	case "exception":
		sink["fault injected: exception"] = 1
	case "panic":
		panic("fault injected: panic")
	case "trap":
		nri.Trap()
	case "recursion":
		down(0)
	case "loop":
		for {
		}
	case "deny":
		return nri.None(), nri.Deny("fault injected: denial")
	}
	return nri.None(), nil
}

func init() {
	nri.Register(nri.Policy{On: map[nri.EventKind]nri.Handler{nri.CreateContainer: create}})
}

func main() {}
