package keys

import (
	"bytes"
	"testing"
)

// TestUserSplitKeys checks that the split points are n-1 distinct user
// keys in increasing order, for one-byte and two-byte splits.
func TestUserSplitKeys(t *testing.T) {
	for _, n := range []int{1, 2, 6, 256, 257, 1000, 10000, 65536} {
		ks := UserSplitKeys(n)
		if len(ks) != n-1 {
			t.Fatalf("n=%d: %d split keys", n, len(ks))
		}
		for i, k := range ks {
			if !IsUser(k) {
				t.Fatalf("n=%d: split key %q is not a user key", n, k)
			}
			if i > 0 && bytes.Compare(ks[i-1], k) >= 0 {
				t.Fatalf("n=%d: split keys %q and %q out of order", n, ks[i-1], k)
			}
		}
	}
}
