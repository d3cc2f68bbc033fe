package client

import (
	"context"
	"sync"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// The functions of this file are for the nodes of a cluster that runs a
// hierarchy protocol (internal/kvserver, hierarchy.go): a node that decides
// transactions records the decisions in the status table, reads them back
// and resolves its parts' intents through a DB of its own, so that the
// status table and the intents are written exactly as the default
// protocol's clients write them (same coalescer, same batched resolution).

// TxnDecision is a transaction's outcome: committed at CommitTs, or
// aborted (CommitTs 0).
type TxnDecision struct {
	StartTs   uint64
	Committed bool
	CommitTs  uint64
}

// DecideTxns records each decision with put-unless-exists of its status
// record (coalesced per status range) and returns the decision that holds
// afterwards for each, in the same order: the one given, or the one
// recorded before. A decision whose write failed is left out of the
// result's Recorded (its error is err, the first error met).
//
// That put-unless-exists is the transaction's commit point (I1): a
// hierarchy transaction commits exactly when its decider's write of the
// committed value succeeds.
func (db *DB) DecideTxns(ctx context.Context, ds []TxnDecision) (held []TxnDecision, recorded []bool, err error) {
	held = make([]TxnDecision, len(ds))
	recorded = make([]bool, len(ds))
	// The transactions began at other clients: this one's status encoding
	// schedule must reach their start timestamps before it picks their
	// status keys, or a decision made after an encoding change would be
	// written under the old era's key while the transaction's own client
	// and its readers look under the new one (I1). Reading is enough: each
	// transaction's Begin made the schedule valid through its start_ts,
	// and a decider that extended it would push encoding changes one of
	// its own extensions ahead, whatever the clients' extension is.
	tss := make([]uint64, len(ds))
	for i, d := range ds {
		tss[i] = d.StartTs
	}
	if err := db.ensureSchedule(ctx, false, tss...); err != nil {
		return held, recorded, publicError(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := txnstatus.Aborted
			if d.Committed {
				c = d.CommitTs
			}
			h, e := db.decide(ctx, d.StartTs, c)
			mu.Lock()
			defer mu.Unlock()
			if e != nil {
				if err == nil {
					err = publicError(e)
				}
				return
			}
			held[i] = TxnDecision{StartTs: d.StartTs, Committed: !h.aborted(), CommitTs: h.commitTs}
			recorded[i] = true
		}()
	}
	wg.Wait()
	return held, recorded, err
}

// decide writes commitTs (txnstatus.Aborted: aborted) for startTs unless a
// decision exists, and returns the decision that holds afterwards.
func (db *DB) decide(ctx context.Context, startTs, commitTs uint64) (decision, error) {
	if commitTs == txnstatus.Aborted {
		return db.abortTxn(ctx, startTs)
	}
	v, err := db.statusValue(startTs, commitTs)
	if err != nil {
		return decision{}, err
	}
	ok, existing, err := db.putUnlessExists(ctx, db.statusKey(startTs), v)
	if err != nil {
		return decision{}, err
	}
	if ok {
		db.statuses.put(startTs, commitTs)
		return decision{commitTs: commitTs}, nil
	}
	c, _, err := db.decodeStatus(startTs, existing)
	if err != nil {
		return decision{}, err
	}
	db.statuses.put(startTs, c)
	return decision{commitTs: c}, nil
}

// LookupTxns reads the status records of startTss (batched, cache first)
// and returns the decided ones: start_ts -> commit_ts, 0 for aborted.
// Pending transactions are absent.
func (db *DB) LookupTxns(ctx context.Context, startTss []uint64) (map[uint64]uint64, error) {
	m, err := db.lookupStatuses(ctx, startTss)
	return m, publicError(err)
}

// TxnIntents names a decided transaction's intents: those of StartTs at
// the logical keys Keys, to commit at CommitTs, or to remove (CommitTs 0).
type TxnIntents struct {
	StartTs, CommitTs uint64
	Keys              [][]byte
}

// ResolveTxnIntents resolves the intents of several decided transactions
// together: one request per range for all of them (in batches of at most
// Options.ResolveBatchKeysMax keys), so one Raft proposal per range
// instead of one per transaction and range.
func (db *DB) ResolveTxnIntents(ctx context.Context, ts []TxnIntents) error {
	var reqs []*rpcpb.RequestUnion
	for _, t := range ts {
		reqs = t.requests(reqs)
	}
	return publicError(db.resolveRequests(ctx, reqs))
}
