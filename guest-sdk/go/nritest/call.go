//go:build !wasip1

package nritest

import (
	"fmt"
	"sort"
	"strings"

	"nri-wasm.local/nriwasm/wit"
)

// call is the call in progress: what the world's imported functions
// (wit.Native) answer from. The test host runs one call at a time.
type call struct {
	host  *Host
	event *Event
	state map[string]string
	logs  []string
}

var current *call

func (h *Host) enter(e *Event) *call {
	current = &call{host: h, event: e, state: copyMap(h.State)}
	install()
	return current
}

func leave() { current = nil }

// guard runs f and returns what a failure left ("" if none): a trap after
// the SDK logged a panic (its log, with the stack), or a panic of its own.
func (c *call) guard(f func()) (failure string) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		var errors []string
		for _, l := range c.logs {
			if rest, ok := strings.CutPrefix(l, "error: "); ok {
				errors = append(errors, rest)
			}
		}
		if _, trapped := r.(wit.Trapped); trapped && len(errors) > 0 {
			failure = strings.Join(errors, "\n")
		} else {
			failure = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

func now(what string) *call {
	if current == nil {
		panic(what + " was called outside a call of the test host (run the policy with nritest.Host.Run)")
	}
	return current
}

func find(kvs []wit.KeyValue, key string) *string {
	for _, kv := range kvs {
		if kv.Key == key {
			v := kv.Value
			return &v
		}
	}
	return nil
}

func pod(what string) *wit.PodSandbox {
	c := now(what)
	if c.event == nil {
		panic(what + " was called in configure, where there is no event")
	}
	return c.event.Pod()
}

func container(what string) *wit.Container {
	c := now(what)
	if c.event == nil {
		panic(what + " was called in configure, where there is no event")
	}
	return c.event.Container()
}

func labels(p *wit.PodSandbox) []wit.KeyValue {
	if p == nil {
		return nil
	}
	return p.Labels
}

// The host's longest state key.
const maxKeyBytes = 256

// entryBytes is what each key counts toward the state's limit beside its
// key and value, as the host counts it.
const entryBytes = 64

func matching(f wit.ContainerFilter) []wit.ContainerInfo {
	h := now("node.containers").host
	has := func(kvs, wanted []wit.KeyValue) bool {
		for _, w := range wanted {
			if v := find(kvs, w.Key); v == nil || *v != w.Value {
				return false
			}
		}
		return true
	}
	var out []wit.ContainerInfo
	for _, c := range h.Containers {
		if f.PodID != nil && c.PodID != *f.PodID {
			continue
		}
		if len(f.States) > 0 {
			in := false
			for _, s := range f.States {
				in = in || s == c.State
			}
			if !in {
				continue
			}
		}
		if !has(c.Labels, f.Labels) {
			continue
		}
		if len(f.PodLabels) > 0 {
			p, ok := h.Pods[c.PodID]
			if !ok || !has(p.Labels, f.PodLabels) {
				continue
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func install() {
	n := &wit.Native
	n.EventWhole = func() wit.Event { return now("event.whole").event.Clone().Whole }
	n.EventPod = func() *wit.PodSandbox {
		p := pod("event.pod")
		if p == nil {
			return nil
		}
		return now("event.pod").event.Clone().Pod()
	}
	n.EventPodMetadata = func() *wit.PodMeta {
		p := pod("event.pod-metadata")
		if p == nil {
			return nil
		}
		return &wit.PodMeta{ID: p.ID, Name: p.Name, UID: p.UID, Namespace: p.Namespace, RuntimeHandler: p.RuntimeHandler, PID: p.PID}
	}
	n.EventPodLabel = func(key string) *string { return find(labels(pod("event.pod-label")), key) }
	n.EventPodLabels = func() []wit.KeyValue { return labels(pod("event.pod-labels")) }
	n.EventPodAnnotation = func(key string) *string {
		if p := pod("event.pod-annotation"); p != nil {
			return find(p.Annotations, key)
		}
		return nil
	}
	n.EventPodAnnotations = func() []wit.KeyValue {
		if p := pod("event.pod-annotations"); p != nil {
			return p.Annotations
		}
		return nil
	}
	n.EventContainer = func() *wit.Container {
		if container("event.container") == nil {
			return nil
		}
		return now("event.container").event.Clone().Container()
	}
	n.EventContainerMetadata = func() *wit.ContainerMeta {
		c := container("event.container-metadata")
		if c == nil {
			return nil
		}
		return &wit.ContainerMeta{ID: c.ID, PodSandboxID: c.PodSandboxID, Name: c.Name, State: c.State, PID: c.PID}
	}
	n.EventContainerLabel = func(key string) *string {
		if c := container("event.container-label"); c != nil {
			return find(c.Labels, key)
		}
		return nil
	}
	n.EventContainerLabels = func() []wit.KeyValue {
		if c := container("event.container-labels"); c != nil {
			return c.Labels
		}
		return nil
	}
	n.EventContainerAnnotation = func(key string) *string {
		if c := container("event.container-annotation"); c != nil {
			return find(c.Annotations, key)
		}
		return nil
	}
	n.EventContainerAnnotations = func() []wit.KeyValue {
		if c := container("event.container-annotations"); c != nil {
			return c.Annotations
		}
		return nil
	}
	n.EventContainerEnv = func() []string {
		if c := container("event.container-env"); c != nil {
			return append([]string(nil), c.Env...)
		}
		return nil
	}
	n.EventContainerEnvVar = func(name string) *string {
		if c := container("event.container-env-var"); c != nil {
			for _, e := range c.Env {
				if v, ok := strings.CutPrefix(e, name+"="); ok {
					return &v
				}
			}
		}
		return nil
	}
	n.EventContainerResources = func() *wit.LinuxResources {
		if c := container("event.container-resources"); c != nil && c.Linux != nil {
			return c.Linux.Resources
		}
		return nil
	}
	n.EventRequestedResources = func() *wit.LinuxResources {
		e := now("event.requested-resources").event
		if e != nil && e.Whole.Tag == wit.EventUpdateContainer {
			return e.Whole.UpdateContainer.LinuxResources
		}
		return nil
	}
	n.HostLog = func(level wit.LogLevel, message string) {
		c := now("host.log")
		c.logs = append(c.logs, level.String()+": "+message)
	}
	n.HostSettings = func() string { return now("host.settings").host.Settings }
	n.HostRuntime = func() wit.RuntimeInfo { return now("host.runtime").host.Runtime }
	n.HostNode = func() wit.NodeInfo { return now("host.node").host.Node }
	n.NodePods = func() []wit.PodInfo {
		h := now("node.pods").host
		var out []wit.PodInfo
		for _, p := range h.Pods {
			out = append(out, p)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out
	}
	n.NodePod = func(id string) *wit.PodInfo {
		if p, ok := now("node.pod").host.Pods[id]; ok {
			return &p
		}
		return nil
	}
	n.NodeContainers = matching
	n.NodeContainerIds = func(f wit.ContainerFilter) wit.IDList {
		var l wit.IDList
		for _, c := range matching(f) {
			l.Ids += c.ID
			l.Ends = append(l.Ends, uint32(len(l.Ids)))
		}
		return l
	}
	n.NodeContainer = func(id string) *wit.ContainerInfo {
		if c, ok := now("node.container").host.Containers[id]; ok {
			return &c
		}
		return nil
	}
	n.GetNodeTopology = func() wit.NodeTopology { return now("node.topology").host.Topology }
	n.StateGet = func(key string) *string {
		if v, ok := now("state.get").state[key]; ok {
			return &v
		}
		return nil
	}
	n.StateSet = func(key, value string) wit.Result[struct{}, wit.StateError] {
		c := now("state.set")
		if len(key) == 0 || len(key) > maxKeyBytes {
			why := fmt.Sprintf("key of %d bytes; keys are 1 to %d bytes", len(key), maxKeyBytes)
			return wit.Result[struct{}, wit.StateError]{IsErr: true, Err: wit.StateError{Tag: wit.StateErrorInvalidKey, InvalidKey: &why}}
		}
		after := copyMap(c.state)
		after[key] = value
		used := 0
		for k, v := range after {
			used += len(k) + len(v) + entryBytes
		}
		if used > c.host.StateLimit {
			limit := uint64(c.host.StateLimit)
			return wit.Result[struct{}, wit.StateError]{IsErr: true, Err: wit.StateError{Tag: wit.StateErrorLimitExceeded, LimitExceeded: &limit}}
		}
		c.state = after
		return wit.Result[struct{}, wit.StateError]{}
	}
	n.StateRemove = func(key string) { delete(now("state.remove").state, key) }
	n.StateKeys = func(prefix string) []string {
		var out []string
		for k := range now("state.keys").state {
			if strings.HasPrefix(k, prefix) {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		return out
	}
}
