//go:build !wasip1

package nritest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"nri-wasm.local/nriwasm/wit"
)

// Replies as lines, in the format of `nri-wasm eval` and the Rust SDK's
// testing::describe: one line per thing a reply sets, sorted; lists of
// strings as ["a", "b"], absent values `-`, enums their NRI numbers.

func q(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

func opt[T any](v *T) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func nums[T ~uint8](items []T) string {
	out := make([]string, len(items))
	for i, v := range items {
		out[i] = strconv.Itoa(int(v))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// Describe is a reply as sorted lines.
func Describe(r wit.Reply) []string {
	out := []string{}
	if r.Adjust != nil {
		out = adjustment(r.Adjust, out)
	}
	for _, u := range r.Update {
		out = append(out, fmt.Sprintf("update %s ignore_failure=%t", u.ContainerID, u.IgnoreFailure))
		if u.Resources != nil {
			out = resources("update "+u.ContainerID+" resources", u.Resources, out)
		}
	}
	for _, e := range r.Evict {
		out = append(out, fmt.Sprintf("evict %s reason=%s", e.ContainerID, e.Reason))
	}
	sort.Strings(out)
	return out
}

func adjustment(a *wit.ContainerAdjustment, out []string) []string {
	for _, kv := range a.Annotations {
		out = append(out, fmt.Sprintf("annotation %s=%s", kv.Key, kv.Value))
	}
	for _, m := range a.Mounts {
		out = append(out, fmt.Sprintf("mount %s type=%s source=%s options=%s", m.Destination, m.Type, m.Source, q(m.Options)))
	}
	for _, kv := range a.Env {
		out = append(out, fmt.Sprintf("env %s=%s", kv.Key, kv.Value))
	}
	if h := a.Hooks; h != nil {
		stages := []struct {
			name  string
			hooks []wit.Hook
		}{
			{"prestart", h.Prestart}, {"createRuntime", h.CreateRuntime}, {"createContainer", h.CreateContainer},
			{"startContainer", h.StartContainer}, {"poststart", h.Poststart}, {"poststop", h.Poststop},
		}
		for _, s := range stages {
			for i, hook := range s.hooks {
				out = append(out, fmt.Sprintf("hook %s[%d] %s args=%s env=%s timeout=%s", s.name, i, hook.Path, q(hook.Args), q(hook.Env), opt(hook.Timeout)))
			}
		}
	}
	for _, r := range a.Rlimits {
		out = append(out, fmt.Sprintf("rlimit %s soft=%d hard=%d", r.Type, r.Soft, r.Hard))
	}
	for _, d := range a.CDIDevices {
		out = append(out, "cdi "+d)
	}
	if len(a.Args) > 0 {
		out = append(out, "args "+q(a.Args))
	}
	if a.Linux != nil {
		out = linux(a.Linux, out)
	}
	return out
}

func linux(l *wit.LinuxContainerAdjustment, out []string) []string {
	for _, d := range l.Devices {
		mode := "-"
		if d.FileMode != nil {
			mode = strconv.FormatUint(uint64(*d.FileMode), 8)
		}
		out = append(out, fmt.Sprintf("device %s type=%s major=%d minor=%d mode=%s uid=%s gid=%s", d.Path, d.Type, d.Major, d.Minor, mode, opt(d.UID), opt(d.Gid)))
	}
	if l.Resources != nil {
		out = resources("resources", l.Resources, out)
	}
	if l.CgroupsPath != "" {
		out = append(out, "cgroups_path="+l.CgroupsPath)
	}
	if l.OOMScoreAdj != nil {
		out = append(out, fmt.Sprintf("oom_score_adj=%d", *l.OOMScoreAdj))
	}
	if io := l.IOPriority; io != nil {
		out = append(out, fmt.Sprintf("io_priority class=%d priority=%d", io.Class, io.Priority))
	}
	if s := l.SeccompPolicy; s != nil {
		out = append(out, fmt.Sprintf("seccomp default_action=%s default_errno=%s architectures=%s flags=%s listener_path=%s listener_metadata=%s",
			s.DefaultAction, opt(s.DefaultErrno), q(s.Architectures), q(s.Flags), s.ListenerPath, s.ListenerMetadata))
		for i, c := range s.Syscalls {
			args := make([]string, len(c.Args))
			for j, a := range c.Args {
				args[j] = fmt.Sprintf("%d:%d:%d:%s", a.Index, a.Value, a.ValueTwo, a.Op)
			}
			out = append(out, fmt.Sprintf("seccomp.syscalls[%d] names=%s action=%s errno=%s args=%s", i, q(c.Names), c.Action, opt(c.ErrnoRet), q(args)))
		}
	}
	for _, n := range l.Namespaces {
		out = append(out, fmt.Sprintf("namespace %s path=%s", n.Type, n.Path))
	}
	for _, kv := range l.Sysctl {
		out = append(out, fmt.Sprintf("sysctl %s=%s", kv.Key, kv.Value))
	}
	for _, d := range l.NetDevices {
		out = append(out, fmt.Sprintf("net_device %s=%s", d.HostName, d.Name))
	}
	if s := l.Scheduler; s != nil {
		out = append(out, fmt.Sprintf("scheduler policy=%d nice=%d priority=%d flags=%s runtime=%d deadline=%d period=%d",
			s.Policy, s.Nice, s.Priority, nums(s.Flags), s.Runtime, s.Deadline, s.Period))
	}
	if r := l.RDT; r != nil {
		schemata := "-"
		if r.Schemata != nil {
			schemata = q(*r.Schemata)
		}
		out = append(out, fmt.Sprintf("rdt clos_id=%s schemata=%s monitoring=%s remove=%t", opt(r.CLOSID), schemata, opt(r.EnableMonitoring), r.Remove))
	}
	if m := l.MemoryPolicy; m != nil {
		out = append(out, fmt.Sprintf("memory_policy mode=%d nodes=%s flags=%s", m.Mode, m.Nodes, nums(m.Flags)))
	}
	return out
}

func resources(prefix string, r *wit.LinuxResources, out []string) []string {
	add := func(name, value string) { out = append(out, prefix+"."+name+"="+value) }
	if m := r.Memory; m != nil {
		for _, f := range []struct {
			name string
			v    *int64
		}{{"limit", m.Limit}, {"reservation", m.Reservation}, {"swap", m.Swap}, {"kernel", m.Kernel}, {"kernel_tcp", m.KernelTCP}} {
			if f.v != nil {
				add("memory."+f.name, strconv.FormatInt(*f.v, 10))
			}
		}
		if m.Swappiness != nil {
			add("memory.swappiness", strconv.FormatUint(*m.Swappiness, 10))
		}
		if m.DisableOOMKiller != nil {
			add("memory.disable_oom_killer", strconv.FormatBool(*m.DisableOOMKiller))
		}
		if m.UseHierarchy != nil {
			add("memory.use_hierarchy", strconv.FormatBool(*m.UseHierarchy))
		}
	}
	if c := r.CPU; c != nil {
		for _, f := range []struct {
			name string
			v    *uint64
		}{{"shares", c.Shares}, {"period", c.Period}, {"realtime_period", c.RealtimePeriod}} {
			if f.v != nil {
				add("cpu."+f.name, strconv.FormatUint(*f.v, 10))
			}
		}
		for _, f := range []struct {
			name string
			v    *int64
		}{{"quota", c.Quota}, {"realtime_runtime", c.RealtimeRuntime}} {
			if f.v != nil {
				add("cpu."+f.name, strconv.FormatInt(*f.v, 10))
			}
		}
		if c.CPUs != "" {
			add("cpu.cpus", c.CPUs)
		}
		if c.Mems != "" {
			add("cpu.mems", c.Mems)
		}
	}
	for _, h := range r.HugepageLimits {
		out = append(out, fmt.Sprintf("%s.hugepage %s=%d", prefix, h.PageSize, h.Limit))
	}
	if r.BlockioClass != nil {
		add("blockio_class", *r.BlockioClass)
	}
	if r.RDTClass != nil {
		add("rdt_class", *r.RDTClass)
	}
	for _, kv := range r.Unified {
		out = append(out, fmt.Sprintf("%s.unified %s=%s", prefix, kv.Key, kv.Value))
	}
	for i, d := range r.Devices {
		out = append(out, fmt.Sprintf("%s.devices[%d] allow=%t type=%s major=%s minor=%s access=%s", prefix, i, d.Allow, d.Type, opt(d.Major), opt(d.Minor), d.Access))
	}
	if r.PIDs != nil {
		out = append(out, fmt.Sprintf("%s.pids.limit=%d", prefix, r.PIDs.Limit))
	}
	return out
}
