// cri-timer creates containers through the CRI one after the other and
// prints how long each CreateContainer call took, as its caller saw it.
//
// The real-runtime benchmark (benches/benches/real_runtime.rs) uses it to
// time creates from the client's side: crictl starts a process per create,
// and the runtime's log has only millisecond timestamps, neither of which
// can show a difference of a few hundred microseconds.
//
//	cri-timer -endpoint unix:///run/x.sock -pod ID -pod-config pod.json \
//	    -container-config container.json -name bench-r0 -count 200 [-remove]
//
// The container's config is read as crictl reads it (protobuf JSON, field
// names as in the CRI's proto file, unknown ones skipped); each container
// gets the name "<name>-<i>" in its metadata, in the
// io.kubernetes.container.name label and in its log path. With -remove,
// each container is removed (untimed) before the next is created, so that
// every create finds the node as the first did: a runtime's creates slow
// down as a pod's containers pile up.
// Output: one line per container made, "<id> <ns>", also when a later
// call failed (the error then goes to stderr and the exit status is 1).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "the runtime's CRI endpoint (unix:///path)")
	pod := flag.String("pod", "", "the id of the pod sandbox to create the containers in")
	podConfig := flag.String("pod-config", "", "the pod's config (JSON), as it was run")
	containerConfig := flag.String("container-config", "", "the containers' config (JSON)")
	name := flag.String("name", "", "the containers' name prefix")
	count := flag.Int("count", 1, "how many containers to create")
	timeout := flag.Duration("timeout", 60*time.Second, "the time limit of each call")
	remove := flag.Bool("remove", false, "remove each container before creating the next")
	flag.Parse()
	if *endpoint == "" || *pod == "" || *podConfig == "" || *containerConfig == "" || *name == "" || *count < 0 {
		fmt.Fprintln(os.Stderr, "cri-timer: -endpoint, -pod, -pod-config, -container-config and -name are required")
		os.Exit(2)
	}
	if err := run(*endpoint, *pod, *podConfig, *containerConfig, *name, *count, *timeout, *remove); err != nil {
		fmt.Fprintf(os.Stderr, "cri-timer: %v\n", err)
		os.Exit(1)
	}
}

func readJSON(path string, m proto.Message) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// Fields this CRI version does not know are skipped, as crictl does.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func run(endpoint, pod, podConfig, containerConfig, name string, count int, timeout time.Duration, remove bool) error {
	var sandbox runtime.PodSandboxConfig
	if err := readJSON(podConfig, &sandbox); err != nil {
		return err
	}
	var template runtime.ContainerConfig
	if err := readJSON(containerConfig, &template); err != nil {
		return err
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	defer conn.Close()
	client := runtime.NewRuntimeServiceClient(conn)

	// The connection is made by the first call: made here, not in the
	// first create.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	_, err = client.Version(ctx, &runtime.VersionRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("Version: %w", err)
	}

	// Printed when the run ends, failed or not: nothing written while the
	// creates are timed, and every container made is named.
	out := make([]string, 0, count)
	defer func() {
		for _, line := range out {
			os.Stdout.WriteString(line)
		}
	}()
	for i := 0; i < count; i++ {
		config := proto.Clone(&template).(*runtime.ContainerConfig)
		n := fmt.Sprintf("%s-%d", name, i)
		if config.Metadata == nil {
			config.Metadata = &runtime.ContainerMetadata{}
		}
		config.Metadata.Name = n
		if config.Labels == nil {
			config.Labels = map[string]string{}
		}
		config.Labels["io.kubernetes.container.name"] = n
		config.LogPath = n + ".log"
		req := &runtime.CreateContainerRequest{PodSandboxId: pod, Config: config, SandboxConfig: &sandbox}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		resp, err := client.CreateContainer(ctx, req)
		took := time.Since(start)
		cancel()
		if err != nil {
			return fmt.Errorf("CreateContainer %s (%d of %d): %w", n, i+1, count, err)
		}
		out = append(out, fmt.Sprintf("%s %d\n", resp.ContainerId, took.Nanoseconds()))
		if remove {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			_, err := client.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: resp.ContainerId})
			cancel()
			if err != nil {
				return fmt.Errorf("RemoveContainer %s (%s): %w", resp.ContainerId, n, err)
			}
		}
	}
	return nil
}
