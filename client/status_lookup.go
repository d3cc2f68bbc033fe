package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// Batched status lookups (issue 10 item 1; the record's "Cell Loader V2").
//
// lookupStatuses serves every read of other transactions' status records:
// the intents a scan, a multi-get or a write meets (resolveForeign), and a
// transaction's own ambiguous-commit lookup (opGetStatus). Decided
// transactions come from the cache; the others' status keys are grouped by
// their status range and, within a range, by the selective-batching rules
// (txnstatus.PartitionForLoad with CC = Options.StatusLookupCrossColumnMax
// and SQ = Options.StatusLookupSingleQueryMax), and the requests are sent
// in parallel, at most StatusLookupRequestsInFlightMax at a time. A
// decision read is cached (it is final, I1); a transaction with no record
// is absent from the result and never cached, so a later lookup reads it
// again and sees its decision once it has one.
//
// Intent resolution of one's own transactions needs no lookup (the
// coordinator knows its decision); a single pending transaction is waited
// for by awaitDecision, which reads its status and heartbeat records in one
// request per round and caches the decision it finds.

// StatusLookupRequestsInFlightMax bounds the lookup requests one
// lookupStatuses call has in flight.
const StatusLookupRequestsInFlightMax = 16

// lookupStatuses returns the decisions (commit_ts, or txnstatus.Aborted)
// of the transactions started at startTss that have one.
func (db *DB) lookupStatuses(ctx context.Context, startTss []uint64) (map[uint64]uint64, error) {
	if err := db.ensureSchedule(ctx, false, startTss...); err != nil {
		return nil, err
	}
	decided := make(map[uint64]uint64, len(startTss))
	byRange := map[uint64][]txnstatus.Cell{}
	var rangeOrder []uint64
	seen := map[uint64]bool{}
	// startOf maps a cell back to its start timestamp: with several
	// encoding eras, no one encoding decodes every cell.
	startOf := map[string]uint64{}
	for _, s := range startTss {
		if seen[s] {
			continue
		}
		seen[s] = true
		if c, ok := db.statuses.get(s); ok {
			decided[s] = c
			db.stats.statusCacheHits.add(1)
			continue
		}
		e, err := db.sender.lookup(ctx, db.statusKey(s))
		if err != nil {
			return nil, err
		}
		rid := e.desc.GetRangeId()
		if _, ok := byRange[rid]; !ok {
			rangeOrder = append(rangeOrder, rid)
		}
		c := db.statusCell(s)
		byRange[rid] = append(byRange[rid], c)
		startOf[string(c.Row)+string(c.Column)] = s
	}
	var batches [][]txnstatus.Cell
	for _, rid := range rangeOrder {
		batches = append(batches, txnstatus.PartitionForLoad(byRange[rid], db.opts.StatusLookupCrossColumnMax, db.opts.StatusLookupSingleQueryMax)...)
	}
	if len(batches) == 0 {
		return decided, nil
	}
	db.stats.statusLookups.add(int64(len(batches)))

	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, StatusLookupRequestsInFlightMax)
	for _, b := range batches {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			got, err := db.readStatusCells(ctx, b, startOf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			for s, c := range got {
				decided[s] = c
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return decided, nil
}

// statusCell is the cell of startTs's status key (without the status
// prefix): the tickets row and column, or for v1 the whole key as the row
// of an empty column, so that v1 lookups batch by CC alone.
func (db *DB) statusCell(startTs uint64) txnstatus.Cell {
	enc := db.encOf(startTs)
	k := enc.Key(startTs)
	if txnstatus.IsTickets(enc) {
		if c, err := txnstatus.SplitTicketsKey(k); err == nil {
			return c
		}
	}
	return txnstatus.Cell{Row: k}
}

// readStatusCells reads one batch of status cells (one request per range
// it falls in, normally one) and returns the decisions found, caching
// them.
func (db *DB) readStatusCells(ctx context.Context, cells []txnstatus.Cell, startOf map[string]uint64) (map[uint64]uint64, error) {
	starts := make([]uint64, len(cells))
	reqs := make([]*rpcpb.RequestUnion, len(cells))
	for i, c := range cells {
		s, ok := startOf[string(c.Row)+string(c.Column)]
		if !ok {
			panic(fmt.Sprintf("client: status cell %x%x has no start timestamp", c.Row, c.Column))
		}
		starts[i] = s
		reqs[i] = &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: db.statusKey(s)}}}
	}
	resps, err := db.sender.sendPoints(ctx, false, reqs)
	if err != nil {
		return nil, err
	}
	out := map[uint64]uint64{}
	for i, s := range starts {
		g := resps[i].GetPlainGet()
		if g == nil {
			return nil, fmt.Errorf("%w: plain get answered with %T", ErrInternal, resps[i].GetValue())
		}
		if !g.GetFound() {
			continue // pending: never cached
		}
		c, _, err := db.decodeStatus(s, g.GetValue())
		if err != nil {
			return nil, err
		}
		db.statuses.put(s, c)
		out[s] = c
	}
	return out, nil
}
