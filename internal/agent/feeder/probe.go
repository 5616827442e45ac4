package feeder

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// The probe protocol: one UDP datagram each way, rebound's own, so that
// the responder knows who asked (memberlist tells a receiver nothing of
// who pinged it, and source addresses lie under SNAT).
//
//	magic "RBF1" | kind (1 byte) | len(from) (1 byte) | from | len(to) (1 byte) | to | nonce (16 bytes) | HMAC-SHA256 (32 bytes)
//
// The HMAC, keyed by the agents' shared gossip key, covers everything
// before it. A request's from is the prober, to the member it asks; an
// answer's from is the member, to the prober, with the request's nonce.
// The responder records whom it heard before it answers.
const (
	probeMagic  = "RBF1"
	kindRequest = byte(1)
	kindAnswer  = byte(2)
	nonceLen    = 16
	macLen      = sha256.Size
	// MaxProbeLen bounds a datagram: two node names of at most 253 bytes.
	MaxProbeLen = len(probeMagic) + 1 + 1 + 253 + 1 + 253 + nonceLen + macLen
)

// Probe is a decoded, authenticated datagram.
type Probe struct {
	Answer bool
	From   string
	To     string
	Nonce  [nonceLen]byte
}

var errProbe = errors.New("not a rebound probe")

// Encode signs p with key.
func (p Probe) Encode(key []byte) ([]byte, error) {
	if len(p.From) == 0 || len(p.From) > 253 || len(p.To) == 0 || len(p.To) > 253 {
		return nil, fmt.Errorf("probe: node names must be 1 to 253 bytes (from %q, to %q)", p.From, p.To)
	}
	b := make([]byte, 0, MaxProbeLen)
	b = append(b, probeMagic...)
	kind := kindRequest
	if p.Answer {
		kind = kindAnswer
	}
	b = append(b, kind, byte(len(p.From)))
	b = append(b, p.From...)
	b = append(b, byte(len(p.To)))
	b = append(b, p.To...)
	b = append(b, p.Nonce[:]...)
	return append(b, mac(key, b)...), nil
}

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// DecodeProbe parses and authenticates a datagram with any of keys (the
// keyring while a key rotates). Anything else is an error, never a panic:
// the datagrams come from the network.
func DecodeProbe(b []byte, keys [][]byte) (Probe, error) {
	var p Probe
	if len(b) < len(probeMagic)+3+nonceLen+macLen || string(b[:len(probeMagic)]) != probeMagic {
		return p, errProbe
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	ok := false
	for _, k := range keys {
		if hmac.Equal(mac(k, body), sum) {
			ok = true
			break
		}
	}
	if !ok {
		return p, fmt.Errorf("%w: bad signature", errProbe)
	}
	rest := body[len(probeMagic):]
	switch rest[0] {
	case kindRequest:
	case kindAnswer:
		p.Answer = true
	default:
		return p, fmt.Errorf("%w: kind %d", errProbe, rest[0])
	}
	rest = rest[1:]
	from, rest, err := field(rest)
	if err != nil {
		return p, err
	}
	to, rest, err := field(rest)
	if err != nil {
		return p, err
	}
	if len(rest) != nonceLen {
		return p, fmt.Errorf("%w: %d bytes of nonce", errProbe, len(rest))
	}
	p.From, p.To = from, to
	copy(p.Nonce[:], rest)
	return p, nil
}

func field(b []byte) (string, []byte, error) {
	if len(b) < 1 {
		return "", nil, errProbe
	}
	n := int(b[0])
	if n == 0 || len(b) < 1+n {
		return "", nil, fmt.Errorf("%w: a name of %d bytes in %d", errProbe, n, len(b)-1)
	}
	return string(b[1 : 1+n]), b[1+n:], nil
}

// newNonce makes a probe's nonce from the system's random source: another
// member that sees its own probe from this agent cannot tell from it the
// nonces this agent sent to the others, so it cannot answer for them.
func newNonce() (n [nonceLen]byte) {
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails
	return n
}
