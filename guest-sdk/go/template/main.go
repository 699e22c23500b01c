// `{{name}}`: an nri-wasm policy.
//
// As generated (make it your own): every container of a pod labelled
// `team=<value>` gets the environment variable `TEAM=<value>`; with
// `"required": true`, a container whose pod has no such label is refused.
//
// Settings are JSON (the `[settings]` table of the policy file an operator
// installs as `NN-{{name}}.toml`); every key is optional:
//
//	{"label": "team", "env": "TEAM", "required": false}
//
// The host calls the policy in a fresh instance for every event: nothing
// kept in memory survives to the next call. Init runs once, when the host
// loads the policy, and refuses settings it cannot use; handlers read the
// settings again.
package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"

	nri "nri-wasm.local/nriwasm"
)

type settings struct {
	Label    string `json:"label"`
	Env      string `json:"env"`
	Required bool   `json:"required"`
}

var variable = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func parseSettings(text string) (*settings, error) {
	s := &settings{Label: "team", Env: "TEAM"}
	if strings.TrimSpace(text) != "" {
		d := json.NewDecoder(bytes.NewReader([]byte(text)))
		d.DisallowUnknownFields()
		if err := d.Decode(s); err != nil {
			return nil, nri.InvalidSettings("%v", err)
		}
	}
	if s.Label == "" {
		return nil, nri.InvalidSettings("label is empty")
	}
	if !variable.MatchString(s.Env) {
		return nil, nri.InvalidSettings("env %q is not a variable name", s.Env)
	}
	return s, nil
}

func createContainer(e *nri.Event) (nri.Reply, error) {
	s, err := parseSettings(nri.Settings())
	if err != nil {
		return nri.None(), err
	}
	// One label asked of the host, not the whole pod.
	if value, ok := e.PodLabel(s.Label); ok {
		return nri.Adjust(nri.NewAdjustment().SetEnv(s.Env, value)), nil
	}
	if s.Required {
		pod := e.PodMeta()
		return nri.None(), nri.Deny("pod %s/%s has no label %s", pod.Namespace, pod.Name, s.Label)
	}
	return nri.None(), nil
}

func init() {
	nri.Register(nri.Policy{
		Init: func(text string) error {
			_, err := parseSettings(text)
			return err
		},
		// The events the host sends this policy; every other one gets the
		// empty reply.
		On: map[nri.EventKind]nri.Handler{nri.CreateContainer: createContainer},
	})
}

func main() {}
