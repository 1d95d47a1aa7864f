package bench

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Where a run's CPU went: the load generator (this process: the callers
// and, for the SDK target, the simulated gateways' SDK clients), the
// spawned nodes, gateway processes and redis-server, each read from
// /proc/<pid>/stat before and after the measured run. The report divides
// each by the checks answered, beside what the machine's cores could give
// a check at that rate, so a target's cost per check is a row of its own
// rather than a guess from checks/s on a machine shared with the load.

// userHZ is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux Go supports.
const userHZ = 100

// ProcCPU returns the CPU time (user and system, all threads) process pid
// has used so far; pid 0 is this process. Linux only (/proc).
func ProcCPU(pid int) (time.Duration, error) {
	p := "/proc/self/stat"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: /proc stat %.40q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat %.40q: %d fields after the name", stat, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("bench: /proc stat: CPU time %q: not a tick count", s)
		}
		ticks += v
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// Procs names the processes whose CPU a run accounts, by role ("nodes",
// "redis"); this process is always accounted as "bench process".
type Procs map[string][]int

// PIDer is implemented by targets that run as their own process (a
// `weir gateway`): Run accounts its CPU under the role.
type PIDer interface {
	PID() (role string, pid int)
}

// CPUShare is one role's cost per answered check over the measured run:
// CPU, read and write system calls and context switches (ProcCounters).
type CPUShare struct {
	Role     string  `json:"role"`
	PerCall  float64 `json:"us_per_check"`
	Reads    float64 `json:"reads_per_check"`
	Writes   float64 `json:"writes_per_check"`
	Switches float64 `json:"switches_per_check"` // voluntary + involuntary
	// Voluntary is the part of Switches where a thread went to sleep (and
	// so had to be woken).
	Voluntary float64 `json:"voluntary_per_check"`
}

// cpuMeter samples the counters of a fixed set of processes.
type cpuMeter struct {
	roles []string
	pids  [][]int
}

func newCPUMeter(procs Procs, targets []Target) *cpuMeter {
	m := &cpuMeter{roles: []string{"bench process"}, pids: [][]int{{0}}}
	add := func(role string, pid int) {
		for i, r := range m.roles {
			if r == role {
				m.pids[i] = append(m.pids[i], pid)
				return
			}
		}
		m.roles = append(m.roles, role)
		m.pids = append(m.pids, []int{pid})
	}
	for _, role := range slices.Sorted(maps.Keys(procs)) { // the same order every run
		for _, pid := range procs[role] {
			add(role, pid)
		}
	}
	for _, t := range targets {
		if p, ok := t.(PIDer); ok {
			add(p.PID())
		}
	}
	return m
}

// sample returns each role's counters so far; a process it cannot read
// (gone) makes the sample nil: the run's accounting is then left out.
func (m *cpuMeter) sample() []ProcCounters {
	out := make([]ProcCounters, len(m.roles))
	for i, pids := range m.pids {
		for _, pid := range pids {
			c, err := ReadProcCounters(pid)
			if err != nil {
				return nil
			}
			out[i] = out[i].add(c)
		}
	}
	return out
}

// perCheck turns two samples into each role's cost per answered check.
func (m *cpuMeter) perCheck(before, after []ProcCounters, checks int64) []CPUShare {
	if before == nil || after == nil || checks <= 0 {
		return nil
	}
	out := make([]CPUShare, len(m.roles))
	n := float64(checks)
	for i, role := range m.roles {
		d := after[i].sub(before[i])
		out[i] = CPUShare{Role: role, PerCall: float64(d.CPU) / float64(time.Microsecond) / n,
			Reads: float64(d.Reads) / n, Writes: float64(d.Writes) / n, Switches: float64(d.Switches()) / n, Voluntary: float64(d.Voluntary) / n}
	}
	return out
}
