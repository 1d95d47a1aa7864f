package bench

import (
	"os/exec"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 250, stime 50
	// ticks (fields 14 and 15).
	line := "4242 (weir (node) x) S 1 4242 4242 0 -1 4194560 9 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(line)
	if err != nil || got != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "4242 weir S 1", "4242 (weir) S 1 2 3", "4242 (w) S 1 4242 4242 0 -1 4194560 9 0 0 0 x 50 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

// TestCPUMeterCountsAChild reads a real child process's CPU: a shell
// spinning for a bounded number of iterations uses some, this process's
// own reading grows with the work it does, and a gone process makes the
// sample nil rather than a wrong number.
func TestCPUMeterCountsAChild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	m := newCPUMeter(Procs{"child": {cmd.Process.Pid}}, nil)
	before := m.sample()
	if len(before) != 2 || m.roles[0] != "bench process" || m.roles[1] != "child" {
		t.Fatalf("roles %v, sample %v", m.roles, before)
	}
	deadline := time.Now().Add(20 * time.Second)
	var after []ProcCounters
	for time.Now().Before(deadline) {
		after = m.sample()
		if after[1].CPU > before[1].CPU {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after[1].CPU <= before[1].CPU {
		t.Fatalf("the spinning child's CPU did not grow: %v → %v", before[1].CPU, after[1].CPU)
	}
	shares := m.perCheck(before, after, 10)
	if len(shares) != 2 || shares[1].Role != "child" || shares[1].PerCall <= 0 {
		t.Fatalf("perCheck = %+v", shares)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if s := m.sample(); s != nil {
		t.Fatalf("sample of a gone process = %v, want nil", s)
	}
	if m.perCheck(before, nil, 10) != nil {
		t.Fatal("perCheck with a missing sample is not nil")
	}
}
