package nriwasm

import "nri-wasm.local/nriwasm/wit"

// Event is the event a handler handles, read from the host on demand: each
// accessor asks the host once and keeps the answer, and the lookups answer
// from a whole record once it was read.
type Event struct {
	Kind EventKind

	pod, container         **wit.PodSandbox
	containerRecord        **wit.Container
	podMeta                **PodMeta
	containerMeta          **ContainerMeta
	env                    *[]string
	resources, requested   **LinuxResources
	whole                  *wit.Event
	podLabels, podAnnots   *[]KeyValue
	ctrLabels, ctrAnnots   *[]KeyValue
}

// Whole is the whole event in one value: the costliest read, and the only
// one for what only some events carry (the pod resources of
// update-pod-sandbox, the merged adjustment being validated).
func (e *Event) Whole() wit.Event {
	if e.whole == nil {
		w := wit.EventWhole()
		e.whole = &w
	}
	return *e.whole
}

// Pod is the event's whole pod; nil on synchronize.
func (e *Event) Pod() *PodSandbox {
	if e.pod == nil {
		p := wit.EventPod()
		e.pod = &p
	}
	return *e.pod
}

// Container is the event's whole container; nil on pod events.
func (e *Event) Container() *Container {
	if e.containerRecord == nil {
		c := wit.EventContainer()
		e.containerRecord = &c
	}
	return *e.containerRecord
}

func (e *Event) podRead() *PodSandbox {
	if e.pod == nil {
		return nil
	}
	return *e.pod
}

func (e *Event) containerRead() *Container {
	if e.containerRecord == nil {
		return nil
	}
	return *e.containerRecord
}

// PodMeta is the pod's id, name, uid, namespace, runtime handler and pid;
// nil on synchronize.
func (e *Event) PodMeta() *PodMeta {
	if e.podMeta == nil {
		m := wit.EventPodMetadata()
		e.podMeta = &m
	}
	return *e.podMeta
}

// ContainerMeta is the container's id, pod id, name, state and pid; nil on
// pod events.
func (e *Event) ContainerMeta() *ContainerMeta {
	if e.containerMeta == nil {
		m := wit.EventContainerMetadata()
		e.containerMeta = &m
	}
	return *e.containerMeta
}

func found(v *string) (string, bool) {
	if v == nil {
		return "", false
	}
	return *v, true
}

// PodLabel is the value of one pod label.
func (e *Event) PodLabel(key string) (string, bool) {
	if p := e.podRead(); p != nil {
		return Lookup(p.Labels, key)
	}
	return found(wit.EventPodLabel(key))
}

// PodAnnotation is the value of one pod annotation.
func (e *Event) PodAnnotation(key string) (string, bool) {
	if p := e.podRead(); p != nil {
		return Lookup(p.Annotations, key)
	}
	return found(wit.EventPodAnnotation(key))
}

// ContainerLabel is the value of one container label.
func (e *Event) ContainerLabel(key string) (string, bool) {
	if c := e.containerRead(); c != nil {
		return Lookup(c.Labels, key)
	}
	return found(wit.EventContainerLabel(key))
}

// ContainerAnnotation is the value of one container annotation.
func (e *Event) ContainerAnnotation(key string) (string, bool) {
	if c := e.containerRead(); c != nil {
		return Lookup(c.Annotations, key)
	}
	return found(wit.EventContainerAnnotation(key))
}

// EnvVar is the value of one environment variable of the container (of the
// first NAME=).
func (e *Event) EnvVar(name string) (string, bool) {
	if e.env == nil {
		if c := e.containerRead(); c != nil {
			e.env = &c.Env
		}
	}
	if e.env != nil {
		for _, kv := range *e.env {
			if len(kv) > len(name) && kv[len(name)] == '=' && kv[:len(name)] == name {
				return kv[len(name)+1:], true
			}
		}
		return "", false
	}
	return found(wit.EventContainerEnvVar(name))
}

func cached(slot **[]KeyValue, whole func() []KeyValue, read func() []KeyValue) []KeyValue {
	if *slot == nil {
		var v []KeyValue
		if whole != nil {
			v = whole()
		} else {
			v = read()
		}
		*slot = &v
	}
	return **slot
}

// PodLabels is every pod label, sorted by key.
func (e *Event) PodLabels() []KeyValue {
	var whole func() []KeyValue
	if p := e.podRead(); p != nil {
		whole = func() []KeyValue { return p.Labels }
	}
	return cached(&e.podLabels, whole, wit.EventPodLabels)
}

// PodAnnotations is every pod annotation, sorted by key.
func (e *Event) PodAnnotations() []KeyValue {
	var whole func() []KeyValue
	if p := e.podRead(); p != nil {
		whole = func() []KeyValue { return p.Annotations }
	}
	return cached(&e.podAnnots, whole, wit.EventPodAnnotations)
}

// ContainerLabels is every container label, sorted by key.
func (e *Event) ContainerLabels() []KeyValue {
	var whole func() []KeyValue
	if c := e.containerRead(); c != nil {
		whole = func() []KeyValue { return c.Labels }
	}
	return cached(&e.ctrLabels, whole, wit.EventContainerLabels)
}

// ContainerAnnotations is every container annotation, sorted by key.
func (e *Event) ContainerAnnotations() []KeyValue {
	var whole func() []KeyValue
	if c := e.containerRead(); c != nil {
		whole = func() []KeyValue { return c.Annotations }
	}
	return cached(&e.ctrAnnots, whole, wit.EventContainerAnnotations)
}

// Env is the container's environment, NAME=value strings in order.
func (e *Event) Env() []string {
	if e.env == nil {
		var v []string
		if c := e.containerRead(); c != nil {
			v = c.Env
		} else {
			v = wit.EventContainerEnv()
		}
		e.env = &v
	}
	return *e.env
}

// Resources is the container's Linux resources, as far as they are set.
func (e *Event) Resources() *LinuxResources {
	if e.resources == nil {
		r := wit.EventContainerResources()
		e.resources = &r
	}
	return *e.resources
}

// RequestedResources is, on update-container, the resources the runtime is
// about to apply; nil on other events.
func (e *Event) RequestedResources() *LinuxResources {
	if e.requested == nil {
		r := wit.EventRequestedResources()
		e.requested = &r
	}
	return *e.requested
}

// MemoryLimit is the container's memory limit in bytes, if it has one.
func (e *Event) MemoryLimit() (int64, bool) {
	if r := e.Resources(); r != nil && r.Memory != nil && r.Memory.Limit != nil {
		return *r.Memory.Limit, true
	}
	return 0, false
}
