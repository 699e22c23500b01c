// Command native-plugin is the project's reference NRI plugin: an ordinary
// plugin written against the NRI library's stub, whose CreateContainer reply
// is described entirely by its command line. The differential tests run K of
// these against a runtime, then the same K adjustments as K wasm policies in
// one nri-wasm host, and compare the OCI specs the runtime produced.
//
// The adjustment flags may be repeated and are applied in the order given on
// the command line (the order of entries within a reply matters to the
// runtime's merge). Values use ':' between fields and ',' within a list:
//
//	-env-set K=V              -env-remove K
//	-annotation-set K=V       -annotation-remove K
//	-mount-add DST:SRC[:OPT,OPT...]   (a bind mount)
//	-mount-remove DST
//	-memory-limit BYTES  -cpu-shares N  -cpu-quota N  -cpu-period N  -pids-limit N
//	-rlimit TYPE:SOFT:HARD           (e.g. RLIMIT_NOFILE:1024:2048)
//	-device-add PATH:TYPE:MAJOR:MINOR[:MODE]   (MODE in octal)
//	-device-remove PATH
//	-hook KIND:PATH[:ARG,ARG...]     (KIND: prestart, create-runtime,
//	                                  create-container, start-container,
//	                                  poststart, poststop)
//	-update NAME:KEY=N[,KEY=N...]    (KEY: memory-limit, cpu-shares,
//	                                  cpu-quota, cpu-period, pids-limit)
//
// -update asks, in the reply to each CreateContainer, for an update of every
// other container named NAME that the plugin knows to exist (from
// Synchronize and the container events it subscribes to for this).
//
// The plugin writes "synchronized" on stdout when the runtime has
// synchronized it, so a test knows it is registered.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// op is one adjustment flag and its value, kept in command-line order.
type op struct {
	flag  string
	value string
}

// ops collects every adjustment flag into one ordered list.
type ops struct {
	list *[]op
	name string
}

func (o ops) String() string { return "" }

func (o ops) Set(v string) error {
	*o.list = append(*o.list, op{flag: o.name, value: v})
	return nil
}

var adjustmentFlags = map[string]string{
	"env-set":           "set an env variable K=V",
	"env-remove":        "remove an env variable",
	"annotation-set":    "set an annotation K=V",
	"annotation-remove": "remove an annotation",
	"mount-add":         "add a bind mount DST:SRC[:OPT,OPT...]",
	"mount-remove":      "remove the mount at DST",
	"memory-limit":      "set the memory limit in bytes",
	"cpu-shares":        "set the CPU shares",
	"cpu-quota":         "set the CPU quota",
	"cpu-period":        "set the CPU period",
	"pids-limit":        "set the pids limit",
	"rlimit":            "set an rlimit TYPE:SOFT:HARD",
	"device-add":        "add a device PATH:TYPE:MAJOR:MINOR[:MODE]",
	"device-remove":     "remove the device at PATH",
	"hook":              "add an OCI hook KIND:PATH[:ARG,ARG...]",
	"update":            "update other containers NAME:KEY=N[,KEY=N...]",
}

type plugin struct {
	stub    stub.Stub
	ops     []op
	updates []updateSpec

	mu    sync.Mutex
	known map[string]string // container id -> name
}

type updateSpec struct {
	name      string
	resources []keyValue
}

type keyValue struct {
	key   string
	value int64
}

func main() {
	var list []op
	name := flag.String("name", "native", "plugin name")
	idx := flag.String("idx", "10", "plugin index (two digits)")
	socket := flag.String("socket", "/var/run/nri/nri.sock", "NRI socket of the runtime")
	for f, usage := range adjustmentFlags {
		flag.Var(ops{list: &list, name: f}, f, usage+" (repeatable, applied in order)")
	}
	flag.Parse()
	if flag.NArg() != 0 {
		fail("unexpected arguments %q", flag.Args())
	}

	p := &plugin{known: map[string]string{}}
	_, updates, err := build(list)
	if err != nil {
		fail("%v", err)
	}
	p.ops, p.updates = list, updates

	s, err := stub.New(p,
		stub.WithPluginName(*name),
		stub.WithPluginIdx(*idx),
		stub.WithSocketPath(*socket),
		stub.WithOnClose(func() {
			fmt.Fprintf(os.Stderr, "native-plugin %s-%s: connection closed\n", *idx, *name)
			os.Exit(3)
		}),
	)
	if err != nil {
		fail("creating the stub: %v", err)
	}
	p.stub = s
	if err := s.Run(context.Background()); err != nil {
		fail("plugin %s-%s stopped: %v", *idx, *name, err)
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "native-plugin: "+format+"\n", args...)
	os.Exit(2)
}

// build turns the ordered flags into the adjustment and the update requests.
func build(list []op) (*api.ContainerAdjustment, []updateSpec, error) {
	a := &api.ContainerAdjustment{}
	var updates []updateSpec
	for _, o := range list {
		if err := apply(a, &updates, o); err != nil {
			return nil, nil, fmt.Errorf("-%s %q: %w", o.flag, o.value, err)
		}
	}
	return a, updates, nil
}

func apply(a *api.ContainerAdjustment, updates *[]updateSpec, o op) error {
	v := o.value
	switch o.flag {
	case "env-set":
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("expected K=V")
		}
		a.AddEnv(k, val)
	case "env-remove":
		a.RemoveEnv(v)
	case "annotation-set":
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("expected K=V")
		}
		a.AddAnnotation(k, val)
	case "annotation-remove":
		a.RemoveAnnotation(v)
	case "mount-add":
		parts := strings.SplitN(v, ":", 3)
		if len(parts) < 2 {
			return fmt.Errorf("expected DST:SRC[:OPTIONS]")
		}
		m := &api.Mount{Destination: parts[0], Source: parts[1], Type: "bind"}
		if len(parts) == 3 && parts[2] != "" {
			m.Options = strings.Split(parts[2], ",")
		}
		a.AddMount(m)
	case "mount-remove":
		a.RemoveMount(v)
	case "memory-limit", "cpu-quota", "cpu-period", "pids-limit":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return err
		}
		switch o.flag {
		case "memory-limit":
			a.SetLinuxMemoryLimit(n)
		case "cpu-quota":
			a.SetLinuxCPUQuota(n)
		case "cpu-period":
			a.SetLinuxCPUPeriod(n)
		default:
			a.SetLinuxPidLimits(n)
		}
	case "cpu-shares":
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return err
		}
		a.SetLinuxCPUShares(n)
	case "rlimit":
		parts := strings.Split(v, ":")
		if len(parts) != 3 {
			return fmt.Errorf("expected TYPE:SOFT:HARD")
		}
		soft, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			return err
		}
		hard, err := strconv.ParseUint(parts[2], 10, 64)
		if err != nil {
			return err
		}
		a.AddRlimit(parts[0], hard, soft)
	case "device-add":
		parts := strings.Split(v, ":")
		if len(parts) != 4 && len(parts) != 5 {
			return fmt.Errorf("expected PATH:TYPE:MAJOR:MINOR[:MODE]")
		}
		major, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			return err
		}
		minor, err := strconv.ParseInt(parts[3], 10, 64)
		if err != nil {
			return err
		}
		d := &api.LinuxDevice{Path: parts[0], Type: parts[1], Major: major, Minor: minor}
		if len(parts) == 5 {
			mode, err := strconv.ParseUint(parts[4], 8, 32)
			if err != nil {
				return err
			}
			d.FileMode = api.FileMode(uint32(mode))
		}
		a.AddDevice(d)
	case "device-remove":
		a.RemoveDevice(v)
	case "hook":
		parts := strings.SplitN(v, ":", 3)
		if len(parts) < 2 {
			return fmt.Errorf("expected KIND:PATH[:ARGS]")
		}
		h := &api.Hook{Path: parts[1]}
		if len(parts) == 3 && parts[2] != "" {
			h.Args = strings.Split(parts[2], ",")
		}
		hooks := &api.Hooks{}
		switch parts[0] {
		case "prestart":
			hooks.Prestart = []*api.Hook{h}
		case "create-runtime":
			hooks.CreateRuntime = []*api.Hook{h}
		case "create-container":
			hooks.CreateContainer = []*api.Hook{h}
		case "start-container":
			hooks.StartContainer = []*api.Hook{h}
		case "poststart":
			hooks.Poststart = []*api.Hook{h}
		case "poststop":
			hooks.Poststop = []*api.Hook{h}
		default:
			return fmt.Errorf("unknown hook kind %q", parts[0])
		}
		a.AddHooks(hooks)
	case "update":
		name, rest, ok := strings.Cut(v, ":")
		if !ok || name == "" || rest == "" {
			return fmt.Errorf("expected NAME:KEY=N[,KEY=N...]")
		}
		u := updateSpec{name: name}
		for _, kv := range strings.Split(rest, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("expected KEY=N in %q", kv)
			}
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return err
			}
			switch k {
			case "memory-limit", "cpu-shares", "cpu-quota", "cpu-period", "pids-limit":
			default:
				return fmt.Errorf("unknown update key %q", k)
			}
			u.resources = append(u.resources, keyValue{key: k, value: n})
		}
		*updates = append(*updates, u)
	default:
		return fmt.Errorf("unknown flag")
	}
	return nil
}

// Configure subscribes to CreateContainer, and to the container events that
// keep the list of containers when -update needs it.
func (p *plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	events := []api.Event{api.Event_CREATE_CONTAINER}
	if len(p.updates) > 0 {
		events = append(events, api.Event_POST_CREATE_CONTAINER, api.Event_REMOVE_CONTAINER)
	}
	mask := api.EventMask(0)
	mask.Set(events...)
	fmt.Fprintf(os.Stderr, "native-plugin: configured by %s %s\n", runtime, version)
	return mask, nil
}

func (p *plugin) Synchronize(_ context.Context, _ []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	for _, c := range containers {
		p.known[c.Id] = c.Name
	}
	p.mu.Unlock()
	fmt.Println("synchronized")
	return nil, nil
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	// A fresh adjustment per reply: the runtime may keep what it is given.
	adjust, _, err := build(p.ops)
	if err != nil {
		return nil, nil, err
	}
	var updates []*api.ContainerUpdate
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, spec := range p.updates {
		for id, name := range p.known {
			if name != spec.name || id == c.Id {
				continue
			}
			u := &api.ContainerUpdate{}
			u.SetContainerId(id)
			for _, kv := range spec.resources {
				switch kv.key {
				case "memory-limit":
					u.SetLinuxMemoryLimit(kv.value)
				case "cpu-shares":
					u.SetLinuxCPUShares(uint64(kv.value))
				case "cpu-quota":
					u.SetLinuxCPUQuota(kv.value)
				case "cpu-period":
					u.SetLinuxCPUPeriod(kv.value)
				case "pids-limit":
					u.SetLinuxPidLimits(kv.value)
				}
			}
			updates = append(updates, u)
		}
	}
	return adjust, updates, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	p.known[c.Id] = c.Name
	p.mu.Unlock()
	return nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	delete(p.known, c.Id)
	p.mu.Unlock()
	return nil
}
