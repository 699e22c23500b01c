// `allowed-images`, in Go: a container runs only an image from an allowed
// registry, pinned by digest, unless its pod carries the exception
// annotation. The image is NRI 0.12.2's field when the runtime sends it,
// else the CRI annotation io.kubernetes.cri.image-name (NRI 0.12.0, e.g.
// containerd 2.3.4). The same policy as example-policies/allowed-images
// (Rust), held to the same cases; its README explains the rules.
package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	nri "nri-wasm.local/nriwasm"
)

const criImageName = "io.kubernetes.cri.image-name"

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-fA-F]{64}$`)

type settings struct {
	registries    []string
	requireDigest bool
	exception     string
}

func parseSettings(text string) (*settings, error) {
	var raw struct {
		Registries    *[]string `json:"registries"`
		RequireDigest *bool     `json:"require-digest"`
		Exception     *string   `json:"exception-annotation"`
	}
	if strings.TrimSpace(text) != "" {
		d := json.NewDecoder(strings.NewReader(text))
		d.DisallowUnknownFields()
		if err := d.Decode(&raw); err != nil {
			return nil, nri.InvalidSettings("%v", err)
		}
	}
	if raw.Registries == nil {
		return nil, nri.InvalidSettings("missing field `registries`")
	}
	s := &settings{registries: *raw.Registries, requireDigest: true, exception: "images.example.com/exception"}
	if raw.RequireDigest != nil {
		s.requireDigest = *raw.RequireDigest
	}
	if raw.Exception != nil {
		s.exception = *raw.Exception
	}
	if len(s.registries) == 0 {
		return nil, nri.InvalidSettings("registries is empty, so every image would be refused")
	}
	for _, r := range s.registries {
		if r == "" || strings.HasSuffix(r, "/") || strings.Contains(r, "://") || strings.ContainsAny(r, "@ ") {
			q, _ := json.Marshal(r)
			return nil, nri.InvalidSettings("registries: %s is not a registry host or host/path (e.g. ghcr.io/example)", q)
		}
	}
	if s.exception == "" {
		return nil, nri.InvalidSettings("exception-annotation is empty")
	}
	return s, nil
}

type reference struct {
	host, path, digest string
	pinned             bool
}

// parseReference reads a reference as the runtimes do: the first component
// is a registry host if it has a . or a : or is localhost; otherwise the
// image is Docker Hub's.
func parseReference(ref string) reference {
	r := reference{}
	rest := ref
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		rest, r.digest, r.pinned = ref[:i], ref[i+1:], true
	}
	r.host, r.path = "docker.io", rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		first := rest[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			r.host, r.path = first, rest[i+1:]
		}
	}
	if i := strings.LastIndexByte(r.path, ':'); i >= 0 && !strings.Contains(r.path[i+1:], "/") {
		r.path = r.path[:i]
	}
	return r
}

func allows(entry string, r reference) bool {
	host, prefix, hasPath := strings.Cut(entry, "/")
	if !hasPath {
		return strings.EqualFold(entry, r.host)
	}
	if !strings.EqualFold(host, r.host) || !strings.HasPrefix(r.path, prefix) {
		return false
	}
	rest := r.path[len(prefix):]
	return rest == "" || strings.HasPrefix(rest, "/")
}

// judge says why the image is refused, or "".
func judge(s *settings, name, resolved string) string {
	r := parseReference(name)
	allowed := false
	for _, e := range s.registries {
		allowed = allowed || allows(e, r)
	}
	switch {
	case !allowed:
		return fmt.Sprintf("image %s is not from an allowed registry (allowed: %s)", name, strings.Join(s.registries, ", "))
	case r.pinned && !digestPattern.MatchString(r.digest):
		q, _ := json.Marshal(r.digest)
		return fmt.Sprintf("image %s: %s is not a sha256 digest", name, q)
	case !r.pinned && s.requireDigest:
		return fmt.Sprintf("image %s is not pinned by digest (use %s/%s@sha256:…)", name, r.host, r.path)
	case r.pinned && resolved != "" && !strings.EqualFold(r.digest, resolved):
		return fmt.Sprintf("image %s: the runtime resolved it to %s, not the pinned digest", name, resolved)
	}
	return ""
}

func createContainer(e *nri.Event) (nri.Reply, error) {
	s, err := parseSettings(nri.Settings())
	if err != nil {
		return nri.None(), err
	}
	c := e.Container()
	name, resolved := "", ""
	if c.Image != nil && c.Image.Name != "" {
		name, resolved = c.Image.Name, c.Image.Digest
	} else if n, ok := e.ContainerAnnotation(criImageName); ok && n != "" {
		name = n
	} else {
		return nri.None(), nri.Deny("container %s: the runtime names no image, so it cannot be checked", c.Name)
	}
	why := judge(s, name, resolved)
	if why == "" {
		return nri.None(), nil
	}
	if reason, ok := e.PodAnnotation(s.exception); ok && reason != "" {
		nri.Logf(nri.Info, "%s: allowed by exception (%s): %s", c.Name, reason, why)
		return nri.None(), nil
	}
	return nri.None(), nri.Deny("container %s: %s", c.Name, why)
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
