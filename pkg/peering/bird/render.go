package bird

import (
	"bytes"
	"embed"
	"fmt"
	"net/netip"
	"slices"
	"text/template"
)

// Name of the bgp template the rendered configuration defines. It carries a
// rebound_ prefix so that an include never collides with Calico's own
// bgp_template.
const (
	meshTemplateName = "rebound_mesh"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// templates holds every template, parsed once: they are constants of the
// program, so a parse error is a bug that the golden tests catch.
var templates = template.Must(template.New("bird").
	Option("missingkey=error").
	Funcs(template.FuncMap{
		"protocolName":     protocolName,
		"passive":          passive,
		"filterClause":     filterClause,
		"meshTemplateName": func() string { return meshTemplateName },
	}).
	ParseFS(templateFS, "templates/*.tmpl"))

// meshView is the validated, defaulted, sorted data of a mesh template.
type meshView struct {
	NodeName            string
	Address             netip.Addr
	AS                  uint32
	GracefulRestartWait int
	ListenPort          uint16
	ImportFilter        string
	ExportFilter        string
	Peers               []peerView
	BFD                 *bfdView
	// StrictBind is BIRD 2's listen-on-this-address-only, for BGP and BFD.
	StrictBind bool
}

// bfdView is a validated, defaulted BFD configuration.
type bfdView struct {
	IntervalMS int64
	Multiplier int
}

// peerView is one rendered peer: defaults resolved, the local node removed.
type peerView struct {
	Name                string
	Address             netip.Addr
	Port                uint16 // 0: BIRD's default, 179
	AS                  uint32
	GracefulRestartTime int
}

// RenderMesh renders the node's mesh as a BIRD include file: the global
// `graceful restart wait`, the optional listen address, a bgp template and
// one protocol per peer. The local node is skipped; peers come out sorted
// by address so the same peer set always renders the same bytes.
func RenderMesh(c MeshConfig) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return execute(meshTemplateFile(c.Version), newMeshView(c))
}

func meshTemplateFile(v Version) string {
	if v == Bird2 {
		return "mesh_bird2.conf.tmpl"
	}
	return "mesh_bird16.conf.tmpl"
}

// newMeshView resolves defaults and drops the local node. c must be valid.
func newMeshView(c MeshConfig) meshView {
	c = c.withDefaults()
	v := meshView{
		NodeName:            c.NodeName,
		Address:             c.Address,
		AS:                  c.AS,
		GracefulRestartWait: c.GracefulRestartWait,
		ListenPort:          c.ListenPort,
		ImportFilter:        c.ImportFilter,
		ExportFilter:        c.ExportFilter,
		StrictBind:          c.ListenPort != 0,
	}
	if c.BFD != nil {
		v.BFD = &bfdView{IntervalMS: c.BFD.Interval.Milliseconds(), Multiplier: c.BFD.Multiplier}
	}
	for _, p := range c.Peers {
		if c.skips(p) {
			continue
		}
		pv := peerView{Name: p.Name, Address: p.Address, Port: p.Port, AS: p.AS, GracefulRestartTime: p.GracefulRestartTime}
		if pv.AS == 0 {
			pv.AS = c.AS
		}
		if pv.GracefulRestartTime == 0 {
			pv.GracefulRestartTime = c.GracefulRestartTime
		}
		if pv.Port == DefaultBGPPort {
			pv.Port = 0
		}
		v.Peers = append(v.Peers, pv)
	}
	slices.SortFunc(v.Peers, func(a, b peerView) int { return a.Address.Compare(b.Address) })
	return v
}

func execute(name string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := templates.ExecuteTemplate(&buf, name, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return buf.Bytes(), nil
}
