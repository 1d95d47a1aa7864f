package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/weirlimit/weir/internal/grpcwin"
)

// The floor targets: a server process answering the same requests as a
// path's, each with a fixed reply, so what a node spends per check shows
// beside what no server on that protocol can go below on this machine in
// the same run. floor-grpc serves the Envoy rate limit service (the RLS
// target's ShouldRateLimit, unary gRPC, grpc-go with the messages' own
// codec) and answers every request OK; floor-http is net/http answering
// every POST with a fixed JSON decision (the HTTP target's requests). Each
// runs as its own process (`weir bench floor`), spawned like a node with a
// node's GOMAXPROCS, and the bench drives it with the RLS or HTTP target's
// client.

// Floor kinds (ServeFloor, SpawnFloor).
const (
	FloorGRPC = "grpc"
	FloorHTTP = "http"
)

// FloorJSON is floor-http's answer to every request.
const FloorJSON = `{"allowed":true,"remaining":99,"reset_ms":1000,"retry_after_ms":0}` + "\n"

// ServeFloor serves a floor of kind on ln until ctx ends.
func ServeFloor(ctx context.Context, kind string, ln net.Listener) error {
	switch kind {
	case FloorGRPC:
		// The nodes' fixed window: without it grpc-go's window estimator
		// pings the client after requests, which the nodes never do.
		srv := grpc.NewServer(grpc.InitialWindowSize(grpcwin.Window), grpc.InitialConnWindowSize(grpcwin.Window))
		rlsv3.RegisterRateLimitServiceServer(srv, floorRLS{ok: floorReply(1)})
		stop := context.AfterFunc(ctx, srv.Stop)
		defer stop()
		return srv.Serve(ln)
	case FloorHTTP:
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(floorHTTP)}
		stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
		defer stop()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	return fmt.Errorf("%w: floor kind %q: use %s or %s", ErrInput, kind, FloorGRPC, FloorHTTP)
}

// floorHTTP reads the request to its end and answers FloorJSON.
func floorHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, FloorJSON)
}

// floorRLS answers every ShouldRateLimit OK, with one status per
// descriptor (the RLS target reads them).
type floorRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	ok *rlsv3.RateLimitResponse // the reply to one descriptor
}

func (f floorRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if n := len(req.GetDescriptors()); n != 1 {
		return floorReply(n), nil
	}
	return f.ok, nil
}

func floorReply(descriptors int) *rlsv3.RateLimitResponse {
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range descriptors {
		r.Statuses = append(r.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_OK,
			CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 100, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining: 99,
		})
	}
	return r
}

// FloorProc is a floor server child process.
type FloorProc struct {
	Kind string
	Addr string // host:port it serves on
	child
}

// SpawnFloor starts `bin bench floor --kind kind` on a free loopback port
// (procs > 0: with that GOMAXPROCS) and waits until it accepts
// connections. Its output goes to logw (may be nil).
func SpawnFloor(ctx context.Context, bin, kind string, procs int, logw io.Writer) (*FloorProc, error) {
	if kind != FloorGRPC && kind != FloorHTTP {
		return nil, fmt.Errorf("%w: floor kind %q", ErrInput, kind)
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "bench", "floor", "--kind", kind, "--listen", addr)
	cmd.Env = os.Environ()
	if procs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	cmd.Stdout, cmd.Stderr = logw, logw
	ch, err := startChild(cmd)
	if err != nil {
		return nil, fmt.Errorf("%w: %s bench floor: %v", ErrSpawn, bin, err)
	}
	p := &FloorProc{Kind: kind, Addr: addr, child: ch}
	if err := poll(ctx, 30*time.Second, func() error {
		if p.exited() {
			return fmt.Errorf("%w: bench floor %w (%v)", ErrSpawn, errExited, cmd.ProcessState)
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}
