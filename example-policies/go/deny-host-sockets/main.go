// `deny-host-sockets`, in Go: no container mounts the container runtime's
// or NRI's sockets, the host's root, /proc or /sys, or another host path
// the operator protects.
//
// A bind mount whose host path (its source) is a protected path, lies
// beneath one, or is a directory holding one (mounting /run would hand out
// /run/containerd/containerd.sock) denies the container's creation. The
// host's root / is protected only as itself. Per-namespace exceptions let
// the few system pods that need a socket have it. Meant for
// on-error = "fail". The same policy as example-policies/deny-host-sockets
// (Rust), held to the same cases.
package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	nri "nri-wasm.local/nriwasm"
)

// builtin is what is protected unless the settings say builtin = false.
var builtin = []string{
	"/", "/proc", "/sys",
	"/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock",
	"/run/nri/nri.sock", "/var/run/nri/nri.sock",
	"/run/crio/crio.sock", "/var/run/crio/crio.sock",
	"/run/docker.sock", "/var/run/docker.sock",
	"/run/containerd/containerd.sock.ttrpc", "/var/run/containerd/containerd.sock.ttrpc",
	"/run/cri-dockerd.sock", "/var/run/cri-dockerd.sock",
}

// quote writes a string as the Rust version does (in double quotes, with
// quotes and backslashes escaped).
func quote(s string) string {
	b, _ := json.Marshal(s)
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(b))
}

// normalize drops . and empty components and resolves .., as the kernel
// reads a path (symbolic links aside); false if it is not absolute.
func normalize(path string) (string, bool) {
	if !strings.HasPrefix(path, "/") {
		return "", false
	}
	var parts []string
	for _, c := range strings.Split(path, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, c)
		}
	}
	return "/" + strings.Join(parts, "/"), true
}

// within says whether path is base or lies beneath it.
func within(path, base string) bool {
	return path == base || (strings.HasPrefix(path, base) && (base == "/" || strings.HasPrefix(path[len(base):], "/")))
}

type settings struct {
	protected  []string
	denyParent bool
	exceptions map[string][]string
}

func parseSettings(text string) (*settings, error) {
	var raw struct {
		Builtin     *bool               `json:"builtin"`
		Paths       []string            `json:"paths"`
		DenyParents *bool               `json:"deny-parents"`
		Exceptions  map[string][]string `json:"exceptions"`
	}
	if strings.TrimSpace(text) != "" {
		d := json.NewDecoder(strings.NewReader(text))
		d.DisallowUnknownFields()
		if err := d.Decode(&raw); err != nil {
			return nil, nri.InvalidSettings("%v", err)
		}
	}
	s := &settings{denyParent: raw.DenyParents == nil || *raw.DenyParents, exceptions: raw.Exceptions}
	for _, p := range raw.Paths {
		if _, ok := normalize(p); !ok || strings.ContainsRune(p, 0) {
			return nil, nri.InvalidSettings("paths: %s is not an absolute path", quote(p))
		}
	}
	var all []string
	if raw.Builtin == nil || *raw.Builtin {
		all = append(all, builtin...)
	}
	for _, p := range raw.Paths {
		n, _ := normalize(p)
		all = append(all, n)
	}
	for _, p := range all {
		if !contains(s.protected, p) {
			s.protected = append(s.protected, p)
		}
	}
	if len(s.protected) == 0 {
		return nil, nri.InvalidSettings("builtin = false and no paths: nothing would be protected")
	}
	namespaces := make([]string, 0, len(s.exceptions))
	for ns := range s.exceptions {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		for _, p := range s.exceptions[ns] {
			n, ok := normalize(p)
			if p != "*" && !(ok && contains(s.protected, n)) {
				return nil, nri.InvalidSettings("exceptions.%s: %s is not a protected path (or \"*\")", ns, quote(p))
			}
		}
	}
	return s, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// exposes is every protected path a mount of host path source exposes, in
// the order they are listed.
func (s *settings) exposes(source string) []string {
	src, ok := normalize(source)
	if !ok {
		return nil
	}
	var out []string
	for _, p := range s.protected {
		if p == "/" {
			if src == "/" {
				out = append(out, p)
			}
			continue
		}
		if within(src, p) || (s.denyParent && within(p, src)) {
			out = append(out, p)
		}
	}
	return out
}

func (s *settings) excepted(namespace, protected string) bool {
	// An exception is read as a path, like the paths it names.
	for _, p := range s.exceptions[namespace] {
		if n, _ := normalize(p); p == "*" || n == protected {
			return true
		}
	}
	return false
}

// isBind says whether the mount takes a host path (rather than a file system
// such as proc or tmpfs, whose source is just a name).
func isBind(m nri.Mount) bool {
	if m.Type == "bind" || m.Type == "rbind" {
		return true
	}
	for _, o := range m.Options {
		if o == "bind" || o == "rbind" {
			return true
		}
	}
	return false
}

func createContainer(e *nri.Event) (nri.Reply, error) {
	s, err := parseSettings(nri.Settings())
	if err != nil {
		return nri.None(), err
	}
	namespace := e.PodMeta().Namespace
	// The mounts are in the whole container: one read.
	for _, m := range e.Container().Mounts {
		if !isBind(m) {
			continue
		}
		// Allowed only if the namespace has an exception for every
		// protected path the mount exposes (/run/containerd holds both of
		// containerd's sockets).
		exposed := s.exposes(m.Source)
		if len(exposed) == 0 {
			continue
		}
		protected := ""
		for _, p := range exposed {
			if !s.excepted(namespace, p) {
				protected = p
				break
			}
		}
		if protected == "" {
			nri.Logf(nri.Info, "%s: %s allowed in namespace %s", e.ContainerMeta().Name, m.Source, namespace)
			continue
		}
		what := ""
		if n, _ := normalize(m.Source); n != protected {
			what = fmt.Sprintf(", which exposes %s,", protected)
		}
		return nri.None(), nri.Deny("mount of host path %s at %s%s is not allowed (protected host path; namespace %s has no exception for it)",
			m.Source, m.Destination, what, namespace)
	}
	return nri.None(), nil
}

func init() {
	nri.Register(nri.Policy{
		Init: func(text string) error {
			_, err := parseSettings(text)
			return err
		},
		On: map[nri.EventKind]nri.Handler{nri.CreateContainer: createContainer},
	})
}

func main() {}
