// Package testwait polls a condition in tests until it holds or a deadline
// passes: the one way tests here wait for something to happen (no sleeps as
// waits).
package testwait

import (
	"testing"
	"time"
)

// For polls f until it returns nil or d passes, then fails the test with
// f's last error; what names the condition.
func For(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// Until polls cond for up to 10 s; what names the condition in the failure.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}
