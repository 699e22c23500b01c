// The policy natively (guest-sdk/go/test.sh example-policies/go/allowed-images):
// the fixture is containerd 2.3.4's CreateContainer, whose CRI annotation
// names a pinned image of an allowed registry.
package main

import (
	"reflect"
	"strings"
	"testing"

	nri "nri-wasm.local/nriwasm"
	"nri-wasm.local/nriwasm/nritest"
	"nri-wasm.local/nriwasm/wit"
)

const (
	testSettings = `{"registries": ["registry.example.com", "ghcr.io/example"]}`
	imageKey     = "io.kubernetes.cri.image-name"
)

var pinned = "registry.example.com/billing/worker@sha256:" + strings.Repeat("a", 64)

func event(t *testing.T) *nritest.Event {
	return nritest.Fixture(t, "fixtures/create-container.json")
}

func host() *nritest.Host { return nritest.NewHost().WithSettings(testSettings) }

func expectNone(t *testing.T, out *nritest.Outcome) {
	t.Helper()
	if got := out.Lines(t); len(got) != 0 {
		t.Fatalf("got %q, want no change", got)
	}
}

func expectDenial(t *testing.T, out *nritest.Outcome, want string) {
	t.Helper()
	if got := out.Denial(t); got != want {
		t.Fatalf("denial %q, want %q", got, want)
	}
}

func expectDenialContaining(t *testing.T, out *nritest.Outcome, want string) {
	t.Helper()
	if got := out.Denial(t); !strings.Contains(got, want) {
		t.Fatalf("denial %q, want one containing %q", got, want)
	}
}

func TestAPinnedImageOfAnAllowedRegistryRuns(t *testing.T) {
	expectNone(t, host().Run(event(t)))
}

func TestAnImageOfAnotherRegistryIsDenied(t *testing.T) {
	out := host().Run(event(t).WithContainerAnnotation(imageKey, "docker.io/library/nginx:1.27"))
	expectDenial(t, out, "container worker: image docker.io/library/nginx:1.27 is not from an allowed registry (allowed: registry.example.com, ghcr.io/example)")
}

func TestAnImageByTagIsDeniedUnlessDigestsAreNotRequired(t *testing.T) {
	tagged := event(t).WithContainerAnnotation(imageKey, "registry.example.com/billing/worker:1.4.2")
	expectDenial(t, host().Run(tagged), "container worker: image registry.example.com/billing/worker:1.4.2 is not pinned by digest (use registry.example.com/billing/worker@sha256:…)")
	lenient := nritest.NewHost().WithSettings(`{"registries": ["registry.example.com"], "require-digest": false}`)
	expectNone(t, lenient.Run(tagged))
}

func TestTheImageFieldWinsOverTheAnnotation(t *testing.T) {
	e := event(t).Clone()
	e.Container().Image = &wit.Image{Name: "quay.io/other/app@sha256:" + strings.Repeat("a", 64)}
	expectDenialContaining(t, host().Run(e), "image quay.io/other/app@sha256:")
	e.Container().Image = &wit.Image{Name: pinned, Digest: "sha256:" + strings.Repeat("b", 64)}
	expectDenialContaining(t, host().Run(e), "the runtime resolved it to sha256:"+strings.Repeat("b", 64)+", not the pinned digest")
}

func TestTheExceptionAnnotationLetsAPodThroughAndIsLogged(t *testing.T) {
	e := event(t).WithContainerAnnotation(imageKey, "docker.io/library/nginx:1.27").
		WithPodAnnotation("images.example.com/exception", "INC-4711")
	out := host().Run(e)
	expectNone(t, out)
	if !out.Logged("worker: allowed by exception (INC-4711)") {
		t.Fatalf("logs %q", out.Logs)
	}
	empty := e.WithPodAnnotation("images.example.com/exception", "")
	expectDenialContaining(t, host().Run(empty), "is not from an allowed registry")
}

func TestSettingsAreCheckedWhenThePolicyLoads(t *testing.T) {
	_, err := nritest.NewHost().WithSettings(`{"registries": []}`).Configure()
	if err == nil || err.Error() != "invalid settings: registries is empty, so every image would be refused" {
		t.Fatalf("got %v", err)
	}
	_, err = nritest.NewHost().WithSettings(`{"registries": ["https://registry.example.com"]}`).Configure()
	want := `invalid settings: registries: "https://registry.example.com" is not a registry host or host/path (e.g. ghcr.io/example)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	kinds, err := host().Configure()
	if err != nil || !reflect.DeepEqual(kinds, []nri.EventKind{nri.CreateContainer}) {
		t.Fatalf("got %v, %v", kinds, err)
	}
}
