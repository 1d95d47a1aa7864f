package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirlimit/weir/internal/tlsconf"
	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// ErrSpawn reports a local process that could not be started or did not
// become ready.
var ErrSpawn = errors.New("bench: spawn")

// freePort asks the kernel for a free loopback port. The port is released
// before the child binds it, so another process (or another child of the
// same spawn, handed the same port again) may bind it first: the child
// then exits with "address already in use", which spawnCluster retries.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// freeGossipPort is freePort for memberlist, which binds the port over
// both TCP and UDP: a port whose UDP side is taken is skipped.
func freeGossipPort() (string, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return addr, nil
		}
	}
	return "", errors.New("no loopback port free over both TCP and UDP")
}

// spawnAttempts bounds how often spawnCluster starts a cluster afresh
// after a node lost a port race.
const spawnAttempts = 3

// errPortTaken marks a node that exited at start-up because an address it
// was given was bound by someone else first (see freePort).
var errPortTaken = errors.New("a port picked for it was bound by another process first")

// tail keeps the last tailBytes of a child's output, for the error that
// reports its exit.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	return len(p), nil
}

// lastLine is the last non-empty line written.
func (t *tail) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// SpawnedNode is one `weir node` child process.
type SpawnedNode struct {
	ID                                string
	HTTP, GRPC, Raft, Gossip, DataDir string
	cmd                               *exec.Cmd
	done                              chan struct{}
	out                               *tail // the end of its output
}

// Spawned is a local cluster of `weir node` processes.
type Spawned struct {
	bin   string
	log   io.Writer
	dir   string
	extra []string // more flags for every node (a region's)
	// proxies delay this region's exchanges to the others (closed last)
	proxies []*DelayProxy
	grpc0   string // the first node's gRPC address, when chosen up front
	mu      sync.Mutex
	nodes   []*SpawnedNode
	seq     int
	// picked holds every address handed to a node of this cluster: the
	// kernel may hand a just-released port out again before the first
	// node has bound it.
	picked map[string]bool
	pick   func() (string, error) // a free TCP port (SpawnOptions.pick)
	procs  int                    // SpawnOptions.Procs

	// With SpawnOptions.TLS: the cluster CA, and the client configs of a
	// gateway (checks) and an admin (rules); nil otherwise.
	ca                   *tlsconf.CA
	GatewayTLS, AdminTLS *tls.Config
}

// SpawnOptions choose how a spawned cluster runs.
type SpawnOptions struct {
	// TLS: a fresh CA, a node certificate per node (--tls-*), and gateway
	// and admin certificates for the bench's own connections.
	TLS bool
	// Procs, when > 0, is each node's GOMAXPROCS (the environment's
	// GOMAXPROCS otherwise): nodes sharing one machine with each other
	// and the load generator, each sized for every core, spend CPU
	// waking each other's threads.
	Procs int

	// pick chooses a node's TCP port (nil: freePort); tests hand out a
	// taken one to lose the port race on purpose.
	pick func() (string, error)
}

// SpawnCluster starts n `weir node` processes of binary bin on loopback
// (free ports, temporary data dirs, --bootstrap-expect n, all joining the
// first's gossip address), and waits until each answers /readyz and sees n
// members. Child output goes to logw (may be nil).
func SpawnCluster(ctx context.Context, bin string, n int, logw io.Writer, opts SpawnOptions) (*Spawned, error) {
	return spawnCluster(ctx, bin, n, logw, opts, nil, "")
}

// SpawnRegions starts one cluster of n nodes per region name, each node
// started with --region and --peer-regions naming the first node of every
// other region. With latency > 0 each region reaches each other one
// through its own DelayProxy, so an exchange's round trip costs
// 2×latency more (checks inside a region are not delayed).
func SpawnRegions(ctx context.Context, bin string, names []string, n int, logw io.Writer, latency time.Duration) (map[string]*Spawned, error) {
	if latency < 0 {
		return nil, fmt.Errorf("%w: region latency %v must be >= 0", ErrInput, latency)
	}
	first := map[string]string{}
	for _, name := range names {
		a, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSpawn, err)
		}
		first[name] = a
	}
	out := map[string]*Spawned{}
	fail := func(proxies []*DelayProxy, err error) (map[string]*Spawned, error) {
		for _, p := range proxies {
			_ = p.Close()
		}
		for _, o := range out {
			o.Close()
		}
		return nil, err
	}
	for _, name := range names {
		var peers []string
		var proxies []*DelayProxy
		for _, o := range names {
			if o == name {
				continue
			}
			addr := first[o]
			if latency > 0 {
				p, err := StartDelayProxy(first[o], latency)
				if err != nil {
					return fail(proxies, err)
				}
				proxies = append(proxies, p)
				addr = p.Addr
			}
			peers = append(peers, o+"="+addr)
		}
		s, err := spawnCluster(ctx, bin, n, logw, SpawnOptions{}, []string{"--region", name, "--peer-regions", strings.Join(peers, ",")}, first[name])
		if err != nil {
			return fail(proxies, fmt.Errorf("region %s: %w", name, err))
		}
		s.proxies = proxies
		out[name] = s
	}
	return out, nil
}

// spawnCluster starts the cluster, and starts it afresh with new ports
// (up to spawnAttempts times) when a node lost a port race.
func spawnCluster(ctx context.Context, bin string, n int, logw io.Writer, opts SpawnOptions, extra []string, grpc0 string) (*Spawned, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d nodes", ErrInput, n)
	}
	var err error
	for attempt := 1; attempt <= spawnAttempts; attempt++ {
		var s *Spawned
		s, err = spawnOnce(ctx, bin, n, logw, opts, extra, grpc0)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w (%d attempts with fresh ports)", err, spawnAttempts)
}

func spawnOnce(ctx context.Context, bin string, n int, logw io.Writer, opts SpawnOptions, extra []string, grpc0 string) (*Spawned, error) {
	dir, err := os.MkdirTemp("", "weir-bench-")
	if err != nil {
		return nil, err
	}
	s := &Spawned{bin: bin, log: logw, dir: dir, extra: extra, grpc0: grpc0, picked: map[string]bool{}, pick: opts.pick, procs: opts.Procs}
	if s.pick == nil {
		s.pick = freePort
	}
	if opts.TLS {
		if err := s.makeTLS(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("%w: certificates: %v", ErrSpawn, err)
		}
	}
	// Every node starts at once (their first rings wait for the member list
	// to settle: clusterview.Settle). Up to bootstrapAtMost bootstrap Raft
	// together; the others join it, as test/scale_test.go starts sixteen.
	expect := min(n, bootstrapAtMost)
	for i := 0; i < n; i++ {
		if i == bootstrapAtMost {
			expect = 0
		}
		if _, err := s.start(expect); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.WaitStable(ctx, n, 60*time.Second); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// bootstrapAtMost is how many spawned nodes bootstrap Raft together
// (--bootstrap-expect); more start beside them and join.
const bootstrapAtMost = 8

// port picks an address with pick that no node of this cluster was given
// yet; s.mu is held.
func (s *Spawned) port(pick func() (string, error)) (string, error) {
	for range 20 {
		a, err := pick()
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrSpawn, err)
		}
		if !s.picked[a] {
			s.picked[a] = true
			return a, nil
		}
	}
	return "", fmt.Errorf("%w: no loopback port not already given to a node", ErrSpawn)
}

func (s *Spawned) start(bootstrapExpect int) (*SpawnedNode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	nd := &SpawnedNode{ID: fmt.Sprintf("b%d", s.seq), done: make(chan struct{})}
	if s.seq == 1 && s.grpc0 != "" {
		nd.GRPC = s.grpc0
	}
	if nd.GRPC != "" {
		s.picked[nd.GRPC] = true
	}
	for _, p := range []*string{&nd.HTTP, &nd.GRPC, &nd.Raft} {
		if *p != "" {
			continue
		}
		a, err := s.port(s.pick)
		if err != nil {
			return nil, err
		}
		*p = a
	}
	g, err := s.port(freeGossipPort)
	if err != nil {
		return nil, err
	}
	nd.Gossip = g
	nd.DataDir = fmt.Sprintf("%s/%s", s.dir, nd.ID)
	args := []string{"node", "--id", nd.ID, "--data-dir", nd.DataDir, "--http", nd.HTTP, "--grpc", nd.GRPC,
		"--raft", nd.Raft, "--gossip", nd.Gossip, "--log-level", "warn"}
	args = append(args, s.extra...)
	if bootstrapExpect > 0 {
		args = append(args, "--bootstrap-expect", strconv.Itoa(bootstrapExpect))
	}
	if s.ca != nil {
		f, err := s.issue(tlsconf.RoleNode, nd.ID)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSpawn, err)
		}
		args = append(args, "--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)
	}
	for _, o := range s.nodes {
		if o != nil {
			args = append(args, "--join", o.Gossip)
			break
		}
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Env = os.Environ()
	if s.procs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(s.procs))
	}
	nd.out = &tail{}
	var w io.Writer = nd.out
	if s.log != nil {
		w = io.MultiWriter(s.log, nd.out)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSpawn, s.bin, err)
	}
	nd.cmd = cmd
	go func() { _ = cmd.Wait(); close(nd.done) }()
	s.nodes = append(s.nodes, nd)
	return nd, nil
}

// Nodes returns the live spawned nodes.
func (s *Spawned) Nodes() []*SpawnedNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*SpawnedNode
	for _, n := range s.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// PID is the node's process id.
func (n *SpawnedNode) PID() int { return n.cmd.Process.Pid }

// PIDs returns the live nodes' process ids (Config.Procs).
func (s *Spawned) PIDs() []int {
	var out []int
	for _, n := range s.Nodes() {
		out = append(out, n.PID())
	}
	return out
}

// GRPCAddrs returns the live nodes' gRPC addresses.
func (s *Spawned) GRPCAddrs() []string {
	var out []string
	for _, n := range s.Nodes() {
		out = append(out, n.GRPC)
	}
	return out
}

// WaitStable polls until every live node answers /readyz and reports want
// members, or d passes. A node that exited ends the wait at once, with its
// exit status and last line of output (errPortTaken when it lost a port
// race): the others would wait for it in vain (no Raft leader before
// bootstrap-expect members are seen).
func (s *Spawned) WaitStable(ctx context.Context, want int, d time.Duration) error {
	return poll(ctx, d, func() error {
		nodes := s.Nodes()
		for _, n := range nodes {
			if err := n.exited(); err != nil {
				return err
			}
		}
		for _, n := range nodes {
			if err := httpOK(ctx, s.AdminTLS, http.MethodGet, "/readyz", n.HTTP, ""); err != nil {
				return err
			}
			m, err := members(ctx, n.GRPC, s.GatewayTLS)
			if err != nil {
				return err
			}
			alive := 0
			for _, mm := range m.GetMembers() {
				if mm.GetState() == "alive" {
					alive++
				}
			}
			if alive != want {
				return fmt.Errorf("%s sees %d alive members, want %d", n.ID, alive, want)
			}
		}
		return nil
	})
}

// errExited marks a spawned node that is no longer running; poll stops
// at it.
var errExited = errors.New("exited")

// exited returns nil while the node runs; afterwards an error naming it,
// its exit status and its last line of output.
func (n *SpawnedNode) exited() error {
	select {
	case <-n.done:
	default:
		return nil
	}
	last := n.out.lastLine()
	err := fmt.Errorf("%w: node %s %w (%v): %s", ErrSpawn, n.ID, errExited, n.cmd.ProcessState, last)
	if strings.Contains(last, "address already in use") {
		err = fmt.Errorf("%w: %w", err, errPortTaken)
	}
	return err
}

// Kill stops the node with id hard (SIGKILL: no hand-off).
func (s *Spawned) Kill(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range s.nodes {
		if n != nil && n.ID == id {
			_ = n.cmd.Process.Kill()
			<-n.done
			s.nodes[i] = nil
			return nil
		}
	}
	return fmt.Errorf("%w: no node %q", ErrInput, id)
}

// Add starts one more node that joins the cluster (no bootstrap).
func (s *Spawned) Add() (*SpawnedNode, error) { return s.start(0) }

// Close kills every node and removes the data directories.
func (s *Spawned) Close() {
	s.mu.Lock()
	nodes := s.nodes
	s.nodes = nil
	s.mu.Unlock()
	for _, n := range nodes {
		if n != nil {
			_ = n.cmd.Process.Signal(os.Interrupt)
		}
	}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		select {
		case <-n.done:
		case <-time.After(5 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	}
	for _, p := range s.proxies {
		_ = p.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// ApplyRules posts a rules file to a node's HTTP API (retrying until the
// Raft group has a leader) and then waits until every gRPC address in
// grpcAddrs knows every rule id. admin and gateway are the TLS configs of
// the two calls (nil: plaintext).
func ApplyRules(ctx context.Context, httpAddr string, yaml string, ruleIDs []string, grpcAddrs []string, admin, gateway *tls.Config) error {
	err := poll(ctx, 30*time.Second, func() error {
		return httpOK(ctx, admin, http.MethodPost, "/v1/rules:apply", httpAddr, yaml)
	})
	if err != nil {
		return err
	}
	return poll(ctx, 30*time.Second, func() error {
		for _, a := range grpcAddrs {
			if err := knowsRules(ctx, a, ruleIDs, gateway); err != nil {
				return err
			}
		}
		return nil
	})
}

// knowsRules peeks (cost 0) every rule on addr; an unknown rule is an error.
func knowsRules(ctx context.Context, addr string, ids []string, tc *tls.Config) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds(tc)))
	if err != nil {
		return err
	}
	defer cc.Close()
	req := &weirv1.CheckRequest{}
	for _, id := range ids {
		req.Items = append(req.Items, &weirv1.CheckItem{Key: "apikey:bench-probe", Rule: id, Cost: 0})
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := weirv1.NewLimiterClient(cc).Check(cctx, req)
	if err != nil {
		return err
	}
	for i, r := range resp.GetResults() {
		if r.GetErrorCode() != weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			return fmt.Errorf("%s: rule %s: %s %s", addr, ids[i], r.GetErrorCode(), r.GetError())
		}
	}
	return nil
}

// creds are TLS over tc, or plaintext when tc is nil.
func creds(tc *tls.Config) credentials.TransportCredentials {
	if tc == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(tc)
}

func members(ctx context.Context, addr string, tc *tls.Config) (*weirv1.MembersResponse, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds(tc)))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return weirv1.NewClusterClient(cc).Members(cctx, &weirv1.MembersRequest{})
}

// httpOK sends body (if any, as YAML) to path on host (HTTPS with tc when
// set) and wants a 200 within 2 s.
func httpOK(ctx context.Context, tc *tls.Config, method, path, host, body string) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hc, url := http.DefaultClient, "http://"+host+path
	if tc != nil {
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		hc, url = &http.Client{Transport: tr}, "https://"+host+path
	}
	req, err := http.NewRequestWithContext(cctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/yaml")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(answer))
	}
	return nil
}

// poll calls f every 50ms until it returns nil, ctx ends or d passes.
func poll(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		if errors.Is(err, errExited) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: not ready within %v: %v", ErrSpawn, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// RedisProc is a redis-server child on loopback.
type RedisProc struct {
	Addr string
	child
}

// child is a helper process the bench spawned (redis-server, a floor
// server): PID for its CPU, Close to stop it.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited
}

// startChild starts cmd and reaps it when it exits.
func startChild(cmd *exec.Cmd) (child, error) {
	if err := cmd.Start(); err != nil {
		return child{}, err
	}
	c := child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

// exited reports whether the process has exited.
func (c child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// PID is the process id.
func (c child) PID() int { return c.cmd.Process.Pid }

// Close stops the process and waits for it.
func (c child) Close() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// SpawnRedis starts `redis-server --port <free> --save "" --appendonly no`
// on loopback and waits until it answers PING.
func SpawnRedis(ctx context.Context, logw io.Writer) (*RedisProc, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: redis-server not found (apt-get install redis-server): %v", ErrSpawn, err)
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	cmd.Stdout, cmd.Stderr = logw, logw
	ch, err := startChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSpawn, err)
	}
	p := &RedisProc{Addr: addr, child: ch}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	err = poll(ctx, 10*time.Second, func() error {
		if p.exited() {
			return fmt.Errorf("redis-server %w", errExited)
		}
		return c.Ping(ctx).Err()
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// makeTLS makes the spawned cluster's CA and the bench's own gateway and
// admin certificates under the cluster's directory.
func (s *Spawned) makeTLS() error {
	ca, err := tlsconf.NewCA("weir", 24*time.Hour)
	if err != nil {
		return err
	}
	if err := ca.WriteCA(s.tlsDir()); err != nil {
		return err
	}
	s.ca = ca
	for _, c := range []struct {
		role tlsconf.Role
		dst  **tls.Config
	}{{tlsconf.RoleGateway, &s.GatewayTLS}, {tlsconf.RoleAdmin, &s.AdminTLS}} {
		f, err := s.issue(c.role, "bench")
		if err != nil {
			return err
		}
		src, err := tlsconf.New(f, "weir", nil)
		if err != nil {
			return err
		}
		*c.dst = src.ClientConfig()
	}
	return nil
}

func (s *Spawned) tlsDir() string { return s.dir + "/tls" }

// issue writes a certificate for role/name from the cluster CA.
func (s *Spawned) issue(role tlsconf.Role, name string) (tlsconf.Files, error) {
	cert, key, err := s.ca.WriteCert(s.tlsDir(), tlsconf.Identity{Cluster: "weir", Role: role, Name: name}, []string{"127.0.0.1"}, 24*time.Hour)
	return tlsconf.Files{Cert: cert, Key: key, CA: s.tlsDir() + "/" + tlsconf.CAFile}, err
}
