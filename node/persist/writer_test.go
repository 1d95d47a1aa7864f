package persist_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirlimit/weir/node/persist"
)

// Write skips a file whose counters did not change, and rewrites it when
// they did.
func TestWriterSkipsUnchanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), persist.File)
	s := sample()
	w := &persist.Writer{Path: path, Logger: slog.Default(),
		Collect: func(context.Context) (persist.Snapshot, error) { return s, nil }}
	if err := w.Write(t.Context()); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(path)
	s.WrittenAt++
	if err := w.Write(t.Context()); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(first, again) {
		t.Error("same counters rewritten")
	}
	s.States[0].B++
	if err := w.Write(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := persist.ReadFile(path)
	if err != nil || got.States[0].B != s.States[0].B {
		t.Errorf("changed counters not written: %+v, %v", got, err)
	}
}

// A node with no durable counter, and no file from an earlier run, writes
// no file.
func TestWriterWritesNoEmptyFirstFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), persist.File)
	w := &persist.Writer{Path: path, Logger: slog.Default(),
		Collect: func(context.Context) (persist.Snapshot, error) {
			return persist.Snapshot{WrittenAt: 1, Members: []string{"n1"}}, nil
		}}
	if err := w.Write(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("file written with nothing durable: %v", err)
	}
}
