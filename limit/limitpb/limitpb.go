// Package limitpb converts the check types of package limit to and from
// their protobuf wire form (proto/weirv1). It is used at the edges only:
// the gRPC Limiter service, the node-to-node forwarder and peer server.
// Batches are converted into value slices (not per-item pointers), taken
// from a BatchPool on the servers, so the check path allocates per batch,
// not per item.
package limitpb

import (
	"sync"
	"time"

	"github.com/weirlimit/weir/bucket"
	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
)

// itemsFromProto converts ps into dst, which has len(ps) items. A nil item
// becomes the zero Item (which ValidateItem refuses: empty key).
func itemsFromProto(dst []limit.Item, ps []*weirv1.CheckItem) []limit.Item {
	for i, p := range ps {
		if p == nil {
			dst[i] = limit.Item{}
			continue
		}
		dst[i] = limit.Item{Key: p.Key, Rule: p.Rule, Cost: p.Cost, RuleVersion: p.RuleVersion, Group: p.Group, Refund: p.Refund, Hops: p.Hops, LeaseGateway: p.LeaseGateway, Priority: p.Priority, Trace: p.Traceparent}
		if p.OverrideRate > 0 {
			dst[i].Override = &limit.Override{Rate: p.OverrideRate, Period: time.Duration(p.OverridePeriodMs) * time.Millisecond, Burst: p.OverrideBurst}
		}
		if len(p.ReleasePermit) > 0 {
			id, _ := limit.PermitFromBytes(p.ReleasePermit) // malformed: the zero id, which no permit has
			dst[i].Release = &id
		}
	}
	return dst
}

// BatchPool recycles the item and result slices an edge converts a
// request into, so a busy edge allocates neither per request. The zero
// value is ready and safe for concurrent use; it keeps nothing of a
// request once it is put back.
type BatchPool struct{ p sync.Pool } // of *Batch

// Batch is one request's items and a zeroed result per item.
type Batch struct {
	Items   []limit.Item
	Results []limit.Result
}

// maxPooled bounds the slices kept, so one huge request does not pin its
// memory.
const maxPooled = 4096

// FromProto converts wire items into a pooled batch, with as many empty
// results. A nil item becomes the zero Item (which ValidateItem refuses:
// empty key). Put it back once nothing refers to its
// items or results any more.
func (bp *BatchPool) FromProto(ps []*weirv1.CheckItem) *Batch {
	b, _ := bp.p.Get().(*Batch)
	if b == nil {
		b = &Batch{}
	}
	if cap(b.Items) < len(ps) {
		b.Items, b.Results = make([]limit.Item, len(ps)), make([]limit.Result, len(ps))
	}
	b.Items = itemsFromProto(b.Items[:len(ps)], ps)
	b.Results = b.Results[:len(ps)]
	return b
}

// Put gives b back; neither its items nor its results may be used
// afterwards.
func (bp *BatchPool) Put(b *Batch) {
	if cap(b.Items) > maxPooled {
		return
	}
	clear(b.Items) // drop the keys: they point into the request
	clear(b.Results)
	b.Items, b.Results = b.Items[:0], b.Results[:0]
	bp.p.Put(b)
}

// ItemToProto writes it into every field of dst (dst may be reused).
func ItemToProto(dst *weirv1.CheckItem, it *limit.Item) {
	dst.Key, dst.Rule, dst.Cost, dst.RuleVersion = it.Key, it.Rule, it.Cost, it.RuleVersion
	dst.Group, dst.Refund, dst.Hops = it.Group, it.Refund, it.Hops
	dst.LeaseGateway, dst.Priority, dst.Traceparent = it.LeaseGateway, it.Priority, it.Trace
	dst.OverrideRate, dst.OverridePeriodMs, dst.OverrideBurst = 0, 0, 0
	if o := it.Override; o != nil {
		dst.OverrideRate, dst.OverridePeriodMs, dst.OverrideBurst = o.Rate, o.Period.Milliseconds(), o.Burst
	}
	dst.ReleasePermit = nil
	if it.Release != nil {
		dst.ReleasePermit = limit.PermitBytes(*it.Release)
	}
}

// ResultsToProto converts results into wire results allocated in one block.
func ResultsToProto(rs []limit.Result) []*weirv1.CheckResult {
	block := make([]weirv1.CheckResult, len(rs))
	out := make([]*weirv1.CheckResult, len(rs))
	for i := range rs {
		ResultToProto(&block[i], &rs[i])
		out[i] = &block[i]
	}
	return out
}

// ResultBuf converts results for one stream's answers, reusing its
// messages from one answer to the next: a stream's answer has been encoded
// when its Send returns, so the next answer may overwrite it.
type ResultBuf struct {
	block []weirv1.CheckResult
	ptrs  []*weirv1.CheckResult
}

// maxBufResults bounds what a ResultBuf keeps between answers.
const maxBufResults = 4096

// ToProto is ResultsToProto into b's messages; the slice and its messages
// are valid until the next ToProto.
func (b *ResultBuf) ToProto(rs []limit.Result) []*weirv1.CheckResult {
	if len(rs) > maxBufResults {
		return ResultsToProto(rs)
	}
	if cap(b.block) < len(rs) {
		b.block = make([]weirv1.CheckResult, len(rs))
		b.ptrs = make([]*weirv1.CheckResult, len(rs))
		for i := range b.block {
			b.ptrs[i] = &b.block[i]
		}
	}
	for i := range rs {
		ResultToProto(&b.block[i], &rs[i])
	}
	return b.ptrs[:len(rs)]
}

// ResultToProto writes r into every field of dst. Durations become whole
// milliseconds, rounded up (Never: -1).
func ResultToProto(dst *weirv1.CheckResult, r *limit.Result) {
	dst.Allowed, dst.Remaining, dst.Limit = r.Allowed, r.Remaining, r.Limit
	dst.ResetMs, dst.RetryAfterMs, dst.WindowMs = limit.Millis(r.Reset), limit.Millis(r.RetryAfter), limit.Millis(r.Window)
	dst.ErrorCode, dst.Error = CodeToProto(r.Code), r.Err
	dst.Shadow, dst.Voided = r.Shadow, r.Voided
	dst.RuleVersion, dst.LeaseGranted = r.RuleVersion, r.LeaseGranted
	dst.Permit, dst.PermitExpiresMs = limit.PermitBytes(r.Permit), limit.Millis(r.PermitExpires)
	dst.Shed = r.Shed
}

// ResultsFromProto converts wire results into one slice of values; a nil
// result becomes the zero Result.
func ResultsFromProto(ps []*weirv1.CheckResult) []limit.Result {
	out := make([]limit.Result, len(ps))
	for i, p := range ps {
		if p != nil {
			out[i] = ResultFromProto(p)
		}
	}
	return out
}

// ResultFromProto converts one wire result (milliseconds; -1 is Never).
func ResultFromProto(p *weirv1.CheckResult) limit.Result {
	return limit.Result{
		Allowed: p.GetAllowed(), Remaining: p.GetRemaining(), Limit: p.GetLimit(),
		Reset: limit.FromMillis(p.GetResetMs()), RetryAfter: limit.FromMillis(p.GetRetryAfterMs()), Window: limit.FromMillis(p.GetWindowMs()),
		Code: CodeFromProto(p.GetErrorCode()), Err: p.GetError(),
		Shadow: p.GetShadow(), Voided: p.GetVoided(), RuleVersion: p.GetRuleVersion(),
		LeaseGranted: p.GetLeaseGranted(),
		Permit:       permitFromProto(p.GetPermit()), PermitExpires: limit.FromMillis(p.GetPermitExpiresMs()),
		Shed: p.GetShed(),
	}
}

// permitFromProto reads a result's permit; absent or malformed: none.
func permitFromProto(b []byte) bucket.PermitID {
	if len(b) == 0 {
		return bucket.PermitID{}
	}
	id, _ := limit.PermitFromBytes(b)
	return id
}

// wireCodes pairs each error code with its wire form; a code missing here
// goes on the wire as UNAVAILABLE, and a wire code missing here reads as
// CodeUnavailable (the item was not decided).
var wireCodes = []struct {
	c limit.ErrorCode
	w weirv1.ErrorCode
}{
	{limit.CodeNone, weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED},
	{limit.CodeUnknownRule, weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE},
	{limit.CodeInvalid, weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
	{limit.CodeUnavailable, weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE},
	{limit.CodeKeyCap, weirv1.ErrorCode_ERROR_CODE_KEY_CAP},
}

// CodeToProto is the wire form of an item's error code.
func CodeToProto(c limit.ErrorCode) weirv1.ErrorCode {
	for _, p := range wireCodes {
		if p.c == c {
			return p.w
		}
	}
	return weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE
}

// CodeFromProto reads a wire error code; a code this build does not know
// means the item was not decided: CodeUnavailable.
func CodeFromProto(w weirv1.ErrorCode) limit.ErrorCode {
	for _, p := range wireCodes {
		if p.w == w {
			return p.c
		}
	}
	return limit.CodeUnavailable
}
