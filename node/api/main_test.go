package api

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Servers, Stores and the test servers leave no
// goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
