package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weirlimit/weir/replication"
)

// File is the file name of the durable counters in a node's data dir.
const File = "counters.weir"

// Version is the format Encode writes and the only one Decode reads.
const Version = 1

// magic opens every file.
var magic = [8]byte{'W', 'E', 'I', 'R', 'C', 'T', 'R', 0}

// Errors of Decode (and ReadFile).
var (
	// ErrCorrupt: truncated, a checksum mismatch, or counts that do not
	// fit the length.
	ErrCorrupt = errors.New("corrupt counters file")
	// ErrVersion: a file of a format this build does not read.
	ErrVersion = errors.New("unknown counters file version")
)

// Snapshot is what one file holds: when it was written (the writer's
// clock, unix ns), the ring members when it was written (sorted; after a
// full-cluster stop, the members to wait for), and the counters.
type Snapshot struct {
	WrittenAt int64
	Members   []string
	States    []replication.State
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	headerLen  = len(magic) + 4 + 8 // magic, version, written at
	trailerLen = 4                  // CRC-32C
	flagLog    = 1
	maxMember  = 1 << 10       // bytes of one member id
	stateFixed = 4 + 1 + 8 + 8 // partition, flags, id, idle
	wordsLen   = 3 * 8         // a, b, c
)

// Encode returns the file's bytes for s. Volatile states are left out
// (they never reach a data dir); fresh ones too (nothing to keep).
func Encode(s Snapshot) []byte {
	return encodeBody(s.WrittenAt, AppendBody(nil, s.Members, s.States))
}

// encodeBody frames a body (AppendBody) as a file written at writtenAt.
func encodeBody(writtenAt int64, body []byte) []byte {
	b := make([]byte, 0, headerLen+len(body)+trailerLen)
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint64(b, uint64(writtenAt))
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// AppendBody appends what a file holds after its header: the members and
// the counters. Two snapshots with equal bodies hold the same counters (a
// writer skips rewriting them).
func AppendBody(b []byte, members []string, states []replication.State) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(members)))
	for _, m := range members {
		m = m[:min(len(m), maxMember)]
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	n := 0
	for i := range states {
		if keep(&states[i]) {
			n++
		}
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(n))
	for i := range states {
		st := &states[i]
		if !keep(st) {
			continue
		}
		var flags byte
		if st.Log != nil {
			flags = flagLog
		}
		b = binary.LittleEndian.AppendUint32(b, st.Partition)
		b = append(b, flags)
		b = binary.LittleEndian.AppendUint64(b, st.ID)
		b = binary.LittleEndian.AppendUint64(b, uint64(st.Idle))
		if st.Log == nil {
			b = binary.LittleEndian.AppendUint64(b, uint64(st.A))
			b = binary.LittleEndian.AppendUint64(b, uint64(st.B))
			b = binary.LittleEndian.AppendUint64(b, uint64(st.C))
			continue
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(st.Log)))
		for _, ts := range st.Log {
			b = binary.LittleEndian.AppendUint64(b, uint64(ts))
		}
	}
	return b
}

func keep(st *replication.State) bool { return !st.Volatile && !st.Fresh() }

// Decode parses a file's bytes. A file that is not exactly what Encode
// writes is refused whole (ErrCorrupt, ErrVersion): a partial read would
// bring back some counters and silently not others.
func Decode(b []byte) (Snapshot, error) {
	if len(b) < headerLen+4+8+trailerLen {
		return Snapshot{}, fmt.Errorf("%w: %d bytes, shorter than any file", ErrCorrupt, len(b))
	}
	if [8]byte(b[:8]) != magic {
		return Snapshot{}, fmt.Errorf("%w: not a counters file", ErrCorrupt)
	}
	body, sum := b[:len(b)-trailerLen], binary.LittleEndian.Uint32(b[len(b)-trailerLen:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return Snapshot{}, fmt.Errorf("%w: checksum %08x, file says %08x (truncated or damaged)", ErrCorrupt, got, sum)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != Version {
		return Snapshot{}, fmt.Errorf("%w: version %d, this build reads %d", ErrVersion, v, Version)
	}
	r := reader{b: body[headerLen:]}
	s := Snapshot{WrittenAt: int64(binary.LittleEndian.Uint64(b[12:]))}
	nm := r.u32()
	if uint64(nm)*2 > uint64(len(r.b)) {
		return Snapshot{}, fmt.Errorf("%w: %d members do not fit", ErrCorrupt, nm)
	}
	for range nm {
		l := int(r.u16())
		if l > maxMember {
			return Snapshot{}, fmt.Errorf("%w: a member id of %d bytes", ErrCorrupt, l)
		}
		s.Members = append(s.Members, string(r.bytes(l)))
	}
	ns := r.u64()
	if r.bad || ns > uint64(len(r.b))/(stateFixed+4) {
		return Snapshot{}, fmt.Errorf("%w: %d counters do not fit", ErrCorrupt, ns)
	}
	s.States = make([]replication.State, 0, ns)
	for range ns {
		st := replication.State{Partition: r.u32()}
		flags := r.byte()
		st.ID, st.Idle = r.u64(), int64(r.u64())
		switch flags {
		case 0:
			st.A, st.B, st.C = int64(r.u64()), int64(r.u64()), int64(r.u64())
		case flagLog:
			n := r.u32()
			if uint64(n) > uint64(len(r.b))/8 {
				return Snapshot{}, fmt.Errorf("%w: a log of %d entries does not fit", ErrCorrupt, n)
			}
			st.Log = make([]int64, n)
			for i := range st.Log {
				st.Log[i] = int64(r.u64())
			}
		default:
			return Snapshot{}, fmt.Errorf("%w: counter flags %#x", ErrCorrupt, flags)
		}
		if r.bad {
			break
		}
		if st.Idle <= 0 || st.Fresh() {
			return Snapshot{}, fmt.Errorf("%w: counter %x has no deadline or no state", ErrCorrupt, st.ID)
		}
		s.States = append(s.States, st)
	}
	if r.bad || len(r.b) != 0 {
		return Snapshot{}, fmt.Errorf("%w: length does not match its counts", ErrCorrupt)
	}
	return s, nil
}

// reader reads little-endian fields; past the end it reads zeros and
// sets bad.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if n > len(r.b) || n < 0 {
		r.bad, r.b = true, nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
