// The parity reference policy (see ../README.md), in Go.
package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	nri "nri-wasm.local/nriwasm"
)

var known = []string{"labels", "annotations", "prefix", "deny-namespaces", "deny-annotation", "memory-cap"}

type mapping struct {
	label     bool
	key, name string
}

type settings struct {
	mappings       []mapping
	denyNamespaces []string
	denyAnnotation string
	memoryCap      *int64
}

func isDigit(c rune) bool  { return c >= '0' && c <= '9' }
func isLetter(c rune) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// sanitize makes a variable name from a key, character by character.
func sanitize(key string) string {
	var b strings.Builder
	for _, c := range key {
		if isLetter(c) || isDigit(c) {
			b.WriteString(strings.ToUpper(string(c)))
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name != "" && isDigit(rune(name[0])) {
		name = "_" + name
	}
	return name
}

func validName(name string) bool {
	if name == "" || !(isLetter(rune(name[0])) || name[0] == '_') {
		return false
	}
	for _, c := range name {
		if !(isLetter(c) || isDigit(c) || c == '_') {
			return false
		}
	}
	return true
}

func parse(text string) (*settings, error) {
	doc, err := nri.SettingsJSON(text)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ok := false
		for _, want := range known {
			ok = ok || k == want
		}
		if !ok {
			return nil, nri.InvalidSettings("unknown field %s", k)
		}
	}
	str := func(key, fallback string) (string, error) {
		raw, ok := doc[key]
		if !ok {
			return fallback, nil
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", nri.InvalidSettings("%s: expected a string", key)
		}
		return s, nil
	}
	prefix, err := str("prefix", "POD_")
	if err != nil {
		return nil, err
	}
	if prefix != "" && !validName(prefix) {
		return nil, nri.InvalidSettings("prefix %s cannot start a variable name", prefix)
	}
	s := &settings{}
	if s.denyAnnotation, err = str("deny-annotation", "parity.example.com/deny"); err != nil {
		return nil, err
	}
	if raw, ok := doc["deny-namespaces"]; ok {
		if json.Unmarshal(raw, &s.denyNamespaces) != nil || s.denyNamespaces == nil {
			return nil, nri.InvalidSettings("deny-namespaces: expected a list of strings")
		}
	}
	if raw, ok := doc["memory-cap"]; ok {
		var value any
		_ = nri.Decode(raw, &value)
		n, isNumber := value.(json.Number)
		if !isNumber {
			return nil, nri.InvalidSettings("memory-cap: expected a positive integer")
		}
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v <= 0 || v >= 1<<53 {
			return nil, nri.InvalidSettings("memory-cap: expected a positive integer")
		}
		s.memoryCap = &v
	}
	for _, what := range []string{"labels", "annotations"} {
		raw, ok := doc[what]
		if !ok {
			continue
		}
		var object map[string]string
		if json.Unmarshal(raw, &object) != nil || object == nil {
			return nil, nri.InvalidSettings("%s: expected an object of strings", what)
		}
		ks := make([]string, 0, len(object))
		for k := range object {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, key := range ks {
			name := object[key]
			if name == "" {
				name = prefix + sanitize(key)
			}
			if !validName(name) {
				return nil, nri.InvalidSettings("%s %s: %s is not a variable name", what, key, name)
			}
			for _, m := range s.mappings {
				if m.name == name {
					return nil, nri.InvalidSettings("%s and %s would both set %s", m.key, key, name)
				}
			}
			s.mappings = append(s.mappings, mapping{label: what == "labels", key: key, name: name})
		}
	}
	return s, nil
}

// The settings Init parsed: found by every call of a pre-initialised
// instance (preinitialize = true), never by a call of one as built.
var parsed nri.Decoded[*settings]

func create(e *nri.Event) (nri.Reply, error) {
	s, err := parsed.Get(nri.Settings(), parse)
	if err != nil {
		return nri.None(), err
	}
	pod := e.PodMeta()
	ns, name := pod.Namespace, pod.Name
	for _, d := range s.denyNamespaces {
		if d == ns {
			return nri.None(), nri.Deny("pod %s/%s: namespace %s is not allowed", ns, name, ns)
		}
	}
	if s.denyAnnotation != "" {
		if v, ok := e.PodAnnotation(s.denyAnnotation); ok {
			return nri.None(), nri.Deny("pod %s/%s is marked %s=%s", ns, name, s.denyAnnotation, v)
		}
	}
	a := nri.NewAdjustment()
	for _, m := range s.mappings {
		var value string
		var ok bool
		if m.label {
			value, ok = e.PodLabel(m.key)
		} else {
			value, ok = e.PodAnnotation(m.key)
		}
		if !ok {
			continue
		}
		if _, set := e.EnvVar(m.name); set {
			continue
		}
		a.SetEnv(m.name, value)
	}
	if s.memoryCap != nil {
		if limit, ok := e.MemoryLimit(); !ok || limit > *s.memoryCap {
			a.SetMemoryLimit(*s.memoryCap)
		}
	}
	a.SetAnnotation("parity.example.com/seen", fmt.Sprintf("%d/%d/%d", len(e.PodLabels()), len(e.PodAnnotations()), len(e.Env())))
	nri.Logf(nri.Info, "%s: %d variables", e.ContainerMeta().Name, len(a.Raw().Env))
	return nri.Adjust(a), nil
}

func init() {
	nri.Register(nri.Policy{
		Init: func(text string) error {
			_, err := parsed.Get(text, parse)
			return err
		},
		On: map[nri.EventKind]nri.Handler{nri.CreateContainer: create},
	})
}

func main() {}
