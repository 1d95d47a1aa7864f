package persist_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/weirlimit/weir/node/persist"
	"github.com/weirlimit/weir/replication"
)

func sample() persist.Snapshot {
	return persist.Snapshot{
		WrittenAt: 1_900_000_000_000_000_000,
		Members:   []string{"n1", "n2", "n3"},
		States: []replication.State{
			{Partition: 7, ID: 0xfeed, A: 1, B: -2, C: 3, Idle: 1_900_003_600_000_000_000},
			{Partition: 9, ID: 0xbeef, Log: []int64{10, 20, 30}, Idle: 1_900_086_400_000_000_000},
		},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	want := sample()
	got, err := persist.Decode(persist.Encode(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// Volatile (durable: off) and fresh states are never written.
func TestEncodeLeavesOutVolatileAndFresh(t *testing.T) {
	s := sample()
	s.States = append(s.States,
		replication.State{Partition: 1, ID: 1, A: 5, Idle: 1, Volatile: true},
		replication.State{Partition: 1, ID: 2, Idle: 1},
		replication.State{Partition: 1, ID: 3, Log: []int64{}, Idle: 1})
	got, err := persist.Decode(persist.Encode(s))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.States) != 2 {
		t.Fatalf("decoded %d states, want the 2 durable ones: %+v", len(got.States), got.States)
	}
}

// Every truncation and every flipped byte is refused whole with
// ErrCorrupt (or ErrVersion for the version field), never a panic.
func TestDecodeRefusesDamage(t *testing.T) {
	b := persist.Encode(sample())
	for n := range len(b) {
		if _, err := persist.Decode(b[:n]); !errors.Is(err, persist.ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: err %v, want ErrCorrupt", n, len(b), err)
		}
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, err := persist.Decode(c); !errors.Is(err, persist.ErrCorrupt) && !errors.Is(err, persist.ErrVersion) {
			t.Fatalf("byte %d flipped: err %v, want ErrCorrupt", i, err)
		}
	}
}

func TestWriteFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, persist.File)
	if s, err := persist.ReadFile(path); err != nil || len(s.States) != 0 {
		t.Fatalf("missing file: %+v, %v; want nothing and no error", s, err)
	}
	for i := range 3 {
		s := sample()
		s.WrittenAt += int64(i)
		if err := persist.WriteFile(path, persist.Encode(s)); err != nil {
			t.Fatal(err)
		}
		got, err := persist.ReadFile(path)
		if err != nil || got.WrittenAt != s.WrittenAt {
			t.Fatalf("write %d read back %+v, %v", i, got, err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("data dir holds %d files, want only %s (no temporary left)", len(ents), persist.File)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(persist.Encode(sample()))
	f.Add(persist.Encode(persist.Snapshot{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := persist.Decode(b)
		if err != nil {
			return
		}
		// What decodes encodes to the same bytes.
		if again := persist.Encode(s); !bytes.Equal(again, b) {
			t.Fatalf("decoded file re-encodes differently")
		}
	})
}
