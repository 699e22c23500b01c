//go:build wasip1

// The canonical ABI runtime the generated bindings (bindings.go) use:
// memory the host writes into, reads and writes of values in memory, and
// cabi_realloc.
//
// An instance of a policy lives for one call, so nothing here is ever
// freed: every block handed to the host or filled by it is kept reachable
// (in kept) until the instance is dropped, which also keeps Go's garbage
// collector from reusing memory the host still reads after a function
// returned.
package wit

import (
	"unsafe"
)

var kept [][]uint64
var keptStrings []string

// alloc returns size bytes of zeroed memory aligned to align (at most 8),
// kept for the life of the instance.
func alloc(size, align uintptr) uintptr {
	if size == 0 {
		return align
	}
	block := make([]uint64, (size+7)/8)
	kept = append(kept, block)
	return uintptr(unsafe.Pointer(&block[0]))
}

// scratch is where the Go adapter (guest-sdk/go/adapter) puts the results
// of the WASI calls it makes for Go's runtime.
var scratch [4]uint64

//go:wasmimport wasi_snapshot_preview1 nri_wasm_set_scratch
func setScratch(p unsafe.Pointer)

//go:wasmimport wasi_snapshot_preview1 nri_wasm_clock_pause
func clockPause(on uint32)

func init() {
	setScratch(unsafe.Pointer(&scratch[0]))
}

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	// A component may not call its imports from cabi_realloc, and Go's
	// allocator may read the clock (garbage collection): the adapter
	// answers the last time it read meanwhile.
	clockPause(1)
	p := alloc(uintptr(newSize), uintptr(align))
	if old != nil && oldSize > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(p)), oldSize), unsafe.Slice((*byte)(old), oldSize))
	}
	clockPause(0)
	return unsafe.Pointer(p)
}

func mem(p uintptr) unsafe.Pointer { return unsafe.Pointer(p) }

func ld8(p uintptr) uint8   { return *(*uint8)(mem(p)) }
func ld16(p uintptr) uint16 { return *(*uint16)(mem(p)) }
func ld32(p uintptr) uint32 { return *(*uint32)(mem(p)) }
func ld64(p uintptr) uint64 { return *(*uint64)(mem(p)) }

func st8(p uintptr, v uint8)   { *(*uint8)(mem(p)) = v }
func st16(p uintptr, v uint16) { *(*uint16)(mem(p)) = v }
func st32(p uintptr, v uint32) { *(*uint32)(mem(p)) = v }
func st64(p uintptr, v uint64) { *(*uint64)(mem(p)) = v }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// stringAt copies n bytes at p into a Go string.
func stringAt(p uintptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(mem(p)), n))
}

func liftString(p uintptr) string { return stringAt(uintptr(ld32(p)), ld32(p+4)) }

// stringPtr is the address of a string's bytes, for the host to read
// during a call (the caller keeps the string alive).
func stringPtr(s string) uint32 {
	if len(s) == 0 {
		return 1
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s))))
}

// lowerString writes a string's address and length; the string is kept
// alive, since the host may read it after the export returned.
func lowerString(p uintptr, s string) {
	if len(s) > 0 {
		keptStrings = append(keptStrings, s)
	}
	st32(p, stringPtr(s))
	st32(p+4, uint32(len(s)))
}

//go:wasmimport wasi_snapshot_preview1 proc_exit
func procExit(code uint32)

// Trap ends the call at once: the adapter's proc_exit traps.
func Trap() {
	procExit(2)
}
