// Package limitpb converts the check types of package limit to and from
// their protobuf wire form (proto/weirv1). It is used at the edges only:
// the gRPC Limiter service, the node-to-node forwarder and peer server.
// Slices are converted in one allocation each (values, not pointers), so
// the check path allocates per batch, not per item.
package limitpb

import (
	"time"

	"github.com/weirlimit/weir/limit"
	"github.com/weirlimit/weir/proto/weirv1"
)

// ItemsFromProto converts wire items into one slice of values. A nil item
// becomes the zero Item (which ValidateItem refuses: empty key).
func ItemsFromProto(ps []*weirv1.CheckItem) []limit.Item {
	out := make([]limit.Item, len(ps))
	for i, p := range ps {
		if p == nil {
			continue
		}
		out[i] = limit.Item{Key: p.Key, Rule: p.Rule, Cost: p.Cost, RuleVersion: p.RuleVersion, Group: p.Group, Refund: p.Refund, Hops: p.Hops}
	}
	return out
}

// ItemToProto writes it into every field of dst (dst may be reused).
func ItemToProto(dst *weirv1.CheckItem, it *limit.Item) {
	dst.Key, dst.Rule, dst.Cost, dst.RuleVersion = it.Key, it.Rule, it.Cost, it.RuleVersion
	dst.Group, dst.Refund, dst.Hops = it.Group, it.Refund, it.Hops
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

// ResultToProto writes r into every field of dst. Durations become whole
// milliseconds, rounded up (Never: -1).
func ResultToProto(dst *weirv1.CheckResult, r *limit.Result) {
	dst.Allowed, dst.Remaining, dst.Limit = r.Allowed, r.Remaining, r.Limit
	dst.ResetMs, dst.RetryAfterMs, dst.WindowMs = MS(r.Reset), MS(r.RetryAfter), MS(r.Window)
	dst.ErrorCode, dst.Error = CodeToProto(r.Code), r.Err
	dst.Shadow = r.Shadow
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
		Reset: Duration(p.GetResetMs()), RetryAfter: Duration(p.GetRetryAfterMs()), Window: Duration(p.GetWindowMs()),
		Code: CodeFromProto(p.GetErrorCode()), Err: p.GetError(),
		Shadow: p.GetShadow(),
	}
}

// CodeToProto is the wire form of an item's error code.
func CodeToProto(c limit.ErrorCode) weirv1.ErrorCode {
	switch c {
	case limit.CodeNone:
		return weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED
	case limit.CodeUnknownRule:
		return weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE
	case limit.CodeInvalid:
		return weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
	}
	return weirv1.ErrorCode_ERROR_CODE_UNAVAILABLE
}

// CodeFromProto reads a wire error code; a code this build does not know
// means the item was not decided: CodeUnavailable.
func CodeFromProto(c weirv1.ErrorCode) limit.ErrorCode {
	switch c {
	case weirv1.ErrorCode_ERROR_CODE_UNSPECIFIED:
		return limit.CodeNone
	case weirv1.ErrorCode_ERROR_CODE_UNKNOWN_RULE:
		return limit.CodeUnknownRule
	case weirv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:
		return limit.CodeInvalid
	}
	return limit.CodeUnavailable
}

// MS is d in whole milliseconds, rounded up; limit.Never stays -1 and a
// negative d is 0.
func MS(d time.Duration) int64 {
	if d == limit.Never {
		return -1
	}
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Duration reads milliseconds: -1 (or any negative value) is limit.Never.
func Duration(ms int64) time.Duration {
	if ms < 0 {
		return limit.Never
	}
	return time.Duration(ms) * time.Millisecond
}
