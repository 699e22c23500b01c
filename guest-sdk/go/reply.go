package nriwasm

import "nri-wasm.local/nriwasm/wit"

// None is the empty reply: it changes nothing.
func None() Reply { return Reply{} }

// Adjust is a reply that adjusts the container being created
// (create-container only).
func Adjust(a *Adjustment) Reply {
	adj := a.a
	return Reply{Adjust: &adj}
}

// Adjustment builds a container adjustment; every method returns the
// adjustment, so calls chain.
type Adjustment struct {
	a wit.ContainerAdjustment
}

// NewAdjustment is an adjustment that changes nothing yet.
func NewAdjustment() *Adjustment { return &Adjustment{} }

// Raw is the adjustment being built, for the fields without a method.
func (a *Adjustment) Raw() *ContainerAdjustment { return &a.a }

// SetAnnotation sets an annotation of the container.
func (a *Adjustment) SetAnnotation(key, value string) *Adjustment {
	a.a.Annotations = append(a.a.Annotations, KeyValue{Key: key, Value: value})
	return a
}

// RemoveAnnotation removes an annotation of the container.
func (a *Adjustment) RemoveAnnotation(key string) *Adjustment {
	return a.SetAnnotation("-"+key, "")
}

// SetEnv sets an environment variable.
func (a *Adjustment) SetEnv(name, value string) *Adjustment {
	a.a.Env = append(a.a.Env, KeyValue{Key: name, Value: value})
	return a
}

// RemoveEnv removes an environment variable.
func (a *Adjustment) RemoveEnv(name string) *Adjustment { return a.SetEnv("-"+name, "") }

// AddMount adds (or replaces, by destination) a mount.
func (a *Adjustment) AddMount(m Mount) *Adjustment {
	a.a.Mounts = append(a.a.Mounts, m)
	return a
}

// SetRlimit sets a POSIX resource limit (type e.g. RLIMIT_NOFILE).
func (a *Adjustment) SetRlimit(kind string, soft, hard uint64) *Adjustment {
	a.a.Rlimits = append(a.a.Rlimits, PosixRlimit{Type: kind, Soft: soft, Hard: hard})
	return a
}

// Linux is the Linux part of the adjustment, created on first use.
func (a *Adjustment) Linux() *LinuxContainerAdjustment {
	if a.a.Linux == nil {
		a.a.Linux = &LinuxContainerAdjustment{}
	}
	return a.a.Linux
}

// Resources is the resources of the adjustment, created on first use.
func (a *Adjustment) Resources() *LinuxResources {
	l := a.Linux()
	if l.Resources == nil {
		l.Resources = &LinuxResources{}
	}
	return l.Resources
}

// SetMemoryLimit sets the memory limit, in bytes.
func (a *Adjustment) SetMemoryLimit(bytes int64) *Adjustment {
	r := a.Resources()
	if r.Memory == nil {
		r.Memory = &LinuxMemory{}
	}
	r.Memory.Limit = &bytes
	return a
}

// SetCPUShares sets the CPU shares.
func (a *Adjustment) SetCPUShares(shares uint64) *Adjustment {
	r := a.Resources()
	if r.CPU == nil {
		r.CPU = &LinuxCPU{}
	}
	r.CPU.Shares = &shares
	return a
}

// SetPidsLimit sets the most processes the container may have.
func (a *Adjustment) SetPidsLimit(limit int64) *Adjustment {
	a.Resources().PIDs = &LinuxPIDs{Limit: limit}
	return a
}
