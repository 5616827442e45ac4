package peering

// Reporter is one member of the mesh's view of its sessions: the input of
// LostByMesh.
type Reporter struct {
	Name string
	// Working: Ready, its report fresh, its BIRD out of graceful-restart
	// recovery and at least one of its sessions Established. A BIRD that
	// is itself starting knows nothing about anybody.
	Working bool
	// Sessions maps a peer name to "Established now" (BGP Established or
	// BFD up); a peer it says nothing about is absent.
	Sessions map[string]bool
}

// LostByMesh reports whether every working reporter other than peer that
// speaks of peer has lost it, and at least one does. One working reporter
// that still has the session keeps the peer; no working reporter says
// nothing.
func LostByMesh(peer string, reporters []Reporter) bool {
	seen := false
	for _, r := range reporters {
		if !r.Working || r.Name == peer {
			continue
		}
		up, configured := r.Sessions[peer]
		if !configured {
			continue
		}
		if up {
			return false
		}
		seen = true
	}
	return seen
}
