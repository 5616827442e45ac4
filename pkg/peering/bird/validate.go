package bird

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// maxTextLen bounds free text such as node names (a Kubernetes node name is
// at most 253 characters).
const maxTextLen = 253

// checkText accepts text that is safe inside a BIRD string literal and a
// comment line: printable ASCII without the characters that end a string,
// a statement, a block or a line. The error names the field and the first
// offending character.
func checkText(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: empty", field)
	}
	if len(s) > maxTextLen {
		return fmt.Errorf("%s: %d characters, at most %d", field, len(s), maxTextLen)
	}
	for i, r := range s {
		var what string
		switch {
		case r == '\r' || r == '\n':
			what = "a line break"
		case r == '{' || r == '}':
			what = "a brace"
		case r == '"' || r == '\'':
			what = "a quote"
		case r == ';':
			what = "a semicolon"
		case r == '\\':
			what = "a backslash (BIRD's string escape)"
		case r < 0x20 || r == 0x7f:
			what = "a control character"
		case r > 0x7e:
			what = "a non-ASCII character"
		default:
			continue
		}
		return fmt.Errorf("%s %q: contains %s at byte %d", field, s, what, i)
	}
	return nil
}

// checkIPv4 accepts a valid, plain IPv4 address. BIRD 1.6 is an IPv4-only
// daemon ("This is an IPv4 router, therefore IPv6 addresses are not
// supported"), and the mesh is rendered for IPv4 in both versions.
func checkIPv4(field string, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("%s: missing or invalid IP address", field)
	case a.Is4In6():
		return fmt.Errorf("%s %s: IPv4-mapped IPv6 address, write it as %s", field, a, a.Unmap())
	case !a.Is4():
		return fmt.Errorf("%s %s: IPv6 is not supported, want an IPv4 address", field, a)
	case a.IsUnspecified():
		return fmt.Errorf("%s %s: unspecified address, want a node's address", field, a)
	}
	return nil
}

func checkRange(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s: %d out of range %d..%d", field, v, lo, hi)
	}
	return nil
}

// identifier is BIRD's symbol syntax, restricted to ASCII.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkFilter accepts "", "all", "none" or the name of a filter.
func checkFilter(field, name string) error {
	switch name {
	case "", "all", "none":
		return nil
	}
	if len(name) > 64 || !identifier.MatchString(name) {
		return fmt.Errorf("%s %q: want all, none or a BIRD filter name (letters, digits, underscores)", field, name)
	}
	return nil
}

// filterClause renders a validated filter setting for `import`/`export`.
func filterClause(name string) string {
	switch name {
	case "", "all":
		return "all"
	case "none":
		return "none"
	}
	return "filter " + name
}

// ProtocolName is the name of the BGP protocol the mesh renders for a peer:
// Calico's Mesh_ and the address with dots replaced by underscores
// (Mesh_10_0_0_2). `show protocols` lists sessions under this name.
func ProtocolName(a netip.Addr) string { return protocolName(a) }

// protocolName is Calico's mesh protocol name: Mesh_ and the address with
// dots replaced by underscores (Mesh_10_0_0_2).
func protocolName(a netip.Addr) string {
	return "Mesh_" + strings.ReplaceAll(a.String(), ".", "_")
}

// passive reports whether the local side waits for the peer to connect.
// Calico's template uses `gt $onode_ip $node_ip`, a comparison of the
// dotted strings (so 10.0.0.9 > 10.0.0.10); comparing the same way keeps a
// mesh that mixes rebound-rendered and Calico-rendered nodes from having
// both ends of a pair passive.
func passive(peer, local netip.Addr) bool {
	return peer.String() > local.String()
}
