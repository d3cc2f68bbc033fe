package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// The 2pc-locking commit protocol (issue 9, items 2 and 7): the same
// workloads and checkers as the default protocol's fault tests, on a
// cluster initialized with --commit-protocol 2pc-locking.

const twoPC = "2pc-locking"

// TestTwoPCBasics: a cluster running 2pc-locking says so, runs read-write
// and read-only transactions with read-your-writes (points and scans),
// admits a default read-only transaction's snapshot reads, and refuses a
// default transaction's writes with *client.ProtocolError.
func TestTwoPCBasics(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4, CommitProtocol: twoPC})
	db := openDB(t, c)
	if got := db.Protocol(); got != client.Protocol2PCLocking {
		t.Fatalf("Protocol() = %q, want 2pc-locking", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		if txn.Protocol() != client.Protocol2PCLocking {
			t.Errorf("txn.Protocol() = %q", txn.Protocol())
		}
		// One key in each of the 4 user ranges (split at 0x40, 0x80, 0xc0).
		for _, k := range []string{"a", "\x10m", "\x90t", "\xd0z"} {
			if _, _, err := txn.Get(ctx, []byte(k)); err != nil {
				return err
			}
			if err := txn.Put(ctx, []byte(k), []byte("v-"+k)); err != nil {
				return err
			}
		}
		v, ok, err := txn.Get(ctx, []byte("\x10m"))
		if err != nil || !ok || string(v) != "v-\x10m" {
			t.Errorf("own write of m: %q %v %v", v, ok, err)
		}
		if err := txn.Delete(ctx, []byte("\x90t")); err != nil {
			return err
		}
		kvs, err := txn.Scan(ctx, nil, []byte("\xff"), 0)
		if err != nil {
			return err
		}
		var got []string
		for _, kv := range kvs {
			got = append(got, string(kv.Key)+"="+string(kv.Value))
		}
		if strings.Join(got, " ") != "\x10m=v-\x10m a=v-a \xd0z=v-\xd0z" {
			t.Errorf("scan in the transaction: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("2pc transaction: %v", err)
	}
	st := db.Stats()
	// Per prepared attempt: 16 messages (4 ranges) and 4 steps. A retried
	// attempt (a lease moving just after the cluster started, seen in CI
	// under load) prepares again and counts again.
	if st.ProtocolTxns < 1 || st.ProtocolMessages != 16*st.ProtocolTxns || st.ProtocolSteps != 4*st.ProtocolTxns {
		t.Errorf("protocol counts: %d transactions, %d messages, %d steps; want 16 (4 ranges) and 4 per transaction prepared", st.ProtocolTxns, st.ProtocolMessages, st.ProtocolSteps)
	}
	// A read-only 2PC transaction and a default one see the commit.
	for _, p := range []client.Protocol{client.Protocol2PCLocking, client.ProtocolDefault} {
		err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			v, ok, err := txn.Get(ctx, []byte("a"))
			if err != nil {
				return err
			}
			if !ok || string(v) != "v-a" {
				t.Errorf("%s read of a: %q %v", p, v, ok)
			}
			if _, ok, _ := txn.Get(ctx, []byte("\x90t")); ok {
				t.Errorf("%s read of t: deleted key found", p)
			}
			return nil
		}, client.WithProtocol(p))
		if err != nil {
			t.Fatalf("%s read-only transaction: %v", p, err)
		}
	}
	// A default transaction's write is refused.
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.Put(ctx, []byte("a"), []byte("x"))
	}, client.WithProtocol(client.ProtocolDefault))
	var pe *client.ProtocolError
	if !errors.As(err, &pe) || !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("default write in a 2pc-locking cluster: %v, want *ProtocolError", err)
	}
	// Locks are released after the decisions: a conflicting writer
	// commits at once.
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.Put(ctx, []byte("a"), []byte("again"))
	}); err != nil {
		t.Fatalf("writer after the readers: %v", err)
	}
}

// TestTwoPCListAppend: serializable list-append histories under
// 2pc-locking, with the busy range's leaseholder stopped and restarted, a
// status-table leader partitioned and a split, have no anomaly (I3).
func TestTwoPCListAppend(t *testing.T) {
	seed := testSeed(t)
	txns := runListAppendOn(t, seed, twoPC, false)
	if ok, anomalies := check.CheckListAppend(txns); !ok {
		t.Fatalf("2pc-locking list-append history has anomalies:\n%s", strings.Join(anomalies, "\n"))
	}
}

// TestTwoPCBank: the bank's invariants under 2pc-locking with the
// accounts' leaseholder killed and restarted.
func TestTwoPCBank(t *testing.T) {
	seed := testSeed(t)
	accounts, transfers, workers := bankSizes()
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4, CommitProtocol: twoPC})
	admin := openDB(t, c)
	b := newBankWorkload(accounts)
	b.setup(t, admin)
	dbs := make([]*client.DB, workers)
	for i := range dbs {
		dbs[i] = openWorkloadDB(t, c)
	}
	n := startNemesis(t, transfers, killFault(c, leaseholderPicker(t, admin, c, b.keys)))
	b.run(t, dbs, seed, transfers, n)
	n.finish()
	var st client.Stats
	for _, db := range dbs {
		s := db.Stats()
		st.ProtocolTxns += s.ProtocolTxns
		st.Retries += s.Retries
	}
	t.Logf("2pc-locking: %d transactions prepared, %d retries", st.ProtocolTxns, st.Retries)
	b.verify(t, admin)
	for _, db := range dbs {
		_ = db.Close()
	}
	_ = admin.Close()
	checkReplicas(t, c)
}

// TestTwoPCPutWaitsForReadLock: on a 2pc-locking cluster a
// non-transactional Put of a key that a running transaction has read
// waits for that transaction's shared lock, and its version lands above
// the transaction's commit timestamp, so the transaction's read stays the
// value as of its commit. Before, the Put went through at once and the
// transaction committed above a write it had not seen.
func TestTwoPCPutWaitsForReadLock(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 2, CommitProtocol: twoPC})
	db, other := openDB(t, c), openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	x, y := []byte("x"), []byte("y")
	if err := db.Put(ctx, x, []byte("old")); err != nil {
		t.Fatal(err)
	}
	read, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var seen []byte
	txnDone := make(chan error, 1)
	var last atomic.Pointer[client.Txn]
	go func() {
		txnDone <- db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			v, _, err := txn.Get(ctx, x)
			if err != nil {
				return err
			}
			seen = v
			last.Store(txn)
			once.Do(func() { close(read); <-proceed })
			if err := txn.Put(ctx, y, append([]byte("saw-"), v...)); err != nil {
				return err
			}
			return nil
		})
	}()
	select {
	case <-read:
	case err := <-txnDone:
		t.Fatalf("transaction ended before its read: %v", err)
	}
	putDone := make(chan error, 1)
	go func() { putDone <- other.Put(ctx, x, []byte("new")) }()
	// The Put must wait for the transaction's lock: either it is seen
	// waiting in a lock table, or it finished while the lock was held.
	for waiting := false; !waiting; {
		select {
		case err := <-putDone:
			close(proceed)
			t.Fatalf("the Put of x finished (%v) while a transaction held the shared lock of its read", err)
		case <-ctx.Done():
			t.Fatal("the Put neither finished nor waited for the lock")
		case <-time.After(10 * time.Millisecond): // polling a counter; decides nothing
		}
		for i := range c.Addrs() {
			if n := c.Node(i); n != nil && n.LockWaiters() > 0 {
				waiting = true
			}
		}
	}
	close(proceed)
	if err := <-txnDone; err != nil {
		t.Fatalf("transaction: %v", err)
	}
	if err := <-putDone; err != nil {
		t.Fatalf("put: %v", err)
	}
	ct := last.Load().CommitTs()
	if string(seen) != "old" || ct == 0 {
		t.Fatalf("the transaction read %q, committed at %d", seen, ct)
	}
	kvs, err := db.ScanAt(ctx, x, []byte("x\x00"), ct, 0)
	if err != nil || len(kvs) != 1 || string(kvs[0].Value) != "old" {
		t.Fatalf("x at the transaction's commit timestamp %d: %v %v, want old (the Put lands above it)", ct, kvs, err)
	}
	if v, _, err := db.Get(ctx, x); err != nil || string(v) != "new" {
		t.Fatalf("x now: %q %v, want new", v, err)
	}
}

// TestTwoPCReadOnlyLostLock: a read-only 2pc-locking transaction whose
// shared lock was lost (its leaseholder stopped: the lock lived only in
// that node's memory) must not commit what it read. Here it reads x, the
// leaseholder of x stops, a Put of x and then a Put of y go through, and
// it reads y: x old with y new fits no serial order. Before, a read-only
// transaction committed without any check of its locks (the G-single of
// TestTwoPCListAppend); now its commit checks them as a Prepare's reads
// are checked, and it retries.
func TestTwoPCReadOnlyLostLock(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 2, CommitProtocol: twoPC})
	db, other := openDB(t, c), openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	x, y := []byte("x"), []byte("y")
	for _, k := range [][]byte{x, y} {
		if err := db.Put(ctx, k, []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
	_, lh, err := busiestRange(ctx, db, c, [][]byte{x})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	var seenX, seenY []byte
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		attempts++
		v, _, err := txn.Get(ctx, x)
		if err != nil {
			return err
		}
		seenX = v
		if attempts == 1 {
			c.StopNode(lh)
			for _, k := range [][]byte{x, y} {
				// A Put sent to the stopping node may come back ambiguous
				// (its connection closed under it); writing "new" again is
				// the same write, so it is repeated.
				var err error
				for try := 0; try < 3; try++ {
					if err = other.Put(ctx, k, []byte("new")); !errors.Is(err, client.ErrAmbiguous) {
						break
					}
				}
				if err != nil {
					return fmt.Errorf("put of %s after the stop: %w", k, err)
				}
			}
		}
		if seenY, _, err = txn.Get(ctx, y); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read-only transaction: %v", err)
	}
	if string(seenX) != string(seenY) {
		t.Fatalf("read-only transaction committed x=%q with y=%q (attempts: %d): its lock of x was lost and x written meanwhile", seenX, seenY, attempts)
	}
	if attempts < 2 {
		t.Fatalf("committed at the first attempt, whose lock of x was lost")
	}
	if err := c.RestartNode(lh); err != nil {
		t.Fatal(err)
	}
}
