package client

import "testing"

// TestStatusCache checks the cache's bound and eviction order against a
// plain twin (a slice of the last max inserted distinct keys).
func TestStatusCache(t *testing.T) {
	const max = 5
	c := newStatusCache(max)
	var twin []uint64
	for i := uint64(1); i <= 23; i++ {
		k := i % 17 // some repeats: a repeat changes nothing
		c.put(k, k*10)
		seen := false
		for _, x := range twin {
			seen = seen || x == k
		}
		if !seen {
			twin = append(twin, k)
			if len(twin) > max {
				twin = twin[1:]
			}
		}
		if c.len() != len(twin) {
			t.Fatalf("after put %d: %d entries, twin has %d", k, c.len(), len(twin))
		}
		for _, x := range twin {
			if v, ok := c.get(x); !ok || v != x*10 {
				t.Fatalf("after put %d: get %d = %d, %v; want %d", k, x, v, ok, x*10)
			}
		}
	}
	if _, ok := newStatusCache(0).get(1); ok {
		t.Fatal("a disabled cache returned an entry")
	}
}
