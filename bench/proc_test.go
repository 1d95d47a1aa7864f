package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
)

func TestParseIOSyscalls(t *testing.T) {
	io := "rchar: 2012\nwchar: 7\nsyscr: 17\nsyscw: 3\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
	r, w, err := parseIOSyscalls(io)
	if err != nil || r != 17 || w != 3 {
		t.Fatalf("parseIOSyscalls = %d, %d, %v; want 17, 3", r, w, err)
	}
	for _, bad := range []string{"", "syscr: 17\n", "syscr: 17\nsyscw: x\n", "syscr: -1\nsyscw: 3\n", "syscr: 1\nsyscw: 3\nsyscw: 4\n"} {
		if _, _, err := parseIOSyscalls(bad); err == nil {
			t.Errorf("parseIOSyscalls(%q): no error", bad)
		}
	}
}

func TestParseStatusSwitches(t *testing.T) {
	status := "Name:\tweir\nState:\tS (sleeping)\nThreads:\t9\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t56\n"
	v, i, err := parseStatusSwitches(status)
	if err != nil || v != 1234 || i != 56 {
		t.Fatalf("parseStatusSwitches = %d, %d, %v; want 1234, 56", v, i, err)
	}
	for _, bad := range []string{"", "voluntary_ctxt_switches:\t1\n", "voluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t1.5\n"} {
		if _, _, err := parseStatusSwitches(bad); err == nil {
			t.Errorf("parseStatusSwitches(%q): no error", bad)
		}
	}
}

// procChildEnv makes the test binary the controlled child of
// TestProcCountersAgainstAChild: it makes as many write and read system
// calls and sleeps as the variable says, on a thread other than its main
// one.
const procChildEnv = "WEIR_BENCH_PROC_CHILD"

func init() {
	if os.Getenv(procChildEnv) != "" {
		// Keep the main goroutine on the main thread (allowed in init),
		// so the work below runs on another thread.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if n := os.Getenv(procChildEnv); n != "" {
		os.Exit(procChild(n))
	}
	os.Exit(m.Run())
}

// procChild says "r" when ready, waits for a byte on stdin, then on a
// locked thread of its own makes n writes to /dev/null, n reads of
// /dev/zero and n short sleeps (each a voluntary context switch), says "d"
// and waits for stdin to close.
func procChild(arg string) int {
	n, err := strconv.Atoi(arg)
	if err != nil {
		return 2
	}
	null, err1 := syscall.Open("/dev/null", syscall.O_WRONLY, 0)
	zero, err2 := syscall.Open("/dev/zero", syscall.O_RDONLY, 0)
	if err1 != nil || err2 != nil {
		return 2
	}
	var b [1]byte
	if _, err := syscall.Write(1, []byte("r")); err != nil {
		return 2
	}
	if _, err := syscall.Read(0, b[:]); err != nil {
		return 2
	}
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		for range n {
			if _, err := syscall.Write(null, b[:]); err != nil {
				done <- 2
				return
			}
			if _, err := syscall.Read(zero, b[:]); err != nil {
				done <- 2
				return
			}
			ts := syscall.Timespec{Nsec: 100_000}
			_ = syscall.Nanosleep(&ts, nil)
		}
		done <- 0
	}()
	if rc := <-done; rc != 0 {
		return rc
	}
	if _, err := syscall.Write(1, []byte("d")); err != nil {
		return 2
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestProcCountersAgainstAChild reads the counters of a child whose work
// is known: n writes, n reads and n sleeps between two samples, the sleeps
// on a thread other than the main one. System calls are within a small
// slack of n (the Go runtime makes a few of its own); the context
// switches summed over the threads are at least n/4, while the main
// thread's own status (/proc/<pid>/status) misses them: the reason
// ReadProcCounters sums over /proc/<pid>/task.
func TestProcCountersAgainstAChild(t *testing.T) {
	const n = 400
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), procChildEnv+"="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	expect := func(want byte) {
		t.Helper()
		if b, err := out.ReadByte(); err != nil || b != want {
			t.Fatalf("child said %q, %v; want %q", b, err, want)
		}
	}
	pid := cmd.Process.Pid
	leader := func() int64 {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := parseStatusSwitches(string(b))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	expect('r')
	before, err := ReadProcCounters(pid)
	if err != nil {
		t.Fatal(err)
	}
	leader0 := leader()
	if _, err := stdin.Write([]byte("g")); err != nil {
		t.Fatal(err)
	}
	expect('d')
	after, err := ReadProcCounters(pid)
	if err != nil {
		t.Fatal(err)
	}
	d, dLeader := after.sub(before), leader()-leader0
	t.Logf("child: Δ %d writes, %d reads, %d voluntary + %d involuntary switches (main thread alone: %d voluntary), %v CPU",
		d.Writes, d.Reads, d.Voluntary, d.Involuntary, dLeader, d.CPU)
	// n of each, one more each for the go and done bytes, and a few of the
	// runtime's own.
	const slack = n/10 + 20
	if d.Writes < n+1 || d.Writes > n+1+slack {
		t.Errorf("Δ writes %d, want %d to %d", d.Writes, n+1, n+1+slack)
	}
	if d.Reads < n+1 || d.Reads > n+1+slack {
		t.Errorf("Δ reads %d, want %d to %d", d.Reads, n+1, n+1+slack)
	}
	// A sleep is a voluntary switch on a loaded machine; on an idle one
	// the kernel was seen to merge them (200 for 400 sleeps), so the test
	// asks for a quarter of them, far above the main thread's own count.
	if d.Voluntary < n/4 || d.Voluntary <= 4*dLeader {
		t.Errorf("Δ voluntary switches over all threads %d, want ≥ %d and well above the main thread's %d", d.Voluntary, n/4, dLeader)
	}
	if dLeader >= n/2 {
		t.Errorf("the main thread alone switched %d times: the sleeps were meant for another thread", dLeader)
	}
	_ = stdin.Close()
	_ = cmd.Wait()
	if _, err := ReadProcCounters(pid); err == nil {
		t.Error("counters of a gone process: no error")
	}
}
