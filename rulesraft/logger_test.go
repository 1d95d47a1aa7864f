package rulesraft

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func TestHCLogAdapterForwardsToSlog(t *testing.T) {
	h := &recordHandler{}
	l := newHCLogger("raft", slog.New(h))
	l.Warn("entering candidate state", "term", 3)
	l.Named("snapshot").Error("failed", "err", "disk")
	if len(h.recs) != 2 {
		t.Fatalf("%d records, want 2", len(h.recs))
	}
	attrs := func(r slog.Record) map[string]string {
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		return m
	}
	r0, r1 := h.recs[0], h.recs[1]
	if r0.Level != slog.LevelWarn || r0.Message != "entering candidate state" || attrs(r0)["term"] != "3" || attrs(r0)["logger"] != "raft" {
		t.Fatalf("record 0: %v %q %v", r0.Level, r0.Message, attrs(r0))
	}
	if r1.Level != slog.LevelError || attrs(r1)["logger"] != "raft.snapshot" || attrs(r1)["err"] != "disk" {
		t.Fatalf("record 1: %v %q %v", r1.Level, r1.Message, attrs(r1))
	}
}
