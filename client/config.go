package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirlimit/weir/client/reqmatch"
	"github.com/weirlimit/weir/limit/headers"
)

// Errors returned by the package; match them with errors.Is.
var (
	// ErrInvalidConfig is wrapped by every Config.Validate failure.
	ErrInvalidConfig = errors.New("client: invalid config")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("client: closed")
	// ErrNotReady is returned by WaitReady when no rule set arrived in
	// time, by CheckKey before the first rule set, and is the Err of a
	// Decision made before the first rule set (see UntilRules).
	ErrNotReady = errors.New("client: no rules yet")
	// ErrUnknownRule is returned by CheckKey for a rule id the current
	// rule set does not have.
	ErrUnknownRule = errors.New("client: unknown rule")
	// ErrInvalidCheck is returned by CheckKey for a key or cost the
	// cluster would refuse.
	ErrInvalidCheck = errors.New("client: invalid check")
	// ErrShed is the Err of a Decision denied to keep a rule's reserve for
	// higher-priority requests (load shedding): Status 503, reason "shed",
	// distinct from a caller's own limit (429).
	ErrShed = errors.New("client: shed")
)

// Config configures a Client. Start from DefaultConfig.
type Config struct {
	// Cluster lists node gRPC addresses (host:port) to bootstrap from. The
	// client learns the rest of the members from the cluster.
	Cluster []string
	// GatewayID names this gateway to the cluster, which counts live
	// gateways to size fail-open shares. Must be unique per gateway.
	GatewayID string
	// Header names read by RequestFromHTTP.
	APIKeyHeader string
	UserHeader   string
	PlanHeader   string
	// HeaderStyle picks the rate-limit response fields the middleware
	// writes (headers.Parse: "ietf", "draft", "x" or a list); empty is
	// headers.Default.
	HeaderStyle headers.Style
	// TrustedProxies are the peers whose X-Forwarded-For / Forwarded
	// headers are believed.
	TrustedProxies []netip.Prefix
	// MaxBatch caps the items of one coalesced request.
	MaxBatch int
	// InFlight is the number of senders per node, each with its own
	// CheckStream and one request in flight. 1 (the default) sends a
	// batch whenever the connection goes idle, which gives the largest
	// batches; measured with unary RPCs and `weir bench --scenario steady
	// --spawn 3` (64 callers, 4 gateways, 2 cores): 22.6k checks/s at 1,
	// 18.1k at 2, 16.3k at 4. Over streams, 1 and 2 were within noise.
	InFlight int
	// Linger bounds how long a sender, before a request, lets the callers
	// its previous request answered run so they can join it (0: never).
	// It yields to them (runtime.Gosched) and stops as soon as a yield
	// brings nobody: it never waits on a timer, so a quiet gateway sends
	// at once. A lone caller never lingers.
	Linger time.Duration
	// QueueSize bounds the checks waiting per node; beyond it checks fail
	// over to their fail mode at once.
	QueueSize int
	// BreakerFailures consecutive failed RPCs to one node open its breaker
	// for BreakerCooldown; then one probe is let through.
	BreakerFailures int
	BreakerCooldown time.Duration
	// ReportInterval is how often the gateway-side decisions (leases, the
	// blocked-until cache, fail modes) are reported to a node, in one batch,
	// so the cluster's per-rule counts, events and dashboard include them
	// (0: never; DefaultConfig: 5s).
	ReportInterval time.Duration
	// LeaseTTL is how long unspent lease tokens are kept before they are
	// given back to the owner.
	LeaseTTL time.Duration
	// ClosedRetryAfter is the Retry-After of a fail-closed denial and of a
	// denial for want of rules (UntilRules).
	ClosedRetryAfter time.Duration
	// RulesCache, when set, is a file holding the last rule set received
	// from the cluster, with its version. New loads it, so a gateway that
	// starts while the cluster is unreachable enforces the rules it last
	// had (fail modes included) instead of none; a set from the cluster
	// replaces it once its version is at least the cached one, and every
	// newer set is written back (temporary file, then rename). A missing,
	// unreadable or corrupt file is logged and ignored. One file per
	// gateway; empty means no cache.
	RulesCache string
	// UntilRules is what Decide (and so Middleware) does while the client
	// holds no rule set at all (none from the cluster, none from
	// RulesCache): UntilRulesWait (the default), UntilRulesDeny or
	// UntilRulesAllow.
	UntilRules UntilRules
	// UntilRulesTimeout bounds how long UntilRulesWait holds a decision
	// (the decision's context may end it sooner); then it is denied as by
	// UntilRulesDeny.
	UntilRulesTimeout time.Duration
	// Logger receives warnings (fallbacks are logged at most once per
	// second). Nil discards.
	Logger *slog.Logger
	// Registry, when set, gets the client's metrics.
	Registry *prometheus.Registry
	// Tracer, when set, traces sampled decisions: a weir.client.check
	// span per call to the cluster, the child of the decision's context
	// (Middleware reads the request's W3C traceparent), whose context the
	// sampled items carry to the nodes. Nil: off. The SDK uses the
	// OpenTelemetry API only; pass the provider your service exports with.
	Tracer trace.TracerProvider
	// Now is the clock for local state (blocked-until cache, leases, the
	// fail-open buckets, the breakers' cooldown). Nil means time.Now.
	Now func() time.Time
	// Dial, when set, opens every connection the client makes to a node
	// (checks and watches) instead of a plain TCP dial; addr is host:port.
	// Tests use it to cut links; a deployment may route through a proxy.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// TLS, when set, makes every connection to a node TLS with this
	// config (a cluster with --tls-*: a gateway certificate from the
	// cluster CA; see docs/security.md). Nil: plaintext.
	TLS *tls.Config
	// Token, when set, is sent as "Authorization: Bearer <token>" on every
	// call: the cluster's gateway token (weir node --gateway-token-file),
	// the gateway role of a cluster without TLS, so its reports are taken
	// and its watch counts in fail-open shares (docs/security.md).
	Token string
}

// UntilRules is the policy for decisions asked before the client holds a
// rule set.
type UntilRules string

const (
	// UntilRulesWait holds each decision until the first rule set arrives
	// (then decides it by the rules), its context ends or
	// UntilRulesTimeout passes (then denies it as UntilRulesDeny does).
	// A gateway starting beside a healthy cluster gets its rules in
	// milliseconds, so its first requests are decided by the rules, a few
	// milliseconds late, rather than refused or let through unchecked.
	UntilRulesWait UntilRules = "wait"
	// UntilRulesDeny denies at once: Status 503, RetryAfter
	// ClosedRetryAfter, Err ErrNotReady.
	UntilRulesDeny UntilRules = "deny"
	// UntilRulesAllow allows with no limits (Err ErrNotReady), counted in
	// weir_client_until_rules_decisions_total and Stats.UntilRules.
	UntilRulesAllow UntilRules = "allow"
)

// DefaultConfig returns a Config with every tunable set; the caller fills
// in Cluster and GatewayID.
func DefaultConfig() Config {
	return Config{
		APIKeyHeader:     reqmatch.DefaultHeaderNames().APIKey,
		UserHeader:       reqmatch.DefaultHeaderNames().User,
		PlanHeader:       reqmatch.DefaultHeaderNames().Plan,
		MaxBatch:         512,
		InFlight:         1,
		Linger:           50 * time.Microsecond,
		QueueSize:        8192,
		BreakerFailures:  5,
		BreakerCooldown:  time.Second,
		LeaseTTL:         time.Second,
		ReportInterval:   5 * time.Second,
		ClosedRetryAfter: time.Second,

		UntilRules:        UntilRulesWait,
		UntilRulesTimeout: 2 * time.Second,
	}
}

// Validate reports the first problem with c; errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(c.Cluster) == 0:
		return bad("Cluster: at least one node gRPC address is required")
	case c.GatewayID == "":
		return bad("GatewayID: must not be empty")
	case strings.ContainsAny(c.Token, " \t\r\n"):
		return bad("Token: must not contain spaces or line breaks")
	case c.APIKeyHeader == "" || c.UserHeader == "" || c.PlanHeader == "":
		return bad("APIKeyHeader, UserHeader and PlanHeader must be set")
	case !validStyle(c.HeaderStyle):
		return bad("HeaderStyle %q: want a comma-separated list of ietf, draft, x", c.HeaderStyle)
	case c.MaxBatch < 1:
		return bad("MaxBatch %d: must be >= 1", c.MaxBatch)
	case c.InFlight < 1:
		return bad("InFlight %d: must be >= 1", c.InFlight)
	case c.Linger < 0:
		return bad("Linger %v: must be >= 0", c.Linger)
	case c.QueueSize < 1:
		return bad("QueueSize %d: must be >= 1", c.QueueSize)
	case c.BreakerFailures < 1:
		return bad("BreakerFailures %d: must be >= 1", c.BreakerFailures)
	case c.BreakerCooldown <= 0:
		return bad("BreakerCooldown %v: must be > 0", c.BreakerCooldown)
	case c.LeaseTTL <= 0:
		return bad("LeaseTTL %v: must be > 0", c.LeaseTTL)
	case c.ReportInterval < 0:
		return bad("ReportInterval %v: must be >= 0 (0: no reports)", c.ReportInterval)
	case c.ClosedRetryAfter <= 0:
		return bad("ClosedRetryAfter %v: must be > 0", c.ClosedRetryAfter)
	case c.UntilRules != UntilRulesWait && c.UntilRules != UntilRulesDeny && c.UntilRules != UntilRulesAllow:
		return bad("UntilRules %q: want wait, deny or allow", c.UntilRules)
	case c.UntilRules == UntilRulesWait && c.UntilRulesTimeout <= 0:
		return bad("UntilRulesTimeout %v: must be > 0", c.UntilRulesTimeout)
	}
	for i, a := range c.Cluster {
		if a == "" {
			return bad("Cluster[%d]: empty address", i)
		}
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return bad("TrustedProxies[%d]: invalid prefix", i)
		}
	}
	return nil
}

func validStyle(s headers.Style) bool {
	_, err := headers.Parse(string(s))
	return err == nil
}
