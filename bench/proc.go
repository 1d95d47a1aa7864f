package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// What a process costs besides CPU time, in counts that do not drift with
// the machine's speed: the read and write system calls it made and the
// times its threads were switched out (voluntarily: gone to sleep, to be
// woken again; involuntarily: preempted). Linux only (/proc).
//
// System calls come from /proc/<pid>/io (syscr, syscw), which the kernel
// sums over every thread of the process, live or exited. Context switches
// come from each thread's /proc/<pid>/task/<tid>/status: /proc/<pid>/status
// reports the main thread's alone, and a Go process's switching happens on
// its other threads (TestProcCountersAgainstAChild shows both). A thread
// that exited takes its counts with it; Go's threads live as long as the
// process.

// ProcCounters is one reading of a process's counters.
type ProcCounters struct {
	CPU time.Duration // user + system, all threads (/proc/<pid>/stat)
	// Reads and Writes are read- and write-class system calls (syscr,
	// syscw: read, readv, pread, recvmsg…; write, writev, sendmsg…).
	Reads, Writes int64
	// Voluntary and Involuntary are context switches summed over the
	// process's threads.
	Voluntary, Involuntary int64
}

// Switches is voluntary plus involuntary context switches.
func (c ProcCounters) Switches() int64 { return c.Voluntary + c.Involuntary }

// sub returns c − o.
func (c ProcCounters) sub(o ProcCounters) ProcCounters {
	return ProcCounters{CPU: c.CPU - o.CPU, Reads: c.Reads - o.Reads, Writes: c.Writes - o.Writes,
		Voluntary: c.Voluntary - o.Voluntary, Involuntary: c.Involuntary - o.Involuntary}
}

// add returns c + o.
func (c ProcCounters) add(o ProcCounters) ProcCounters {
	return ProcCounters{CPU: c.CPU + o.CPU, Reads: c.Reads + o.Reads, Writes: c.Writes + o.Writes,
		Voluntary: c.Voluntary + o.Voluntary, Involuntary: c.Involuntary + o.Involuntary}
}

// procDir is /proc/<pid>, or /proc/self for pid 0.
func procDir(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return "/proc/" + strconv.Itoa(pid)
}

// ReadProcCounters reads process pid's counters (pid 0: this process).
// /proc/<pid>/io is readable for one's own children (and oneself) only.
func ReadProcCounters(pid int) (ProcCounters, error) {
	var c ProcCounters
	var err error
	dir := procDir(pid)
	if c.CPU, err = ProcCPU(pid); err != nil {
		return c, err
	}
	b, err := os.ReadFile(dir + "/io")
	if err != nil {
		return c, err
	}
	if c.Reads, c.Writes, err = parseIOSyscalls(string(b)); err != nil {
		return c, err
	}
	c.Voluntary, c.Involuntary, err = threadSwitches(dir)
	return c, err
}

// threadSwitches sums the context switches of every thread under dir
// (/proc/<pid>). A thread that exits between the listing and its read is
// skipped.
func threadSwitches(dir string) (vol, invol int64, err error) {
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		return 0, 0, err
	}
	read := 0
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/task/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		v, i, err := parseStatusSwitches(string(b))
		if err != nil {
			return 0, 0, err
		}
		vol, invol, read = vol+v, invol+i, read+1
	}
	if read == 0 {
		return 0, 0, fmt.Errorf("bench: %s: no thread's status readable", dir)
	}
	return vol, invol, nil
}

// parseIOSyscalls reads syscr and syscw from a /proc/<pid>/io text.
func parseIOSyscalls(io string) (reads, writes int64, err error) {
	f, err := procFields(io, "syscr", "syscw")
	if err != nil {
		return 0, 0, fmt.Errorf("bench: /proc io: %w", err)
	}
	return f[0], f[1], nil
}

// parseStatusSwitches reads voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches from a /proc status text.
func parseStatusSwitches(status string) (vol, invol int64, err error) {
	f, err := procFields(status, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
	if err != nil {
		return 0, 0, fmt.Errorf("bench: /proc status: %w", err)
	}
	return f[0], f[1], nil
}

// procFields reads the named non-negative integer fields of a
// "name:<spaces>value" text, each exactly once.
func procFields(text string, names ...string) ([]int64, error) {
	out := make([]int64, len(names))
	seen := make([]bool, len(names))
	for line := range strings.Lines(text) {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for i, n := range names {
			if name != n {
				continue
			}
			if seen[i] {
				return nil, fmt.Errorf("%s twice", n)
			}
			v, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%s %q: not a count", n, strings.TrimSpace(val))
			}
			out[i], seen[i] = v, true
		}
	}
	for i, n := range names {
		if !seen[i] {
			return nil, fmt.Errorf("no %s", n)
		}
	}
	return out, nil
}

// Idle is one process's background while no check arrives, per second of
// the sampled window.
type Idle struct {
	CPUPct   float64 `json:"cpu_pct"` // of one core
	Writes   float64 `json:"writes_per_s"`
	Reads    float64 `json:"reads_per_s"`
	Switches float64 `json:"switches_per_s"`
}

// IdleCPU samples each process's counters over d, before any load, and
// returns them per second (the background a server spends on tickers,
// gossip, Raft and probes while no check arrives).
func IdleCPU(ctx context.Context, pids []int, d time.Duration) ([]Idle, error) {
	before := make([]ProcCounters, len(pids))
	for i, pid := range pids {
		c, err := ReadProcCounters(pid)
		if err != nil {
			return nil, err
		}
		before[i] = c
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	secs := time.Since(start).Seconds()
	out := make([]Idle, len(pids))
	for i, pid := range pids {
		c, err := ReadProcCounters(pid)
		if err != nil {
			return nil, err
		}
		dc := c.sub(before[i])
		out[i] = Idle{CPUPct: 100 * dc.CPU.Seconds() / secs, Writes: float64(dc.Writes) / secs, Reads: float64(dc.Reads) / secs,
			Switches: float64(dc.Switches()) / secs}
	}
	return out, nil
}
