package rulesraft

import (
	"cmp"
	"context"
	"slices"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// Event is one step of a watch: the full rule set at its version.
type Event struct {
	Set *rules.Set
}

// nextAfter returns the version a watcher that has delivered version last
// must deliver next: the version made directly from last when the history
// still has it, else the current one. When that is the current version,
// cur is its already published set (shared by every watcher). With nothing
// newer it returns a channel that is closed on the next change.
func (f *FSM) nextAfter(last uint64) (next *version, cur *rules.Set, wait <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if last >= f.head.Version {
		return nil, nil, f.changed
	}
	next = f.head
	i, _ := slices.BinarySearchFunc(f.hist, last+1, func(e *version, t uint64) int { return cmp.Compare(e.Version, t) })
	if i < len(f.hist) && f.hist[i].prev == last {
		next = f.hist[i]
	}
	if next == f.head {
		cur = f.cur.Load()
	}
	return next, cur, nil
}

// changedCh returns the current set and the channel closed on its next
// change, read together.
func (f *FSM) changedCh() (*rules.Set, <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cur.Load(), f.changed
}

// watch feeds out until ctx is done or stop is closed; see Store.Watch. It
// runs on the watcher's own goroutine and only reads the FSM, so a slow
// reader never holds up Apply: it falls behind in the history and, when the
// history has moved past it, skips to the current set.
func (f *FSM) watch(ctx context.Context, stop <-chan struct{}, from uint64, out chan<- Event) {
	send := func(s *rules.Set) bool {
		select {
		case out <- Event{Set: s}:
			return true
		case <-ctx.Done():
		case <-stop:
		}
		return false
	}
	last := from
	if cur := f.Current(); from == 0 || from < cur.Version {
		if !send(cur) {
			return
		}
		last = cur.Version
	}
	for {
		v, set, wait := f.nextAfter(last)
		if v == nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
			case <-stop:
			}
			return
		}
		if set == nil {
			set = v.set()
		}
		if !send(set) {
			return
		}
		last = v.Version
	}
}

// waitVersion returns the current set once its version is above newerThan.
func (f *FSM) waitVersion(ctx context.Context, stop <-chan struct{}, newerThan uint64) (*rules.Set, error) {
	for {
		cur, wait := f.changedCh()
		if cur.Version > newerThan {
			return cur, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stop:
			return nil, ErrClosed
		}
	}
}
