package persist

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirlimit/weir/replication"
)

// keeperOn writes a file of members' counters into a fresh data dir and
// opens a Keeper of node "a" over it, on a clock the test moves.
func keeperOn(t *testing.T, solo bool, members ...string) (*Keeper, *replication.Store, *int64) {
	t.Helper()
	dir := t.TempDir()
	now := int64(time.Hour)
	day := now + int64(24*time.Hour)
	snap := Snapshot{WrittenAt: now, Members: members, States: []replication.State{
		{Partition: 1, ID: 7, A: 1, B: 2, C: 3, Idle: day},
		{Partition: 2, ID: 8, A: 4, Idle: now},  // idle already: not loaded
		{Partition: 99, ID: 9, A: 5, Idle: day}, // beyond the ring's partitions: not loaded
	}}
	if err := WriteFile(filepath.Join(dir, File), Encode(snap)); err != nil {
		t.Fatal(err)
	}
	store := replication.NewStore()
	k := NewKeeper(KeeperConfig{ID: "a", DataDir: dir, Solo: solo, Partitions: 10, Interval: time.Second,
		RestoreWait: time.Minute, MinIdle: time.Hour, Now: func() int64 { return now },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Copies: store,
		Ring: func() Ring { return nil }, Leaving: func() bool { return false }})
	return k, store, &now
}

func TestKeeperHoldsTheFirstRingForTheWritersMembers(t *testing.T) {
	k, store, _ := keeperOn(t, false, "a", "b", "c")
	if got := store.Select(func(*replication.State) bool { return true }); len(got) != 1 || got[0].ID != 7 {
		t.Fatalf("loaded copies %+v, want counter 7 alone", got)
	}
	live := map[string]bool{"a": true, "b": true}
	isLive := func(id string) bool { return live[id] }
	if !k.Restoring(isLive, false) {
		t.Fatal("c is not back: the first ring must wait")
	}
	if k.Restoring(isLive, true) {
		t.Fatal("a ring is published already: nothing waits")
	}
	live["c"] = true
	if k.Restoring(isLive, false) {
		t.Fatal("every member is back: no wait")
	}
	live["c"] = false
	if k.Restoring(isLive, false) {
		t.Fatal("the wait ended once: it does not start again")
	}
}

func TestKeeperStopsWaitingAfterRestoreWait(t *testing.T) {
	k, _, now := keeperOn(t, false, "a", "b")
	none := func(id string) bool { return id == "a" }
	if !k.Restoring(none, false) {
		t.Fatal("b is not back: the first ring must wait")
	}
	*now += int64(time.Minute)
	if k.Restoring(none, false) {
		t.Fatal("RestoreWait is over: the ring forms without b")
	}
}

func TestKeeperKeepsASoloNodesCountersForItsShards(t *testing.T) {
	k, store, _ := keeperOn(t, true, "a")
	if got := store.Select(func(*replication.State) bool { return true }); len(got) != 0 {
		t.Fatalf("a solo node's counters went to the replica store: %+v", got)
	}
	if len(k.solo) != 1 || k.solo[0].ID != 7 {
		t.Fatalf("solo counters %+v, want counter 7", k.solo)
	}
	if k.Restoring(func(string) bool { return false }, false) {
		t.Fatal("a solo node waits for nobody")
	}
}

func TestKeeperIgnoresADamagedFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, File), []byte("not a counters file"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := replication.NewStore()
	var log bytes.Buffer
	k := NewKeeper(KeeperConfig{ID: "a", DataDir: dir, Partitions: 10, Now: func() int64 { return 0 },
		Logger: slog.New(slog.NewTextHandler(&log, nil)), Copies: store})
	if k.Restoring(func(string) bool { return false }, false) || len(store.Select(func(*replication.State) bool { return true })) != 0 {
		t.Fatal("a damaged file must be ignored")
	}
	// The operator reads what is wrong with the file, not the Go package
	// that noticed it.
	if got := log.String(); !strings.Contains(got, "corrupt counters file") || strings.Contains(got, "persist:") {
		t.Errorf("startup log %q: want the damage in user words, without \"persist:\"", got)
	}
}
