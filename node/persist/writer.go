package persist

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/weirlimit/weir/internal/sched"
)

// Writer writes a node's durable counters to Path every Interval and on
// Write. Collect gathers them (the shards' and the replica store's); it
// runs on the writer's goroutine (or Write's caller), never on a check's,
// one call at a time.
type Writer struct {
	Path     string
	Interval time.Duration
	Collect  func(ctx context.Context) (Snapshot, error)
	Sched    sched.Sched
	Logger   *slog.Logger

	mu   sync.Mutex // serialises collects and writes; guards last
	last []byte     // the body of the last file written
}

// ErrNotReady is what Collect returns when there is nothing to write yet
// (a node with no ring): the file on disk is left as it is, unlogged.
var ErrNotReady = errors.New("no counters to write yet")

// Run writes every Interval until ctx ends. A failed collect or write is
// logged and tried again at the next interval.
func (w *Writer) Run(ctx context.Context) error {
	tk := sched.Or(w.Sched).NewTicker(w.Interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C():
			if err := w.Write(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotReady) {
				w.Logger.Warn("durable counters not written", "path", w.Path, "err", err)
			}
		}
	}
}

// Write collects the durable counters and writes them now, unless they
// are the same as in the last file written.
func (w *Writer) Write(ctx context.Context) error {
	w.mu.Lock() // collect under it too: a later write never holds older counters
	defer w.mu.Unlock()
	s, err := w.Collect(ctx)
	if err != nil {
		return err
	}
	slices.Sort(s.Members)
	if len(s.States) == 0 && w.last == nil {
		if _, err := os.Stat(w.Path); errors.Is(err, os.ErrNotExist) {
			return nil // nothing durable yet, and nothing on disk to replace
		}
	}
	body := AppendBody(nil, s.Members, s.States)
	if w.last != nil && bytes.Equal(body, w.last) {
		return nil
	}
	if err := WriteFile(w.Path, encodeBody(s.WrittenAt, body)); err != nil {
		return err
	}
	w.last = body
	return nil
}
