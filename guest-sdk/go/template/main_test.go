// The handlers, natively: `./test.sh` on this machine, no WebAssembly
// build. The test host runs a call as the real one does (configure with
// the settings, then the handler), on the same fixture `nri-wasm eval`
// reads, and describes the reply in the lines `eval` prints.
package main

import (
	"reflect"
	"strings"
	"testing"

	nri "nri-wasm.local/nriwasm"
	"nri-wasm.local/nriwasm/nritest"
)

// event is a CreateContainer as containerd sends it, in NRI's protobuf
// JSON (`nri-wasm eval --input` reads it too).
func event(t *testing.T) *nritest.Event {
	return nritest.Fixture(t, "fixtures/create-container.json")
}

func expect(t *testing.T, got, want []string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestThePodLabelBecomesAnEnvironmentVariable(t *testing.T) {
	expect(t, nritest.NewHost().Run(event(t)).Lines(t), []string{"env TEAM=payments"})
	out := nritest.NewHost().WithSettings(`{"label": "app", "env": "APP"}`).Run(event(t))
	expect(t, out.Lines(t), []string{"env APP=billing"})
}

func TestAPodWithoutTheLabelIsRefusedOnlyWhenRequired(t *testing.T) {
	unlabelled := event(t).WithoutPodLabel("team")
	expect(t, nritest.NewHost().Run(unlabelled).Lines(t), []string{})
	out := nritest.NewHost().WithSettings(`{"required": true}`).Run(unlabelled)
	if got, want := out.Denial(t), "pod payments/billing-worker-7f9c5 has no label team"; got != want {
		t.Fatalf("denial %q, want %q", got, want)
	}
}

func TestSettingsAreCheckedWhenThePolicyLoads(t *testing.T) {
	_, err := nritest.NewHost().WithSettings(`{"env": "NOT A NAME"}`).Configure()
	if err == nil || err.Error() != `invalid settings: env "NOT A NAME" is not a variable name` {
		t.Fatalf("got %v", err)
	}
	_, err = nritest.NewHost().WithSettings(`{"lable": "team"}`).Configure()
	if err == nil || !strings.Contains(err.Error(), `unknown field "lable"`) {
		t.Fatalf("got %v", err)
	}
	kinds, err := nritest.NewHost().Configure()
	if err != nil || !reflect.DeepEqual(kinds, []nri.EventKind{nri.CreateContainer}) {
		t.Fatalf("got %v, %v", kinds, err)
	}
}
