package forward_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that tables, once closed, and the fake peers leave no
// goroutine behind (streams' receivers, unary RPCs, timers).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
