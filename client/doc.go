// Package client is the gateway SDK: what an API gateway links to ask a
// Weir cluster, once per request, whether a caller may go on, and to
// answer the caller with the right status and headers even when the
// cluster is sick.
//
// # Use
//
//	cfg := client.DefaultConfig()
//	cfg.Cluster = []string{"n1:9090", "n2:9090"} // nodes' gRPC addresses
//	cfg.GatewayID = "edge-1"
//	cl, err := client.New(ctx, cfg)              // then defer cl.Close()
//	err = cl.WaitReady(ctx)                      // optional: until the rules are in
//	http.ListenAndServe(":8000", cl.Middleware()(yourHandler))
//
// Middleware answers 429 (or 503) with Retry-After and RateLimit headers
// itself and passes allowed requests on; Decide does the same for a
// Request without HTTP, CheckKey for a key and rule ids of your own. For
// a cluster with mutual TLS set Config.TLS, e.g. from the files `weir tls`
// writes with TLSFromFiles. RetryTransport is the http.RoundTripper for
// callers that want to wait out a 429. The sections below say how keys
// are built, what happens when the cluster is slow or down, and the
// headers; "How it works" and after are the internals.
//
// # Keys
//
// The limited key is "<type>:<value>": "apikey:<X-API-Key>",
// "user:<X-User-ID>", "ip:<client ip>", "header:<Name>:<value>",
// "global:global". When the request lacks the value:
//   - apikey and user fall back to the client's IP key ("ip:<addr>"), so
//     anonymous callers are limited per address, not all together;
//   - header:<Name> uses "header:<Name>:-": every request without the
//     header shares one bucket (a header that callers can omit must not
//     be a way around the limit);
//   - with no usable IP either, "ip:unknown" (one shared bucket).
//
// A value that would make the key longer than MaxKeyLen (256 bytes, the
// node's limit), or that is not valid UTF-8 (the wire's strings must be;
// one such key would fail the whole coalesced RPC and count against the
// node's breaker), is replaced by "~" and its xxhash64 in hex.
//
// The client IP is RemoteAddr; X-Forwarded-For (else Forwarded for=) is
// believed only when RemoteAddr is in TrustedProxies, and then the
// rightmost hop that is not a trusted proxy is the caller. A malformed,
// obfuscated or oversized chain is ignored (RemoteAddr is used).
//
// # Fail modes
//
// A request waits for its node at most the longest timeout of its rules
// (default 5ms). When the node does not answer in time, the RPC fails, the
// node's breaker is open, or an item comes back with an error code, each
// rule follows its fail_mode:
//   - open: a local bucket holding this gateway's share of the limit:
//     rate and burst divided by the number of live gateways the cluster
//     reports (at least 1 token). With G gateways all failing open, the
//     cluster-wide admission is at most the limit (rounding down), plus
//     whatever a gateway admitted before it learned of the last gateway
//     change.
//   - closed: denied with 503 and Retry-After ClosedRetryAfter (1s).
//   - shadow rules never block, in either mode.
//
// Each such decision is counted (Stats.Fallbacks and the Prometheus
// counter weir_client_fallback_decisions_total{rule,fail_mode,reason}) and
// logged at most once per second. After BreakerFailures failed attempts in
// a row a node's breaker opens: for BreakerCooldown no request is sent to
// it (each fails over at once, without waiting), then one probe is let
// through per cooldown; a success closes the breaker. RPCs that were in
// flight together and fail together (one stall, one GC pause, one burst
// of timeouts) count as one attempt, so a hiccup of a few milliseconds
// does not cost a whole cooldown of fallbacks.
//
// A check that times out may still have taken tokens on its owner; that
// request is then decided by the fail mode (so counted once too often,
// never admitted twice by the cluster).
//
// # HTTP
//
// Middleware sets RateLimit-Policy / RateLimit (draft-ietf-httpapi-
// ratelimit-headers: `"<rule>";q=<limit>;w=<window s>` and
// `"<rule>";r=<remaining>;t=<reset s>`) and X-RateLimit-Limit/-Remaining/
// -Reset on every response a rule applied to, reporting the most
// restrictive limit (when denied, the one with the longest wait; else the
// fewest remaining). Config.HeaderStyle picks the fields (limit/headers:
// ietf, draft RateLimit-Limit/-Remaining/-Reset, x; default ietf,x), the
// same setting the nodes' forward-auth and rate limit service take.
// Denied: 429 (or 503 for fail-closed) with Retry-After in whole seconds
// rounded up (at least 1) and {"error", "retry_after_ms"}. Matching a
// request to rules and keys is client/reqmatch, shared with the nodes'
// /v1/forward-auth.
// RetryTransport is the matching http.RoundTripper for callers: it waits
// out a 429 and tries again; a 503 only for an idempotent request (by
// method, or with an Idempotency-Key header), since a 503 may come after
// the server acted.
//
// # TLS
//
// Config.TLS makes every connection to the nodes TLS with that config: for
// a cluster with mutual TLS, a gateway certificate from the cluster CA
// (docs/security.md); TLSFromFiles builds it from the PEM files `weir tls`
// writes. Nil is plaintext.
//
// # How it works
//
// The client imports ring, bucket, proto/weirv1, the pure rule model
// (rulesraft/rules, rulespb) and the check vocabulary (limit: the nodes'
// key validator and MaxKeyLen); never node or the Raft code. It owns:
//
//   - Rules: one goroutine keeps a Rules.Watch stream open to any node
//     (reconnecting with backoff, resuming from its last version), compiles
//     each set into a rules.Matcher and swaps an atomic pointer. Requests
//     match locally. With Config.RulesCache, New first loads the last set
//     from that file, and the watch goroutine writes every newer set back
//     (temporary file, then rename); versions only go forward, from the
//     cluster and the cache alike. Until a set is held (from either),
//     Decide follows Config.UntilRules: wait for it (the default; bounded
//     by UntilRulesTimeout and the request's context, then deny), deny
//     (503, Err ErrNotReady) or allow with no limits. Ready / WaitReady /
//     RulesStatus tell when rules are in and where they came from.
//   - Routing: one goroutine keeps a Cluster.WatchMembers stream open and
//     builds a ring.Ring with the cluster's own ring configuration; a
//     request's items go to the owner of its first key (a node that is not
//     the owner forwards; all rules of a request are one all-or-nothing
//     group, decided by that node).
//   - Coalescing: InFlight sender goroutines per node each take the first
//     waiting check, then whatever else queued meanwhile (up to MaxBatch
//     items), into one request. There is no fixed flush delay: batches
//     grow while every sender is busy, and a sender whose queue holds
//     fewer calls than its previous request carried plus those that
//     queued while it was out first lets the callers that request
//     answered run (runtime.Gosched) and takes what they queued, again
//     while a yield brings a call, for at most Linger (50µs): callers
//     answered together tend to ask again together, and on a busy machine
//     the first would otherwise leave alone. No timer is armed (in an
//     idle Go process a timer under 1 ms fires after about 1.1 ms). A
//     lone caller never lingers.
//     Each sender sends its requests
//     as messages of one long-lived CheckStream (far cheaper per request
//     than a unary RPC), one in flight at a time; the stream is opened
//     lazily and dropped after a failure or timeout. A node that answers
//     Unimplemented to CheckStream gets unary Check RPCs instead. A check
//     that finds nothing queued for its node and a sender free is sent on
//     its caller's goroutine (no hand-off to a sender and back); it then
//     waits for its answer up to its timeout whatever its context says.
//   - Local state (localState): the blocked-until cache, the fail-open
//     share buckets and the leases, each map behind its own mutex; a
//     janitor goroutine gives back expired leases and drops stale entries.
//
// Every goroutine (two watches, the janitor, InFlight senders per node)
// is started by New or conn and joined by Close. A decision waiting for
// the first rule set ends when Close is called.
//
// # Blocked-until cache
//
// A key denied by a non-shadow rule with a retry-after is denied locally
// until then, without an RPC; "never" (a block override, a cost above the
// burst) is cached for one window, at least 1s. Only this gateway's view:
// a raised override reaches a blocked key when its retry-after ends.
//
// # Leases and their accuracy
//
// For a rule with lease N > 0 the client takes N tokens in one item (cost
// N) and spends them locally for LeaseTTL (1s); unspent tokens are given
// back with a refund item when the lease expires and on Close (a cluster
// with TLS takes refunds from nodes only: after the first refusal the
// client sends none and unspent tokens come back by refill). When fewer
// than N are left, it asks again for a single token in the same request.
// Because lease tokens are taken from the owner's bucket before they are
// spent, leases do not over-admit against the owner's counter: admitted ≤
// burst + rate×T, as in exact mode. What leases cost is fairness and
// precision: up to (N-1) × gateways tokens may sit unspent in other
// gateways, so a key can be denied while tokens are held elsewhere. A
// gateway spends its own lease tokens before it consults the blocked-until
// cache, so a denial from the owner never strands tokens it holds.
// The stated bound, tested with two gateways, is |admitted − (burst +
// rate×T)| ≤ N × gateways. When an owner fails over and loses its last
// decrements, leases add at most N × gateways to the failover bound.
//
// For a rule with lease auto (the default) the owner decides: the client
// names itself on the rule's items (CheckItem.lease_gateway, a hash of
// GatewayID) and keeps the tokens an owner grants (CheckResult.
// lease_granted) exactly as a fixed lease's, asking for one grant of a key
// at a time (lease.asking). Owners grant only for keys they see hot from
// several gateways, at most max(1, burst/8) tokens a gateway
// (docs/design.md, leases). Lease off never leases.
package client
