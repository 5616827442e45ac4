package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcessMemoryKiB reads a process's resident set and its peak (VmRSS,
// VmHWM) from /proc, in KiB; zero when the process is gone.
func ProcessMemoryKiB(pid int) (rss, peak int64) { return memoryKiB(pid) }

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ProcessCPUSeconds reads the CPU time a process has used so far (user
// plus system, /proc/PID/stat fields 14 and 15).
func ProcessCPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ")".
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime %q %q", pid, fields[11], fields[12])
	}
	return float64(utime+stime) / clockTicks, nil
}

// ComponentPID returns the PID of a running component, e.g. to measure it.
func (c *Cluster) ComponentPID(name string) (int, error) {
	_, p, err := c.component(name)
	if err != nil {
		return 0, err
	}
	return p.PID, nil
}
