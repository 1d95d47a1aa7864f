package api

import (
	"context"
	"crypto/subtle"
	"strings"
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/rulesraft"
	"github.com/weirlimit/weir/rulesraft/rules"
)

// The operations both edges share, in domain terms. The gRPC services and
// the HTTP handlers read their wire into these arguments, call one of
// them, and write the answer (or the error, through GRPCError or
// HTTPStatus) back; nothing here knows either wire, except that a follower
// forwards writes and consistent reads to the leader over gRPC (forward.go).

// caller is who sent a request, as an edge reads it off its wire.
type caller struct {
	// auth holds the Authorization values sent ("Bearer <token>").
	auth []string
	// forwarded: a follower forwarded this request once already, so it is
	// not forwarded again.
	forwarded bool
	// author names the caller in the history when the request names no
	// author ("http:<addr>", "grpc:<addr>").
	author string
}

// admin is a caller that passed the admin-token check. Every write takes
// one, so no write can skip the check.
type admin struct{ caller }

// authorize checks the admin token for a write: the one check both edges
// call, as soon as they know the caller.
func (s *Server) authorize(c caller) (admin, error) {
	if s.cfg.AdminToken == "" {
		return admin{c}, nil
	}
	for _, v := range c.auth {
		tok, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.cfg.AdminToken)) == 1 {
			return admin{c}, nil
		}
	}
	return admin{}, limit.Errorf(limit.ErrUnauthenticated, "this node requires an admin token for writes: send \"Authorization: Bearer <token>\" with the token the node was started with")
}

// check decides a batch into out (one result per item): each item is
// validated once here, where it enters the node; malformed items get an
// error result of their own and are not sent to the Backend.
func (s *Server) check(ctx context.Context, items []limit.Item, out []limit.Result) error {
	if len(items) > MaxItems {
		return limit.Errorf(limit.ErrInvalid, "items: %d in one request; at most %d (split the batch)", len(items), MaxItems)
	}
	return limit.DecideValid(items, out, func(valid []limit.Item, out []limit.Result) error {
		return s.b.Check(ctx, valid, out)
	})
}

// getLimits reports a key's quota under every rule, taking nothing.
func (s *Server) getLimits(ctx context.Context, key string) ([]KeyLimit, error) {
	if err := limit.ValidateKey(key); err != nil {
		return nil, err
	}
	return s.b.GetLimits(ctx, key)
}

// current returns the local set, or for a consistent read the leader's:
// after a barrier on the leader, or forwarded to it.
func (s *Server) current(ctx context.Context, c caller, consistent bool) (*rules.Set, error) {
	st := s.b.Rules()
	if consistent {
		if !st.IsLeader() {
			return s.leaderSet(ctx, c)
		}
		if err := st.Barrier(ctx); err != nil {
			return nil, err
		}
	}
	return st.Current(), nil
}

// listRules returns the rule set with the overrides in force now.
func (s *Server) listRules(ctx context.Context, c caller, consistent bool) (*rules.Set, error) {
	set, err := s.current(ctx, c, consistent)
	if err != nil {
		return nil, err
	}
	return activeSet(set, s.cfg.Now), nil
}

// getRule returns one rule and the version of the set it is from.
func (s *Server) getRule(ctx context.Context, c caller, id string, consistent bool) (rules.Rule, uint64, error) {
	if id == "" {
		return rules.Rule{}, 0, limit.Errorf(limit.ErrInvalid, "id: must not be empty")
	}
	set, err := s.current(ctx, c, consistent)
	if err != nil {
		return rules.Rule{}, 0, err
	}
	r, ok := set.Rule(id)
	if !ok {
		return rules.Rule{}, 0, limit.Errorf(limit.ErrNotFound, "rule %q not found (version %d)", id, set.Version)
	}
	return r, set.Version, nil
}

// activeSet returns set without overrides that expired by now. It shares
// set when nothing expired.
func activeSet(set *rules.Set, now func() time.Time) *rules.Set {
	t := now()
	n := 0
	for _, o := range set.Overrides {
		if o.Active(t) {
			n++
		}
	}
	if n == len(set.Overrides) {
		return set
	}
	out := &rules.Set{Version: set.Version, Rules: set.Rules, Overrides: make([]rules.Override, 0, n)}
	for _, o := range set.Overrides {
		if o.Active(t) {
			out.Overrides = append(out.Overrides, o)
		}
	}
	return out
}

// written is the outcome of a write: the version it made and, for applies
// and dry runs, what changed ("+ id", "- id", "~ id: field a -> b").
type written struct {
	version uint64
	diff    []string
}

// applyRules validates in against the local set (rules.Merge, the FSM's
// own merge) and, unless dryRun, applies it on the leader. A dry run
// answers the current version and the diff, and writes nothing.
func (s *Server) applyRules(ctx context.Context, a admin, in []rules.Rule, replaceAll, dryRun bool, author string) (written, error) {
	cur := s.b.Rules().Current()
	next, err := rules.Merge(cur.Rules, in, replaceAll)
	if err != nil {
		return written{}, err
	}
	diff := rules.DiffSets(cur.Rules, next)
	if dryRun {
		return written{version: cur.Version, diff: diff}, nil
	}
	norm := make([]rules.Rule, len(in))
	for i, r := range in {
		norm[i] = rules.Normalize(r)
	}
	w, err := s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpApply, Rules: norm, ReplaceAll: replaceAll, Author: author})
	if err != nil {
		return written{}, err
	}
	if w.diff == nil { // applied here; forwarded answers carry the leader's diff
		w.diff = diff
	}
	return w, nil
}

// deleteRule deletes a rule and its overrides.
func (s *Server) deleteRule(ctx context.Context, a admin, id, author string) (written, error) {
	if id == "" {
		return written{}, limit.Errorf(limit.ErrInvalid, "id: must not be empty")
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpDeleteRule, ID: id, Author: author})
}

// rollback restores the rules and overrides of an earlier version as a
// new version.
func (s *Server) rollback(ctx context.Context, a admin, version uint64, author string) (written, error) {
	if version == 0 {
		return written{}, limit.Errorf(limit.ErrInvalid, "version: must be > 0 (see the history for versions)")
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpRollback, Version: version, Author: author})
}

// setOverride creates or replaces one override. Its expiry is kept to the
// millisecond, in UTC, as the wire carries it, whichever edge it came from.
func (s *Server) setOverride(ctx context.Context, a admin, o rules.Override, author string) (written, error) {
	if !o.ExpiresAt.IsZero() {
		o.ExpiresAt = time.UnixMilli(o.ExpiresAt.UnixMilli()).UTC()
	}
	var err error
	if r, ok := s.b.Rules().Current().Rule(o.Rule); ok {
		err = o.ValidateFor(r)
	} else {
		err = o.Validate()
	}
	if err != nil {
		return written{}, err
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpSetOverride, Override: &o, Author: author})
}

// deleteOverride deletes one override.
func (s *Server) deleteOverride(ctx context.Context, a admin, key, rule, author string) (written, error) {
	var missing []string
	if key == "" {
		missing = append(missing, "key")
	}
	if rule == "" {
		missing = append(missing, "rule")
	}
	if len(missing) > 0 {
		return written{}, limit.Errorf(limit.ErrInvalid, "%s: must not be empty", strings.Join(missing, " and "))
	}
	return s.write(ctx, a, rulesraft.Command{Op: rulesraft.OpDeleteOverride, Key: key, Rule: rule, Author: author})
}

// write applies cmd on the local store when this node is the leader (the
// Store stamps At with the leader's clock); otherwise it forwards cmd to
// the leader (forward.go). A node that loses leadership during Apply does
// not forward (the outcome is unknown, and a retry could apply twice): the
// caller gets limit.ErrNotLeader (not_leader) and retries. cmd.Author
// empty means the caller's default author.
func (s *Server) write(ctx context.Context, a admin, cmd rulesraft.Command) (written, error) {
	if cmd.Author == "" {
		cmd.Author = a.author
	}
	st := s.b.Rules()
	if !st.IsLeader() {
		w, err := s.forward(ctx, a.caller, cmd)
		if err != nil {
			s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeError).Inc()
			return written{}, err
		}
		s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeForwarded).Inc()
		return w, nil
	}
	cmd.At = s.cfg.Now()
	v, err := st.Apply(ctx, cmd)
	if err != nil {
		s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeError).Inc()
		return written{}, err
	}
	s.metrics.ruleWrites.WithLabelValues(cmd.Op, writeOK).Inc()
	return written{version: v}, nil
}
