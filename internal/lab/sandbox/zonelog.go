package sandbox

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
)

// ZoneTransition is one "zone is now in new state" line of the
// controller-manager's log: the ground truth of what upstream decided.
type ZoneTransition struct {
	Zone  string
	State string // Normal, PartialDisruption, FullDisruption
}

// zoneLine matches the log line of handleDisruption in
// pkg/controller/nodelifecycle/node_lifecycle_controller.go:
//
//	"Controller detected that zone is now in new state" zone="sandbox:\x00:zone-a" newState="PartialDisruption"
var zoneLine = regexp.MustCompile(`zone is now in new state" zone=("(?:[^"\\]|\\.)*") newState="(\w+)"`)

// ZoneTransitions returns every zone state change the controller-manager
// has logged so far, oldest first.
func (c *Cluster) ZoneTransitions() ([]ZoneTransition, error) {
	f, err := os.Open(c.LogPath(ControllerManager))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []ZoneTransition
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := zoneLine.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		zone, err := strconv.Unquote(string(m[1]))
		if err != nil {
			zone = string(m[1])
		}
		out = append(out, ZoneTransition{Zone: zone, State: string(m[2])})
	}
	return out, sc.Err()
}

// ZoneState returns the last state the controller-manager logged for the
// zone key, or "" if it logged none.
func (c *Cluster) ZoneState(zone string) (string, error) {
	ts, err := c.ZoneTransitions()
	if err != nil {
		return "", err
	}
	state := ""
	for _, t := range ts {
		if t.Zone == zone {
			state = t.State
		}
	}
	return state, nil
}
