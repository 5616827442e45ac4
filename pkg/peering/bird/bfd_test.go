package bird_test

import (
	"testing"

	"rebound/pkg/peering/bird"
)

func TestParseShowBFDSessions(t *testing.T) {
	// Captured from BIRD 2.0.12 on the control socket, and BIRD 1.6.8 as
	// birdc prints it.
	bird2 := "0001 BIRD 2.0.12 ready.\n1020-bfd1:\n IP address                Interface  State      Since         Interval  Timeout\n 127.0.9.3                 ---        Up         17:55:03.765    0.100    0.500\n 127.0.9.4                 ---        Down       17:55:04.001    1.000    0.000\n0000 \n"
	bird16 := "BIRD 1.6.8 ready.\nrebound_bfd:\nIP address                Interface  State      Since       Interval  Timeout\n127.0.9.3                 ---        Up         17:39:35      0.100    0.500\n"
	got, err := bird.ParseShowBFDSessions(bird2)
	if err != nil || len(got) != 2 || got[0].Protocol != "bfd1" || !got[0].Up() || got[1].Up() || got[0].Since != "17:55:03.765" || got[1].Address.String() != "127.0.9.4" {
		t.Errorf("BIRD 2: %+v, %v", got, err)
	}
	got, err = bird.ParseShowBFDSessions(bird16)
	if err != nil || len(got) != 1 || got[0].Protocol != "rebound_bfd" || !got[0].Up() || got[0].Since != "17:39:35" {
		t.Errorf("BIRD 1.6: %+v, %v", got, err)
	}
	empty := "0001 BIRD 1.6.8 ready.\n1020-rebound_bfd:\n IP address                Interface  State      Since       Interval  Timeout\n0000 \n"
	if got, err := bird.ParseShowBFDSessions(empty); err != nil || len(got) != 0 {
		t.Errorf("no sessions: %+v, %v", got, err)
	}
	if _, err := bird.ParseShowBFDSessions("1020-bfd1:\n x.y ---  Up 1:00\n0000 \n"); err == nil {
		t.Error("a bad address parsed")
	}
}
