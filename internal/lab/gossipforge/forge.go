// Package gossipforge lets a test act as a malicious key holder in
// rebound's gossip plane: it speaks hashicorp/memberlist v0.6.0's UDP wire
// format with the cluster's key, and forges alive, suspect, dead and
// left messages about any member.
//
// Every node holds the gossip key, and the key authenticates membership,
// not the sender: a member accepts any message about any other member from
// anyone who can encrypt it. This package is that anyone. It exists so that
// the agent's tests can show that no forged membership state turns into a
// Dead vote, without trusting a mock of memberlist to behave as the real
// one does.
//
// The wire format, as memberlist v0.6.0 writes one gossip packet (net.go
// rawSendMsgPacket, configured as rebound configures it: a secret key,
// GossipVerifyOutgoing, no label, no compression):
//
//	packet    = encryptionVersion(1) nonce(12) AES-GCM(key, plain, label="")
//	plain     = hasCrcMsg(12) crc32-IEEE(body, big-endian, 4) body
//	body      = messageType(1) msgpack(struct)
//
// The CRC header is what memberlist adds for recipients that speak
// protocol 5; a receiver accepts packets with or without it. Encryption
// version 1 (no padding) is what memberlist uses at any protocol version
// above 1, including the default.
package gossipforge

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// memberlist's message type numbers (net.go; append-only, part of the
// protocol).
const (
	suspectMsg byte = 3
	aliveMsg   byte = 4
	deadMsg    byte = 5
	hasCrcMsg  byte = 12
)

// encryptionVersion 1 is AES-GCM without padding: what memberlist speaks
// at every protocol version but 1.
const encryptionVersion = 1

// vsn is the version vector a memberlist with the default config announces
// in its alive messages (Config.BuildVsnArray): protocol min, max, current,
// then the delegate's min, max, current. A receiver with an alive delegate
// ignores an alive message without all six.
var vsn = []uint8{1, 5, 2, 0, 0, 0}

// packetGap is the pause between two packets of one Send. memberlist hands
// received gossip to its state machine through two LIFO queues, alive
// messages first: a burst would be applied in reverse order, alive before
// the rest. The gap lets each packet be applied before the next arrives.
const packetGap = 25 * time.Millisecond

// Kind is what a forged message claims.
type Kind string

// The kinds of messages the forger sends.
const (
	KindAlive   Kind = "alive"
	KindSuspect Kind = "suspect"
	KindDead    Kind = "dead"
	// KindLeft is a dead message whose sender is the node itself: the
	// receivers mark it Left, as after a graceful leave.
	KindLeft Kind = "left"
)

// Message is one forged message about a node. Build it with Alive,
// Suspect, Dead or Left.
type Message struct {
	Kind        Kind
	Node        string
	Incarnation uint32
	// Addr is where an alive message says the node is; unset otherwise.
	Addr netip.AddrPort
}

func (m Message) String() string {
	if m.Kind == KindAlive {
		return fmt.Sprintf("%s %s incarnation %d at %s", m.Node, m.Kind, m.Incarnation, m.Addr)
	}
	return fmt.Sprintf("%s %s incarnation %d", m.Node, m.Kind, m.Incarnation)
}

// Alive says node is alive at addr with the given incarnation.
func Alive(node string, incarnation uint32, addr netip.AddrPort) Message {
	return Message{Kind: KindAlive, Node: node, Incarnation: incarnation, Addr: addr}
}

// Suspect says the forger suspects node (at the given incarnation).
func Suspect(node string, incarnation uint32) Message {
	return Message{Kind: KindSuspect, Node: node, Incarnation: incarnation}
}

// Dead says the forger found node dead (at the given incarnation).
func Dead(node string, incarnation uint32) Message {
	return Message{Kind: KindDead, Node: node, Incarnation: incarnation}
}

// Left says node left the gossip itself (at the given incarnation).
func Left(node string, incarnation uint32) Message {
	return Message{Kind: KindLeft, Node: node, Incarnation: incarnation}
}

// ForgedSequence is the attack on a live node: "node left" carrying the
// highest incarnation, "node alive at bogus" (an address where nothing
// answers), "node dead". A member that applies it holds node dead at
// bogus. The left message moves node's incarnation to math.MaxUint32 and
// makes its address replaceable (a Left member may come back anywhere),
// the alive message moves it to bogus, and the dead one kills it there.
// The real node cannot refute: its refutation must carry a higher
// incarnation than math.MaxUint32, which wraps to 0 and is ignored.
func ForgedSequence(node string, bogus netip.AddrPort) []Message {
	return []Message{
		Left(node, math.MaxUint32),
		Alive(node, math.MaxUint32, bogus),
		Dead(node, math.MaxUint32),
	}
}

// Forger sends forged gossip as a key holder.
type Forger struct {
	// Key is the cluster's gossip key: 16, 24 or 32 bytes (AES-128, -192
	// or -256), as in memberlist's SecretKey.
	Key []byte
	// From is the member the forger claims to be, the sender named in
	// suspect and dead messages: a real member's name, since every member
	// holds the key.
	From string
}

// Send sends each message in its own UDP packet, encrypted with f.Key, to
// a member's gossip address, in order and paced so that the member
// applies them in that order.
func (f Forger) Send(to netip.AddrPort, msgs ...Message) error {
	return f.SendAll([]netip.AddrPort{to}, msgs...)
}

// SendAll sends each message to every member of to before the next
// message, paced as Send paces. Sending the whole sequence to one member
// and then to the next does not work: the first member relays what it
// applied to the others in compound gossip packets, which they apply
// alive first, out of the sequence's order.
func (f Forger) SendAll(to []netip.AddrPort, msgs ...Message) error {
	gcm, err := f.cipher()
	if err != nil {
		return err
	}
	conns := make([]*net.UDPConn, len(to))
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i, a := range to {
		if !a.IsValid() {
			return fmt.Errorf("gossipforge: invalid destination address %v", a)
		}
		if conns[i], err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(a)); err != nil {
			return fmt.Errorf("gossipforge: %w", err)
		}
	}
	for i, m := range msgs {
		body, err := f.encode(m)
		if err != nil {
			return err
		}
		if i > 0 {
			time.Sleep(packetGap)
		}
		for j, c := range conns {
			// A fresh nonce per packet, as memberlist does.
			packet, err := seal(gcm, withCRC(body))
			if err != nil {
				return err
			}
			if _, err := c.Write(packet); err != nil {
				return fmt.Errorf("gossipforge: send %v to %s: %w", m, to[j], err)
			}
		}
	}
	return nil
}

func (f Forger) cipher() (cipher.AEAD, error) {
	switch len(f.Key) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("gossipforge: Forger.Key is %d bytes: use the cluster's gossip key, 16, 24 or 32 bytes", len(f.Key))
	}
	block, err := aes.NewCipher(f.Key)
	if err != nil {
		return nil, fmt.Errorf("gossipforge: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gossipforge: %w", err)
	}
	return gcm, nil
}

// The message structs, field for field as memberlist's (net.go): msgpack
// encodes them as maps keyed by field name.
type (
	aliveBody struct {
		Incarnation uint32
		Node        string
		Addr        []byte
		Port        uint16
		Meta        []byte
		Vsn         []uint8
	}
	suspectBody struct {
		Incarnation uint32
		Node        string
		From        string
	}
	deadBody struct {
		Incarnation uint32
		Node        string
		From        string
	}
)

// encode is memberlist's encode: the type byte, then the msgpack body.
func (f Forger) encode(m Message) ([]byte, error) {
	if m.Node == "" {
		return nil, fmt.Errorf("gossipforge: %s message without a node name", m.Kind)
	}
	var (
		typ  byte
		body any
	)
	switch m.Kind {
	case KindAlive:
		if !m.Addr.IsValid() {
			return nil, fmt.Errorf("gossipforge: alive message about %s without an address", m.Node)
		}
		addr := m.Addr.Addr().Unmap()
		ip := addr.AsSlice()
		typ, body = aliveMsg, aliveBody{Incarnation: m.Incarnation, Node: m.Node, Addr: ip, Port: m.Addr.Port(), Vsn: vsn}
	case KindSuspect, KindDead:
		if f.From == "" {
			return nil, fmt.Errorf("gossipforge: Forger.From is empty: name the member the forger claims to be")
		}
		typ = deadMsg
		if m.Kind == KindSuspect {
			typ = suspectMsg
			body = suspectBody{Incarnation: m.Incarnation, Node: m.Node, From: f.From}
		} else {
			body = deadBody{Incarnation: m.Incarnation, Node: m.Node, From: f.From}
		}
	case KindLeft:
		typ, body = deadMsg, deadBody{Incarnation: m.Incarnation, Node: m.Node, From: m.Node}
	default:
		return nil, fmt.Errorf("gossipforge: unknown message kind %q", m.Kind)
	}
	var buf bytes.Buffer
	buf.WriteByte(typ)
	// memberlist's default (MsgpackUseNewTimeFormat false) sets
	// TimeNotBuiltin; no message here carries a time, but the handle is
	// the same.
	h := codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	if err := codec.NewEncoder(&buf, &h).Encode(body); err != nil {
		return nil, fmt.Errorf("gossipforge: encode %v: %w", m, err)
	}
	return buf.Bytes(), nil
}

// withCRC prepends memberlist's checksum header (protocol 5).
func withCRC(body []byte) []byte {
	out := make([]byte, 5, 5+len(body))
	out[0] = hasCrcMsg
	binary.BigEndian.PutUint32(out[1:], crc32.ChecksumIEEE(body))
	return append(out, body...)
}

// seal is memberlist's encryptPayload at version 1 with no label: version
// byte, random nonce, AES-GCM ciphertext and tag, no additional data.
func seal(gcm cipher.AEAD, plain []byte) ([]byte, error) {
	out := make([]byte, 1+gcm.NonceSize(), 1+gcm.NonceSize()+len(plain)+gcm.Overhead())
	out[0] = encryptionVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("gossipforge: nonce: %w", err)
	}
	return gcm.Seal(out, out[1:], plain, nil), nil
}
