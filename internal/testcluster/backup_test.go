package testcluster_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/backup"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// TestBackupDuringBankRestores backs up a three-node cluster while bank
// transfers run (small pages, so that the backup's reads interleave with
// many commits), restores the backup into a new cluster and checks that
// the restored keyspace is exactly the source's as of the backup
// timestamp (a ScanAt of the source at it), that the restored balances
// keep the bank's total and replay from the restored receipts (the
// snapshot holds each transfer whole or not at all), and that restore
// refuses the now non-empty cluster.
func TestBackupDuringBankRestores(t *testing.T) {
	src := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4})
	const accounts, transfers, workers = 60, 240, 4
	b := newBankWorkload(accounts)
	var dbs []*client.DB
	for range workers {
		dbs = append(dbs, openWorkloadDB(t, src))
	}
	b.setup(t, dbs[0])
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()

	seed := testSeed(t)
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		close(started)
		b.run(t, dbs, seed, transfers, nil)
	}()
	<-started
	// Back up once a few transfers have committed, while the rest run.
	for b.committed.Load() < 20 {
		if ctx.Err() != nil {
			t.Fatal("no transfer committed")
		}
		time.Sleep(10 * time.Millisecond) // polling a counter; decides nothing
	}
	reader := openDB(t, src)
	// Transfers acknowledged before the timestamp is taken committed below
	// it (the oracle's timestamps increase in real time), so the backup
	// must hold their receipts.
	committedBefore := b.committed.Load()
	at, err := reader.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	m, err := backup.Backup(ctx, reader, dir, at, backup.Options{PageKeys: 8, ClusterID: "src"})
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	committedAfter := b.committed.Load()
	wg.Wait()
	t.Logf("backup at %d: %d keys in %d files, while transfers %d..%d of %d committed", at, m.Keys, len(m.Files), committedBefore, committedAfter, transfers)

	want, err := reader.ScanAt(ctx, nil, nil, at, 0)
	if err != nil {
		t.Fatal(err)
	}

	dst := startCluster(t, testcluster.Options{Nodes: 1, InitialRanges: 2})
	target := openDB(t, dst)
	var last backup.Progress
	if _, err := backup.Restore(ctx, target, dir, backup.Options{BatchKeys: 25, Progress: func(p backup.Progress) { last = p }}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !last.Done || last.Keys != m.Keys {
		t.Errorf("restore's last progress %+v, want done with %d keys", last, m.Keys)
	}
	got, err := target.Scan(ctx, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("restored %d keys; the source held %d at %d", len(got), len(want), at)
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, want[i].Key) || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Fatalf("restored key %d: %q=%x; the source held %q=%x at %d", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value, at)
		}
	}

	// The bank as restored: the total holds, and the balances replay
	// from the receipts the snapshot holds.
	balances := map[string]int64{}
	replay := make([]int64, accounts)
	for i := range replay {
		replay[i] = bankInitialBalance
	}
	receipts := 0
	for _, kv := range got {
		switch {
		case strings.HasPrefix(string(kv.Key), receiptPrefix):
			receipts++
			r := kv.Value
			from, to, amount := binary.BigEndian.Uint32(r), binary.BigEndian.Uint32(r[4:]), int64(binary.BigEndian.Uint64(r[8:]))
			replay[from] -= amount
			replay[to] += amount
		case strings.Contains(string(kv.Key), "acct/"):
			v, err := decodeBalance(kv.Value)
			if err != nil {
				t.Fatalf("account %q: %v", kv.Key, err)
			}
			balances[string(kv.Key)] = v
		}
	}
	if len(balances) != accounts {
		t.Fatalf("restored %d accounts, want %d", len(balances), accounts)
	}
	if err := check.CheckBankTotal(balances, accounts*bankInitialBalance); err != nil {
		t.Errorf("restored bank: %v", err)
	}
	for i, k := range b.keys {
		if balances[string(k)] != replay[i] {
			t.Errorf("restored account %q holds %d; its restored receipts say %d", k, balances[string(k)], replay[i])
		}
	}
	if receipts < int(committedBefore) {
		t.Errorf("the backup holds %d receipts, but %d transfers had committed before it began", receipts, committedBefore)
	}
	t.Logf("restored %d keys: %d accounts (total kept), %d receipts", len(got), accounts, receipts)

	if _, err := backup.Restore(ctx, target, dir, backup.Options{}); !errors.Is(err, backup.ErrNotEmpty) {
		t.Errorf("restore into the restored cluster: %v, want ErrNotEmpty", err)
	}
}
