package feeder

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestProbeRoundTrip(t *testing.T) {
	key, other := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	p := Probe{From: "node-0", To: "node-1", Nonce: nonceOf(7, 99)}
	b, err := p.Encode(key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeProbe(b, [][]byte{other, key})
	if err != nil || got != p {
		t.Fatalf("DecodeProbe = %+v, %v; want %+v", got, err, p)
	}
	if _, err := DecodeProbe(b, [][]byte{other}); err == nil {
		t.Fatal("a probe signed with another key was accepted")
	}
	forged := bytes.Clone(b)
	forged[6] = 'X' // the sender's name
	if _, err := DecodeProbe(forged, [][]byte{key}); err == nil {
		t.Fatal("a probe with a forged sender was accepted")
	}
	if _, err := (Probe{From: "", To: "a"}).Encode(key); err == nil {
		t.Fatal("a probe without a sender encodes")
	}
}

func FuzzDecodeProbe(f *testing.F) {
	key := bytes.Repeat([]byte{1}, 32)
	b, _ := Probe{From: "node-0", To: "node-1", Answer: true}.Encode(key)
	f.Add(b)
	f.Add([]byte("RBF1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodeProbe(data, [][]byte{key})
		if err != nil {
			return
		}
		again, err := p.Encode(key)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatalf("an accepted probe does not encode back to itself: %v", err)
		}
	})
}

// nonceOf makes a known nonce, for the tests.
func nonceOf(seq uint64, at int64) (n [nonceLen]byte) {
	binary.BigEndian.PutUint64(n[:8], seq)
	binary.BigEndian.PutUint64(n[8:], uint64(at))
	return n
}
