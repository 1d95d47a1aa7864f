package rulesraft

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Raft's wire format (hashicorp/raft net_transport.go), as a connection's
// acceptor reads it: each request is one rpc-type byte, then the request
// struct encoded with go-msgpack (a map from field name to value, the
// embedded RPCHeader's fields ProtocolVersion, ID and Addr inlined);
// InstallSnapshot's is followed by Size bytes of snapshot data. Responses
// go the other way and are not read here. TestRPCFrameWireFormat encodes
// each type with raft's own transport and fails if this changes.
const (
	rpcAppendEntries   byte = 0
	rpcRequestVote     byte = 1
	rpcInstallSnapshot byte = 2
	rpcTimeoutNow      byte = 3
	rpcRequestPreVote  byte = 4
)

// rpcName names an rpc type in log lines.
func rpcName(t byte) string {
	switch t {
	case rpcAppendEntries:
		return "AppendEntries"
	case rpcRequestVote:
		return "RequestVote"
	case rpcInstallSnapshot:
		return "InstallSnapshot"
	case rpcTimeoutNow:
		return "TimeoutNow"
	case rpcRequestPreVote:
		return "RequestPreVote"
	}
	return fmt.Sprintf("rpc type %d", t)
}

// maxFrame bounds one request's encoding (snapshot data excluded): above
// what raft's 64 entries a request take of rule commands (each arrived in
// one gRPC message of at most 4 MiB or a 1 MiB HTTP body), so that no
// peer can make a node buffer more.
const maxFrame = 256 << 20

// maxDepth bounds nesting in a request (raft's go 3 deep).
const maxDepth = 16

// errFrame reports a request that is not one raft sends.
var errFrame = errors.New("rules store: malformed raft request")

// rpcFrame is what the checks need of one request.
type rpcFrame struct {
	Type byte
	ID   string // RPCHeader.ID: the sender's server ID
	Addr string // RPCHeader.Addr: the sender's server address
	Size int64  // InstallSnapshot: bytes of snapshot data after the request
	Raw  []byte // the request's bytes as read, type byte first
}

// readFrame reads one request from r into buf (reused; its capacity is
// kept) and decodes what the checks need, reading no more than maxFrame
// bytes: a length is never trusted for an allocation, the buffer grows by
// the bytes that actually came. io.EOF before the type byte is a clean
// end of the connection.
func readFrame(r *bufio.Reader, buf []byte) (rpcFrame, error) {
	t, err := r.ReadByte()
	if err != nil {
		return rpcFrame{}, err
	}
	d := frameDecoder{r: r, buf: append(buf[:0], t)}
	f := rpcFrame{Type: t}
	if t > rpcRequestPreVote {
		return f, fmt.Errorf("%w: unknown rpc type %d", errFrame, t)
	}
	n, err := d.mapLen()
	if err != nil {
		return f, err
	}
	for range n {
		key, err := d.str()
		if err != nil {
			return f, err
		}
		switch key {
		case "ID":
			f.ID, err = d.str()
		case "Addr":
			f.Addr, err = d.str()
		case "Size":
			f.Size, err = d.int()
			if err == nil && f.Size < 0 {
				err = fmt.Errorf("%w: negative snapshot size", errFrame)
			}
		default:
			err = d.skip(0)
		}
		if err != nil {
			return f, err
		}
	}
	f.Raw = d.buf
	return f, nil
}

// frameDecoder reads msgpack values from r, keeping every byte in buf.
type frameDecoder struct {
	r   *bufio.Reader
	buf []byte
}

func (d *frameDecoder) fail(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: cut short", errFrame)
	}
	return err
}

func (d *frameDecoder) byte() (byte, error) {
	b, err := d.r.ReadByte()
	if err != nil {
		return 0, d.fail(err)
	}
	if len(d.buf) >= maxFrame {
		return 0, fmt.Errorf("%w: longer than %d bytes", errFrame, maxFrame)
	}
	d.buf = append(d.buf, b)
	return b, nil
}

// take reads n bytes and returns them (a view of buf, valid until the next
// read).
func (d *frameDecoder) take(n uint64) ([]byte, error) {
	if n > uint64(maxFrame-len(d.buf)) {
		return nil, fmt.Errorf("%w: longer than %d bytes", errFrame, maxFrame)
	}
	start := len(d.buf)
	for uint64(len(d.buf)-start) < n {
		// Grow by what arrives (at most 64 KiB a step), never by n at once.
		chunk := min(n-uint64(len(d.buf)-start), 64<<10)
		d.buf = append(d.buf, make([]byte, chunk)...)
		if _, err := io.ReadFull(d.r, d.buf[len(d.buf)-int(chunk):]); err != nil {
			return nil, d.fail(err)
		}
	}
	return d.buf[start:], nil
}

func (d *frameDecoder) uint(size int) (uint64, error) {
	b, err := d.take(uint64(size))
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// mapLen reads a map header.
func (d *frameDecoder) mapLen() (uint64, error) {
	b, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case b&0xf0 == 0x80:
		return uint64(b & 0x0f), nil
	case b == 0xde:
		return d.uint(2)
	case b == 0xdf:
		return d.uint(4)
	}
	return 0, fmt.Errorf("%w: a request is not a map (0x%02x)", errFrame, b)
}

// str reads a string or byte string (go-msgpack writes []byte as either).
func (d *frameDecoder) str() (string, error) {
	b, err := d.byte()
	if err != nil {
		return "", err
	}
	var n uint64
	switch {
	case b&0xe0 == 0xa0:
		n = uint64(b & 0x1f)
	case b == 0xd9, b == 0xc4:
		n, err = d.uint(1)
	case b == 0xda, b == 0xc5:
		n, err = d.uint(2)
	case b == 0xdb, b == 0xc6:
		n, err = d.uint(4)
	case b == 0xc0:
		return "", nil // nil: an empty ID
	default:
		return "", fmt.Errorf("%w: a string expected (0x%02x)", errFrame, b)
	}
	if err != nil {
		return "", err
	}
	s, err := d.take(n)
	return string(s), err
}

// int reads an integer.
func (d *frameDecoder) int() (int64, error) {
	b, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case b <= 0x7f:
		return int64(b), nil
	case b >= 0xe0:
		return int64(int8(b)), nil
	case b >= 0xcc && b <= 0xcf: // uint 8..64
		v, err := d.uint(1 << (b - 0xcc))
		if v > 1<<63-1 {
			return 0, fmt.Errorf("%w: integer out of range", errFrame)
		}
		return int64(v), err
	case b >= 0xd0 && b <= 0xd3: // int 8..64
		size := 1 << (b - 0xd0)
		v, err := d.uint(size)
		shift := 64 - 8*size
		return int64(v<<shift) >> shift, err
	}
	return 0, fmt.Errorf("%w: an integer expected (0x%02x)", errFrame, b)
}

// skip reads one value of any type, depth levels deep.
func (d *frameDecoder) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", errFrame, maxDepth)
	}
	b, err := d.byte()
	if err != nil {
		return err
	}
	var n, items uint64 // payload bytes; items (values) that follow
	switch {
	case b <= 0x7f, b >= 0xe0, b == 0xc0, b == 0xc2, b == 0xc3: // fixint, nil, bool
	case b&0xe0 == 0xa0:
		n = uint64(b & 0x1f)
	case b&0xf0 == 0x90:
		items = uint64(b & 0x0f)
	case b&0xf0 == 0x80:
		items = 2 * uint64(b&0x0f)
	case b == 0xcc, b == 0xd0:
		n = 1
	case b == 0xcd, b == 0xd1:
		n = 2
	case b == 0xca, b == 0xce, b == 0xd2:
		n = 4
	case b == 0xcb, b == 0xcf, b == 0xd3:
		n = 8
	case b == 0xd4, b == 0xd5, b == 0xd6, b == 0xd7, b == 0xd8: // fixext: type + 1..16
		n = 1 + 1<<(b-0xd4)
	case b == 0xc4, b == 0xd9:
		n, err = d.uint(1)
	case b == 0xc5, b == 0xda:
		n, err = d.uint(2)
	case b == 0xc6, b == 0xdb:
		n, err = d.uint(4)
	case b == 0xc7, b == 0xc8, b == 0xc9: // ext: length, type, data
		n, err = d.uint(1 << (b - 0xc7))
		n++
	case b == 0xdc:
		items, err = d.uint(2)
	case b == 0xdd:
		items, err = d.uint(4)
	case b == 0xde:
		items, err = d.uint(2)
		items *= 2
	case b == 0xdf:
		items, err = d.uint(4)
		items *= 2
	default:
		return fmt.Errorf("%w: unknown msgpack type 0x%02x", errFrame, b)
	}
	if err != nil {
		return err
	}
	if n > 0 {
		if _, err := d.take(n); err != nil {
			return err
		}
	}
	if items > uint64(maxFrame-len(d.buf)) { // each takes a byte at least
		return fmt.Errorf("%w: longer than %d bytes", errFrame, maxFrame)
	}
	for range items {
		if err := d.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
