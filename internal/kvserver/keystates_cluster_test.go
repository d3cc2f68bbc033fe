package kvserver_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// Every test of this package checks the Puts' key cache against the store.
func init() { eval.VerifyKeyStatesForTesting(true) }

// TestPutsAmongTransactions runs non-transactional Puts and read-modify-
// write transactions on the same keys, with a node stopped and restarted
// in the middle (leases move), and every Put that takes its key's state
// from the leaseholder's key cache (keystates.go) checking it against the
// store (init above): no Put may find the cache wrong.
// Afterwards every key can be read.
func TestPutsAmongTransactions(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), InitialRanges: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	const keyCount, putters, txners, opsEach = 6, 4, 3, 120
	key := func(rng *rand.Rand) []byte { return []byte(fmt.Sprintf("kc%d", rng.IntN(keyCount))) }
	var (
		mu      sync.Mutex
		wrong   []string
		puts    int
		commits int
	)
	fail := func(err error) {
		if err != nil && strings.Contains(err.Error(), "key cache") {
			mu.Lock()
			wrong = append(wrong, err.Error())
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for w := range putters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range opsEach {
				err := db.Put(ctx, key(rng), []byte(fmt.Sprintf("put-%d-%d", w, i)))
				fail(err)
				if err == nil {
					mu.Lock()
					puts++
					mu.Unlock()
				}
			}
		}()
	}
	for w := range txners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range opsEach / 3 {
				a, b := key(rng), key(rng)
				err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
					for _, k := range [][]byte{a, b} {
						v, _, err := txn.Get(ctx, k)
						if err != nil {
							return err
						}
						if err := txn.Put(ctx, k, append([]byte("t-"), v[:min(len(v), 20)]...)); err != nil {
							return err
						}
					}
					return nil
				})
				fail(err)
				if err == nil {
					mu.Lock()
					commits++
					mu.Unlock()
				}
			}
		}()
	}
	// A node stopped and restarted while they run: its leases move, and
	// the new leaseholders' caches start over.
	time.Sleep(300 * time.Millisecond)
	c.StopNode(2)
	time.Sleep(300 * time.Millisecond)
	if err := c.RestartNode(2); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d operations found the key cache wrong, the first: %s", len(wrong), wrong[0])
	}
	if puts == 0 || commits == 0 {
		t.Fatalf("%d Puts and %d transactions succeeded: the mix did not run", puts, commits)
	}
	for i := range keyCount {
		k := []byte(fmt.Sprintf("kc%d", i))
		if _, _, err := db.Get(ctx, k); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read %s: %v", k, err)
		}
	}
	t.Logf("%d Puts and %d transactions committed", puts, commits)
}
