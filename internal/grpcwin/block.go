package grpcwin

import (
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	weirv1 "github.com/weirlimit/weir/proto/weirv1"
)

// The check and replication messages carry a repeated message field (a
// request's items, a response's results, a replication batch's states).
// The generated decoder allocates each element on its own; unmarshalBlock
// decodes them into one block instead (one allocation for all of them, one
// for the pointers): check items by decodeCheckItem, other elements by
// their generated UnmarshalVT. Only the fields a message declares are read
// here: anything else (an unknown field, a wire type that does not match)
// makes it give up, and the caller decodes the message with the generated
// code from scratch, so the result is always what UnmarshalVT gives.

// unmarshalBlock decodes data into v with decodeBlock when v is one of the
// hot messages; it reports false when it did not (v is then untouched or
// must be decoded afresh).
func unmarshalBlock(data []byte, v any) bool {
	switch m := v.(type) {
	case *weirv1.CheckStreamRequest:
		return decodeCheckStreamRequest(data, m)
	case *weirv1.CheckStreamResponse:
		return decodeCheckStreamResponse(data, m)
	case *weirv1.ReplicateRequest:
		return decodeReplicateRequest(data, m)
	case *weirv1.CheckRequest:
		return decodeCheckRequest(data, m)
	case *weirv1.CheckResponse:
		return decodeCheckResponse(data, m)
	}
	return false
}

// field is one top-level field: its number, wire type and value (v for
// varints, b for length-delimited).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// fields walks data's top-level fields, calling f for each; it reports
// false on malformed data or when f does.
func fields(data []byte, f func(field) bool) bool {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		fl := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			fl.v, n = protowire.ConsumeVarint(data)
		case protowire.BytesType:
			fl.b, n = protowire.ConsumeBytes(data)
		default:
			return false
		}
		if n < 0 || !f(fl) {
			return false
		}
		data = data[n:]
	}
	return true
}

// count returns how many times field num occurs with the bytes wire type,
// or -1 if data is malformed.
func count(data []byte, num protowire.Number) int {
	c := 0
	if !fields(data, func(f field) bool {
		if f.num == num && f.typ == protowire.BytesType {
			c++
		}
		return true
	}) {
		return -1
	}
	return c
}

// block allocates n elements in one block and their pointers.
func block[T any](n int) []*T {
	b := make([]T, n)
	p := make([]*T, n)
	for i := range b {
		p[i] = &b[i]
	}
	return p
}

func decodeCheckRequest(data []byte, m *weirv1.CheckRequest) bool {
	items, ok := decodeItems(data, 1, nil)
	if ok {
		m.Items = items
	}
	return ok
}

func decodeCheckResponse(data []byte, m *weirv1.CheckResponse) bool {
	n := count(data, 1)
	if n < 0 {
		return false
	}
	results := block[weirv1.CheckResult](n)[:0]
	all := results[:n]
	ok := fields(data, func(f field) bool {
		if f.num != 1 || f.typ != protowire.BytesType {
			return false
		}
		r := all[len(results)]
		if r.UnmarshalVT(f.b) != nil {
			return false
		}
		results = append(results, r)
		return true
	})
	if ok && n > 0 {
		m.Results = results
	}
	return ok
}

// decodeItems decodes the check items of field num; other fields go to
// other (false: the message is left to the generated code).
func decodeItems(data []byte, num protowire.Number, other func(field) bool) ([]*weirv1.CheckItem, bool) {
	n := count(data, num)
	if n < 0 {
		return nil, false
	}
	items := block[weirv1.CheckItem](n)[:0]
	all := items[:n]
	ok := fields(data, func(f field) bool {
		if f.num == num && f.typ == protowire.BytesType {
			it := all[len(items)]
			if !decodeCheckItem(f.b, it) && it.UnmarshalVT(f.b) != nil {
				return false
			}
			items = append(items, it)
			return true
		}
		return other != nil && other(f)
	})
	if !ok || n == 0 {
		return nil, ok
	}
	return items, true
}

func decodeCheckStreamRequest(data []byte, m *weirv1.CheckStreamRequest) bool {
	items, ok := decodeItems(data, 2, func(f field) bool {
		if f.num == 1 && f.typ == protowire.VarintType {
			m.Id = f.v
			return true
		}
		return false
	})
	if ok {
		m.Items = items
	}
	return ok
}

func decodeCheckStreamResponse(data []byte, m *weirv1.CheckStreamResponse) bool {
	n := count(data, 2)
	if n < 0 {
		return false
	}
	results := block[weirv1.CheckResult](n)[:0]
	all := results[:n]
	ok := fields(data, func(f field) bool {
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			m.Id = f.v
		case f.num == 2 && f.typ == protowire.BytesType:
			r := all[len(results)]
			if r.UnmarshalVT(f.b) != nil {
				return false
			}
			results = append(results, r)
		case f.num == 3 && f.typ == protowire.VarintType:
			m.ErrorCode = weirv1.ErrorCode(f.v)
		case f.num == 4 && f.typ == protowire.BytesType:
			m.Error = string(f.b)
		default:
			return false
		}
		return true
	})
	if ok && n > 0 {
		m.Results = results
	}
	return ok
}

func decodeReplicateRequest(data []byte, m *weirv1.ReplicateRequest) bool {
	n := count(data, 3)
	if n < 0 {
		return false
	}
	states := block[weirv1.CounterState](n)[:0]
	all := states[:n]
	ok := fields(data, func(f field) bool {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			m.From = string(f.b)
		case f.num == 2 && f.typ == protowire.VarintType:
			m.RingVersion = f.v
		case f.num == 3 && f.typ == protowire.BytesType:
			s := all[len(states)]
			if s.UnmarshalVT(f.b) != nil {
				return false
			}
			states = append(states, s)
		case f.num == 4 && f.typ == protowire.VarintType:
			m.SentAtNs = int64(f.v)
		case f.num == 5 && f.typ == protowire.VarintType:
			m.Seq = f.v
		case f.num == 6 && f.typ == protowire.VarintType:
			m.Ack = f.v != 0
		default:
			return false
		}
		return true
	})
	if ok && n > 0 {
		m.States = states
	}
	return ok
}

// decodeCheckItem decodes a check item's declared fields, its rule name
// interned (a batch names a few rules many times); false: anything else
// (it is then reset, for the generated code to decode afresh).
func decodeCheckItem(data []byte, it *weirv1.CheckItem) bool {
	ok := fields(data, func(f field) bool {
		if f.typ == protowire.BytesType {
			switch f.num {
			case 1:
				it.Key = string(f.b)
			case 2:
				it.Rule = rules.intern(f.b)
			case 12:
				it.ReleasePermit = append([]byte(nil), f.b...)
			case 13:
				it.Priority = rules.intern(f.b)
			case 14:
				it.Traceparent = string(f.b)
			default:
				return false
			}
			return true
		}
		switch f.num {
		case 3:
			it.Cost = int64(f.v)
		case 4:
			it.RuleVersion = f.v
		case 5:
			it.Group = uint32(f.v)
		case 6:
			it.Refund = f.v != 0
		case 7:
			it.Hops = uint32(f.v)
		case 8:
			it.OverrideRate = int64(f.v)
		case 9:
			it.OverridePeriodMs = int64(f.v)
		case 10:
			it.OverrideBurst = int64(f.v)
		case 11:
			it.LeaseGateway = f.v
		default:
			return false
		}
		return true
	})
	if !ok {
		it.Reset()
	}
	return ok
}

// internTable holds rule names seen on the wire, so decoding a batch does
// not allocate each item's rule afresh. It is bounded: made-up names past
// maxInterned are allocated as usual, never kept.
type internTable struct {
	m  atomic.Pointer[map[string]string] // read without a lock; replaced, never changed
	mu sync.Mutex                        // serializes replacements
}

const (
	maxInterned    = 256
	maxInternedLen = 128
)

var rules internTable

func (t *internTable) intern(b []byte) string {
	if m := t.m.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
	}
	s := string(b)
	if len(b) > maxInternedLen {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m.Load()
	if old != nil && len(*old) >= maxInterned {
		return s
	}
	m := make(map[string]string, 1+len(ptrMap(old)))
	for k, v := range ptrMap(old) {
		m[k] = v
	}
	m[s] = s
	t.m.Store(&m)
	return s
}

func ptrMap(m *map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return *m
}
