package limit

import (
	"fmt"
	"unicode/utf8"
)

// ValidateKey checks a limited key: 1 to MaxKeyLen bytes of valid UTF-8.
// The error starts with "key: " and is ErrInvalid.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return Errorf(ErrInvalid, "key: must not be empty")
	case len(key) > MaxKeyLen:
		return Errorf(ErrInvalid, "key: is %d bytes long; at most %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return Errorf(ErrInvalid, "key: is not valid UTF-8 (keys are compared byte for byte; send the bytes as UTF-8 or encode them, e.g. in hex)")
	}
	return nil
}

// ValidateItem checks the shape of an item: its key (ValidateKey), a
// non-empty rule id and a cost that is not negative. It is the one item
// validator; the error names the field first ("key: ...", "rule: ...",
// "cost: ...") and is ErrInvalid.
func ValidateItem(key, rule string, cost int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	switch {
	case rule == "":
		return Errorf(ErrInvalid, "rule: must not be empty")
	case cost < 0:
		return Errorf(ErrInvalid, "cost: %d is negative (0 peeks, more takes tokens)", cost)
	}
	return nil
}

// DecideValid decides items into out (len(out) == len(items)), each item
// validated once (ValidateItem): an invalid item gets a result of its own
// (CodeInvalid, the problem in Err, RetryAfter Never) and is never passed
// on; decide gets the valid ones, in order, with a results slice of the
// same length to fill. When every item is valid, decide fills out itself.
// It is what every edge that takes items from a wire runs before they go
// further. No items, no call.
func DecideValid(items []Item, out []Result, decide func(items []Item, out []Result) error) error {
	if len(out) != len(items) {
		return fmt.Errorf("limit: %d results for %d items", len(out), len(items))
	}
	if len(items) == 0 {
		return nil
	}
	bad := -1
	for i := range items {
		if ValidateItem(items[i].Key, items[i].Rule, items[i].Cost) != nil {
			bad = i
			break
		}
	}
	if bad < 0 {
		// The common case: every item is well formed.
		return decide(items, out)
	}
	valid := make([]Item, 0, len(items)-1)
	where := make([]int, 0, len(items)-1)
	for i := range items {
		if err := ValidateItem(items[i].Key, items[i].Rule, items[i].Cost); err != nil {
			out[i] = Result{Code: CodeInvalid, Err: err.Error(), RetryAfter: Never}
			continue
		}
		valid = append(valid, items[i])
		where = append(where, i)
	}
	if len(valid) == 0 {
		return nil
	}
	got := make([]Result, len(valid))
	if err := decide(valid, got); err != nil {
		return err
	}
	for j, i := range where {
		out[i] = got[j]
	}
	return nil
}
