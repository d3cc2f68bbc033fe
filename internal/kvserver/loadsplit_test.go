package kvserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
)

func TestLoadSplitter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	user := func(s string) []byte { return keys.UserKey([]byte(s)) }
	start, end := keys.UserKey(nil), keys.MaxKey
	// drive sends qps requests a second for secs seconds, keys from key(i).
	drive := func(l *loadSplitter, from time.Time, secs, qps int, key func(i int) ([]byte, []byte)) time.Time {
		now := from
		for s := 0; s < secs; s++ {
			for i := 0; i < qps; i++ {
				k, e := key(s*qps + i)
				l.record(now.Add(time.Duration(i)*time.Second/time.Duration(qps)), k, e, 100)
			}
			now = now.Add(time.Second)
		}
		return now
	}
	uniform := func(i int) ([]byte, []byte) { return user(fmt.Sprintf("k%03d", (i*37)%1000)), nil }

	t.Run("uniform load splits near the middle, only once hot for long enough", func(t *testing.T) {
		var l loadSplitter
		now := drive(&l, t0, 3, 200, uniform)
		if k := l.suggest(now, 10*time.Second, start, end); k != nil {
			t.Fatalf("suggested %q after 3 s of load, want nothing before 10 s", k)
		}
		now = drive(&l, now, 10, 200, uniform)
		k := l.suggest(now, 10*time.Second, start, end)
		if k == nil {
			t.Fatal("no split key after 13 s of uniform load at twice the threshold")
		}
		if s := string(k[1:]); s < "k250" || s > "k750" {
			t.Fatalf("split key %q, want one that divides the load about evenly", s)
		}
	})
	t.Run("load below the threshold never splits", func(t *testing.T) {
		var l loadSplitter
		now := drive(&l, t0, 15, 50, uniform)
		if k := l.suggest(now, 10*time.Second, start, end); k != nil {
			t.Fatalf("suggested %q under the threshold", k)
		}
	})
	t.Run("a hot single key has no split key", func(t *testing.T) {
		var l loadSplitter
		now := drive(&l, t0, 15, 200, func(int) ([]byte, []byte) { return user("hot"), nil })
		if k := l.suggest(now, 10*time.Second, start, end); k != nil {
			t.Fatalf("suggested %q for a single hot key", k)
		}
	})
	t.Run("scans across every key have no split key", func(t *testing.T) {
		var l loadSplitter
		now := drive(&l, t0, 15, 200, func(i int) ([]byte, []byte) {
			return user(fmt.Sprintf("a%03d", i%10)), user("z")
		})
		if k := l.suggest(now, 10*time.Second, start, end); k != nil {
			t.Fatalf("suggested %q though every request straddles it", k)
		}
	})
	t.Run("load that stops resets", func(t *testing.T) {
		var l loadSplitter
		now := drive(&l, t0, 8, 200, uniform)
		now = drive(&l, now, 2, 10, uniform)
		now = drive(&l, now, 8, 200, uniform)
		if k := l.suggest(now, 10*time.Second, start, end); k != nil {
			t.Fatalf("suggested %q: the load was interrupted, no 10 s of it", k)
		}
	})
}
