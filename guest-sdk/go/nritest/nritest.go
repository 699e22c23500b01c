//go:build !wasip1

// Package nritest runs a Go policy's handlers natively, in `go test`, no
// WebAssembly build:
//
//	func TestLabel(t *testing.T) {
//		out := nritest.NewHost().Run(nritest.Fixture(t, "fixtures/create-container.json"))
//		if got := out.Lines(t); !reflect.DeepEqual(got, []string{"env TEAM=payments"}) { ... }
//	}
//
// The policy's package registers itself in its init function, as in the
// component; the test host then does what the host does for a call:
// Configure with the settings, then Handle of the event's kind if the
// policy subscribed to it, with the world's imported functions (wit.Native
// in a native build) answered from the event, a node view, facts and an
// in-memory state (committed when the event succeeds). Events are read from
// NRI's protobuf JSON as `nri-wasm eval --input` reads them, and replies are
// described in the lines `eval` prints, so a test's expectation and the
// host's answer compare directly. What it does not do: limits (fuel, time,
// memory), a chain of several policies, and a fresh instance per call
// (check and eval do). It builds for the host machine only (not wasip1).
package nritest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"nri-wasm.local/nriwasm/wit"
)

// ---- events ----------------------------------------------------------------

// Event is an event as the host shows it to a policy.
type Event struct {
	Whole wit.Event
}

var rpcWord = regexp.MustCompile(`[A-Z][a-z]*`)

// EventFromJSON reads an event in NRI's protobuf JSON: {"event": "<RPC
// name>", "request": {...}}, as `nri-wasm eval --input` reads it.
func EventFromJSON(text []byte) (*Event, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, err
	}
	rpc, ok := doc["event"].(string)
	request, has := doc["request"]
	if !ok || !has {
		return nil, fmt.Errorf(`expected {"event": "<RPC name>", "request": {...}}`)
	}
	for k := range doc {
		if k != "event" && k != "request" {
			return nil, fmt.Errorf("unknown field %q", k)
		}
	}
	kind, ok := wit.ParseEventKind(strings.ToLower(strings.Join(rpcWord.FindAllString(rpc, -1), "-")))
	if !ok {
		return nil, fmt.Errorf("unknown event %q", rpc)
	}
	var e wit.Event
	e.Tag = wit.EventTag(kind)
	if kind != wit.EventKindSynchronize {
		// The case's field: the variant's fields follow its tags, after Tag.
		field := reflect.ValueOf(&e).Elem().Field(int(kind) + 1)
		if err := fromJSON(request, field, rpc+"Request"); err != nil {
			return nil, err
		}
	}
	return &Event{Whole: e}, nil
}

// Fixture reads the event of a file (a path relative to the package's
// directory, where `go test` runs), failing the test if it cannot.
func Fixture(t testing.TB, path string) *Event {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	e, err := EventFromJSON(text)
	if err != nil {
		abs, _ := filepath.Abs(path)
		t.Fatalf("%s: %v", abs, err)
	}
	return e
}

// Kind is the event's kind.
func (e *Event) Kind() wit.EventKind { return wit.EventKind(e.Whole.Tag) }

// payload is the case's record (nil on synchronize).
func (e *Event) payload() reflect.Value {
	if e.Whole.Tag == wit.EventSynchronize {
		return reflect.Value{}
	}
	p := reflect.ValueOf(&e.Whole).Elem().Field(int(e.Whole.Tag) + 1)
	if p.IsNil() {
		return reflect.Value{}
	}
	return p.Elem()
}

// Pod is the event's pod, to change in place; nil on synchronize.
func (e *Event) Pod() *wit.PodSandbox {
	p := e.payload()
	if !p.IsValid() {
		return nil
	}
	return p.FieldByName("Pod").Addr().Interface().(*wit.PodSandbox)
}

// Container is the event's container, to change in place; nil on pod events.
func (e *Event) Container() *wit.Container {
	p := e.payload()
	if !p.IsValid() {
		return nil
	}
	f := p.FieldByName("Container")
	if !f.IsValid() {
		return nil
	}
	return f.Addr().Interface().(*wit.Container)
}

// Clone is a deep copy, for changing one test's event without touching another's.
func (e *Event) Clone() *Event {
	var c wit.Event
	deepCopy(reflect.ValueOf(&c).Elem(), reflect.ValueOf(e.Whole))
	return &Event{Whole: c}
}

func deepCopy(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if !src.IsNil() {
			p := reflect.New(src.Type().Elem())
			deepCopy(p.Elem(), src.Elem())
			dst.Set(p)
		}
	case reflect.Slice:
		if !src.IsNil() {
			s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
			for i := 0; i < src.Len(); i++ {
				deepCopy(s.Index(i), src.Index(i))
			}
			dst.Set(s)
		}
	case reflect.Struct:
		for i := 0; i < src.NumField(); i++ {
			deepCopy(dst.Field(i), src.Field(i))
		}
	default:
		dst.Set(src)
	}
}

// WithoutPodLabel is a copy without the pod label key.
func (e *Event) WithoutPodLabel(key string) *Event {
	c := e.Clone()
	c.Pod().Labels = without(c.Pod().Labels, key)
	return c
}

// WithPodLabel is a copy with the pod label key set.
func (e *Event) WithPodLabel(key, value string) *Event {
	c := e.Clone()
	c.Pod().Labels = with(c.Pod().Labels, key, value)
	return c
}

// WithPodAnnotation is a copy with the pod annotation key set.
func (e *Event) WithPodAnnotation(key, value string) *Event {
	c := e.Clone()
	c.Pod().Annotations = with(c.Pod().Annotations, key, value)
	return c
}

// WithContainerAnnotation is a copy with the container annotation key set.
func (e *Event) WithContainerAnnotation(key, value string) *Event {
	c := e.Clone()
	c.Container().Annotations = with(c.Container().Annotations, key, value)
	return c
}

func without(kvs []wit.KeyValue, key string) []wit.KeyValue {
	var out []wit.KeyValue
	for _, kv := range kvs {
		if kv.Key != key {
			out = append(out, kv)
		}
	}
	return out
}

func with(kvs []wit.KeyValue, key, value string) []wit.KeyValue {
	out := append(without(kvs, key), wit.KeyValue{Key: key, Value: value})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// ---- the host ----------------------------------------------------------------

// Host is a host for native tests: settings, a node view, facts and the
// policy's committed state, kept across the calls it runs.
type Host struct {
	Settings   string
	Pods       map[string]wit.PodInfo
	Containers map[string]wit.ContainerInfo
	Topology   wit.NodeTopology
	Runtime    wit.RuntimeInfo
	Node       wit.NodeInfo
	// State is the policy's committed state; StateLimit its most bytes.
	State      map[string]string
	StateLimit int
}

// NewHost is a host of no settings, an empty view of 8 CPUs on two NUMA
// nodes and 16 GiB, an unconfigured runtime (empty strings), node `node-1`,
// empty state of 1 MiB.
func NewHost() *Host {
	const gib = 1 << 30
	return &Host{
		Pods:       map[string]wit.PodInfo{},
		Containers: map[string]wit.ContainerInfo{},
		Topology: wit.NodeTopology{
			OnlineCPUs: []uint32{0, 1, 2, 3, 4, 5, 6, 7},
			NUMANodes: []wit.NUMANode{
				{ID: 0, CPUs: []uint32{0, 1, 2, 3}, MemoryBytes: 8 * gib},
				{ID: 1, CPUs: []uint32{4, 5, 6, 7}, MemoryBytes: 8 * gib},
			},
			MemoryBytes: 16 * gib,
		},
		Node:       wit.NodeInfo{Hostname: "node-1", Arch: "x86_64", CPUs: 8, MemoryBytes: 16 * gib},
		State:      map[string]string{},
		StateLimit: 1 << 20,
	}
}

// WithSettings sets the text Configure receives (JSON: the policy file's [settings]).
func (h *Host) WithSettings(text string) *Host {
	h.Settings = text
	return h
}

// WithPod adds a pod to the node view.
func (h *Host) WithPod(p wit.PodInfo) *Host {
	h.Pods[p.ID] = p
	return h
}

// WithContainer adds a container to the node view.
func (h *Host) WithContainer(c wit.ContainerInfo) *Host {
	h.Containers[c.ID] = c
	return h
}

// WithState sets a key of the committed state.
func (h *Host) WithState(key, value string) *Host {
	h.State[key] = value
	return h
}

// Configure runs the policy's configure as the host does when it loads the
// policy: its subscription, or its error (invalid settings).
func (h *Host) Configure() ([]wit.EventKind, error) {
	kinds, err, _ := h.configure()
	return kinds, err
}

func (h *Host) configure() (kinds []wit.EventKind, err error, logs []string) {
	c := h.enter(nil)
	defer leave()
	if wit.Exports.Configure == nil {
		return nil, fmt.Errorf("no policy registered (its package's init calls nriwasm.Register)"), nil
	}
	failure := c.guard(func() {
		r := wit.Exports.Configure(h.Settings)
		if r.IsErr {
			err = fmt.Errorf("%s", r.Err)
		} else {
			kinds = r.Ok
		}
	})
	if failure != "" {
		err = fmt.Errorf("configure failed: %s", failure)
	}
	if err == nil {
		err = beyondDeclaration(kinds)
	}
	return kinds, err, c.logs
}

// beyondDeclaration is what the host says of a subscription beyond the
// policy's declaration: the events configure answered that the file
// `events` of the policy's directory (the current one: go test runs in
// it), which build.sh records in the component, does not list; nil when
// all are listed, or without the file (the component then declares
// nothing).
func beyondDeclaration(kinds []wit.EventKind) error {
	text, err := os.ReadFile("events")
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var declared []string
	for _, line := range strings.Split(string(text), "\n") {
		line, _, _ = strings.Cut(line, "#")
		declared = append(declared, strings.FieldsFunc(line, func(r rune) bool {
			return r == ',' || r == ' ' || r == '\t' || r == '\r'
		})...)
	}
	var undeclared []string
	for _, k := range kinds {
		name := k.String()
		listed := false
		for _, d := range append(declared, undeclared...) {
			listed = listed || d == name
		}
		if !listed {
			undeclared = append(undeclared, name)
		}
	}
	if len(undeclared) == 0 {
		return nil
	}
	has := strings.Join(declared, ", ")
	if has == "" {
		has = "none"
	}
	return fmt.Errorf("configure subscribes to %s, which the file events does not declare (it declares %s): add them to events", strings.Join(undeclared, ", "), has)
}

// Run runs event through the policy as the host would. It panics if
// configure refuses the settings: the host would not have loaded the policy.
func (h *Host) Run(event *Event) *Outcome {
	kinds, err, logs := h.configure()
	if err != nil {
		panic(fmt.Sprintf("configure rejected the settings %q: %v (the host would not load the policy)", h.Settings, err))
	}
	kind := event.Kind()
	out := &Outcome{Kind: kind, Logs: logs}
	subscribed := false
	for _, k := range kinds {
		subscribed = subscribed || k == kind
	}
	if !subscribed {
		out.State = copyMap(h.State)
		return out
	}
	out.Called = true
	c := h.enter(event.Clone())
	defer leave()
	out.Failure = c.guard(func() {
		r := wit.Exports.Handle(kind)
		if r.IsErr {
			out.Denied, out.denied = r.Err, true
		} else {
			out.reply = r.Ok
		}
	})
	out.Logs = append(out.Logs, c.logs...)
	if out.Failure == "" && !out.denied {
		h.State = c.state
	}
	out.State = copyMap(h.State)
	return out
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Outcome is what a call answered, logged and left in the state.
type Outcome struct {
	Kind wit.EventKind
	// Called says whether the handler ran (the policy subscribed to the kind).
	Called bool
	// Denied is the reason of a denial.
	Denied string
	denied bool
	// Failure is what a failed call (a panic: a bug) left: the SDK's log of
	// the panic with its stack.
	Failure string
	// Logs are the "level: message" lines configure and the handler logged.
	Logs  []string
	State map[string]string
	reply wit.Reply
}

// Reply is the reply; it fails the test if the event was denied or the call failed.
func (o *Outcome) Reply(t testing.TB) wit.Reply {
	t.Helper()
	if o.Failure != "" {
		t.Fatalf("the %s handler failed:\n%s", o.Kind, o.Failure)
	}
	if o.denied {
		t.Fatalf("the policy denied %s: %s", o.Kind, o.Denied)
	}
	return o.reply
}

// Denial is the reason of the denial; it fails the test if the policy did not deny.
func (o *Outcome) Denial(t testing.TB) string {
	t.Helper()
	if o.Failure != "" {
		t.Fatalf("the %s handler failed (it did not deny):\n%s", o.Kind, o.Failure)
	}
	if !o.denied {
		t.Fatalf("the policy did not deny %s; it replied %q", o.Kind, Describe(o.reply))
	}
	return o.Denied
}

// Lines is the reply as the lines `nri-wasm eval` prints, sorted.
func (o *Outcome) Lines(t testing.TB) []string {
	t.Helper()
	return Describe(o.Reply(t))
}

// Logged says whether some logged line contains text.
func (o *Outcome) Logged(text string) bool {
	for _, l := range o.Logs {
		if strings.Contains(l, text) {
			return true
		}
	}
	return false
}
