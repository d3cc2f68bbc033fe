package nemesis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/bank"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// Outcome is what a client learned of one operation.
type Outcome int

const (
	// OK: the operation took effect and its result is known.
	OK Outcome = iota
	// Failed: the operation definitely did not take effect.
	Failed
	// Ambiguous: the operation may or may not have taken effect.
	Ambiguous
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	default:
		return "ambiguous"
	}
}

// Workloads names the workloads Run accepts.
var Workloads = []string{"list-append", "bank", "register"}

// workload is one of Workloads: what the clients do, and how the history
// is checked.
type workload interface {
	setup(ctx context.Context, db *client.DB) error
	// op runs one operation of worker w and records it.
	op(ctx context.Context, db *client.DB, rng *rand.Rand, w int) Outcome
	// check runs after every fault is healed and the clients stopped; it
	// may read (final reads) and returns the violations found. An error
	// means no verdict.
	check(ctx context.Context, db *client.DB) (violations []string, err error)
}

func newWorkload(name string, opTimeout time.Duration) (workload, error) {
	switch name {
	case "list-append":
		return &listAppend{h: testcluster.NewHistory(), opTimeout: opTimeout}, nil
	case "bank":
		return &bankWorkload{opTimeout: opTimeout}, nil
	case "register":
		return &register{h: testcluster.NewHistory(), opTimeout: opTimeout}, nil
	}
	return nil, fmt.Errorf("invalid argument: workload %q (want one of %s)", name, strings.Join(Workloads, ", "))
}

func txnOutcome(err error) Outcome {
	committed, ambiguous := testcluster.TxnOutcome(err)
	switch {
	case committed:
		return OK
	case ambiguous:
		return Ambiguous
	default:
		return Failed
	}
}

// listAppend: transactions of 1-4 reads and appends over a sliding window
// of keys (the window moves on as appends accumulate, so lists stay
// short), checked by check.CheckListAppend (serializability, I3); and a
// final read of every key, once every fault is healed, that must hold
// every acknowledged append (no acknowledged write lost, I1).
type listAppend struct {
	h         *testcluster.History
	opTimeout time.Duration
	next      atomic.Int64 // the last appended element
	window    int
}

const (
	listWindow        = 8
	listKeyEvery      = 64 // appends per shift of the window by one key
	listPrefix        = "nemesis/la/"
	listFinalReadKeys = 50 // keys per final read transaction
)

func listKey(i int64) string { return fmt.Sprintf("%s%08d", listPrefix, i) }

func encodeList(l []int) []byte {
	b := make([]byte, 0, 4*len(l))
	for _, v := range l {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func decodeList(b []byte) ([]int, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("list of %d bytes", len(b))
	}
	l := make([]int, 0, len(b)/4)
	for i := 0; i < len(b); i += 4 {
		l = append(l, int(binary.BigEndian.Uint32(b[i:])))
	}
	return l, nil
}

func (la *listAppend) setup(ctx context.Context, db *client.DB) error { return nil }

func (la *listAppend) op(ctx context.Context, db *client.DB, rng *rand.Rand, w int) Outcome {
	base := la.next.Load() / listKeyEvery
	type plan struct {
		key    string
		append bool
	}
	var ops []plan
	for i, n := 0, 1+rng.IntN(4); i < n; i++ {
		ops = append(ops, plan{key: listKey(base + int64(rng.IntN(listWindow))), append: rng.IntN(2) == 0})
	}
	var cur *check.TxnRecord
	fn := func(ctx context.Context, txn *client.Txn) error {
		if cur != nil {
			la.h.AddTxn(*cur) // the previous attempt aborted
		}
		cur = &check.TxnRecord{ID: la.h.NextTxnID(), StartTs: txn.StartTs()}
		for _, p := range ops {
			old, _, err := txn.Get(ctx, []byte(p.key))
			if err != nil {
				return err
			}
			list, err := decodeList(old)
			if err != nil {
				return err
			}
			if !p.append {
				cur.Ops = append(cur.Ops, check.MicroOp{Kind: check.OpRead, Key: p.key, List: list})
				continue
			}
			v := int(la.next.Add(1))
			cur.Ops = append(cur.Ops, check.MicroOp{Kind: check.OpAppend, Key: p.key, Value: v})
			if err := txn.Put(ctx, []byte(p.key), encodeList(append(list, v))); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, la.opTimeout)
	err := db.Txn(ctx, fn)
	cancel()
	if cur == nil {
		return Failed
	}
	cur.Committed, cur.Ambiguous = testcluster.TxnOutcome(err)
	la.h.AddTxn(*cur)
	return txnOutcome(err)
}

func (la *listAppend) check(ctx context.Context, db *client.DB) ([]string, error) {
	// Final reads: every key ever used, in a few transactions, retried
	// until they commit (the faults are healed).
	last := la.next.Load()/listKeyEvery + listWindow
	final := map[string][]int{}
	for lo := int64(0); lo < last; lo += listFinalReadKeys {
		hi := min(lo+listFinalReadKeys, last)
		var rec check.TxnRecord
		err := retry(ctx, 2*time.Minute, func() error {
			rec = check.TxnRecord{ID: la.h.NextTxnID()}
			rctx, cancel := context.WithTimeout(ctx, la.opTimeout)
			defer cancel()
			return db.Txn(rctx, func(ctx context.Context, txn *client.Txn) error {
				rec.Ops = rec.Ops[:0]
				kvs, err := txn.Scan(ctx, []byte(listKey(lo)), []byte(listKey(hi)), 0)
				if err != nil {
					return err
				}
				got := map[string][]int{}
				for _, kv := range kvs {
					if got[string(kv.Key)], err = decodeList(kv.Value); err != nil {
						return err
					}
				}
				for i := lo; i < hi; i++ {
					rec.Ops = append(rec.Ops, check.MicroOp{Kind: check.OpRead, Key: listKey(i), List: got[listKey(i)]})
				}
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("final read of keys %d-%d: %w", lo, hi, err)
		}
		rec.Committed = true
		la.h.AddTxn(rec)
		for _, op := range rec.Ops {
			final[op.Key] = op.List
		}
	}
	var violations []string
	txns := la.h.Txns()
	if ok, anomalies := check.CheckListAppend(txns); !ok {
		violations = append(violations, anomalies...)
	}
	// Every acknowledged append is in the final read of its key.
	lost := 0
	for _, t := range txns {
		if !t.Committed {
			continue
		}
		for _, op := range t.Ops {
			if op.Kind != check.OpAppend || contains(final[op.Key], op.Value) {
				continue
			}
			lost++
			if lost <= 10 {
				violations = append(violations, fmt.Sprintf("lost write: T%d's acknowledged append %d to %q is not in the final read %v", t.ID, op.Value, op.Key, final[op.Key]))
			}
		}
	}
	if lost > 10 {
		violations = append(violations, fmt.Sprintf("lost write: %d more", lost-10))
	}
	return violations, nil
}

func contains(l []int, v int) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// retry runs f until it succeeds, ctx ends or max elapses.
func retry(ctx context.Context, max time.Duration, f func() error) error {
	deadline := time.Now().Add(max)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// attemptMax bounds one attempt of retryEach.
const attemptMax = 5 * time.Second

// retryEach is retry with each attempt given its own context, bounded by
// attemptMax: a call that hangs on a stopped or cut-off node is cut short
// and tried again, instead of holding the whole retry.
func retryEach(ctx context.Context, max time.Duration, f func(ctx context.Context) error) error {
	return retry(ctx, max, func() error {
		actx, cancel := context.WithTimeout(ctx, attemptMax)
		defer cancel()
		return f(actx)
	})
}

// bankWorkload: transfers between 50 accounts (internal/bench/bank); the
// total must hold (check.CheckBankTotal) at the end.
type bankWorkload struct {
	b         *bank.Bank
	opTimeout time.Duration
}

func (bw *bankWorkload) setup(ctx context.Context, db *client.DB) error {
	bw.b = bank.New(db, bank.Options{Accounts: 50, Prefix: "nemesis/bank/"})
	return retry(ctx, time.Minute, func() error {
		sctx, cancel := context.WithTimeout(ctx, bw.opTimeout)
		defer cancel()
		return bw.b.Setup(sctx)
	})
}

func (bw *bankWorkload) op(ctx context.Context, db *client.DB, rng *rand.Rand, w int) Outcome {
	ctx, cancel := context.WithTimeout(ctx, bw.opTimeout)
	defer cancel()
	return txnOutcome(bw.b.Transfer(ctx, rng))
}

func (bw *bankWorkload) check(ctx context.Context, db *client.DB) ([]string, error) {
	var bal map[string]int64
	err := retry(ctx, 2*time.Minute, func() error {
		rctx, cancel := context.WithTimeout(ctx, bw.opTimeout)
		defer cancel()
		var err error
		bal, err = bw.b.Balances(rctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("final balances: %w", err)
	}
	if err := check.CheckBankTotal(bal, bw.b.Want()); err != nil {
		return []string{err.Error()}, nil
	}
	return nil, nil
}

// register: single-key gets and puts of unique values over a sliding
// window of keys, checked by check.CheckLinearizable (porcupine).
type register struct {
	h         *testcluster.History
	opTimeout time.Duration
	writes    atomic.Int64
	mu        sync.Mutex
}

const (
	registerWindow   = 4
	registerKeyEvery = 200 // writes per shift of the window
	registerPrefix   = "nemesis/reg/"
	// registerCheckTimeout bounds porcupine's search.
	registerCheckTimeout = 5 * time.Minute
)

func (r *register) setup(ctx context.Context, db *client.DB) error { return nil }

func (r *register) op(ctx context.Context, db *client.DB, rng *rand.Rand, w int) Outcome {
	key := fmt.Sprintf("%s%08d", registerPrefix, r.writes.Load()/registerKeyEvery+int64(rng.IntN(registerWindow)))
	ctx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	op := check.KVOp{ClientID: w, Key: key}
	if rng.IntN(2) == 0 {
		op.Kind = check.OpGet
		op.Call = r.h.Now()
		v, found, err := db.Get(ctx, []byte(key))
		op.Return = r.h.Now()
		if err != nil {
			op.Outcome = check.Failed // a read that failed changed nothing
			r.h.AddKV(op)
			return Failed
		}
		op.Value, op.Found, op.Outcome = string(v), found, check.OK
		r.h.AddKV(op)
		return OK
	}
	op.Kind = check.OpPut
	op.Value = fmt.Sprintf("w%d-%d", w, r.writes.Add(1))
	op.Call = r.h.Now()
	err := db.Put(ctx, []byte(key), []byte(op.Value))
	op.Return = r.h.Now()
	op.Outcome = testcluster.KVWriteOutcome(err)
	r.h.AddKV(op)
	switch op.Outcome {
	case check.OK:
		return OK
	case check.Failed:
		return Failed
	}
	return Ambiguous
}

func (r *register) check(ctx context.Context, db *client.DB) ([]string, error) {
	ok, info, err := check.CheckLinearizable(r.h.KV(), registerCheckTimeout)
	if err != nil {
		return nil, err
	}
	if !ok {
		return []string{"not linearizable: " + info}, nil
	}
	return nil, nil
}

// sortedKinds returns m's keys in order.
func sortedKinds[V any](m map[Kind]V) []Kind {
	out := make([]Kind, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
