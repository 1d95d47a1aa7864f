package test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/weirlimit/weir/internal/testwait"
)

// The versioned rule, as a sequential object: one rule ("lin") whose rate
// the writes set, and the rule-set version the last write made.
//
// A write that answered is {Value} -> {Version}: its version is after
// every earlier one. A write that failed (timeout, leader gone) may or may
// not have happened: it is recorded with an unknown outcome and a return
// time of "never", so the checker may place it anywhere after its call or
// nowhere observable. A read is {} -> {Version, Value}: it sees the last
// write's value and version.
type linInput struct {
	write bool
	value int64
}

type linOutput struct {
	unknown bool // a write whose answer never came
	version uint64
	value   int64
}

type linState struct {
	version uint64
	value   int64
	exact   bool // version is the last write's; false after an unknown write: a read then sees a later one
}

var versionedRule = porcupine.Model{
	Init: func() any { return linState{} },
	Step: func(st, in, out any) (bool, any) {
		s, i, o := st.(linState), in.(linInput), out.(linOutput)
		switch {
		case i.write && o.unknown:
			return true, linState{version: s.version, value: i.value, exact: false}
		case i.write:
			return o.version > s.version, linState{version: o.version, value: i.value, exact: true}
		case s.exact:
			return o.value == s.value && o.version == s.version, s
		default:
			return o.value == s.value && o.version > s.version, s
		}
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(linInput), out.(linOutput)
		if i.write {
			if o.unknown {
				return fmt.Sprintf("write(%d) -> ?", i.value)
			}
			return fmt.Sprintf("write(%d) -> v%d", i.value, o.version)
		}
		return fmt.Sprintf("read() -> v%d %d", o.version, o.value)
	},
}

// linSeed is the seed of TestRulesLinearizableUnderLeaderKills's clients
// and fault loop: WEIR_LIN_SEED, or the clock's. It is logged, so a failing
// run's choices (which node each operation goes to, read or write, the
// pauses, when the leader is killed) can be made again; the timing of the
// processes is not the seed's.
func linSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WEIR_LIN_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WEIR_LIN_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (WEIR_LIN_SEED=%d makes the same choices)", seed, seed)
	return seed
}

// linRecord is one operation as the history file shows it: the porcupine
// operation, the node it went to, and the error of a failed one.
type linRecord struct {
	op   porcupine.Operation
	node string
	err  error
}

// linHistory is the record of one run: every operation tried, and the
// faults, on one clock.
type linHistory struct {
	begin  time.Time
	mu     sync.Mutex
	recs   []linRecord
	faults []string
}

func (h *linHistory) now() int64 { return int64(time.Since(h.begin)) }

func (h *linHistory) add(r linRecord) {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
}

func (h *linHistory) fault(format string, args ...any) {
	h.mu.Lock()
	h.faults = append(h.faults, fmt.Sprintf("%12.6fs ", time.Since(h.begin).Seconds())+fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

// Rule writes and reads from three clients through random nodes of three
// `weir node` processes, while the leader is SIGKILLed and restarted three
// times: the history of writes (with the versions they answered) and reads
// (with the version and value they saw) is linearizable, checked by
// porcupine against the versioned rule above. Reads are the default ones
// (read-your-writes through the leader's read index). A failure names a
// directory holding the history, porcupine's visualization and the
// processes' output, and the seed reruns the same choices.
func TestRulesLinearizableUnderLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	seed := linSeed(t)
	procs, hc := startProcs(t, "l")
	var v0 uint64
	testwait.For(t, 20*time.Second, "the first write", func() (err error) {
		v0, err = putRate(hc, procs[0].http, 1)
		return err
	})
	model := versionedRule
	model.Init = func() any { return linState{version: v0, value: 1, exact: true} }

	h := &linHistory{begin: time.Now()}
	var (
		mu      sync.Mutex
		next    = int64(1) // the last value written: every write is unique
		alive   = make([]bool, len(procs))
		stop    = make(chan struct{})
		clients sync.WaitGroup
	)
	for i := range alive {
		alive[i] = true
	}
	var stopOnce sync.Once
	stopClients := func() { stopOnce.Do(func() { close(stop); clients.Wait() }) }
	defer stopClients() // a fault loop that fails the test stops them too
	pick := func(rng *rand.Rand) *proc {
		mu.Lock()
		defer mu.Unlock()
		for {
			if i := rng.IntN(len(procs)); alive[i] {
				return procs[i]
			}
		}
	}
	for c := range 3 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			rng := rand.New(rand.NewPCG(uint64(c), seed))
			for n := 0; n < 400; n++ {
				select {
				case <-stop:
					return
				default:
				}
				p := pick(rng)
				r := linRecord{op: porcupine.Operation{ClientId: c, Call: h.now()}, node: p.id}
				if rng.IntN(2) == 0 {
					mu.Lock()
					next++
					v := next
					mu.Unlock()
					r.op.Input = linInput{write: true, value: v}
					var ver uint64
					ver, r.err = putRate(hc, p.http, v)
					r.op.Return, r.op.Output = h.now(), linOutput{version: ver}
					if r.err != nil {
						r.op.Output, r.op.Return = linOutput{unknown: true}, math.MaxInt64
					}
				} else {
					r.op.Input = linInput{}
					ver, v, err := getRate(hc, p.http)
					r.op.Return, r.op.Output, r.err = h.now(), linOutput{version: ver, value: v}, err
				}
				h.add(r)
				if r.err != nil && r.op.Input.(linInput).write {
					time.Sleep(100 * time.Millisecond) // no leader yet, most likely: pace the retries
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // pace
			}
		}()
	}
	// The faults: SIGKILL the leader, restart it 0.5 s later; three times.
	// Each kill waits for the cluster to have come back from the one
	// before (a leader, every node ready): on a loaded machine elections
	// take seconds, and a kill before one ends tests nothing and leaves
	// too few answered operations to check.
	rng := rand.New(rand.NewPCG(7, seed))
	kills := 0
	for kills < 3 {
		time.Sleep(time.Second + time.Duration(rng.IntN(500))*time.Millisecond)
		i := leaderIndex(procs)
		if i < 0 {
			continue
		}
		mu.Lock()
		alive[i] = false
		mu.Unlock()
		h.fault("SIGKILL %s (the leader)", procs[i].id)
		procs[i].stop(syscall.SIGKILL)
		time.Sleep(500 * time.Millisecond)
		startProc(t, procs[i], procs[(i+1)%len(procs)].gossip, 3)
		h.fault("restarted %s", procs[i].id)
		testwait.For(t, 30*time.Second, "a leader and every node ready after the kill", func() error { return procsReady(procs) })
		h.fault("a leader and every node ready")
		mu.Lock()
		alive[i] = true
		mu.Unlock()
		kills++
	}
	time.Sleep(2 * time.Second)
	stopClients()
	checkRuleHistory(t, model, h, procs, seed)
}

// checkRuleHistory checks h against model; a history that is not
// linearizable (or that the checker could not decide) is written out
// first, with the visualization and the processes' output, to a directory
// the failure names.
func checkRuleHistory(t *testing.T, model porcupine.Model, h *linHistory, procs []*proc, seed uint64) {
	t.Helper()
	ops, n := linOps(h.recs)
	t.Logf("%d operations: %d writes (%d of them unanswered, %d of those seen by a read), %d reads (%d failed); %d faults",
		len(h.recs), n.writes, n.unknown, n.unknown-n.dropped, n.reads, n.failedReads, len(h.faults))
	if n.writes-n.unknown < 10 || n.reads-n.failedReads < 10 {
		dir := keepRuleHistory(t, model, h, procs, seed, nil)
		t.Fatalf("too few answered operations to check: %d writes, %d reads (seed %d); history and process output in %s", n.writes-n.unknown, n.reads-n.failedReads, seed, dir)
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	if res == porcupine.Ok {
		return
	}
	dir := keepRuleHistory(t, model, h, procs, seed, &info)
	t.Fatalf("rule history is not linearizable: %v (seed %d, WEIR_LIN_SEED=%d to rerun); history, visualization and process output in %s", res, seed, seed, dir)
}

// keepRuleHistory writes the history (every operation tried and the
// faults), porcupine's visualization when info is not nil, and each
// process's output to a directory named for the test and the seed under
// the system's temporary directory (t.TempDir is removed after the test),
// and returns its path.
func keepRuleHistory(t *testing.T, model porcupine.Model, h *linHistory, procs []*proc, seed uint64, info *porcupine.LinearizationInfo) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("keeping the history: %v", err)
		return dir
	}
	var b strings.Builder
	writeLinHistory(&b, model, h)
	files := map[string]string{"history.txt": b.String()}
	for _, p := range procs {
		if p.out != nil {
			files[p.id+".log"] = p.out.String()
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Errorf("keeping %s: %v", name, err)
		}
	}
	if info != nil {
		if err := porcupine.VisualizePath(model, *info, filepath.Join(dir, "history.html")); err != nil {
			t.Errorf("visualization: %v", err)
		}
	}
	return dir
}

// linCounts counts a run's operations by kind.
type linCounts struct {
	writes, unknown, dropped int // writes; unanswered; unanswered and left out
	reads, failedReads       int
}

// linOps returns the operations to check: failed reads (which changed
// nothing) are left out, and so are unanswered writes whose value no read
// saw: such a write can always be placed at the very end of the history
// (its return is "never"), where nothing observes it, so leaving it out
// changes no verdict and keeps the search small.
func linOps(recs []linRecord) ([]porcupine.Operation, linCounts) {
	seen := map[int64]bool{}
	for _, r := range recs {
		if !r.op.Input.(linInput).write && r.err == nil {
			seen[r.op.Output.(linOutput).value] = true
		}
	}
	var ops []porcupine.Operation
	var n linCounts
	for _, r := range recs {
		i := r.op.Input.(linInput)
		switch {
		case !i.write:
			n.reads++
			if r.err != nil {
				n.failedReads++
				continue
			}
		case r.op.Output.(linOutput).unknown:
			n.writes++
			n.unknown++
			if !seen[i.value] {
				n.dropped++
				continue
			}
		default:
			n.writes++
		}
		ops = append(ops, r.op)
	}
	return ops, n
}

// writeLinHistory writes every operation tried (failed ones too) and the
// faults, in the order they began, one a line.
func writeLinHistory(w io.Writer, model porcupine.Model, h *linHistory) {
	recs := slices.Clone(h.recs)
	slices.SortFunc(recs, func(a, b linRecord) int { return cmp.Compare(a.op.Call, b.op.Call) })
	secs := func(ns int64) string {
		if ns == math.MaxInt64 {
			return "never"
		}
		return fmt.Sprintf("%.6fs", time.Duration(ns).Seconds())
	}
	for _, f := range h.faults {
		fmt.Fprintf(w, "fault %s\n", f)
	}
	for _, r := range recs {
		line := fmt.Sprintf("client %d via %s: call %s return %s: %s", r.op.ClientId, r.node, secs(r.op.Call), secs(r.op.Return), model.DescribeOperation(r.op.Input, r.op.Output))
		if r.err != nil {
			line += fmt.Sprintf(" (error: %v)", r.err)
		}
		fmt.Fprintln(w, line)
	}
}

// The model refuses what a stale read would show: a read of the value
// before an acknowledged write, after that write returned.
func TestVersionedRuleModelCatchesStaleRead(t *testing.T) {
	model := versionedRule
	model.Init = func() any { return linState{version: 5, value: 1, exact: true} }
	ok := []porcupine.Operation{
		{ClientId: 0, Input: linInput{write: true, value: 2}, Call: 0, Output: linOutput{version: 7}, Return: 10},
		{ClientId: 1, Input: linInput{}, Call: 5, Output: linOutput{version: 5, value: 1}, Return: 8}, // concurrent: either
		{ClientId: 1, Input: linInput{}, Call: 11, Output: linOutput{version: 7, value: 2}, Return: 12},
		{ClientId: 2, Input: linInput{write: true, value: 3}, Call: 13, Output: linOutput{unknown: true}, Return: math.MaxInt64},
		{ClientId: 1, Input: linInput{}, Call: 14, Output: linOutput{version: 7, value: 2}, Return: 15}, // not applied yet
		{ClientId: 1, Input: linInput{}, Call: 16, Output: linOutput{version: 9, value: 3}, Return: 17}, // applied now
	}
	if !porcupine.CheckOperations(model, ok) {
		t.Fatal("a linearizable history was refused")
	}
	stale := append(ok[:3:3], porcupine.Operation{ClientId: 2, Input: linInput{}, Call: 13, Output: linOutput{version: 5, value: 1}, Return: 14})
	if porcupine.CheckOperations(model, stale) {
		t.Fatal("a stale read after an acknowledged write was accepted")
	}
	backwards := append(ok[:1:1], porcupine.Operation{ClientId: 1, Input: linInput{write: true, value: 9}, Call: 11, Output: linOutput{version: 6}, Return: 12})
	if porcupine.CheckOperations(model, backwards) {
		t.Fatal("a write answering an older version than an earlier write was accepted")
	}
}

// One key's checks from three clients through all three nodes, on a rule
// that refills 1 a hour (so, within the test, a counter): every answer
// (allowed, remaining) is linearizable against the bucket model.
func TestChecksLinearizableAgainstTheBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	procs, hc := startProcs(t, "b")
	const burst = 150
	body := fmt.Sprintf(`{"match":{"route":"/lin"},"key":"apikey","rate":1,"period":"1h","burst":%d}`, burst)
	var version uint64
	testwait.For(t, 20*time.Second, "the rule", func() (err error) {
		version, err = putBody(hc, procs[0].http, "linbucket", body)
		return err
	})
	type in struct{}
	type out struct {
		allowed   bool
		remaining int64
	}
	model := porcupine.Model{
		Init: func() any { return int64(burst) },
		Step: func(st, _, o any) (bool, any) {
			left, r := st.(int64), o.(out)
			if left >= 1 {
				return r.allowed && r.remaining == left-1, left - 1
			}
			return !r.allowed && r.remaining == 0, left
		},
		DescribeOperation: func(_, o any) string { return fmt.Sprintf("check -> %+v", o.(out)) },
	}
	var (
		mu  sync.Mutex
		ops []porcupine.Operation
		wg  sync.WaitGroup
	)
	begin := time.Now()
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 70 { // 210 checks: the burst, then denials
				p := procs[(c+n)%len(procs)]
				call := int64(time.Since(begin))
				ok, rem, err := checkRemaining(hc, p.http, "apikey:lin", "linbucket", version)
				ret := int64(time.Since(begin))
				if err != nil {
					t.Errorf("check through %s: %v", p.id, err)
					return
				}
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: in{}, Call: call, Output: out{ok, rem}, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if res := porcupine.CheckOperationsTimeout(model, ops, time.Minute); res != porcupine.Ok {
		t.Fatalf("one key's checks are not linearizable against the bucket: %v (%d checks)", res, len(ops))
	}
}

// startProcs starts three `weir node` processes (ids prefix1..3) and waits
// for a leader. A start that does not get there in 30 s (a port taken
// between freeAddr and the bind by another package's test, on a loaded
// machine) is stopped and tried again on fresh ports, three times at most.
func startProcs(t *testing.T, prefix string) ([]*proc, *http.Client) {
	t.Helper()
	weirBin(t)
	var failures []string
	for attempt := 1; attempt <= 3; attempt++ {
		procs := make([]*proc, 3)
		for i := range procs {
			procs[i] = &proc{id: fmt.Sprintf("%s%d", prefix, i+1), dir: t.TempDir(),
				http: freeAddr(t), grpc: freeAddr(t), raft: freeAddr(t), gossip: freeAddr(t)}
		}
		for i, p := range procs {
			join := ""
			if i > 0 {
				join = procs[0].gossip
			}
			startProc(t, p, join, 3)
		}
		err := errors.New("no leader")
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // poll
			if err = procsReady(procs); err == nil {
				t.Cleanup(func() {
					for _, p := range procs {
						p.stop(syscall.SIGKILL)
					}
				})
				return procs, &http.Client{Timeout: 3 * time.Second}
			}
		}
		for _, p := range procs {
			p.stop(syscall.SIGKILL)
			failures = append(failures, fmt.Sprintf("attempt %d, %s: %s", attempt, p.id, tail(p.out.String(), 600)))
		}
		t.Logf("attempt %d: the processes did not get a leader in 30 s (%v); trying again on fresh ports", attempt, err)
	}
	t.Fatalf("three attempts to start three processes failed:\n%s", strings.Join(failures, "\n"))
	return nil, nil
}

func procsReady(procs []*proc) error {
	if leaderIndex(procs) < 0 {
		return errors.New("no leader")
	}
	return allReady(procs)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// leaderIndex is the index of the running process the others call leader,
// or -1.
func leaderIndex(procs []*proc) int {
	for _, p := range procs {
		if p.cmd == nil {
			continue
		}
		if c, err := clusterInfo(p.http); err == nil && c.Leader != "" {
			for i, q := range procs {
				if q.id == c.Leader && q.cmd != nil {
					return i
				}
			}
		}
	}
	return -1
}

func putRate(hc *http.Client, addr string, rate int64) (uint64, error) {
	return putBody(hc, addr, "lin", fmt.Sprintf(`{"match":{"route":"/lin"},"key":"ip","rate":%d,"period":"1s"}`, rate))
}

func putBody(hc *http.Client, addr, id, body string) (uint64, error) {
	req, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/rules/"+id, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("PUT %s: %d %s", id, resp.StatusCode, b)
	}
	var out struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Version == 0 {
		return 0, fmt.Errorf("PUT %s: answer %s: %v", id, b, err)
	}
	return out.Version, nil
}

func getRate(hc *http.Client, addr string) (uint64, int64, error) {
	resp, err := hc.Get("http://" + addr + "/v1/rules/lin")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET: %d", resp.StatusCode)
	}
	var out struct {
		Version uint64 `json:"version"`
		Read    string `json:"read"`
		Rule    struct {
			Rate int64 `json:"rate"`
		} `json:"rule"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, 0, err
	}
	if out.Read != "consistent" {
		return 0, 0, fmt.Errorf("read %q, want consistent", out.Read)
	}
	return out.Version, out.Rule.Rate, nil
}

func checkRemaining(hc *http.Client, addr, key, rule string, minVersion uint64) (bool, int64, error) {
	body := fmt.Sprintf(`{"key":%q,"rule":%q,"min_rule_version":%d}`, key, rule, minVersion)
	resp, err := hc.Post("http://"+addr+"/v1/limits/check", "application/json", strings.NewReader(body))
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
		Error     string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return false, 0, err
	}
	if (resp.StatusCode != 200 && resp.StatusCode != 429) || r.Error != "" {
		return false, 0, fmt.Errorf("%s: %d %s", addr, resp.StatusCode, r.Error)
	}
	return r.Allowed, r.Remaining, nil
}
