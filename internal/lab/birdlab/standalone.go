package birdlab

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"text/template"

	"rebound/pkg/peering/bird"
)

// Names of the objects a standalone configuration defines beside the mesh.
const (
	exportFilterName   = "rebound_export"
	kernelFilterName   = "rebound_kernel"
	staticProtocolName = "rebound_static"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// templates are the standalone configurations; the mesh inside them is
// rendered by bird.RenderMesh, the production renderer, so a lab runs the
// exact mesh the agent writes.
var templates = template.Must(template.New("standalone").
	Option("missingkey=error").
	Funcs(template.FuncMap{
		"exportFilterName":   func() string { return exportFilterName },
		"kernelFilterName":   func() string { return kernelFilterName },
		"staticProtocolName": func() string { return staticProtocolName },
	}).
	ParseFS(templateFS, "templates/*.tmpl"))

// KernelConfig adds a `protocol kernel` to a standalone configuration.
type KernelConfig struct {
	// Export programs the routes learned from peers into the kernel's main
	// table. Only do this inside a network namespace: on a shared host it
	// changes the host's routing.
	Export bool
}

// StandaloneConfig is a complete BIRD configuration for one test node:
// router id, the mesh, static routes to announce, and optionally a kernel
// protocol. End-to-end tests run several of these on 127.0.0.x.
type StandaloneConfig struct {
	// Mesh is the node's mesh; its ListenPort is required, since several
	// test instances share one host. Its filters must be unset: the
	// standalone file defines its own (peers' routes in, static routes out).
	Mesh bird.MeshConfig
	// RouterID defaults to Mesh.Address.
	RouterID netip.Addr
	// Routes are announced to the peers as blackhole static routes, like
	// the /26 IPAM block Calico announces for a node.
	Routes []netip.Prefix
	// Kernel, when set, adds a kernel protocol with graceful restart.
	Kernel *KernelConfig
	// MeshInclude, when set, is the absolute path of a mesh include file
	// (what `rebound agent` writes with bird.RenderMesh): the configuration
	// includes it instead of rendering Mesh.Peers inline. Mesh still gives
	// the node name, address, version and listen port, and the include
	// must be rendered with the same ListenPort.
	MeshInclude string
}

// Validate checks the standalone fields, then the mesh.
func (c StandaloneConfig) Validate() error {
	var errs []error
	if c.RouterID.IsValid() && (!c.RouterID.Is4() || c.RouterID.IsUnspecified()) {
		errs = append(errs, fmt.Errorf("routerID %s: want an IPv4 address", c.RouterID))
	}
	if c.Mesh.ListenPort == 0 {
		errs = append(errs, errors.New("mesh.listenPort: required for a standalone configuration (several instances share one host)"))
	}
	if c.Mesh.ImportFilter != "" || c.Mesh.ExportFilter != "" {
		errs = append(errs, errors.New("mesh.importFilter/exportFilter: must be empty, the standalone configuration defines its own filters"))
	}
	for i, r := range c.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		switch {
		case !r.IsValid():
			errs = append(errs, fmt.Errorf("%s: not a valid prefix", field))
		case !r.Addr().Is4():
			errs = append(errs, fmt.Errorf("%s %s: want an IPv4 prefix", field, r))
		case r != r.Masked():
			errs = append(errs, fmt.Errorf("%s %s: host bits set, want %s", field, r, r.Masked()))
		}
	}
	if c.MeshInclude != "" {
		switch {
		case strings.ContainsAny(c.MeshInclude, "\"'{};\\\r\n"):
			errs = append(errs, fmt.Errorf("meshInclude %q: contains a quote, brace, semicolon, backslash or line break", c.MeshInclude))
		case !strings.HasPrefix(c.MeshInclude, "/"):
			errs = append(errs, fmt.Errorf("meshInclude %q: want an absolute path (BIRD resolves a relative one against its working directory)", c.MeshInclude))
		}
	}
	if err := c.Mesh.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("bird standalone config: %w", errors.Join(errs...))
}

type standaloneView struct {
	NodeName string
	RouterID netip.Addr
	Routes   []netip.Prefix
	Kernel   *KernelConfig
	// MeshInclude replaces the inline mesh (Mesh) with an include of this file.
	MeshInclude string
	Mesh        string
}

// RenderStandalone renders a complete configuration for one test node: the
// mesh plus router id, logging to stderr, a device protocol, the static
// routes to announce and an optional kernel protocol.
func RenderStandalone(c StandaloneConfig) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	v := standaloneView{
		NodeName:    c.Mesh.NodeName,
		RouterID:    c.RouterID,
		Routes:      slices.Clone(c.Routes),
		Kernel:      c.Kernel,
		MeshInclude: c.MeshInclude,
	}
	if v.MeshInclude == "" {
		mesh := c.Mesh
		mesh.ImportFilter, mesh.ExportFilter = "all", exportFilterName
		out, err := bird.RenderMesh(mesh)
		if err != nil {
			return nil, err
		}
		v.Mesh = string(out)
	}
	if !v.RouterID.IsValid() {
		v.RouterID = c.Mesh.Address
	}
	slices.SortFunc(v.Routes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	name := "standalone_bird16.conf.tmpl"
	if c.Mesh.Version == bird.Bird2 {
		name = "standalone_bird2.conf.tmpl"
	}
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, v); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return buf.Bytes(), nil
}
