// Command witgen writes the Go bindings of the nri-wasm:policy world
// (package wit of this SDK) from the resolved WIT package as JSON:
//
//	wasm-tools component wit ../../wit --json | go run ./cmd/witgen -world policy -part types > wit/types.go
//
// (guest-sdk/go/gen-bindings.sh runs it for each part.) Three parts, so
// that a policy builds natively for its tests as well as for WebAssembly:
// -part types (wit/types.go) the world's types and Exports, for every
// platform; -part wasm (wit/bindings.go, wasip1 only) the canonical ABI;
// -part native (wit/native.go, every other platform) the imported functions
// as calls of the functions in Native, which a test host sets. It implements the
// canonical ABI for the shapes the world uses: primitives, strings, lists,
// records, enums, variants, options and results; a WIT change that needs
// anything else (flags, tuples, resources, async) makes it fail with the
// name of the type, rather than produce wrong code.
//
// What it generates, for every type of the world's interfaces, is a Go type
// (records are structs, enums are uint8 constants with String, options are
// pointers, lists are slices, variants are structs with a tag and a pointer
// per case, results are Result[T, E]) with a function that reads it from
// the policy's memory and one that writes it; for every imported function a
// Go function named <Interface><Function> (HostLog, EventPodLabel, ...); and
// for the world's exports the //go:wasmexport functions, which call the
// functions the program puts in Exports. Natively, each imported function
// calls the function of the same name in Native (a struct of functions):
// unset, it panics with the function's name.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"io"
	"os"
	"sort"
	"strings"
)

// ---- the JSON form of a resolved WIT package (wasm-tools --json) ----

type docs struct {
	Contents *string `json:"contents"`
}

type typeRef = json.RawMessage // "u32", "string", ... or a type index

type param struct {
	Name string  `json:"name"`
	Type typeRef `json:"type"`
}

type function struct {
	Name   string  `json:"name"`
	Kind   any     `json:"kind"`
	Params []param `json:"params"`
	Result typeRef `json:"result"`
	Docs   docs    `json:"docs"`
}

type field struct {
	Name string  `json:"name"`
	Type typeRef `json:"type"`
	Docs docs    `json:"docs"`
}

type caseDef struct {
	Name string  `json:"name"`
	Type typeRef `json:"type"`
	Docs docs    `json:"docs"`
}

type typeKind struct {
	Record  *struct{ Fields []field }  `json:"record"`
	Enum    *struct{ Cases []caseDef } `json:"enum"`
	Variant *struct{ Cases []caseDef } `json:"variant"`
	Option  typeRef                    `json:"option"`
	List    typeRef                    `json:"list"`
	Result  *struct {
		Ok  typeRef `json:"ok"`
		Err typeRef `json:"err"`
	} `json:"result"`
	Type  typeRef `json:"type"`
	Other string  `json:"-"`
}

type typeDef struct {
	Name  *string         `json:"name"`
	Kind  json.RawMessage `json:"kind"`
	Owner json.RawMessage `json:"owner"`
	Docs  docs            `json:"docs"`
	kind  typeKind
}

type iface struct {
	Name      *string             `json:"name"`
	Types     map[string]int      `json:"types"`
	Functions map[string]function `json:"functions"`
	Package   int                 `json:"package"`
}

type worldItem struct {
	Interface *struct {
		ID int `json:"id"`
	} `json:"interface"`
	Function *function `json:"function"`
	Type     *int      `json:"type"`
}

type world struct {
	Name    string               `json:"name"`
	Imports map[string]worldItem `json:"imports"`
	Exports map[string]worldItem `json:"exports"`
	Package int                  `json:"package"`
}

type pkg struct {
	Name string `json:"name"`
}

type resolve struct {
	Worlds     []world   `json:"worlds"`
	Interfaces []iface   `json:"interfaces"`
	Types      []typeDef `json:"types"`
	Packages   []pkg     `json:"packages"`
}

// ---- types as the generator sees them ----

// ty is a type reference: a primitive name, or an index into the types.
type ty struct {
	prim string
	id   int
}

func (g *gen) ref(raw typeRef) *ty {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return &ty{prim: s, id: -1}
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		fail("bad type reference %s", raw)
	}
	// Follow anonymous and `use`d aliases to what they name.
	for {
		k := g.kind(n)
		if k.Type == nil {
			break
		}
		// Aliases (`use`, `type x = y`) are the type they name; a
		// renaming alias is also declared as a Go alias.
		return g.ref(k.Type)
	}
	return &ty{id: n}
}

func (g *gen) kind(id int) *typeKind {
	t := &g.r.Types[id]
	if t.kind.Record == nil && t.kind.Enum == nil && t.kind.Variant == nil && t.kind.Option == nil &&
		t.kind.List == nil && t.kind.Result == nil && t.kind.Type == nil && t.kind.Other == "" {
		var s string
		if json.Unmarshal(t.Kind, &s) == nil {
			t.kind.Other = s
		} else if err := json.Unmarshal(t.Kind, &t.kind); err != nil {
			fail("type %d: %v", id, err)
		}
		if t.kind.Record == nil && t.kind.Enum == nil && t.kind.Variant == nil && t.kind.Option == nil &&
			t.kind.List == nil && t.kind.Result == nil && t.kind.Type == nil {
			var m map[string]json.RawMessage
			_ = json.Unmarshal(t.Kind, &m)
			for k := range m {
				t.kind.Other = k
			}
			if t.kind.Other == "" {
				t.kind.Other = string(t.Kind)
			}
		}
	}
	return &t.kind
}

type gen struct {
	r       resolve
	out     bytes.Buffer
	names   map[int]string // Go names of named types
	done    map[string]bool
	pending []func()
	exports []exportDecl
	natives []nativeDecl
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "witgen: "+format+"\n", args...)
	os.Exit(1)
}

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.out, format, args...)
	g.out.WriteByte('\n')
}

var initialisms = map[string]string{
	"id": "ID", "uid": "UID", "cpu": "CPU", "cpus": "CPUs", "ip": "IP", "ips": "IPs", "oom": "OOM",
	"rdt": "RDT", "io": "IO", "pid": "PID", "pids": "PIDs", "cdi": "CDI", "tcp": "TCP", "numa": "NUMA",
	"clos": "CLOS", "os": "OS",
}

// camel turns a kebab-case WIT name into an exported Go name.
func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(strings.TrimPrefix(s, "%"), "-") {
		if part == "" {
			continue
		}
		if up, ok := initialisms[part]; ok {
			b.WriteString(up)
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

var keywords = map[string]bool{
	"break": true, "case": true, "chan": true, "const": true, "continue": true, "default": true, "defer": true,
	"else": true, "fallthrough": true, "for": true, "func": true, "go": true, "goto": true, "if": true,
	"import": true, "interface": true, "map": true, "package": true, "range": true, "return": true,
	"select": true, "struct": true, "switch": true, "type": true, "var": true,
}

// local turns a WIT name into an unexported Go identifier.
func local(s string) string {
	first, rest, _ := strings.Cut(strings.TrimPrefix(s, "%"), "-")
	c := strings.ToLower(first)
	if rest != "" {
		c += camel(rest)
	}
	if keywords[c] {
		return c + "_"
	}
	return c
}

func (g *gen) goName(id int) string {
	if n, ok := g.names[id]; ok {
		return n
	}
	t := g.r.Types[id]
	if t.Name == nil {
		fail("type %d has no name", id)
	}
	return camel(*t.Name)
}

// goType is the Go type of a WIT type.
func (g *gen) goType(t *ty) string {
	if t == nil {
		return "struct{}"
	}
	if t.prim != "" {
		switch t.prim {
		case "bool":
			return "bool"
		case "u8":
			return "uint8"
		case "s8":
			return "int8"
		case "u16":
			return "uint16"
		case "s16":
			return "int16"
		case "u32":
			return "uint32"
		case "s32":
			return "int32"
		case "u64":
			return "uint64"
		case "s64":
			return "int64"
		case "f32":
			return "float32"
		case "f64":
			return "float64"
		case "char":
			return "rune"
		case "string":
			return "string"
		}
		fail("unsupported primitive %q", t.prim)
	}
	if g.r.Types[t.id].Name != nil {
		return g.goName(t.id)
	}
	k := g.kind(t.id)
	switch {
	case k.Option != nil:
		return "*" + g.goType(g.ref(k.Option))
	case k.List != nil:
		return "[]" + g.goType(g.ref(k.List))
	case k.Result != nil:
		return "Result[" + g.goType(g.ref(k.Result.Ok)) + ", " + g.goType(g.ref(k.Result.Err)) + "]"
	}
	fail("unsupported anonymous type %d (%s)", t.id, g.r.Types[t.id].Kind)
	return ""
}

// ---- canonical ABI: sizes, alignments, flattening ----

func alignTo(n, a int) int { return (n + a - 1) / a * a }

func discSize(cases int) int {
	switch {
	case cases <= 1<<8:
		return 1
	case cases <= 1<<16:
		return 2
	}
	return 4
}

func (g *gen) sizeAlign(t *ty) (int, int) {
	if t == nil {
		return 0, 1
	}
	switch t.prim {
	case "bool", "u8", "s8":
		return 1, 1
	case "u16", "s16":
		return 2, 2
	case "u32", "s32", "f32", "char":
		return 4, 4
	case "u64", "s64", "f64":
		return 8, 8
	case "string":
		return 8, 4
	case "":
	default:
		fail("unsupported primitive %q", t.prim)
	}
	k := g.kind(t.id)
	switch {
	case k.Record != nil:
		size, align := 0, 1
		for _, f := range k.Record.Fields {
			s, a := g.sizeAlign(g.ref(f.Type))
			size = alignTo(size, a) + s
			if a > align {
				align = a
			}
		}
		return alignTo(size, align), align
	case k.List != nil:
		return 8, 4
	case k.Enum != nil:
		d := discSize(len(k.Enum.Cases))
		return d, d
	case k.Option != nil:
		return g.variantSizeAlign([]*ty{nil, g.ref(k.Option)})
	case k.Result != nil:
		return g.variantSizeAlign([]*ty{g.ref(k.Result.Ok), g.ref(k.Result.Err)})
	case k.Variant != nil:
		var cases []*ty
		for _, c := range k.Variant.Cases {
			cases = append(cases, g.ref(c.Type))
		}
		return g.variantSizeAlign(cases)
	}
	fail("unsupported type %d (%s)", t.id, g.r.Types[t.id].Kind)
	return 0, 0
}

func (g *gen) variantSizeAlign(cases []*ty) (int, int) {
	d := discSize(len(cases))
	size, align := 0, d
	for _, c := range cases {
		s, a := g.sizeAlign(c)
		if s > size {
			size = s
		}
		if a > align {
			align = a
		}
	}
	return alignTo(alignTo(d, align)+size, align), align
}

func (g *gen) payloadOffset(cases []*ty) int {
	d := discSize(len(cases))
	align := d
	for _, c := range cases {
		if _, a := g.sizeAlign(c); a > align {
			align = a
		}
	}
	return alignTo(d, align)
}

// flat is the core wasm types a value flattens to ("i32", "i64", ...).
func (g *gen) flat(t *ty) []string {
	if t == nil {
		return nil
	}
	switch t.prim {
	case "bool", "u8", "s8", "u16", "s16", "u32", "s32", "char":
		return []string{"i32"}
	case "u64", "s64":
		return []string{"i64"}
	case "f32":
		return []string{"f32"}
	case "f64":
		return []string{"f64"}
	case "string":
		return []string{"i32", "i32"}
	}
	k := g.kind(t.id)
	switch {
	case k.Record != nil:
		var out []string
		for _, f := range k.Record.Fields {
			out = append(out, g.flat(g.ref(f.Type))...)
		}
		return out
	case k.List != nil:
		return []string{"i32", "i32"}
	case k.Enum != nil:
		return []string{"i32"}
	case k.Option != nil:
		return g.flatVariant([]*ty{nil, g.ref(k.Option)})
	case k.Result != nil:
		return g.flatVariant([]*ty{g.ref(k.Result.Ok), g.ref(k.Result.Err)})
	case k.Variant != nil:
		var cases []*ty
		for _, c := range k.Variant.Cases {
			cases = append(cases, g.ref(c.Type))
		}
		return g.flatVariant(cases)
	}
	fail("unsupported type %d", t.id)
	return nil
}

func (g *gen) flatVariant(cases []*ty) []string {
	var joined []string
	for _, c := range cases {
		for i, f := range g.flat(c) {
			if i >= len(joined) {
				joined = append(joined, f)
			} else if joined[i] != f {
				if (joined[i] == "i32" && f == "f32") || (joined[i] == "f32" && f == "i32") {
					joined[i] = "i32"
				} else {
					joined[i] = "i64"
				}
			}
		}
	}
	return append([]string{"i32"}, joined...)
}

func wasmGo(w string) string {
	switch w {
	case "i32":
		return "uint32"
	case "i64":
		return "uint64"
	case "f32":
		return "float32"
	}
	return "float64"
}

// ---- reading and writing values in memory ----

// liftFn is the name of the function that reads a value of type t at an
// address, generating it on first use.
func (g *gen) liftExpr(t *ty, addr string) string {
	switch t.prim {
	case "bool":
		return "(ld8(" + addr + ") != 0)"
	case "u8":
		return "ld8(" + addr + ")"
	case "s8":
		return "int8(ld8(" + addr + "))"
	case "u16":
		return "ld16(" + addr + ")"
	case "s16":
		return "int16(ld16(" + addr + "))"
	case "u32":
		return "ld32(" + addr + ")"
	case "s32":
		return "int32(ld32(" + addr + "))"
	case "char":
		return "rune(ld32(" + addr + "))"
	case "u64":
		return "ld64(" + addr + ")"
	case "s64":
		return "int64(ld64(" + addr + "))"
	case "f32":
		return "math.Float32frombits(ld32(" + addr + "))"
	case "f64":
		return "math.Float64frombits(ld64(" + addr + "))"
	case "string":
		return "liftString(" + addr + ")"
	}
	name := fmt.Sprintf("lift%d", t.id)
	if !g.done[name] {
		g.done[name] = true
		g.pending = append(g.pending, func() { g.genLift(t, name) })
	}
	return name + "(" + addr + ")"
}

func (g *gen) genLift(t *ty, name string) {
	gt := g.goType(t)
	k := g.kind(t.id)
	g.p("func %s(p uintptr) %s {", name, gt)
	switch {
	case k.Record != nil:
		g.p("return %s{", gt)
		off := 0
		for _, f := range k.Record.Fields {
			ft := g.ref(f.Type)
			s, a := g.sizeAlign(ft)
			off = alignTo(off, a)
			g.p("%s: %s,", camel(f.Name), g.liftExpr(ft, fmt.Sprintf("p+%d", off)))
			off += s
		}
		g.p("}")
	case k.Enum != nil:
		g.p("return %s(%s)", gt, g.discLoad(len(k.Enum.Cases), "p"))
	case k.List != nil:
		et := g.ref(k.List)
		s, _ := g.sizeAlign(et)
		g.p("base, n := uintptr(ld32(p)), ld32(p+4)")
		g.p("out := make(%s, n)", gt)
		g.p("for i := range out {")
		g.p("out[i] = %s", g.liftExpr(et, fmt.Sprintf("base+uintptr(i)*%d", s)))
		g.p("}")
		g.p("return out")
	case k.Option != nil:
		pt := g.ref(k.Option)
		off := g.payloadOffset([]*ty{nil, pt})
		g.p("if ld8(p) == 0 {")
		g.p("return nil")
		g.p("}")
		g.p("v := %s", g.liftExpr(pt, fmt.Sprintf("p+%d", off)))
		g.p("return &v")
	case k.Result != nil:
		ok, er := g.ref(k.Result.Ok), g.ref(k.Result.Err)
		off := g.payloadOffset([]*ty{ok, er})
		g.p("var r %s", gt)
		g.p("if ld8(p) == 0 {")
		if ok != nil {
			g.p("r.Ok = %s", g.liftExpr(ok, fmt.Sprintf("p+%d", off)))
		}
		g.p("} else {")
		g.p("r.IsErr = true")
		if er != nil {
			g.p("r.Err = %s", g.liftExpr(er, fmt.Sprintf("p+%d", off)))
		}
		g.p("}")
		g.p("return r")
	case k.Variant != nil:
		var cases []*ty
		for _, c := range k.Variant.Cases {
			cases = append(cases, g.ref(c.Type))
		}
		off := g.payloadOffset(cases)
		g.p("v := %s{Tag: %sTag(%s)}", gt, gt, g.discLoad(len(cases), "p"))
		g.p("switch v.Tag {")
		for i, c := range k.Variant.Cases {
			if cases[i] == nil {
				continue
			}
			g.p("case %d:", i)
			g.p("x := %s", g.liftExpr(cases[i], fmt.Sprintf("p+%d", off)))
			g.p("v.%s = &x", camel(c.Name))
		}
		g.p("}")
		g.p("return v")
	default:
		fail("cannot read type %d", t.id)
	}
	g.p("}")
	g.p("")
}

func (g *gen) discLoad(cases int, addr string) string {
	switch discSize(cases) {
	case 1:
		return "ld8(" + addr + ")"
	case 2:
		return "ld16(" + addr + ")"
	}
	return "ld32(" + addr + ")"
}

func (g *gen) discStore(cases int, addr, v string) string {
	switch discSize(cases) {
	case 1:
		return "st8(" + addr + ", uint8(" + v + "))"
	case 2:
		return "st16(" + addr + ", uint16(" + v + "))"
	}
	return "st32(" + addr + ", uint32(" + v + "))"
}

// lowerStmt writes v of type t at an address.
func (g *gen) lowerStmt(t *ty, addr, v string) string {
	switch t.prim {
	case "bool":
		return "st8(" + addr + ", b2u(" + v + "))"
	case "u8", "s8":
		return "st8(" + addr + ", uint8(" + v + "))"
	case "u16", "s16":
		return "st16(" + addr + ", uint16(" + v + "))"
	case "u32", "s32", "char":
		return "st32(" + addr + ", uint32(" + v + "))"
	case "u64", "s64":
		return "st64(" + addr + ", uint64(" + v + "))"
	case "f32":
		return "st32(" + addr + ", math.Float32bits(" + v + "))"
	case "f64":
		return "st64(" + addr + ", math.Float64bits(" + v + "))"
	case "string":
		return "lowerString(" + addr + ", " + v + ")"
	}
	name := fmt.Sprintf("lower%d", t.id)
	if !g.done[name] {
		g.done[name] = true
		g.pending = append(g.pending, func() { g.genLower(t, name) })
	}
	return name + "(" + addr + ", " + v + ")"
}

func (g *gen) genLower(t *ty, name string) {
	gt := g.goType(t)
	k := g.kind(t.id)
	g.p("func %s(p uintptr, v %s) {", name, gt)
	switch {
	case k.Record != nil:
		off := 0
		for _, f := range k.Record.Fields {
			ft := g.ref(f.Type)
			s, a := g.sizeAlign(ft)
			off = alignTo(off, a)
			g.p("%s", g.lowerStmt(ft, fmt.Sprintf("p+%d", off), "v."+camel(f.Name)))
			off += s
		}
	case k.Enum != nil:
		g.p("%s", g.discStore(len(k.Enum.Cases), "p", "v"))
	case k.List != nil:
		et := g.ref(k.List)
		s, a := g.sizeAlign(et)
		g.p("base := alloc(uintptr(len(v))*%d, %d)", s, a)
		g.p("for i := range v {")
		g.p("%s", g.lowerStmt(et, fmt.Sprintf("base+uintptr(i)*%d", s), "v[i]"))
		g.p("}")
		g.p("st32(p, uint32(base))")
		g.p("st32(p+4, uint32(len(v)))")
	case k.Option != nil:
		pt := g.ref(k.Option)
		off := g.payloadOffset([]*ty{nil, pt})
		g.p("if v == nil {")
		g.p("st8(p, 0)")
		g.p("return")
		g.p("}")
		g.p("st8(p, 1)")
		g.p("%s", g.lowerStmt(pt, fmt.Sprintf("p+%d", off), "*v"))
	case k.Result != nil:
		ok, er := g.ref(k.Result.Ok), g.ref(k.Result.Err)
		off := g.payloadOffset([]*ty{ok, er})
		g.p("if !v.IsErr {")
		g.p("st8(p, 0)")
		if ok != nil {
			g.p("%s", g.lowerStmt(ok, fmt.Sprintf("p+%d", off), "v.Ok"))
		}
		g.p("return")
		g.p("}")
		g.p("st8(p, 1)")
		if er != nil {
			g.p("%s", g.lowerStmt(er, fmt.Sprintf("p+%d", off), "v.Err"))
		}
	case k.Variant != nil:
		var cases []*ty
		for _, c := range k.Variant.Cases {
			cases = append(cases, g.ref(c.Type))
		}
		off := g.payloadOffset(cases)
		g.p("%s", g.discStore(len(cases), "p", "v.Tag"))
		g.p("switch v.Tag {")
		for i, c := range k.Variant.Cases {
			if cases[i] == nil {
				continue
			}
			g.p("case %d:", i)
			g.p("if v.%s == nil {", camel(c.Name))
			g.p(`panic("%s: case %s without its value")`, gt, c.Name)
			g.p("}")
			g.p("%s", g.lowerStmt(cases[i], fmt.Sprintf("p+%d", off), "*v."+camel(c.Name)))
		}
		g.p("}")
	default:
		fail("cannot write type %d", t.id)
	}
	g.p("}")
	g.p("")
}

// ---- flat parameters of imports and exports ----

// flatLower appends the flat values of v (type t) to args, as Go
// expressions, with statements that prepare them.
func (g *gen) flatLower(t *ty, v string, args *[]string, pre *[]string, n *int) {
	tmp := func() string { *n++; return fmt.Sprintf("t%d", *n) }
	switch t.prim {
	case "bool":
		*args = append(*args, "uint32(b2u("+v+"))")
		return
	case "u8", "s8", "u16", "s16", "u32", "s32", "char":
		*args = append(*args, "uint32("+v+")")
		return
	case "u64", "s64":
		*args = append(*args, "uint64("+v+")")
		return
	case "f32", "f64":
		*args = append(*args, v)
		return
	case "string":
		*args = append(*args, "stringPtr("+v+")", "uint32(len("+v+"))")
		return
	}
	k := g.kind(t.id)
	switch {
	case k.Enum != nil:
		*args = append(*args, "uint32("+v+")")
	case k.Record != nil:
		for _, f := range k.Record.Fields {
			g.flatLower(g.ref(f.Type), v+"."+camel(f.Name), args, pre, n)
		}
	case k.List != nil:
		et := g.ref(k.List)
		s, a := g.sizeAlign(et)
		b := tmp()
		*pre = append(*pre, fmt.Sprintf("%s := alloc(uintptr(len(%s))*%d, %d)", b, v, s, a),
			fmt.Sprintf("for i := range %s {\n%s\n}", v, g.lowerStmt(et, fmt.Sprintf("%s+uintptr(i)*%d", b, s), v+"[i]")))
		*args = append(*args, "uint32("+b+")", "uint32(len("+v+"))")
	case k.Option != nil:
		pt := g.ref(k.Option)
		flat := g.flat(pt)
		d := tmp()
		vals := make([]string, len(flat))
		decl := []string{fmt.Sprintf("var %s uint32", d)}
		for i, w := range flat {
			vals[i] = tmp()
			decl = append(decl, fmt.Sprintf("var %s %s", vals[i], wasmGo(w)))
		}
		var inner, innerPre []string
		g.flatLower(pt, "(*"+v+")", &inner, &innerPre, n)
		body := append([]string{d + " = 1"}, innerPre...)
		for i, e := range inner {
			body = append(body, fmt.Sprintf("%s = %s", vals[i], e))
		}
		*pre = append(*pre, strings.Join(decl, "\n"),
			fmt.Sprintf("if %s != nil {\n%s\n}", v, strings.Join(body, "\n")))
		*args = append(*args, d)
		*args = append(*args, vals...)
	default:
		fail("a parameter of type %d cannot be passed flat by this generator", t.id)
	}
}

// flatLift reads an export's parameter of type t from flat values.
func (g *gen) flatLift(t *ty, vals []string) string {
	switch t.prim {
	case "bool":
		return "(" + vals[0] + " != 0)"
	case "u8", "s8", "u16", "s16", "u32", "s32", "char", "u64", "s64":
		return g.goType(t) + "(" + vals[0] + ")"
	case "string":
		return "stringAt(uintptr(" + vals[0] + "), " + vals[1] + ")"
	}
	if k := g.kind(t.id); k.Enum != nil {
		return g.goType(t) + "(" + vals[0] + ")"
	}
	fail("an export parameter of type %d is not supported by this generator", t.id)
	return ""
}

// ---- declarations ----

func (g *gen) comment(d docs, indent string) {
	if d.Contents == nil {
		return
	}
	for _, line := range strings.Split(strings.TrimRight(*d.Contents, "\n"), "\n") {
		if line == "" {
			g.p("%s//", indent)
		} else {
			g.p("%s// %s", indent, line)
		}
	}
}

func (g *gen) declareType(id int) {
	t := g.r.Types[id]
	name := g.goName(id)
	if g.done["type "+name] {
		return
	}
	g.done["type "+name] = true
	k := g.kind(id)
	g.comment(t.Docs, "")
	switch {
	case k.Record != nil:
		g.p("type %s struct {", name)
		for _, f := range k.Record.Fields {
			g.comment(f.Docs, "\t")
			g.p("\t%s %s", camel(f.Name), g.goType(g.ref(f.Type)))
		}
		g.p("}")
	case k.Enum != nil:
		g.p("type %s uint8", name)
		g.p("")
		g.p("const (")
		for i, c := range k.Enum.Cases {
			g.comment(c.Docs, "\t")
			if i == 0 {
				g.p("\t%s%s %s = iota", name, camel(c.Name), name)
			} else {
				g.p("\t%s%s", name, camel(c.Name))
			}
		}
		g.p(")")
		g.p("")
		var names []string
		for _, c := range k.Enum.Cases {
			names = append(names, fmt.Sprintf("%q", c.Name))
		}
		g.p("var %sNames = [...]string{%s}", local(*t.Name), strings.Join(names, ", "))
		g.p("")
		g.p("// String is the WIT name of the case (%s).", names[0])
		g.p("func (v %s) String() string {", name)
		g.p("if int(v) < len(%sNames) {", local(*t.Name))
		g.p("return %sNames[v]", local(*t.Name))
		g.p("}")
		g.p(`return "%s(" + strconv.Itoa(int(v)) + ")"`, *t.Name)
		g.p("}")
		g.p("")
		g.p("// Parse%s is the case named name (the WIT name), if there is one.", name)
		g.p("func Parse%s(name string) (%s, bool) {", name, name)
		g.p("for i, n := range %sNames {", local(*t.Name))
		g.p("if n == name {")
		g.p("return %s(i), true", name)
		g.p("}")
		g.p("}")
		g.p("return 0, false")
		g.p("}")
	case k.Variant != nil:
		g.p("type %s struct {", name)
		g.p("\tTag %sTag", name)
		for _, c := range k.Variant.Cases {
			if ct := g.ref(c.Type); ct != nil {
				g.comment(c.Docs, "\t")
				g.p("\t%s *%s", camel(c.Name), g.goType(ct))
			}
		}
		g.p("}")
		g.p("")
		g.p("// %sTag says which case a %s is.", name, name)
		g.p("type %sTag uint8", name)
		g.p("")
		g.p("const (")
		for i, c := range k.Variant.Cases {
			if i == 0 {
				g.p("\t%s%s %sTag = iota", name, camel(c.Name), name)
			} else {
				g.p("\t%s%s", name, camel(c.Name))
			}
		}
		g.p(")")
	case k.Type != nil:
		g.p("type %s = %s", name, g.goType(g.ref(k.Type)))
	default:
		g.p("type %s = %s", name, g.goType(&ty{id: id}))
	}
	g.p("")
}

func (g *gen) importFunc(module, ifaceName string, f function) {
	name := camel(ifaceName) + camel(f.Name)
	if g.done["type "+name] {
		name = "Get" + name // a type of that name exists (node.topology)
	}
	var params, args, pre []string
	var wasmParams []string
	n := 0
	for _, p := range f.Params {
		t := g.ref(p.Type)
		params = append(params, local(p.Name)+" "+g.goType(t))
		before := len(args)
		g.flatLower(t, local(p.Name), &args, &pre, &n)
		for i, w := range g.flat(t) {
			wasmParams = append(wasmParams, fmt.Sprintf("p%d %s", before+i, wasmGo(w)))
		}
	}
	if len(wasmParams) > 16 {
		fail("%s: more than 16 flat parameters is not supported by this generator", name)
	}
	res := g.ref(f.Result)
	resFlat := g.flat(res)
	wasmResult := ""
	retArea := len(resFlat) > 1
	if retArea {
		wasmParams = append(wasmParams, "ret uint32")
	} else if len(resFlat) == 1 {
		wasmResult = " " + wasmGo(resFlat[0])
	}
	var paramNames []string
	for _, p := range f.Params {
		paramNames = append(paramNames, local(p.Name))
	}
	resDecl := ""
	if res != nil {
		resDecl = " " + g.goType(res)
	}
	g.natives = append(g.natives, nativeDecl{name: name, params: strings.Join(params, ", "),
		args: strings.Join(paramNames, ", "), result: resDecl, docs: f.Docs, wit: module + "#" + f.Name})
	raw := "wasmimport" + name
	g.p("//go:wasmimport %s %s", module, f.Name)
	g.p("//go:noescape")
	g.p("func %s(%s)%s", raw, strings.Join(wasmParams, ", "), wasmResult)
	g.p("")
	g.comment(f.Docs, "")
	resType := ""
	if res != nil {
		resType = " " + g.goType(res)
	}
	g.p("func %s(%s)%s {", name, strings.Join(params, ", "), resType)
	for _, s := range pre {
		g.p("%s", s)
	}
	switch {
	case retArea:
		s, a := g.sizeAlign(res)
		g.p("ret := alloc(%d, %d)", s, a)
		g.p("%s(%s)", raw, strings.Join(append(args, "uint32(ret)"), ", "))
	case len(resFlat) == 1:
		g.p("r := %s(%s)", raw, strings.Join(args, ", "))
	default:
		g.p("%s(%s)", raw, strings.Join(args, ", "))
	}
	for _, p := range f.Params {
		g.p("runtime.KeepAlive(%s)", local(p.Name))
	}
	switch {
	case retArea:
		g.p("return %s", g.liftExpr(res, "ret"))
	case len(resFlat) == 1:
		g.p("return %s", g.flatLift(res, []string{"r"}))
	}
	g.p("}")
	g.p("")
}

func (g *gen) exportFunc(f function) {
	name := camel(f.Name)
	var sig, wasmParams, args []string
	n := 0
	for _, p := range f.Params {
		t := g.ref(p.Type)
		sig = append(sig, local(p.Name)+" "+g.goType(t))
		var vals []string
		for _, w := range g.flat(t) {
			v := fmt.Sprintf("p%d", n)
			n++
			vals = append(vals, v)
			wasmParams = append(wasmParams, v+" "+wasmGo(w))
		}
		args = append(args, g.flatLift(t, vals))
	}
	res := g.ref(f.Result)
	resFlat := g.flat(res)
	resType := ""
	if res != nil {
		resType = " " + g.goType(res)
	}
	g.exports = append(g.exports, exportDecl{name: name, sig: "func(" + strings.Join(sig, ", ") + ")" + resType, docs: f.Docs})
	wasmResult := ""
	switch {
	case len(resFlat) > 1:
		wasmResult = " uint32"
	case len(resFlat) == 1:
		wasmResult = " " + wasmGo(resFlat[0])
	}
	g.p("//go:wasmexport %s", f.Name)
	g.p("func wasmexport%s(%s)%s {", name, strings.Join(wasmParams, ", "), wasmResult)
	g.p("if Exports.%s == nil {", name)
	g.p(`panic("wit.Exports.%s is not set: the program must set it in an init function")`, name)
	g.p("}")
	call := "Exports." + name + "(" + strings.Join(args, ", ") + ")"
	switch {
	case len(resFlat) > 1:
		s, a := g.sizeAlign(res)
		g.p("r := %s", call)
		g.p("ret := alloc(%d, %d)", s, a)
		g.p("%s", g.lowerStmt(res, "ret", "r"))
		g.p("return uint32(ret)")
	case len(resFlat) == 1:
		fail("export %s: single flat results are not supported by this generator", f.Name)
	default:
		g.p("%s", call)
	}
	g.p("}")
	g.p("")
}

// nativeDecl is an imported function as the native part declares it.
type nativeDecl struct {
	name, params, args, result, wit string
	docs                            docs
}

type exportDecl struct {
	name, sig string
	docs      docs
}

func main() {
	worldName := flag.String("world", "policy", "the world to generate")
	pkgName := flag.String("package", "wit", "the Go package name")
	part := flag.String("part", "", "which file: types, wasm or native")
	flag.Parse()
	if *part != "types" && *part != "wasm" && *part != "native" {
		fail("-part must be types, wasm or native")
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	g := &gen{names: map[int]string{}, done: map[string]bool{}}
	if err := json.Unmarshal(input, &g.r); err != nil {
		fail("parsing the resolved WIT (wasm-tools component wit --json): %v", err)
	}
	var w *world
	for i := range g.r.Worlds {
		if g.r.Worlds[i].Name == *worldName {
			w = &g.r.Worlds[i]
		}
	}
	if w == nil {
		fail("no world %q", *worldName)
	}
	pkgOf := func(i int) string { return g.r.Packages[i].Name }

	// Interfaces the world imports, in the order of their ids (stable).
	var ids []int
	for _, item := range w.Imports {
		if item.Interface != nil {
			ids = append(ids, item.Interface.ID)
		}
		if item.Function != nil {
			fail("world-level imported functions are not supported by this generator")
		}
	}
	for _, item := range w.Exports {
		if item.Interface != nil {
			fail("exported interfaces are not supported by this generator")
		}
	}
	sort.Ints(ids)

	// Named types: every type an interface defines. `use`d types are
	// aliases of the same name and need no declaration of their own.
	seen := map[string]int{}
	var named []int
	for _, id := range ids {
		in := g.r.Interfaces[id]
		var typeNames []string
		for n := range in.Types {
			typeNames = append(typeNames, n)
		}
		sort.Strings(typeNames)
		for _, n := range typeNames {
			tid := in.Types[n]
			k := g.kind(tid)
			if k.Other != "" {
				fail("type %s of interface %s is a %s, which this generator does not support", n, *in.Name, k.Other)
			}
			if k.Type != nil {
				target := g.ref(k.Type)
				if target.prim == "" && g.r.Types[target.id].Name != nil && *g.r.Types[target.id].Name == n {
					continue // `use types.{x}`: the same type
				}
			}
			goName := camel(n)
			if other, dup := seen[goName]; dup && other != tid {
				goName = camel(*in.Name) + goName
			}
			seen[goName] = tid
			g.names[tid] = goName
			named = append(named, tid)
		}
	}

	g.out = bytes.Buffer{}
	g.p("// ---- types ----")
	g.p("")
	for _, id := range named {
		g.declareType(id)
	}
	types := g.out
	g.out = bytes.Buffer{}
	g.p("// ---- imported functions ----")
	g.p("")
	for _, id := range ids {
		in := g.r.Interfaces[id]
		module := fmt.Sprintf("%s/%s", strings.SplitN(pkgOf(in.Package), "@", 2)[0], *in.Name)
		if v := strings.SplitN(pkgOf(in.Package), "@", 2); len(v) == 2 {
			module += "@" + v[1]
		}
		var fnames []string
		for n := range in.Functions {
			fnames = append(fnames, n)
		}
		sort.Strings(fnames)
		for _, n := range fnames {
			g.importFunc(module, *in.Name, in.Functions[n])
		}
	}
	g.p("// ---- exported functions ----")
	g.p("")
	var enames []string
	for n, item := range w.Exports {
		if item.Function != nil {
			enames = append(enames, n)
		}
	}
	sort.Strings(enames)
	for _, n := range enames {
		g.exportFunc(*w.Exports[n].Function)
	}
	g.p("// ---- reading and writing values ----")
	g.p("")
	for len(g.pending) > 0 {
		next := g.pending[0]
		g.pending = g.pending[1:]
		next()
	}
	generated := g.out

	g.out = bytes.Buffer{}
	g.p("// Code generated by guest-sdk/go/cmd/witgen from the WIT package %s, world %s. DO NOT EDIT.", pkgOf(w.Package), *worldName)
	g.p("")
	switch *part {
	case "types":
		g.p("package %s", *pkgName)
		g.p("")
		g.p(`import "strconv"`)
		g.p("")
		g.p("var _ = strconv.Itoa")
		g.p("")
		g.p("// Exports are the world's exports, implemented by the program: it sets")
		g.p("// them in an init function (the SDK's nriwasm.Register does).")
		g.p("var Exports struct {")
		for _, e := range g.exports {
			g.comment(e.docs, "\t")
			g.p("\t%s %s", e.name, e.sig)
		}
		g.p("}")
		g.p("")
		g.out.Write(types.Bytes())
	case "wasm":
		g.p("//go:build wasip1")
		g.p("")
		g.p("package %s", *pkgName)
		g.p("")
		g.p("import (")
		g.p(`"math"`)
		g.p(`"runtime"`)
		g.p(")")
		g.p("")
		g.p("var _ = math.Float32bits")
		g.p("")
		g.out.Write(generated.Bytes())
	case "native":
		g.p("//go:build !wasip1")
		g.p("")
		g.p("// Natively (a policy's tests), the imported functions call the functions")
		g.p("// of Native, which the SDK's test host sets for the call it runs.")
		g.p("")
		g.p("package %s", *pkgName)
		g.p("")
		g.p("// Trapped is what Trap panics with natively: the test host recovers it")
		g.p("// as the failure of the call, as the host reports a trap.")
		g.p("type Trapped struct{}")
		g.p("")
		g.p("// Trap ends the call at once.")
		g.p("func Trap() {")
		g.p("panic(Trapped{})")
		g.p("}")
		g.p("")
		g.p("// Native holds the imported functions of a native build.")
		g.p("var Native struct {")
		for _, n := range g.natives {
			g.p("\t%s func(%s)%s", n.name, n.params, n.result)
		}
		g.p("}")
		g.p("")
		for _, n := range g.natives {
			g.comment(n.docs, "")
			g.p("func %s(%s)%s {", n.name, n.params, n.result)
			g.p("if Native.%s == nil {", n.name)
			g.p(`panic("%s (wit.%s) was called outside a call of the test host")`, n.wit, n.name)
			g.p("}")
			ret := ""
			if n.result != "" {
				ret = "return "
			}
			g.p("%sNative.%s(%s)", ret, n.name, n.args)
			g.p("}")
			g.p("")
		}
	}
	src, err := format.Source(g.out.Bytes())
	if err != nil {
		os.Stdout.Write(g.out.Bytes())
		fail("formatting the output: %v", err)
	}
	os.Stdout.Write(src)
}
