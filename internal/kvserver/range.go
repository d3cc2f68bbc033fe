package kvserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// rangeReplica is a replica with its state machine and latches.
type rangeReplica struct {
	r *replica.Replica
	// peer is the replica's Raft peer ID (replica.PeerID).
	peer    uint64
	sm      *rangeSM
	latches *concurrency.LatchManager
	locks   rangeLocks
	// asyncProposals counts pipelined writes in flight.
	asyncProposals asyncLimit
	// load tracks the requests served here as leaseholder, for load-based
	// splitting (loadsplit.go).
	load loadSplitter
	// damaged: a read found this replica's data damaged; it serves
	// nothing until it is replaced (damage.go).
	damaged atomic.Bool
}

// rangeHost is what a range's state machine needs from its node: the
// engine, and a way to start the right hand side of a split it applied.
// *Node is the host in a server; the stepped harness (stepped_test.go) is
// another, which creates replicas it drives by hand.
type rangeHost interface {
	Engine() *storage.Engine
	// startRange starts the replica of a range created here by a split,
	// replacing an uninitialized replica of it.
	startRange(d *rpcpb.RangeDescriptor)
	// snapshots holds the engine snapshots of snapshots made here and not
	// yet streamed (snapshot.go).
	snapshots() *snapshotRegistry
}

// rangeSM is the state machine of one range on this node. It implements
// replica.StateMachine.
type rangeSM struct {
	n       rangeHost
	rangeID uint64
	mu      struct {
		sync.RWMutex
		desc *rpcpb.RangeDescriptor // nil while uninitialized
	}
	// gc caches the range's GC threshold (kept in the engine, read by every
	// read): loaded from the engine on first use, then raised when a GC
	// command or a snapshot applies, before its batch commits, so that a
	// read is refused no later than the versions it needs are removed.
	gc struct {
		sync.Mutex
		loaded    bool
		threshold uint64
	}
	// dataChanges counts the commands and snapshots applied here that may
	// have changed the range's data, GC commands excepted (they only
	// remove garbage). Version GC skips a range whose count has not moved
	// since it was last found clean (gc.go, gcSkip).
	dataChanges atomic.Uint64
	// feed: change feeds of the range at this replica (feed.go).
	feed rangeFeed
	// keys: what the leaseholder knows of keys a Put may write without
	// reading them (keystates.go).
	keys keyStates
}

// gcThreshold returns the range's GC threshold (see rangeSM.gc).
func (s *rangeSM) gcThreshold() (uint64, error) {
	s.gc.Lock()
	defer s.gc.Unlock()
	if !s.gc.loaded {
		t, err := loadGCThreshold(s.n.Engine(), s.rangeID)
		if err != nil {
			return 0, err
		}
		s.gc.threshold, s.gc.loaded = t, true
	}
	return s.gc.threshold, nil
}

// raiseGCThreshold records a threshold about to be written.
func (s *rangeSM) raiseGCThreshold(t uint64) {
	s.gc.Lock()
	s.gc.threshold, s.gc.loaded = max(s.gc.threshold, t), true
	s.gc.Unlock()
}

// Desc returns the range's current descriptor (nil if uninitialized). The
// returned value must not be modified.
func (s *rangeSM) Desc() *rpcpb.RangeDescriptor {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.desc
}

func (s *rangeSM) setDesc(d *rpcpb.RangeDescriptor) {
	s.mu.Lock()
	s.mu.desc = d
	s.mu.Unlock()
}

func writeDesc(w storage.Writer, d *rpcpb.RangeDescriptor) error {
	b, err := proto.Marshal(d)
	if err != nil {
		return err
	}
	return w.Set(storage.RangeLocalKey(d.RangeId, storage.SuffixDescriptor), b)
}

func loadDesc(r storage.Reader, rangeID uint64) (*rpcpb.RangeDescriptor, error) {
	v, err := r.Get(storage.RangeLocalKey(rangeID, storage.SuffixDescriptor))
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d := &rpcpb.RangeDescriptor{}
	if err := proto.Unmarshal(v, d); err != nil {
		return nil, fmt.Errorf("kvserver: descriptor of r%d: %v: %w", rangeID, err, storage.ErrCorruption)
	}
	return d, nil
}

// voters returns the nodes of d's voting replicas (a joint
// configuration's incoming and outgoing voters included).
func voters(d *rpcpb.RangeDescriptor) []uint64 {
	out := make([]uint64, 0, len(d.Replicas))
	for _, r := range d.Replicas {
		if r.Type != rpcpb.ReplicaType_LEARNER {
			out = append(out, r.NodeId)
		}
	}
	return out
}

// peerID is the Raft peer ID of the replica rd (replica.PeerID).
func peerID(rd *rpcpb.ReplicaDescriptor) uint64 { return replica.PeerID(rd.ReplicaId, rd.NodeId) }

// replicaOn returns d's replica on node nodeID, nil if none.
func replicaOn(d *rpcpb.RangeDescriptor, nodeID uint64) *rpcpb.ReplicaDescriptor {
	if d == nil {
		return nil
	}
	for _, r := range d.Replicas {
		if r.NodeId == nodeID {
			return r
		}
	}
	return nil
}

// confStateOf is the Raft configuration d describes: VOTER and
// VOTER_INCOMING replicas vote in the (incoming) configuration; while one
// is joint (any VOTER_INCOMING or VOTER_OUTGOING), VOTER and
// VOTER_OUTGOING ones form the outgoing one; LEARNERs are learners.
func confStateOf(d *rpcpb.RangeDescriptor) raftpb.ConfState {
	var cs raftpb.ConfState
	joint := false
	for _, r := range d.Replicas {
		if t := r.Type; t == rpcpb.ReplicaType_VOTER_INCOMING || t == rpcpb.ReplicaType_VOTER_OUTGOING {
			joint = true
		}
	}
	for _, r := range d.Replicas {
		id := peerID(r)
		switch r.Type {
		case rpcpb.ReplicaType_VOTER:
			cs.Voters = append(cs.Voters, id)
			if joint {
				cs.VotersOutgoing = append(cs.VotersOutgoing, id)
			}
		case rpcpb.ReplicaType_VOTER_INCOMING:
			cs.Voters = append(cs.Voters, id)
		case rpcpb.ReplicaType_VOTER_OUTGOING:
			cs.VotersOutgoing = append(cs.VotersOutgoing, id)
		case rpcpb.ReplicaType_LEARNER:
			cs.Learners = append(cs.Learners, id)
		}
	}
	return cs
}

// changing reports whether d is in the middle of a replica change (a
// learner, or a joint configuration): splits wait for it to end.
func changing(d *rpcpb.RangeDescriptor) bool {
	for _, r := range d.Replicas {
		if r.Type != rpcpb.ReplicaType_VOTER {
			return true
		}
	}
	return false
}

// appliedResult is the result of an evaluated command that applied: the
// proposer answers with the response its evaluation produced.
type appliedResult struct{}

// Apply implements replica.StateMachine.
func (s *rangeSM) Apply(b *storage.Batch, index, term uint64, data []byte) (any, func()) {
	var c rpcpb.RaftCommand
	if err := proto.Unmarshal(data, &c); err != nil {
		panic(fmt.Sprintf("r%d: undecodable Raft command at index %d: %v", s.rangeID, index, err))
	}
	if c.ProposerTerm == 0 {
		// A command of another form (split, GC, meta record, oracle bound,
		// ...) may change keys without their latches: the key cache
		// forgets (keystates.go), now and once its batch has committed
		// (Flushed).
		s.keys.forget()
	}
	desc := s.Desc()
	if c.Gc == nil {
		s.dataChanges.Add(1)
	}
	fail := func(e *rpcpb.Error) (any, func()) {
		return &rpcpb.BatchResponse{Error: e}, nil
	}
	switch {
	case c.ProposerTerm != 0:
		// Evaluated at the leaseholder: apply its bytes, if the evaluation
		// still holds. Both checks read only the entry and the replica's
		// applied state, so every replica decides alike (I5).
		if c.ProposerTerm != term {
			return fail(pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "r%d: command evaluated in term %d was appended in term %d", s.rangeID, c.ProposerTerm, term))
		}
		if desc == nil || desc.Generation != c.RangeGeneration {
			e := pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "r%d changed (generation %d, evaluated under %d) before the command applied", s.rangeID, desc.GetGeneration(), c.RangeGeneration)
			e.Range = desc
			return fail(e)
		}
		if err := b.ApplyRepr(c.WriteBatch); err != nil {
			panic(fmt.Sprintf("r%d: entry %d: %v", s.rangeID, index, err))
		}
		s.keys.applied(s.n.Engine(), c.ProposerTerm, c.WriteBatch)
		s.feedApplied(index, term, c.WriteBatch) // feed.go
		return appliedResult{}, nil
	case c.Batch != nil:
		return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "r%d: entry %d is a write batch of the retired apply-time form; it was not applied", s.rangeID, index))
	case c.Split != nil:
		if h := testingHooks.beforeSplit; h != nil {
			if n, ok := s.n.(*Node); ok {
				h(n, c.Split.NewRangeId)
			}
		}
		res, after := s.applySplit(b, desc, c.Split)
		if _, ok := res.(splitResult); ok {
			// Watchers look the span up again and resume (feed.go).
			s.feedStop(&feedStop{rpcpb.FeedError_RANGE_CHANGED, pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "range r%d split at %q", s.rangeID, c.Split.SplitKey)})
		}
		return res, after
	case c.MetaUpdate != nil:
		d := c.MetaUpdate.Range
		key := keys.MetaKey(d.EndKey)
		if !eval.ContainsKey(desc, key) {
			return fail(pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "meta key outside r%d", s.rangeID))
		}
		old, found, err := mvcc.GetPlain(b, key)
		if err != nil {
			panic(err)
		}
		if found {
			var od rpcpb.RangeDescriptor
			if err := proto.Unmarshal(old, &od); err == nil && od.Generation > d.Generation {
				return fail(pbErr(rpcpb.ErrorCode_WRITE_CONFLICT, "meta record of generation %d is newer", od.Generation))
			}
		}
		v, _ := proto.Marshal(d)
		if err := mvcc.PutPlain(b, key, v); err != nil {
			panic(err)
		}
		return &rpcpb.BatchResponse{}, nil
	case c.Gc != nil:
		return s.applyGC(b, desc, c.Gc)
	case c.AddNode != nil:
		return s.applyAddNode(b, desc, c.AddNode) // membership.go
	case c.SetMembership != nil:
		return s.applySetMembership(b, desc, c.SetMembership)
	case c.AllocRangeId != nil:
		if !eval.ContainsKey(desc, keys.RangeIDKey) {
			return fail(pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "range ID counter outside r%d", s.rangeID))
		}
		cur, _, err := mvcc.GetPlain(b, keys.RangeIDKey)
		if err != nil {
			panic(err)
		}
		var last uint64
		if len(cur) == 8 {
			last = binary.BigEndian.Uint64(cur)
		}
		if err := mvcc.PutPlain(b, keys.RangeIDKey, binary.BigEndian.AppendUint64(nil, last+1)); err != nil {
			panic(err)
		}
		return rangeIDResult(last + 1), nil
	case c.CasBound != nil:
		if !eval.ContainsKey(desc, keys.OracleBoundKey) {
			return fail(pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "oracle bound outside r%d", s.rangeID))
		}
		cur, found, err := mvcc.GetPlain(b, keys.OracleBoundKey)
		if err != nil {
			panic(err)
		}
		var current uint64
		if found && len(cur) == 8 {
			current = binary.BigEndian.Uint64(cur)
		}
		if current != c.CasBound.Expected {
			return casResult{current: current, ok: false}, nil
		}
		if err := mvcc.PutPlain(b, keys.OracleBoundKey, binary.BigEndian.AppendUint64(nil, c.CasBound.NewBound)); err != nil {
			panic(err)
		}
		return casResult{current: c.CasBound.NewBound, ok: true}, nil
	}
	return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "empty Raft command"))
}

type rangeIDResult uint64

type casResult struct {
	current uint64
	ok      bool
}

type splitResult struct {
	left, right *rpcpb.RangeDescriptor
}

func (s *rangeSM) applySplit(b *storage.Batch, desc *rpcpb.RangeDescriptor, sc *rpcpb.SplitCommand) (any, func()) {
	fail := func(e *rpcpb.Error) (any, func()) {
		return &rpcpb.BatchResponse{Error: e}, nil
	}
	if desc == nil || desc.Generation != sc.ExpectedGeneration {
		return fail(pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "r%d changed before the split applied", s.rangeID))
	}
	if changing(desc) {
		// The right hand side starts from the descriptor's configuration;
		// a change in flight would leave it half done there.
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "r%d is changing its replicas; split it later", s.rangeID))
	}
	if bytes.Compare(sc.SplitKey, desc.StartKey) <= 0 || bytes.Compare(sc.SplitKey, desc.EndKey) >= 0 {
		return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "split key %q is not inside r%d [%q, %q)", sc.SplitKey, s.rangeID, desc.StartKey, desc.EndKey))
	}
	left := proto.Clone(desc).(*rpcpb.RangeDescriptor)
	left.EndKey = append([]byte(nil), sc.SplitKey...)
	left.Generation++
	right := proto.Clone(desc).(*rpcpb.RangeDescriptor)
	right.RangeId = sc.NewRangeId
	right.StartKey = append([]byte(nil), sc.SplitKey...)
	right.Generation = left.Generation
	if err := writeDesc(b, left); err != nil {
		panic(err)
	}
	if err := writeDesc(b, right); err != nil {
		panic(err)
	}
	// An uninitialized replica of the right hand side may already exist
	// here (created by its peers' messages) and may have voted: keep its
	// HardState so that no vote is cast twice in one term.
	var hard raftpb.HardState
	if v, err := b.Get(storage.RangeLocalKey(right.RangeId, storage.SuffixHardState)); err == nil {
		_ = hard.Unmarshal(v)
	}
	hard.Commit = 0
	if err := replica.WriteInitialConfState(b, right.RangeId, confStateOf(right), hard); err != nil {
		panic(err)
	}
	// The right hand side inherits the GC threshold: reads below it, and
	// the refusals and 1PC records pruned below it, must stay refused
	// there too.
	threshold, err := loadGCThreshold(b, s.rangeID)
	if err != nil {
		panic(err)
	}
	if err := b.Set(storage.RangeLocalKey(right.RangeId, storage.SuffixGCThreshold), binary.BigEndian.AppendUint64(nil, threshold)); err != nil {
		panic(err)
	}
	if err := b.Set(registryKey(right.RangeId), nil); err != nil {
		panic(err)
	}
	after := func() {
		s.setDesc(left)
		// A processor installed between the split's apply (which stopped
		// the one before, above) and setDesc covers the old span: stop it
		// too (its watchers look the span up again).
		s.feedStop(&feedStop{rpcpb.FeedError_RANGE_CHANGED, pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "range r%d split at %q", s.rangeID, right.StartKey)})
		s.n.startRange(right)
	}
	return splitResult{left: left, right: right}, after
}

// Snapshot data: uvarint length + RangeState (descriptor, GC threshold),
// then, in an inline snapshot, (uvarint length + key, uvarint length +
// value) for every physical data key of the range. A streamed snapshot's
// data is the RangeState alone, naming the stream or the staged file the
// pairs are in (snapshot.go).

func nextChunk(data []byte) (chunk, rest []byte, err error) {
	n, w := binary.Uvarint(data)
	if w <= 0 || uint64(len(data)-w) < n {
		return nil, nil, fmt.Errorf("kvserver: truncated snapshot: %w", storage.ErrCorruption)
	}
	return data[w : w+int(n)], data[w+int(n):], nil
}

func snapshotState(data []byte) (*rpcpb.RangeState, []byte, error) {
	hb, rest, err := nextChunk(data)
	if err != nil {
		return nil, nil, err
	}
	st := &rpcpb.RangeState{}
	if err := proto.Unmarshal(hb, st); err != nil || st.Range == nil {
		return nil, nil, fmt.Errorf("kvserver: snapshot header: %v: %w", err, storage.ErrCorruption)
	}
	return st, rest, nil
}

// ApplySnapshot implements replica.StateMachine.
func (s *rangeSM) ApplySnapshot(b *storage.Batch, data []byte) (func(), error) {
	st, rest, err := snapshotState(data)
	if err != nil {
		return nil, err
	}
	desc := st.Range
	s.dataChanges.Add(1)
	s.keys.forget() // and again once it has committed, below
	s.feedStop(&feedStop{rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "range r%d received a snapshot", s.rangeID)})
	src, err := openPairs(st, rest)
	if err != nil {
		return nil, err
	}
	defer src.close()
	if err := s.applyPairs(b, st, src); err != nil {
		return nil, err
	}
	if err := writeDesc(b, desc); err != nil {
		return nil, err
	}
	if err := b.Set(storage.RangeLocalKey(desc.RangeId, storage.SuffixGCThreshold), binary.BigEndian.AppendUint64(nil, st.GcThreshold)); err != nil {
		return nil, err
	}
	if err := b.Set(registryKey(desc.RangeId), nil); err != nil {
		return nil, err
	}
	s.raiseGCThreshold(st.GcThreshold)
	return func() {
		s.keys.forget()
		s.setDesc(desc)
	}, nil
}

// registryKey marks, in node-local space, that this node holds rangeID.
func registryKey(rangeID uint64) []byte {
	return binary.BigEndian.AppendUint64(storage.NodeLocalKey("range/"), rangeID)
}

// loadGCThreshold returns the range's GC threshold: reads below it are
// refused because versions they need may be gone.
func loadGCThreshold(r storage.Reader, rangeID uint64) (uint64, error) {
	v, err := r.Get(storage.RangeLocalKey(rangeID, storage.SuffixGCThreshold))
	if errors.Is(err, storage.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("kvserver: GC threshold of r%d has %d bytes: %w", rangeID, len(v), storage.ErrCorruption)
	}
	return binary.BigEndian.Uint64(v), nil
}

type gcResult struct {
	deleted int // versions
	resume  []byte
	records gcRecords
}

// gcRecords counts the records a GC command removed besides versions
// (docs/design-notes.md, "GC of the records parallel commits and 1PC
// leave"): STAGING and FENCE records of decided transactions in the status
// table; refusals and 1PC entries dropped from key records.
type gcRecords struct {
	staging, fence, refusals, onePC int
}

func (r *gcRecords) add(o gcRecords) {
	r.staging += o.staging
	r.fence += o.fence
	r.refusals += o.refusals
	r.onePC += o.onePC
}

// applyStagingGC deletes each of ks that is a staging key whose status key
// holds a decision (checked here, at application, so every replica decides
// alike). Once a transaction is decided nobody needs its STAGING or FENCE
// record: readers look at the status key first, recovery ends in a
// put-unless-exists there, and a STAGING put after the decision is answered
// with a FENCE (cmd_plain_put_unless_exists.go).
func (s *rangeSM) applyStagingGC(b *storage.Batch, desc *rpcpb.RangeDescriptor, ks [][]byte) (any, func()) {
	var r gcRecords
	for _, k := range ks {
		sk, ok := eval.StagingStatusKey(k)
		if !ok || !eval.ContainsKey(desc, k) || !eval.ContainsKey(desc, sk) {
			continue
		}
		_, decided, err := mvcc.GetPlain(b, sk)
		if err != nil {
			panic(fmt.Sprintf("r%d: staging GC: %v", s.rangeID, err))
		}
		if !decided {
			continue
		}
		v, found, err := mvcc.GetPlain(b, k)
		if err != nil {
			panic(fmt.Sprintf("r%d: staging GC: %v", s.rangeID, err))
		}
		if !found {
			continue
		}
		if bytes.Equal(v, txnstatus.FenceValue()) {
			r.fence++
		} else {
			r.staging++
		}
		if err := mvcc.DeletePlain(b, k); err != nil {
			panic(fmt.Sprintf("r%d: staging GC: %v", s.rangeID, err))
		}
	}
	return gcResult{records: r}, nil
}

func (s *rangeSM) applyGC(b *storage.Batch, desc *rpcpb.RangeDescriptor, gc *rpcpb.GCCommand) (any, func()) {
	if desc == nil {
		return &rpcpb.BatchResponse{Error: pbErr(rpcpb.ErrorCode_RANGE_NOT_FOUND, "r%d is not initialized", s.rangeID)}, nil
	}
	if len(gc.StagingKeys) > 0 {
		return s.applyStagingGC(b, desc, gc.StagingKeys)
	}
	threshold, err := loadGCThreshold(b, s.rangeID)
	if err != nil {
		panic(err)
	}
	// The threshold never moves down: reads refused once stay refused.
	threshold = max(threshold, gc.Threshold)
	s.raiseGCThreshold(threshold)
	if err := b.Set(storage.RangeLocalKey(s.rangeID, storage.SuffixGCThreshold), binary.BigEndian.AppendUint64(nil, threshold)); err != nil {
		panic(err)
	}
	start := desc.StartKey
	if bytes.Compare(gc.StartKey, start) > 0 {
		start = gc.StartKey
	}
	if bytes.Compare(start, desc.EndKey) >= 0 {
		return gcResult{}, nil
	}
	var plain mvcc.PlainGC
	var kr eval.KeyRecordGC
	slots := 0
	if gc.KeyRecords {
		plain = keyRecordGC(threshold, &kr, &slots)
	}
	n, resume, err := mvcc.GCLimitedPlain(b, start, desc.EndKey, threshold, int(max(gc.VersionsMax, 1)), plain)
	if err != nil {
		panic(fmt.Sprintf("r%d: version GC: %v", s.rangeID, err))
	}
	return gcResult{deleted: n - slots, resume: resume, records: gcRecords{refusals: kr.Refusals, onePC: kr.OnePC}}, nil
}

// keyRecordGC is the plain-slot GC of version GC: the key records of user
// keys (eval.GCKeyRecord), counted into st and slots (records changed).
func keyRecordGC(threshold uint64, st *eval.KeyRecordGC, slots *int) mvcc.PlainGC {
	return func(key, v []byte) ([]byte, bool) {
		if !keys.IsUser(key) {
			return v, false
		}
		out, changed, r := eval.GCKeyRecord(v, threshold)
		if changed {
			*slots++
			st.Refusals += r.Refusals
			st.OnePC += r.OnePC
			st.Records += r.Records
		}
		return out, changed
	}
}
