package ring

import (
	"fmt"
	"testing"
)

func BenchmarkOwner(b *testing.B) {
	r := mustNew(b, ids(0, 5), LegacyConfig())
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("apikey:ak_%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = r.Owner(keys[i&1023])
		i++
	}
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{5, 50} {
		members := ids(0, n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(members, LegacyConfig()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
