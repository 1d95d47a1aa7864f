package opsapi

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/weirlimit/weir/node/events"
)

// Bounds of reading other members' events.
const (
	// PeerPage is the most events one answer to the feed carries.
	PeerPage = 256
	// maxPages is the most pages asked of one member per poll: a member
	// that holds more new events than that is caught up at the next poll.
	maxPages = events.DefaultCapacity / PeerPage
)

// feed is the one poll of the other members' events that all of this
// node's cluster-scoped followers share. While at least one follows, a
// single goroutine asks every other member, each FollowPoll, for the
// events after the last one it got, in pages of at most PeerPage (a
// member seen for the first time: its newest PeerPage), and relays them
// into a mirror buffer the followers read. A failed answer moves the
// member's cursor on (its newest page next time): a failure is never
// asked again. The goroutine ends at the first poll that finds no
// follower, or with the Server's context.
type feed struct {
	s     *Server
	mu    sync.Mutex
	users int
	cur   *feedRun // nil while not polling
	wg    sync.WaitGroup
}

// feedRun is one polling goroutine's mirror.
type feedRun struct {
	mirror *events.Buffer
	ready  chan struct{} // closed after the first poll
}

// join counts a follower in, starting the poll if none runs.
func (f *feed) join() *feedRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users++
	if f.cur == nil {
		fr := &feedRun{mirror: events.New(events.DefaultCapacity), ready: make(chan struct{})}
		f.cur = fr
		f.wg.Add(1)
		go f.run(fr)
	}
	return f.cur
}

// leave counts a follower out.
func (f *feed) leave() {
	f.mu.Lock()
	f.users--
	f.mu.Unlock()
}

func (f *feed) run(fr *feedRun) {
	defer f.wg.Done()
	ctx := f.s.cfg.Ctx
	cursors := map[string]uint64{} // member id → the last seq relayed
	f.poll(ctx, fr, cursors)
	close(fr.ready)
	t := time.NewTicker(f.s.cfg.FollowPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		if f.users == 0 {
			f.cur = nil
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		f.poll(ctx, fr, cursors)
	}
}

// poll asks every other member for its new events and relays them, the
// whole batch in time order.
func (f *feed) poll(ctx context.Context, fr *feedRun, cursors map[string]uint64) {
	peers := f.s.src.Peers()
	for id := range cursors {
		if _, ok := peers[id]; !ok {
			delete(cursors, id)
		}
	}
	var (
		mu  sync.Mutex
		all []events.Event
		wg  sync.WaitGroup
	)
	for id, addr := range peers {
		mu.Lock()
		after, seen := cursors[id]
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs, next, err := f.s.pullEvents(ctx, addr, after, seen)
			mu.Lock()
			defer mu.Unlock()
			all = append(all, evs...)
			if err != nil {
				f.s.cfg.Logger.Debug("events feed", "member", id, "err", err)
				delete(cursors, id)
				return
			}
			cursors[id] = next
		}()
	}
	wg.Wait()
	sortEvents(all)
	for _, e := range all {
		fr.mirror.Relay(e)
	}
}

// pullEvents reads a member's events after seq after (seen) or its
// newest PeerPage (not seen), page by page, and the seq to ask after next.
func (s *Server) pullEvents(ctx context.Context, addr string, after uint64, seen bool) ([]events.Event, uint64, error) {
	var out []events.Event
	for range maxPages {
		q := url.Values{"scope": {"local"}}
		if seen {
			q.Set("after", strconv.FormatUint(after, 10))
			q.Set("first", strconv.Itoa(PeerPage))
		} else {
			q.Set("limit", strconv.Itoa(PeerPage))
		}
		body, err := s.get(ctx, addr, "/v1/events?"+q.Encode())
		if err != nil {
			return out, after, err
		}
		var part struct {
			Events []events.Event `json:"events"`
			Next   uint64         `json:"next"`
			More   bool           `json:"more"`
		}
		if err := json.Unmarshal(body, &part); err != nil {
			return out, after, err
		}
		out = append(out, part.Events...)
		after, seen = part.Next, true
		if !part.More {
			break
		}
	}
	return out, after, nil
}
