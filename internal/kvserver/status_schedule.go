package kvserver

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// The status encoding schedule as a node knows it, for the metrics that
// say which encoding a status-table record is in
// (canopy_status_table_requests_total's encoding label) and that decode a
// record's value (canopy_txn_decisions_total). A cluster may have moved
// since its bootstrap (client/status_schedule.go), so the encoding of a
// record is the one its start timestamp's era holds.
//
// The node keeps the newest version it read. The era of a key is final
// once the key's start timestamp, read by the schedule (Schedule.Owner),
// is at or below the version's valid-through: no later version changes
// the eras up to it. A key whose timestamp is above it makes the node read
// the newest version again (from range 1's leaseholder, on the request's
// path: the writer of that record made the schedule valid through its
// start before writing it, so the newest version covers it) at most once
// every StatusScheduleRefreshIntervalMin; until it covers the key, the
// key is read with the schedule as known (its last era). Clusters
// bootstrapped before the schedule existed keep their one encoding and
// never read it.

// StatusScheduleRefreshIntervalMin bounds how often a node reads the
// status encoding schedule for its metrics.
const StatusScheduleRefreshIntervalMin = 100 * time.Millisecond

type nodeSchedule struct {
	cur atomic.Pointer[txnstatus.Schedule]
	mu  struct {
		sync.Mutex
		// readAt is when the schedule was last read (guarded by mu, which
		// also serializes the reads).
		readAt time.Time
	}
}

// knownSchedule returns the schedule this node holds, nil before it knows
// the cluster's settings: at first the bootstrap encoding, valid through 0
// (or for ever, on a cluster without a schedule).
func (n *Node) knownSchedule() *txnstatus.Schedule {
	if s := n.schedule.cur.Load(); s != nil {
		return s
	}
	settings := n.settings()
	if settings == nil {
		return nil
	}
	name := settings.GetStatusEncoding()
	if name == "" {
		name = "tickets" // bootstrapped before encodings were recorded (client.statusEncodingFor)
	}
	enc, err := txnstatus.Named(name, settings.GetTicketsPartitioningQuantum(), settings.GetTicketsRowsPerQuantum())
	if err != nil {
		return nil
	}
	validThrough := uint64(0)
	if !settings.GetStatusEncodingSchedule() {
		validThrough = math.MaxUint64
	}
	s := txnstatus.NewSchedule(enc, validThrough)
	n.schedule.cur.CompareAndSwap(nil, &s)
	return n.schedule.cur.Load()
}

// statusRecordEra returns the encoding in effect for the status-table key
// key (without keys.StatusPrefix), the start timestamp it encodes and
// whether it is a staging key; ok is false for a key no era's encoding
// reads (or before the node knows the cluster's settings).
func (n *Node) statusRecordEra(key []byte) (enc txnstatus.Encoding, ts uint64, staging, ok bool) {
	s := n.knownSchedule()
	if s == nil {
		return nil, 0, false, false
	}
	era, ts, staging, err := s.Owner(key)
	if err != nil || ts > s.ValidThrough {
		if fresh := n.refreshSchedule(s); fresh != nil {
			s = fresh
			era, ts, staging, err = s.Owner(key)
		}
	}
	if err != nil {
		return nil, 0, false, false
	}
	return s.Eras[era].Encoding, ts, staging, true
}

// refreshSchedule reads the newest version of the schedule unless another
// caller did since seen was current or one was read less than
// StatusScheduleRefreshIntervalMin ago. It returns the schedule now held,
// or nil if it read nothing new.
func (n *Node) refreshSchedule(seen *txnstatus.Schedule) *txnstatus.Schedule {
	sc := &n.schedule
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if cur := sc.cur.Load(); cur != seen {
		return cur
	}
	if time.Since(sc.mu.readAt) < StatusScheduleRefreshIntervalMin {
		return nil
	}
	sc.mu.readAt = time.Now()
	ctx, cancel := context.WithTimeout(n.stopCtx, 2*n.electionTimeout())
	defer cancel()
	s, err := n.readStatusSchedule(ctx)
	if err != nil {
		n.log.Debug("reading the status encoding schedule for the metrics failed", "err", err)
		return nil
	}
	if s == nil || s.ValidThrough < seen.ValidThrough {
		return nil // no version yet, or one older than held
	}
	sc.cur.Store(s)
	return s
}

// readStatusSchedule reads the newest version of the schedule at range 1's
// leaseholder (here or on another node, following hints); nil if none is
// stored yet.
func (n *Node) readStatusSchedule(ctx context.Context) (*txnstatus.Schedule, error) {
	req := &rpcpb.BatchRequest{RangeId: OracleRangeID, Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_PlainScan{
		PlainScan: &rpcpb.PlainScanRequest{Start: keys.StatusSchedulePrefix, End: keys.StatusScheduleEnd, Limit: 1}}}}}
	target := n.r1Leader()
	var last error
	for range MetaHintsMax {
		var resp *rpcpb.BatchResponse
		if target == 0 || target == n.NodeID() {
			resp = n.batch(ctx, req)
		} else {
			cl, err := n.kvClient(target)
			if err != nil {
				return nil, err
			}
			if resp, err = cl.Batch(ctx, req); err != nil {
				return nil, err
			}
		}
		if e := resp.Error; e != nil {
			last = errorf(e)
			if e.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER || e.LeaseholderHint == 0 || e.LeaseholderHint == target {
				return nil, last
			}
			target = e.LeaseholderHint
			continue
		}
		if len(resp.Responses) != 1 {
			return nil, errorf(pbErr(rpcpb.ErrorCode_INTERNAL, "a plain scan answered with %d responses", len(resp.Responses)))
		}
		kvs := resp.Responses[0].GetPlainScan().GetKvs()
		if len(kvs) == 0 {
			return nil, nil
		}
		s, err := txnstatus.DecodeSchedule(kvs[0].GetValue())
		if err != nil {
			return nil, err
		}
		return &s, nil
	}
	return nil, last
}
