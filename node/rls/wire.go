package rls

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/weirlimit/weir/rulesraft/rules"
)

// The Envoy messages on the wire, decoded and encoded by hand with
// protowire: go-control-plane's types have only the reflective codec
// (their vtprotobuf code is behind a build tag and has no decoder), which
// spends more on a ShouldRateLimit than the decision. A request is decoded
// straight into a Request (its strings share one copy of the message),
// and a Response is encoded straight from its fields, as the reflective
// codec would decode and encode the generated messages (TestWireMatches
// and FuzzWireRequest hold them equal).
//
// The types below implement what internal/grpcwin.Codec (every node's
// codec) looks for (SizeVT, MarshalToSizedBufferVT, UnmarshalVT). Under
// any other codec they are proto messages through ProtoReflect, backed by
// the generated types, so the service still works, reflectively.

// serviceDesc is rlsv3.RateLimitService_ServiceDesc with a handler that
// decodes into wireRequest and answers a wireResponse.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "envoy.service.ratelimit.v3.RateLimitService",
	HandlerType: (*rlsv3.RateLimitServiceServer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimitHandler}},
	Streams:     []grpc.StreamDesc{},
	Metadata:    "envoy/service/ratelimit/v3/rls.proto",
}

func shouldRateLimitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wireRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if interceptor == nil {
		return s.shouldRateLimitWire(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.shouldRateLimitWire(ctx, req.(*wireRequest))
	})
}

// shouldRateLimitWire is ShouldRateLimit on the hand-decoded request.
func (s *Server) shouldRateLimitWire(ctx context.Context, in *wireRequest) (any, error) {
	r := in.r
	if in.pb != nil { // decoded by another codec
		r = fromProto(in.pb)
	}
	resp, err := s.Decide(ctx, &r)
	if err != nil {
		return nil, s.statusOf(err)
	}
	return &wireResponse{r: resp}, nil
}

// wireRequest is a RateLimitRequest on the wire.
type wireRequest struct {
	r  Request
	pb *rlsv3.RateLimitRequest // set instead of r by a codec other than grpcwin's
}

func (w *wireRequest) Reset() { *w = wireRequest{} }

// UnmarshalVT decodes a RateLimitRequest into w.
func (w *wireRequest) UnmarshalVT(b []byte) error {
	w.pb = nil
	return decodeRequest(b, &w.r)
}

var errDecodeOnly = errors.New("rls: the request is only decoded here")

func (w *wireRequest) SizeVT() int                                { return 0 }
func (w *wireRequest) MarshalToSizedBufferVT([]byte) (int, error) { return 0, errDecodeOnly }

// ProtoReflect lets another codec fill the generated message instead.
func (w *wireRequest) ProtoReflect() protoreflect.Message {
	if w.pb == nil {
		w.pb = new(rlsv3.RateLimitRequest)
	}
	return w.pb.ProtoReflect()
}

// wireResponse is a RateLimitResponse on the wire.
type wireResponse struct{ r Response }

var errEncodeOnly = errors.New("rls: the response is only encoded here")

func (w *wireResponse) SizeVT() int { return sizeResponse(&w.r) }

// MarshalToSizedBufferVT encodes w into b, which is SizeVT bytes long.
func (w *wireResponse) MarshalToSizedBufferVT(b []byte) (int, error) {
	out := appendResponse(b[:0], &w.r)
	if len(out) != len(b) || (len(b) > 0 && &out[0] != &b[0]) {
		return 0, fmt.Errorf("rls: encoded %d bytes of a %d-byte response", len(out), len(b))
	}
	return len(out), nil
}

func (w *wireResponse) UnmarshalVT([]byte) error { return errEncodeOnly }

// ProtoReflect lets another codec encode the generated message instead.
func (w *wireResponse) ProtoReflect() protoreflect.Message { return toProto(w.r).ProtoReflect() }

var errMalformed = errors.New("rls: malformed RateLimitRequest")

// decodeRequest decodes a RateLimitRequest into r as proto.Unmarshal and
// fromProto would: the last of a scalar field wins, a repeated message
// field appends, a message field given twice merges, unknown fields and
// known fields of another wire type are skipped, and a string that is not
// UTF-8 fails the message.
func decodeRequest(b []byte, r *Request) error {
	*r = Request{}
	s := string(b) // every string of the request is a part of this one copy
	off := 0
	var entries []rules.Entry // all descriptors' entries, one block
	for off < len(b) {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || !num.IsValid() { // a field number out of range is malformed, as for the generated decoder
			return errMalformed
		}
		off += n
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := consumeString(b, s, off)
			if n < 0 {
				return errMalformed
			}
			r.Domain, off = v, off+n
			continue
		case num == 2 && typ == protowire.BytesType:
			m, n := protowire.ConsumeBytes(b[off:])
			if n < 0 {
				return errMalformed
			}
			start := off + n - len(m)
			var d Descriptor
			var err error
			if entries, err = decodeDescriptor(b[:start+len(m)], s, start, &d, entries); err != nil {
				return err
			}
			r.Descriptors = append(r.Descriptors, d)
			off += n
			continue
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b[off:])
			if n < 0 {
				return errMalformed
			}
			r.Hits, off = uint64(uint32(v)), off+n
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b[off:])
		if n < 0 {
			return errMalformed
		}
		off += n
	}
	if r.Descriptors == nil {
		r.Descriptors = []Descriptor{} // as fromProto makes it
	}
	return nil
}

// consumeString reads a length-delimited string field's value at b[off:]
// (s is b as a string) and reports the bytes it took, or -1.
func consumeString(b []byte, s string, off int) (string, int) {
	v, n := protowire.ConsumeBytes(b[off:])
	if n < 0 || !utf8.Valid(v) {
		return "", -1
	}
	end := off + n
	return s[end-len(v) : end], n
}

// decodeDescriptor decodes the RateLimitDescriptor b[off:] into d; its
// entries are appended to block, and d.Entries is their part of it.
func decodeDescriptor(b []byte, s string, off int, d *Descriptor, block []rules.Entry) ([]rules.Entry, error) {
	first := len(block)
	multSeen := false // a unit_multiplier was given (its value defaults to 0, not 1)
	for off < len(b) {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || !num.IsValid() { // a field number out of range is malformed, as for the generated decoder
			return block, errMalformed
		}
		off += n
		switch {
		case num == 1 && typ == protowire.BytesType: // entries
			m, n := protowire.ConsumeBytes(b[off:])
			if n < 0 {
				return block, errMalformed
			}
			end := off + n
			e, err := decodeEntry(b[:end], s, end-len(m))
			if err != nil {
				return block, err
			}
			block = append(block, e)
			off = end
			continue
		case num == 2 && typ == protowire.BytesType: // limit
			m, n := protowire.ConsumeBytes(b[off:])
			if n < 0 {
				return block, errMalformed
			}
			if d.Override == nil {
				d.Override = &Override{Multiplier: 1}
			}
			if !decodeOverride(m, d.Override, &multSeen) {
				return block, errMalformed
			}
			off += n
			continue
		case num == 3 && typ == protowire.BytesType: // hits_addend
			m, n := protowire.ConsumeBytes(b[off:])
			if n < 0 {
				return block, errMalformed
			}
			d.HasHits = true
			if !decodeWrapper(m, func(v uint64) { d.Hits = v }) {
				return block, errMalformed
			}
			off += n
			continue
		case num == 4 && typ == protowire.VarintType: // is_negative_hits
			v, n := protowire.ConsumeVarint(b[off:])
			if n < 0 {
				return block, errMalformed
			}
			d.Negative, off = v != 0, off+n
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b[off:])
		if n < 0 {
			return block, errMalformed
		}
		off += n
	}
	d.Entries = block[first:len(block):len(block)]
	if len(d.Entries) == 0 {
		d.Entries = []rules.Entry{} // as fromProto makes it
	}
	return block, nil
}

// decodeEntry decodes the Entry b[off:].
func decodeEntry(b []byte, s string, off int) (rules.Entry, error) {
	var e rules.Entry
	for off < len(b) {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || !num.IsValid() { // a field number out of range is malformed, as for the generated decoder
			return e, errMalformed
		}
		off += n
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, n := consumeString(b, s, off)
			if n < 0 {
				return e, errMalformed
			}
			if num == 1 {
				e.Key = v
			} else {
				e.Value = v
			}
			off += n
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b[off:])
		if n < 0 {
			return e, errMalformed
		}
		off += n
	}
	return e, nil
}

// decodeOverride merges the RateLimitOverride b into o; multSeen is
// whether an earlier one gave a unit_multiplier.
func decodeOverride(b []byte, o *Override, multSeen *bool) bool {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, m []byte) bool {
		switch {
		case num == 1 && typ == protowire.VarintType:
			o.RequestsPerUnit = uint32(v)
		case num == 2 && typ == protowire.VarintType:
			o.Unit = units[typev3.RateLimitUnit(int32(v))]
		case num == 3 && typ == protowire.BytesType:
			if !*multSeen {
				*multSeen, o.Multiplier = true, 0
			}
			return decodeWrapper(m, func(v uint64) { o.Multiplier = uint32(v) })
		}
		return true
	})
}

// decodeWrapper reads the value of a UInt64Value or UInt32Value (set
// truncates it for the latter).
func decodeWrapper(b []byte, set func(uint64)) bool {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) bool {
		if num == 1 && typ == protowire.VarintType {
			set(v)
		}
		return true
	})
}

// eachField calls f with each field of b: its varint value or its bytes
// (other wire types are skipped); it reports false on malformed data or
// when f does.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, m []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || !num.IsValid() { // a field number out of range is malformed, as for the generated decoder
			return false
		}
		b = b[n:]
		var v uint64
		var m []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			m, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 || !f(num, typ, v, m) {
			return false
		}
		b = b[n:]
	}
	return true
}

// The RateLimitResponse as toProto builds it: overall_code (1),
// statuses (2), response_headers_to_add (3); a DescriptorStatus is code
// (1), current_limit (2), limit_remaining (3), duration_until_reset (4); a
// RateLimit is requests_per_unit (1), unit (2), name (3), unit_multiplier
// (4); fields in number order, zero scalars left out, as proto.Marshal
// writes them.

func sizeResponse(r *Response) int {
	n := sizeVarintField(1, uint64(code(r.Overall)))
	for i := range r.Statuses {
		n += sizeMessageField(2, sizeStatus(&r.Statuses[i]))
	}
	for _, h := range r.Headers {
		n += sizeMessageField(3, sizeStringField(1, h.Name)+sizeStringField(2, h.Value))
	}
	return n
}

func appendResponse(b []byte, r *Response) []byte {
	b = appendVarintField(b, 1, uint64(code(r.Overall)))
	for i := range r.Statuses {
		s := &r.Statuses[i]
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeStatus(s)))
		b = appendStatus(b, s)
	}
	for _, h := range r.Headers {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeStringField(1, h.Name)+sizeStringField(2, h.Value)))
		b = appendStringField(b, 1, h.Name)
		b = appendStringField(b, 2, h.Value)
	}
	return b
}

// statusFields are a status's wire values.
type statusFields struct {
	limit, remaining uint32
	unit             uint64
	mult             uint32 // 1: no unit_multiplier
	secs             int64
	nanos            int32
}

func fieldsOf(s *Status) statusFields {
	var f statusFields
	switch {
	case s.Rule != "":
		unit, mult := unitOf(s.Window)
		d := max(s.Reset, 0)
		f = statusFields{limit: clampU32(s.Limit), remaining: clampU32(s.Remaining), unit: uint64(unit), mult: mult,
			secs: int64(d / 1e9), nanos: int32(d % 1e9)}
	case s.Unlimited:
		f.remaining = 1<<32 - 1
	}
	return f
}

func sizeLimit(s *Status, f *statusFields) int {
	n := sizeVarintField(1, uint64(f.limit)) + sizeVarintField(2, f.unit) + sizeStringField(3, s.Rule)
	if f.mult != 1 {
		n += sizeMessageField(4, sizeVarintField(1, uint64(f.mult)))
	}
	return n
}

func sizeDuration(f *statusFields) int {
	return sizeVarintField(1, uint64(f.secs)) + sizeVarintField(2, uint64(int64(f.nanos)))
}

func sizeStatus(s *Status) int {
	f := fieldsOf(s)
	n := sizeVarintField(1, uint64(code(s.Code)))
	if s.Rule != "" {
		n += sizeMessageField(2, sizeLimit(s, &f))
	}
	n += sizeVarintField(3, uint64(f.remaining))
	if s.Rule != "" {
		n += sizeMessageField(4, sizeDuration(&f))
	}
	return n
}

func appendStatus(b []byte, s *Status) []byte {
	f := fieldsOf(s)
	b = appendVarintField(b, 1, uint64(code(s.Code)))
	if s.Rule != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeLimit(s, &f)))
		b = appendVarintField(b, 1, uint64(f.limit))
		b = appendVarintField(b, 2, f.unit)
		b = appendStringField(b, 3, s.Rule)
		if f.mult != 1 {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(sizeVarintField(1, uint64(f.mult))))
			b = appendVarintField(b, 1, uint64(f.mult))
		}
	}
	b = appendVarintField(b, 3, uint64(f.remaining))
	if s.Rule != "" {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeDuration(&f)))
		b = appendVarintField(b, 1, uint64(f.secs))
		b = appendVarintField(b, 2, uint64(int64(f.nanos)))
	}
	return b
}

// sizeVarintField is the size of a varint field, 0 for a zero value.
func sizeVarintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// sizeStringField is the size of a string field, 0 for "".
func sizeStringField(num protowire.Number, v string) int {
	if v == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// sizeMessageField is the size of a message field whose message is n bytes.
func sizeMessageField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}
