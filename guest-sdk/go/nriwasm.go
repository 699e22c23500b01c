// Package nriwasm writes nri-wasm policies in Go.
//
// A policy registers a Policy in an init function: the handlers of the
// events it wants, and optionally a check of its settings. Every event
// without a handler gets an empty reply.
//
//	func init() {
//		nriwasm.Register(nriwasm.Policy{
//			On: map[nriwasm.EventKind]nriwasm.Handler{
//				nriwasm.CreateContainer: createContainer,
//			},
//		})
//	}
//
//	func createContainer(e *nriwasm.Event) (nriwasm.Reply, error) {
//		if v, ok := e.ContainerAnnotation("example.com/privileged"); ok && v == "true" {
//			return nriwasm.None(), fmt.Errorf("container %s asks for privileges", e.ContainerMeta().Name)
//		}
//		return nriwasm.Adjust(nriwasm.NewAdjustment().SetAnnotation("example.com/seen", "yes")), nil
//	}
//
//	func main() {}
//
// A handler's error denies the event with its text; a panic is a failure
// of the policy (the host reports Go's panic message), which the policy's
// on-error setting decides about. Settings arrive as JSON (an operator's
// [settings] table): SettingsJSON reads them.
//
// The package wit has the generated bindings of the whole world (every
// type, every imported function); this package re-exports the types a
// policy uses most.
package nriwasm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"

	"nri-wasm.local/nriwasm/wit"
)

// The types of the world, as generated.
type (
	EventKind                = wit.EventKind
	Reply                    = wit.Reply
	ContainerAdjustment      = wit.ContainerAdjustment
	LinuxContainerAdjustment = wit.LinuxContainerAdjustment
	ContainerUpdate          = wit.ContainerUpdate
	ContainerEviction        = wit.ContainerEviction
	KeyValue                 = wit.KeyValue
	PodSandbox               = wit.PodSandbox
	Container                = wit.Container
	PodMeta                  = wit.PodMeta
	ContainerMeta            = wit.ContainerMeta
	LinuxResources           = wit.LinuxResources
	LinuxMemory              = wit.LinuxMemory
	LinuxCPU                 = wit.LinuxCPU
	LinuxPIDs                = wit.LinuxPIDs
	Mount                    = wit.Mount
	PosixRlimit              = wit.PosixRlimit
	LogLevel                 = wit.LogLevel
	WholeEvent               = wit.Event
)

// Event kinds.
const (
	RunPodSandbox               = wit.EventKindRunPodSandbox
	StopPodSandbox              = wit.EventKindStopPodSandbox
	RemovePodSandbox            = wit.EventKindRemovePodSandbox
	CreateContainer             = wit.EventKindCreateContainer
	PostCreateContainer         = wit.EventKindPostCreateContainer
	StartContainer              = wit.EventKindStartContainer
	PostStartContainer          = wit.EventKindPostStartContainer
	UpdateContainer             = wit.EventKindUpdateContainer
	PostUpdateContainer         = wit.EventKindPostUpdateContainer
	StopContainer               = wit.EventKindStopContainer
	RemoveContainer             = wit.EventKindRemoveContainer
	UpdatePodSandbox            = wit.EventKindUpdatePodSandbox
	PostUpdatePodSandbox        = wit.EventKindPostUpdatePodSandbox
	ValidateContainerAdjustment = wit.EventKindValidateContainerAdjustment
	Synchronize                 = wit.EventKindSynchronize
)

// Log levels.
const (
	Debug = wit.LogLevelDebug
	Info  = wit.LogLevelInfo
	Warn  = wit.LogLevelWarn
	Error = wit.LogLevelError
)

// A Handler answers one event: an error denies it with its text.
type Handler func(e *Event) (Reply, error)

// Policy is what a policy program registers.
type Policy struct {
	// Init checks the settings when the host loads the policy (optional):
	// an error keeps the policy from loading, with that message. It runs
	// in an instance of its own; handlers read the settings with Settings.
	Init func(settings string) error
	// On has a handler per event kind the policy subscribes to.
	On map[EventKind]Handler
}

// Register makes p the policy of this program; call it from an init
// function.
func Register(p Policy) {
	wit.Exports.Configure = func(settings string) (result wit.Result[[]EventKind, string]) {
		defer recoverAsFailure("configure")
		if p.Init != nil {
			if err := p.Init(settings); err != nil {
				return wit.Result[[]EventKind, string]{Err: err.Error(), IsErr: true}
			}
		}
		kinds := make([]EventKind, 0, len(p.On))
		for k := range p.On {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
		return wit.Result[[]EventKind, string]{Ok: kinds}
	}
	wit.Exports.Handle = func(kind EventKind) wit.Result[Reply, string] {
		h := p.On[kind]
		if h == nil {
			return wit.Result[Reply, string]{Ok: None()}
		}
		defer recoverAsFailure("the " + kind.String() + " handler")
		reply, err := h(&Event{Kind: kind})
		if err != nil {
			return wit.Result[Reply, string]{Err: err.Error(), IsErr: true}
		}
		return wit.Result[Reply, string]{Ok: reply}
	}
}

// recoverAsFailure turns a panic into a failure of the call: the panic and
// its stack go to the host's log, one line to stderr (the host reports the
// end of stderr with a failure), and the call traps without Go's goroutine
// dump, which would push the message out of what the host keeps.
func recoverAsFailure(where string) {
	r := recover()
	if r == nil {
		return
	}
	Log(Error, fmt.Sprintf("%s panicked: %v\n%s", where, r, debug.Stack()))
	fmt.Fprintf(os.Stderr, "panic: %v [recovered in %s]\n", r, where)
	wit.Trap()
}

// Deny is a handler's error that denies the event with a formatted reason
// (any error denies; this one reads as what it is).
func Deny(format string, args ...any) error {
	return errors.New(fmt.Sprintf(format, args...))
}

// SettingsError is settings a policy cannot use.
type SettingsError struct{ Message string }

func (e *SettingsError) Error() string { return "invalid settings: " + e.Message }

// InvalidSettings is a SettingsError with a formatted message.
func InvalidSettings(format string, args ...any) error {
	return &SettingsError{Message: fmt.Sprintf(format, args...)}
}

// SettingsJSON reads settings as a JSON object (an operator's [settings]
// table reaches a policy as JSON); an empty text is {}. Values stay raw, to
// be decoded by their key; numbers decode as json.Number with Decode.
func SettingsJSON(text string) (map[string]json.RawMessage, error) {
	if strings.TrimSpace(text) == "" {
		return map[string]json.RawMessage{}, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, InvalidSettings("not JSON: %v", err)
		}
		return nil, InvalidSettings("expected an object")
	}
	if doc == nil {
		return nil, InvalidSettings("expected an object")
	}
	return doc, nil
}

// Decode decodes one raw settings value into v; numbers into an any become
// json.Number (exact).
func Decode(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	return d.Decode(v)
}

// Decoded keeps a value decoded from a settings text, so that a policy
// decodes its settings once per instance: Init decodes and keeps it
// (d.Get(text, decode)), a handler asks again with Settings() and gets the
// kept value while the text is the same. Every call runs in a fresh
// instance, so a handler decodes again, unless the operator pre-initialises
// the policy (preinitialize = true, docs/configuration.md): every call then
// starts from the instance Init left, value included.
type Decoded[T any] struct {
	text  string
	value T
	set   bool
}

// Get returns the value decoded from text: the kept one if it was decoded
// from the same text, otherwise decode's, which is kept if it succeeds.
func (d *Decoded[T]) Get(text string, decode func(string) (T, error)) (T, error) {
	if d.set && d.text == text {
		return d.value, nil
	}
	v, err := decode(text)
	if err != nil {
		var zero T
		return zero, err
	}
	d.text, d.value, d.set = text, v, true
	return v, nil
}

// Settings is the settings text of the policy (what Init checked).
func Settings() string { return wit.HostSettings() }

// Log writes a line to the host's log, tagged with the policy's name.
func Log(level LogLevel, message string) { wit.HostLog(level, message) }

// Logf is Log with a format.
func Logf(level LogLevel, format string, args ...any) { wit.HostLog(level, fmt.Sprintf(format, args...)) }

// List splits a comma-separated settings text into its trimmed, non-empty
// items.
func List(text string) []string {
	var out []string
	for _, item := range strings.Split(text, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Lookup finds key in a list of key-value pairs (a map of the world).
func Lookup(kvs []KeyValue, key string) (string, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// Ptr is a pointer to a copy of v, for the optional fields of the world.
func Ptr[T any](v T) *T { return &v }

// Trap ends the call at once with a trap, without a message: a failure of
// the policy, as a panic is.
func Trap() { wit.Trap() }
