package txnbench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/bench/kvbench"
)

// mapStore is an in-memory Store whose transfers are atomic; every
// conflictEvery-th transfer loses one attempt, as a compare-and-swap
// beaten by a concurrent write would.
type mapStore struct {
	mu            sync.Mutex
	m             map[string][]byte
	transfers     int
	conflictEvery int
	// torn makes transfers write only the debit: a broken store that
	// Check must catch.
	torn bool
}

func (s *mapStore) Put(_ context.Context, k, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[string(k)] = append([]byte(nil), v...)
	return nil
}

func (s *mapStore) Get(_ context.Context, k []byte) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(k)]
	return v, ok, nil
}

func (s *mapStore) Transfer(_ context.Context, from, to []byte, amount int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.transfers++
	attempts := 1
	if s.conflictEvery > 0 && s.transfers%s.conflictEvery == 0 {
		attempts = 2
	}
	nf, nt, err := Moved(s.m[string(from)], s.m[string(to)], amount)
	if err != nil {
		return attempts, err
	}
	s.m[string(from)] = nf
	if !s.torn {
		s.m[string(to)] = nt
	}
	return attempts, nil
}

func TestMovedKeepsSizeAndTotal(t *testing.T) {
	a := WithBalance(make([]byte, 256), 10)
	b := WithBalance(make([]byte, 256), -3)
	a[200], b[100] = 7, 9
	na, nb, err := Moved(a, b, 4)
	if err != nil {
		t.Fatal(err)
	}
	ba, _ := Balance(na)
	bb, _ := Balance(nb)
	if ba != 6 || bb != 1 || len(na) != 256 || len(nb) != 256 || na[200] != 7 || nb[100] != 9 {
		t.Fatalf("got balances %d, %d, sizes %d, %d", ba, bb, len(na), len(nb))
	}
	if ob, _ := Balance(a); ob != 10 {
		t.Fatalf("Moved changed its input: balance %d", ob)
	}
	if _, _, err := Moved(a, []byte{1, 2}, 1); err == nil {
		t.Fatal("a 2-byte value accepted")
	}
}

func TestRunCountsRetriesAndPreservesTotal(t *testing.T) {
	s := &mapStore{m: map[string][]byte{}, conflictEvery: 4}
	o := kvbench.Options{Keys: 50, ValueBytes: 64, Duration: time.Hour, OpsMax: 400}
	if err := Load(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	// Duration is an hour: the run ends only because of OpsMax.
	r, err := Run(context.Background(), s, o, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops < o.OpsMax || r.Writes != r.Ops || r.Errors != 0 || r.Workload != WorkloadName {
		t.Fatalf("result %+v", r)
	}
	// Every 4th transfer took two attempts; the run counts the transfers
	// started after the (zero) warm-up, at most one per worker uncounted
	// at the end.
	if r.Retries < r.Ops/4-4 || r.Retries > r.Ops/4+4 {
		t.Errorf("%d retries for %d transfers, want about a quarter", r.Retries, r.Ops)
	}
	total, err := Check(context.Background(), s, o)
	if err != nil || total != 50*InitialBalance {
		t.Fatalf("Check = %d, %v", total, err)
	}
}

func TestCheckCatchesTornTransfer(t *testing.T) {
	s := &mapStore{m: map[string][]byte{}, torn: true}
	o := kvbench.Options{Keys: 10, ValueBytes: 8, Duration: time.Hour, OpsMax: 5}
	if err := Load(context.Background(), s, o); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), s, o, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(context.Background(), s, o); !errors.Is(err, ErrTotalChanged) {
		t.Fatalf("Check after torn transfers: %v", err)
	}
	delete(s.m, string(Key(3)))
	if _, err := Check(context.Background(), s, o); err == nil || errors.Is(err, ErrTotalChanged) {
		t.Fatalf("Check with a missing key: %v", err)
	}
}

func TestValidate(t *testing.T) {
	s := &mapStore{m: map[string][]byte{}}
	for _, o := range []kvbench.Options{{ValueBytes: 7}, {Keys: 1}} {
		if err := Load(context.Background(), s, o); err == nil {
			t.Errorf("Load accepted %+v", o)
		}
		if _, err := Run(context.Background(), s, o, 1); err == nil {
			t.Errorf("Run accepted %+v", o)
		}
	}
}
