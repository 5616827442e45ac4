// Package linkcut is the lab's network partition between agents that
// share one host's loopback: the lab writes, per agent, a file naming the
// addresses its links to are cut, and the agent (rebound sandbox agent)
// drops its gossip and fencing traffic to and from them (the agent's
// GossipOptions.Cut). No rule of rebound's lives here.
package linkcut

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Write names, in path, the addresses whose links are cut; none heals
// every link. The file is replaced at once: a reader never sees half.
func Write(path string, cut ...netip.Addr) error {
	var b strings.Builder
	for _, a := range cut {
		b.WriteString(a.String() + "\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Reader returns the agent's side: whether the link to an address is cut,
// as path says, read again at most every interval. A missing or
// unreadable file cuts nothing.
func Reader(path string, interval time.Duration) func(netip.Addr) bool {
	var (
		mu   sync.Mutex
		cut  []netip.Addr
		read time.Time
	)
	return func(a netip.Addr) bool {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(read) >= interval {
			read, cut = now, parse(path)
		}
		return slices.Contains(cut, a)
	}
}

func parse(path string) []netip.Addr {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, line := range strings.Fields(string(data)) {
		if a, err := netip.ParseAddr(line); err == nil {
			out = append(out, a)
		}
	}
	return out
}
