package rulesraft

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger returns an hclog.Logger (what Raft wants) that forwards every
// record, with its key/value pairs, to l. The hclog side writes nowhere; its
// sink does the forwarding and slog's handler does the level filtering.
func newHCLogger(name string, l *slog.Logger) hclog.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   name,
		Level:  hclog.Off,
		Output: io.Discard,
	})
	il.RegisterSink(slogSink{l: l})
	return il
}

type slogSink struct{ l *slog.Logger }

// Accept implements hclog.SinkAdapter.
func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	ctx := context.Background()
	if !s.l.Enabled(ctx, lv) {
		return
	}
	s.l.Log(ctx, lv, msg, append([]any{"logger", name}, args...)...)
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
