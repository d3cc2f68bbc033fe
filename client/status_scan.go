package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// Range scans of the status table (issue 10 item 3): txnstatus plans the
// spans of a start-timestamp interval for the cluster's encoding and joins
// each transaction's records; the client reads the spans with PlainScan,
// range by range.

// TxnRecord is one transaction as DB.ScanTxns finds it in the status
// table and among the heartbeat records.
type TxnRecord struct {
	StartTs uint64
	TxnStatus
	// Heartbeat: the transaction has a heartbeat record (only transactions
	// that live longer than Options.HeartbeatTTL write one; the record of
	// a decided transaction is deleted after its cleanup).
	Heartbeat bool
}

// Pending reports whether the record holds no decision: the transaction
// is running, or STAGING (it may be implicitly committed: a reader would
// recover it), or fenced by a reader about to abort it.
func (r TxnRecord) Pending() bool { return !r.Decided }

// HeartbeatScanMax bounds the heartbeat records ScanTxns holds in memory
// while it scans the status table: heartbeat records exist only for
// transactions older than Options.HeartbeatTTL that are still running (or
// whose cleanup has not run yet), so more than this many in one interval
// means something is wrong; the scan then fails with ErrInvalidArgument
// rather than grow without bound.
const HeartbeatScanMax = 100_000

// ScanTxns calls fn for each transaction with a start timestamp in [from,
// to) that has a record: a decision, a STAGING or FENCE record, or a
// heartbeat record. Decided and staged transactions come first, in
// start_ts order for the v1 encoding and row by row for tickets (in
// start_ts order within a row); transactions known only by their
// heartbeat come last, in no particular order. A transaction that has
// written nothing to either table yet (a young running one) is not
// listed. The scan is not a snapshot: a transaction decided during the
// scan may or may not appear decided. fn's error ends the scan and is
// returned as is.
func (db *DB) ScanTxns(ctx context.Context, from, to uint64, fn func(TxnRecord) error) error {
	if from >= to {
		return invalidArgf("start-timestamp interval [%d, %d) is empty", from, to)
	}
	if err := db.ensureSchedule(ctx, false, to-1); err != nil {
		return err
	}
	sched := db.schedule.cur.Load().s
	heartbeats := map[uint64]bool{}
	hbEnd := append(append([]byte(nil), keys.HeartbeatPrefix[:len(keys.HeartbeatPrefix)-1]...), keys.HeartbeatPrefix[len(keys.HeartbeatPrefix)-1]+1)
	err := db.sender.plainScan(ctx, keys.HeartbeatPrefix, hbEnd, func(k, _ []byte) error {
		rest := k[len(keys.HeartbeatPrefix):]
		if len(rest) != 8 {
			return fmt.Errorf("%w: heartbeat key %x is not 8 bytes after its prefix", ErrInternal, k)
		}
		if ts := bits.Reverse64(binary.BigEndian.Uint64(rest)); ts >= from && ts < to {
			if len(heartbeats) >= HeartbeatScanMax {
				return invalidArgf("more than HeartbeatScanMax=%d heartbeat records in [%d, %d); narrow the interval", HeartbeatScanMax, from, to)
			}
			heartbeats[ts] = true
		}
		return nil
	})
	if err != nil {
		return publicError(err)
	}
	read := func(sp txnstatus.Span, f func(k, v []byte) error) error {
		start, end := keys.StatusKey(sp.Start), keys.StatusKey(sp.End)
		if sp.End == nil {
			end = keys.UserPrefix // the status table ends where user keys begin
		}
		return db.sender.plainScan(ctx, start, end, func(k, v []byte) error {
			if !bytes.HasPrefix(k, keys.StatusPrefix) {
				return fmt.Errorf("%w: plain scan of the status table returned %x", ErrInternal, k)
			}
			return f(k[len(keys.StatusPrefix):], v)
		})
	}
	var fnErr error
	err = txnstatus.ScanSchedule(sched, from, to, read, func(r txnstatus.Record) error {
		tr := TxnRecord{StartTs: r.StartTs, Heartbeat: heartbeats[r.StartTs]}
		delete(heartbeats, r.StartTs)
		tr.Decided, tr.Aborted, tr.CommitTs = r.Decided, r.Aborted, r.CommitTs
		if r.HasStaging {
			tr.Fenced, tr.Staged, tr.StagedTs = r.Staging.Fence, !r.Staging.Fence, r.Staging.CommitTs
		}
		if err := fn(tr); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if err != nil {
		if fnErr != nil && errors.Is(err, fnErr) {
			return err
		}
		if errors.Is(err, txnstatus.ErrCorruption) {
			return fmt.Errorf("%w: %w: %w", ErrInternal, errBadStatus, err)
		}
		return publicError(err)
	}
	for ts := range heartbeats {
		if err := fn(TxnRecord{StartTs: ts, Heartbeat: true}); err != nil {
			return err
		}
	}
	return nil
}

// plainScan reads the plain keys of [start, end) (system keys only, end
// not empty) range by range in key order, calling fn for each pair; fn's
// error ends the scan and is returned as is.
func (s *sender) plainScan(ctx context.Context, start, end []byte, fn func(k, v []byte) error) error {
	return s.plainScanLimit(ctx, start, end, 0, fn)
}

// plainScanLimit is plainScan asking each range for at most limit pairs
// (0: the server's page), for a caller that stops after the first few.
func (s *sender) plainScanLimit(ctx context.Context, start, end []byte, limit uint32, fn func(k, v []byte) error) error {
	cur := start
	for bytes.Compare(cur, end) < 0 {
		resps, desc, err := s.sendBatch(ctx, cur, false, false, func(d *rpcpb.RangeDescriptor) ([]*rpcpb.RequestUnion, error) {
			e := end
			if len(d.GetEndKey()) > 0 && bytes.Compare(d.GetEndKey(), end) < 0 {
				e = d.GetEndKey()
			}
			return []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_PlainScan{PlainScan: &rpcpb.PlainScanRequest{Start: cur, End: e, Limit: limit}}}}, nil
		})
		if err != nil {
			return err
		}
		resp := resps[0].GetPlainScan()
		if resp == nil {
			return fmt.Errorf("%w: plain scan answered with %T", ErrInternal, resps[0].GetValue())
		}
		for _, kv := range resp.GetKvs() {
			if err := fn(kv.GetKey(), kv.GetValue()); err != nil {
				return err
			}
		}
		switch {
		case len(resp.GetResumeKey()) > 0:
			if bytes.Compare(resp.GetResumeKey(), cur) <= 0 {
				return fmt.Errorf("%w: plain scan resume key %q does not advance past %q", ErrInternal, resp.GetResumeKey(), cur)
			}
			cur = resp.GetResumeKey()
		case len(desc.GetEndKey()) == 0 || bytes.Compare(desc.GetEndKey(), end) >= 0:
			return nil
		default:
			cur = desc.GetEndKey()
		}
	}
	return nil
}
