package fencing_test

import (
	"testing"
	"time"
)

// FuzzFencingModel plays one scenario of the model from fuzzed inputs: the
// number of nodes, the first cut (any topology of them), the seed of the
// cuts, heals, clocks and events after it, and whether the judge calls
// every node dead from the start. No input may taint a node while a boot
// that runs its pods is alive.
func FuzzFencingModel(f *testing.F) {
	f.Add(uint8(3), uint32(0), uint64(1), false)
	f.Add(uint8(5), uint32(1234), uint64(7), true)
	f.Add(uint8(7), uint32(99999), uint64(42), true)
	f.Fuzz(func(t *testing.T, n uint8, cut uint32, seed uint64, alwaysDead bool) {
		size := 3 + int(n%5)
		var first topology
		if size <= 5 {
			all := cuts(size)
			first = all[int(cut)%len(all)]
		} else {
			first = randomTopology(newSim(size, uint64(cut), sound, map[uint64]struct{}{}).r, size)
		}
		s := newSim(size, seed, sound, map[uint64]struct{}{})
		s.alwaysDead = s.alwaysDead || alwaysDead
		s.run(first, 3*time.Minute)
		if len(s.violations) > 0 {
			t.Fatal(s.violations[0])
		}
	})
}
