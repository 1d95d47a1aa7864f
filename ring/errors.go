package ring

import "errors"

// Errors returned by this package; test with errors.Is.
var (
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("ring: invalid config")
	// ErrInvalidMember: a member ID is empty or listed twice.
	ErrInvalidMember = errors.New("ring: invalid member")
	// ErrCapacity: the members cannot hold every partition within the load
	// bound (too many members for the partition count, or Load too low).
	ErrCapacity = errors.New("ring: partitions do not fit the load bound")
)
