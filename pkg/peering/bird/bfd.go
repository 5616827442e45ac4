package bird

import (
	"fmt"
	"net/netip"
	"strings"
)

// BFDSession is one row of `birdc show bfd sessions`:
//
//	bfd1:
//	IP address                Interface  State      Since         Interval  Timeout
//	127.0.9.3                 ---        Up         17:39:02.844    0.100    0.500
type BFDSession struct {
	// Protocol is the BFD protocol the session belongs to.
	Protocol string
	Address  netip.Addr
	// Interface is "---" for a multihop session.
	Interface string
	// State is Up, Down, Init or AdminDown.
	State string
	// Since is when State was entered, as BIRD prints it (see ParseSince).
	Since string
}

// Up reports whether the session is Up.
func (s BFDSession) Up() bool { return s.State == "Up" }

// codeBFDProtocol starts the block of one BFD protocol ("bfd1:").
const codeBFDProtocol = 1020

// ParseShowBFDSessions parses `birdc show bfd sessions` of BIRD 1.6 or 2,
// plain or with reply codes.
func ParseShowBFDSessions(out string) ([]BFDSession, error) {
	lines, err := splitReply(out)
	if err != nil {
		return nil, err
	}
	var sessions []BFDSession
	proto := ""
	for i, l := range lines {
		text := strings.TrimSpace(l.text)
		f := strings.Fields(text)
		switch {
		case len(f) == 1 && strings.HasSuffix(text, ":"):
			proto = strings.TrimSuffix(text, ":")
		case len(f) >= 2 && f[0] == "IP" && f[1] == "address":
			// the column header
		case l.code > 0 && l.code != codeBFDProtocol:
			// end of reply or another message
		case len(f) >= 4:
			addr, err := netip.ParseAddr(f[0])
			if err != nil {
				return nil, fmt.Errorf("`show bfd sessions` line %d %q: address: %w", i+1, text, err)
			}
			s := BFDSession{Protocol: proto, Address: addr, Interface: f[1], State: f[2], Since: f[3]}
			if len(f) >= 5 && dateToken.MatchString(f[3]) && timeToken.MatchString(f[4]) {
				s.Since += " " + f[4]
			}
			sessions = append(sessions, s)
		default:
			return nil, fmt.Errorf("`show bfd sessions` line %d %q: want address, interface, state and since", i+1, text)
		}
	}
	return sessions, nil
}
