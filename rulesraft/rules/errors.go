package rules

import (
	"fmt"
	"strings"

	"github.com/weirlimit/weir/limit"
)

// ErrInvalid is matched (errors.Is) by every validation failure in this
// package. The concrete error is a *ValidationError listing each problem.
// It is limit.ErrInvalid too, so the edges answer InvalidArgument / 400.
var ErrInvalid = limit.Errorf(limit.ErrInvalid, "rules: invalid")

// Problem is one thing wrong with a rule, an override or a rules file.
// Line is the 1-based line in the file, or 0 when unknown (rules that did
// not come from a file). Field is a path such as "rules[1].rate" or, for a
// single rule, "rate"; it is empty for problems with the whole document.
type Problem struct {
	Line  int
	Field string
	Msg   string
}

// String formats the problem as "line 7: rules[1].rate: must be > 0",
// leaving out the parts that are unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ValidationError lists every problem found, so an admin can fix a file in
// one pass. errors.Is(err, ErrInvalid) holds for it.
type ValidationError struct {
	Problems []Problem
}

// Error lists all problems, one per line after a summary.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	switch len(e.Problems) {
	case 0:
		return b.String()
	case 1:
		b.WriteString(": ")
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, ": %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// problems collects Problems under a field prefix.
type problems struct {
	prefix string
	list   []Problem
}

func (ps *problems) add(field, format string, args ...any) {
	if ps.prefix != "" {
		if field == "" {
			field = strings.TrimSuffix(ps.prefix, ".")
		} else {
			field = ps.prefix + field
		}
	}
	ps.list = append(ps.list, Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err returns nil when there are no problems, else a *ValidationError.
func errOf(list []Problem) error {
	if len(list) == 0 {
		return nil
	}
	return &ValidationError{Problems: list}
}
