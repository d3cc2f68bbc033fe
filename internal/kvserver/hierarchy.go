package kvserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/tso"
)

// The hierarchy protocols in a node (issue 9; docs/design-notes.md, "The
// hierarchical protocol in kvserver"). internal/hierarchy is the validator
// core; this file and hierarchy_*.go run it:
//
//   - hierarchy.go: the runtime, which validators this node hosts (its
//     leaf always; an inner validator when this node is the lowest-ID live
//     node below it), lease fences, routing of validator messages;
//   - hierarchy_loop.go: one goroutine per hosted validator, owning the
//     core's Validator and carrying out each Ready (decisions durable in
//     the status table before any message leaves, then messages, then
//     intent resolution, then status lookups); an inner validator's
//     status writes and messages are done by its sender goroutine, in
//     order, while its loop goes on;
//   - hierarchy_part.go: a part taken by the leaf: latches, the lease
//     check, the storage check, Propose, and the intents through Raft;
//   - hierarchy_record.go: part records, written with a passed part's
//     intents and read back by a restarted leaf (its Recovery);
//   - hierarchy_link.go: the Hierarchy gRPC service (Commit from clients,
//     Link streams between nodes) and the per-link senders.

// Limits and times of the hierarchy runtime.
const (
	// HierarchyTxnAgeMax: a transaction older than this (by its start_ts's
	// physical time) is never committed by a hierarchy decider (it records
	// ABORTED instead), and a leaf whose part of it is overdue aborts it
	// in the status table. That is what lets a part whose leaf died (its
	// vote never sent) and the read holds a lease move left behind end.
	HierarchyTxnAgeMax = 4 * time.Second
	// HierarchyLeaseFence: a node that became leaseholder of a range
	// takes hierarchy parts on it only this long after (and after
	// observing a fresh oracle timestamp): by then every transaction a
	// previous leaseholder's leaf may hold a read of is decided or too old
	// to commit (HierarchyTxnAgeMax plus a margin for clock skew between
	// nodes).
	HierarchyLeaseFence = HierarchyTxnAgeMax + time.Second
	// hierInboxMax bounds a validator loop's queue of inputs; a message
	// that finds it full is dropped (counted), which the core recovers
	// from (ResendAfter, status lookups).
	hierInboxMax = 16384
	// hierLinkQueueMax bounds the messages queued for one link.
	hierLinkQueueMax = 65536
	// hierLinkBatchMax bounds the messages of one link batch.
	hierLinkBatchMax = 1024
	// hierManageInterval: how often the runtime rechecks hosting and
	// fences.
	hierManageInterval = 50 * time.Millisecond
	// hierOverridesMax bounds a loop's memory of decisions that came out
	// otherwise than the core made them (status table answers).
	hierOverridesMax = 1 << 16
	// hierRecordingMax bounds an inner validator's batches of decisions
	// being written to the status table at once (hierLoop.send); a loop
	// that would start one more waits.
	hierRecordingMax = 8
	// hierSendQueueMax bounds an inner validator's Readies waiting for
	// their turn to leave (hierLoop.send).
	hierSendQueueMax = 256
)

// hierRuntime is a node's share of the validator tree.
type hierRuntime struct {
	n        *Node
	self     uint64
	tree     *hierarchy.Tree
	treeText string
	cfg      hierarchy.Config // ID unset
	// db is the node's own client of the cluster: status-table writes and
	// lookups, and intent resolution, routed and batched as a client's.
	db    *client.DB
	start time.Time
	leaf  *hierLoop
	// records writes the leaf's part records (hierarchy_record.go).
	records *partRecorder

	mu struct {
		sync.Mutex
		inner   map[hierarchy.ValidatorID]*hierLoop
		links   map[uint64]*hierLink
		waiters map[hierarchy.TxnID]chan hierarchy.Decision
		fences  map[uint64]*hierFence
		// published: each loop's counts after its last round.
		published map[hierarchy.ValidatorID]hierPublished
		// retired: the counts of inner validators this node ran before
		// another node took them over.
		retired map[hierarchy.ValidatorID]hierPublished
		stopped bool
	}
	metrics hierMetrics
}

// hierFence is a range's lease fence (HierarchyLeaseFence): parts on it
// wait until ready.
type hierFence struct {
	term  uint64
	since time.Time
	// ready: the fence passed and the leaf observed a timestamp taken
	// after it. Parts enqueued afterwards follow that Observe in the
	// leaf's inbox.
	ready bool
	// observing: a goroutine is fetching the timestamp.
	observing bool
}

type hierMetrics struct {
	mu                              sync.Mutex
	dropped, overridden, agedAborts int64
	// recovered: parts a restarted leaf gave back to its core from their
	// records; recoveredEnded: records it found decided, or aborted as
	// too old (hierarchy_record.go).
	recovered, recoveredEnded int64
	// recordsDropped: part record writes and deletions not made (queue
	// full, or a failed batch).
	recordsDropped int64
	// delayed: link batches held by an injected delay, and how long their
	// first message was held in fact (queued to sent).
	delayed heldDelays
}

func (m *hierMetrics) add(p *int64, d int64) {
	m.mu.Lock()
	*p += d
	m.mu.Unlock()
}

// hierConfig reads the cluster's hierarchy settings into a validator
// configuration (without ID).
func hierConfig(s *rpcpb.HierarchySettings) (*hierarchy.Tree, hierarchy.Config, error) {
	tree, err := hierarchy.ParseTree(s.GetTree())
	if err != nil {
		return nil, hierarchy.Config{}, err
	}
	variant, err := hierarchy.ParseVariant(s.GetVariant())
	if err != nil {
		return nil, hierarchy.Config{}, err
	}
	cfg := hierarchy.Config{
		Tree:           tree,
		Variant:        variant,
		ValidatorBatch: hierarchy.Batching{SizeMax: int(s.GetValidatorBatchSize()), Timeout: time.Duration(s.GetValidatorBatchTimeoutUs()) * time.Microsecond},
		NodeBatch:      hierarchy.Batching{SizeMax: int(s.GetNodeBatchSize()), Timeout: time.Duration(s.GetNodeBatchTimeoutUs()) * time.Microsecond},
	}
	cfg.EnsureDefaults()
	c := cfg
	c.ID = tree.Root()
	if err := c.Validate(); err != nil {
		return nil, hierarchy.Config{}, err
	}
	return tree, cfg, nil
}

// ValidateHierarchySettings checks settings given to init, filling the
// defaults (variant locking, the default tree over nodeIDs, batches of 1
// with a 1 ms timeout). Errors wrap hierarchy.ErrInvalidArgument.
func ValidateHierarchySettings(s *rpcpb.HierarchySettings, nodeIDs []uint64) error {
	if s.Variant == "" {
		s.Variant = hierarchy.Locking.String()
	}
	if s.Tree == "" {
		ids := make([]hierarchy.NodeID, len(nodeIDs))
		for i, id := range nodeIDs {
			ids[i] = hierarchy.NodeID(id)
		}
		t, err := hierarchy.DefaultTree(ids)
		if err != nil {
			return err
		}
		s.Tree = t.String()
	}
	tree, cfg, err := hierConfig(s)
	if err != nil {
		return err
	}
	s.Tree = tree.String()
	s.ValidatorBatchSize = uint32(cfg.ValidatorBatch.SizeMax)
	s.ValidatorBatchTimeoutUs = uint64(cfg.ValidatorBatch.Timeout / time.Microsecond)
	s.NodeBatchSize = uint32(cfg.NodeBatch.SizeMax)
	s.NodeBatchTimeoutUs = uint64(cfg.NodeBatch.Timeout / time.Microsecond)
	for _, id := range nodeIDs {
		if _, ok := tree.Leaf(hierarchy.NodeID(id)); !ok {
			return fmt.Errorf("%w: tree %s has no leaf for node %d", hierarchy.ErrInvalidArgument, tree, id)
		}
	}
	return nil
}

// hierManage starts the runtime once the node is in a cluster whose
// settings ask for it, then keeps hosting and fences current.
func (n *Node) hierManage() {
	if !n.bootstrapped() {
		return
	}
	s := n.settings().GetHierarchy()
	if s == nil {
		return
	}
	rt := n.hier.Load()
	if rt == nil {
		var err error
		if rt, err = newHierRuntime(n, s); err != nil {
			n.log.Warn("hierarchy: cannot start the validators yet", "err", err)
			return
		}
		n.hier.Store(rt)
		n.log.Info("hierarchy: validators started", "tree", rt.treeText, "variant", rt.cfg.Variant)
	}
	rt.manage()
}

// stopHierarchy stops the validators (Stop, before the store closes).
func (n *Node) stopHierarchy() {
	if rt := n.hier.Load(); rt != nil {
		rt.stop()
	}
}

func newHierRuntime(n *Node, s *rpcpb.HierarchySettings) (*hierRuntime, error) {
	tree, cfg, err := hierConfig(s)
	if err != nil {
		return nil, err
	}
	self := n.NodeID()
	leafID, ok := tree.Leaf(hierarchy.NodeID(self))
	if !ok {
		return nil, fmt.Errorf("hierarchy: tree %s has no leaf for node %d", tree, self)
	}
	addrs := []string{n.cfg.AdvertiseAddr}
	for _, nd := range n.nodeList() {
		if nd.Address != n.cfg.AdvertiseAddr {
			addrs = append(addrs, nd.Address)
		}
	}
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	dial := append(n.identityDialOptions(), grpc.WithTransportCredentials(n.peerCredentials()))
	db, err := client.Open(ctx, addrs, client.WithDialOptions(dial...), client.WithLogger(n.log))
	if err != nil {
		return nil, fmt.Errorf("hierarchy: opening the node's client: %w", err)
	}
	rt := &hierRuntime{n: n, self: self, tree: tree, treeText: tree.String(), cfg: cfg, db: db, start: time.Now()}
	rt.mu.inner = map[hierarchy.ValidatorID]*hierLoop{}
	rt.mu.links = map[uint64]*hierLink{}
	rt.mu.waiters = map[hierarchy.TxnID]chan hierarchy.Decision{}
	rt.mu.fences = map[uint64]*hierFence{}
	rt.mu.published = map[hierarchy.ValidatorID]hierPublished{}
	rt.mu.retired = map[hierarchy.ValidatorID]hierPublished{}
	rt.records = newPartRecorder(n.eng, n.log, func(k int) { rt.metrics.add(&rt.metrics.recordsDropped, int64(k)) })
	leaf, err := rt.newLoop(leafID)
	if err != nil {
		rt.records.stop()
		_ = db.Close()
		return nil, err
	}
	rt.leaf = leaf
	return rt, nil
}

// now is the runtime's monotonic time, fed to the validators' Tick.
func (rt *hierRuntime) now() time.Duration { return time.Since(rt.start) }

// hostOf is the node that runs validator id: a leaf's own node; for an
// inner validator the lowest-ID node below it that this node believes
// live. Every node computes it alike from its liveness view; while the
// views differ, two nodes may host one validator or none, which costs
// resends, not safety (a decision is a function of the votes, and the
// status table keeps the first one).
func (rt *hierRuntime) hostOf(id hierarchy.ValidatorID) uint64 {
	if rt.tree.IsLeaf(id) {
		return uint64(rt.tree.Node(id))
	}
	nodes := rt.tree.Nodes(id)
	for _, nd := range nodes {
		if uint64(nd) == rt.self || rt.n.liveness.isLive(uint64(nd)) {
			return uint64(nd)
		}
	}
	return uint64(nodes[0])
}

// manage starts and stops inner validators by hostOf and keeps the lease
// fences of the ranges this node leads.
func (rt *hierRuntime) manage() {
	var start []hierarchy.ValidatorID
	var stop []*hierLoop
	rt.mu.Lock()
	if rt.mu.stopped {
		rt.mu.Unlock()
		return
	}
	for id := hierarchy.ValidatorID(0); int(id) < rt.tree.Size(); id++ {
		if rt.tree.IsLeaf(id) {
			continue
		}
		l := rt.mu.inner[id]
		switch host := rt.hostOf(id); {
		case host == rt.self && l == nil:
			start = append(start, id)
		case host != rt.self && l != nil:
			delete(rt.mu.inner, id)
			// Its counts stay, as those of a validator no longer run here.
			rt.mu.retired[id] = rt.mu.retired[id].add(rt.mu.published[id])
			delete(rt.mu.published, id)
			stop = append(stop, l)
		}
	}
	rt.mu.Unlock()
	for _, l := range stop {
		l.stop()
	}
	for _, id := range start {
		l, err := rt.newLoop(id)
		if err != nil {
			rt.n.log.Error("hierarchy: cannot start a validator", "validator", id, "err", err)
			continue
		}
		rt.mu.Lock()
		if rt.mu.stopped || rt.mu.inner[id] != nil {
			rt.mu.Unlock()
			l.stop()
			continue
		}
		rt.mu.inner[id] = l
		rt.mu.Unlock()
	}
	rt.updateFences()
}

// updateFences opens a fence for every range this node newly leads and
// readies the fences that have passed: a fresh oracle timestamp is
// observed by the leaf first (above every snapshot served by an earlier
// leaseholder).
func (rt *hierRuntime) updateFences() {
	now := time.Now()
	var observe []*hierFence
	rt.mu.Lock()
	for _, rr := range rt.n.replicaList() {
		st := rr.r.Status()
		id := rr.r.RangeID()
		if !st.Leaseholder {
			delete(rt.mu.fences, id)
			continue
		}
		f := rt.mu.fences[id]
		if f == nil || f.term != st.Term {
			f = &hierFence{term: st.Term, since: now}
			rt.mu.fences[id] = f
		}
		if !f.ready && !f.observing && now.Sub(f.since) >= HierarchyLeaseFence {
			f.observing = true
			observe = append(observe, f)
		}
	}
	rt.mu.Unlock()
	if len(observe) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(rt.n.stopCtx, rt.n.cfg.RequestTimeout)
		defer cancel()
		ts, e := rt.n.timestamp(ctx)
		ok := e == nil && rt.leaf.observe(ctx, ts) == nil
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for _, f := range observe {
			f.observing = false
			f.ready = ok
		}
	}()
}

// fenceWait is how long parts on range id must still wait (0: ready), and
// false if this node does not lead it.
func (rt *hierRuntime) fenceWait(id uint64) (time.Duration, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	f := rt.mu.fences[id]
	if f == nil {
		return 0, false
	}
	if f.ready {
		return 0, true
	}
	return max(time.Until(f.since.Add(HierarchyLeaseFence)), hierManageInterval), true
}

// fenceTerm is the term of range id's fence if it is ready.
func (rt *hierRuntime) fenceTerm(id uint64) (uint64, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	f := rt.mu.fences[id]
	if f == nil || !f.ready {
		return 0, false
	}
	return f.term, true
}

func (rt *hierRuntime) stop() {
	rt.mu.Lock()
	if rt.mu.stopped {
		rt.mu.Unlock()
		return
	}
	rt.mu.stopped = true
	inner := rt.mu.inner
	links := rt.mu.links
	rt.mu.inner = map[hierarchy.ValidatorID]*hierLoop{}
	rt.mu.Unlock()
	rt.leaf.stop()
	for _, l := range inner {
		l.stop()
	}
	for _, l := range links {
		l.stop()
	}
	rt.records.stop()
	_ = rt.db.Close()
}

// addWaiter registers the answering part of txn (Commit on the
// transaction's lowest node): it gets the decision when it reaches this
// node's leaf.
func (rt *hierRuntime) addWaiter(txn hierarchy.TxnID) chan hierarchy.Decision {
	c := make(chan hierarchy.Decision, 1)
	rt.mu.Lock()
	rt.mu.waiters[txn] = c
	rt.mu.Unlock()
	return c
}

func (rt *hierRuntime) removeWaiter(txn hierarchy.TxnID) {
	rt.mu.Lock()
	delete(rt.mu.waiters, txn)
	rt.mu.Unlock()
}

func (rt *hierRuntime) notify(d hierarchy.Decision) {
	rt.mu.Lock()
	c := rt.mu.waiters[d.Txn]
	rt.mu.Unlock()
	if c != nil {
		select {
		case c <- d:
		default:
		}
	}
}

// route sends validator messages to where their receivers run. Results
// for clients are not sent: the transaction's lowest node answers its
// client once the decision reaches its leaf (every involved node gets the
// decision anyway), so a result costs one reply, as in formula 3.4.
func (rt *hierRuntime) route(msgs []hierarchy.Message) {
	for _, m := range msgs {
		var dest uint64
		switch m.Kind {
		case hierarchy.MsgResult:
			continue
		case hierarchy.MsgDecisions:
			dest = uint64(m.Node)
		default:
			dest = rt.hostOf(m.To)
		}
		if dest == rt.self {
			rt.deliver(m)
			continue
		}
		rt.link(dest).enqueue(hierMessageToProto(m))
	}
}

// deliver hands a message to the loop of its receiver on this node, or
// drops it (counted) if no loop here runs it or the loop's inbox is full.
func (rt *hierRuntime) deliver(m hierarchy.Message) {
	var l *hierLoop
	switch {
	case m.Kind == hierarchy.MsgDecisions:
		if uint64(m.Node) == rt.self {
			l = rt.leaf
		}
	case rt.tree.Valid(m.To) && rt.tree.IsLeaf(m.To):
		if uint64(rt.tree.Node(m.To)) == rt.self {
			l = rt.leaf
		}
	case rt.tree.Valid(m.To):
		rt.mu.Lock()
		l = rt.mu.inner[m.To]
		rt.mu.Unlock()
	}
	if l == nil || !l.offer(hierInput{msg: &m}) {
		rt.metrics.add(&rt.metrics.dropped, 1)
	}
}

// startMillis is the physical time of an oracle timestamp.
func startMillis(ts uint64) int64 { return int64(ts >> tso.DefaultLogicalBits) }

// tooOld reports whether a transaction is older than HierarchyTxnAgeMax.
func tooOld(txn hierarchy.TxnID) bool {
	return time.Now().UnixMilli()-startMillis(uint64(txn)) > HierarchyTxnAgeMax.Milliseconds()
}

// raiseReadFloor raises the node's read floor to the timestamp of a read
// batch (under its latches, readOnce); transactional or not, so that a
// single-key read at the latest timestamp is not overtaken by a hierarchy
// commit below it either.
func (n *Node) raiseReadFloor(req *rpcpb.BatchRequest) {
	var ts uint64
	for _, ru := range req.Requests {
		if g := ru.GetGet(); g != nil {
			ts = max(ts, g.GetTs())
		}
		if s := ru.GetScan(); s != nil {
			ts = max(ts, s.GetTs())
		}
	}
	for {
		cur := n.hierReadFloor.Load()
		if ts <= cur || n.hierReadFloor.CompareAndSwap(cur, ts) {
			return
		}
	}
}

// HierarchyValidator is one validator this node runs, for status and
// tests.
type HierarchyValidator struct {
	ID    hierarchy.ValidatorID
	Leaf  bool
	Level int
	// Running: this node runs it now (else: it ran here before another
	// node took it over; Counts are what it did here).
	Running bool
	Pending int
	Counts  hierarchy.Counts
}

// HierarchyStatus is what a node's hierarchy runtime reports (nil
// Validators: the cluster runs no hierarchy protocol, or not yet here).
type HierarchyStatus struct {
	Tree, Variant string
	Validators    []HierarchyValidator
	// Dropped: validator messages lost (inbox or link queue full, link
	// down, receiver not hosted here); Overridden: decisions the status
	// table held otherwise than the deciding core made them; AgedAborts:
	// transactions aborted for being older than HierarchyTxnAgeMax.
	Dropped, Overridden, AgedAborts int64
	// Recovered: parts this node's leaf recovered from its part records
	// when it started, pending again; RecoveredEnded: records it found
	// decided in the status table, or aborted there as too old to commit.
	Recovered, RecoveredEnded int64
	// RecordsDropped: part record writes and deletions not made (their
	// queue full, or a failed batch).
	RecordsDropped int64
	// DelayedBatches and DelayedHeld: validator-link batches held by an
	// injected delay (Node.SetLinkFault), and the sum of the time their
	// first message was in fact held, queued to sent (the realized delay,
	// which a coarse timer makes longer than the one asked for).
	DelayedBatches int64
	DelayedHeld    time.Duration
}

// HierarchyStatus reports this node's validators.
func (n *Node) HierarchyStatus() HierarchyStatus {
	rt := n.hier.Load()
	if rt == nil {
		return HierarchyStatus{}
	}
	s := HierarchyStatus{Tree: rt.treeText, Variant: rt.cfg.Variant.String()}
	rt.mu.Lock()
	all := map[hierarchy.ValidatorID]hierPublished{}
	for id, v := range rt.mu.retired {
		all[id] = hierPublished{counts: v.counts}
	}
	for id, v := range rt.mu.published {
		all[id] = all[id].add(v)
	}
	for id, v := range all {
		_, running := rt.mu.published[id]
		s.Validators = append(s.Validators, HierarchyValidator{ID: id, Leaf: rt.tree.IsLeaf(id), Level: rt.tree.Level(id),
			Running: running, Pending: v.pending, Counts: v.counts})
	}
	rt.mu.Unlock()
	slices.SortFunc(s.Validators, func(a, b HierarchyValidator) int { return int(a.ID) - int(b.ID) })
	rt.metrics.mu.Lock()
	s.Dropped, s.Overridden, s.AgedAborts = rt.metrics.dropped, rt.metrics.overridden, rt.metrics.agedAborts
	s.Recovered, s.RecoveredEnded, s.RecordsDropped = rt.metrics.recovered, rt.metrics.recoveredEnded, rt.metrics.recordsDropped
	rt.metrics.mu.Unlock()
	s.DelayedBatches, s.DelayedHeld = rt.metrics.delayed.load()
	return s
}

type hierPublished struct {
	counts  hierarchy.Counts
	pending int
}

func (p hierPublished) add(q hierPublished) hierPublished {
	p.counts = p.counts.Add(q.counts)
	p.pending += q.pending
	return p
}

// publish records a loop's counts (after each round; the loop owns its
// validator, so status reads these copies).
func (rt *hierRuntime) publish(id hierarchy.ValidatorID, c hierarchy.Counts, pending int) {
	rt.mu.Lock()
	rt.mu.published[id] = hierPublished{counts: c, pending: pending}
	rt.mu.Unlock()
}

// hierarchyServerProtocol is the server side of hierarchy-locking and
// hierarchy-timestamps (protocol.go). A hierarchy transaction sends no
// transactional request but its snapshot reads through KV.Batch (its
// intents are written by the node, under the part's latches, and its
// commit goes through the Hierarchy service); a default read-only
// transaction's snapshot reads are served too. The validators are started
// by hierManage, which reads the settings.
type hierarchyServerProtocol struct{}

func (hierarchyServerProtocol) admit(sent commitprotocol.Name, ru *rpcpb.RequestUnion) bool {
	switch sent {
	case commitprotocol.HierarchyLocking, commitprotocol.HierarchyTimestamps, commitprotocol.Default:
		return isSnapshotRead(ru)
	}
	return false
}

func (hierarchyServerProtocol) start(*Node) error { return nil }
func (hierarchyServerProtocol) stop()             {}

// HierarchyReady reports whether this node takes hierarchy parts on every
// range it leads: its validators run and each led range's lease fence has
// passed (benchmarks wait for it before they measure).
func (n *Node) HierarchyReady() bool {
	rt := n.hier.Load()
	if rt == nil {
		return false
	}
	for _, rr := range n.replicaList() {
		if !rr.r.Status().Leaseholder {
			continue
		}
		if _, ok := rt.fenceTerm(rr.r.RangeID()); !ok {
			return false
		}
	}
	return true
}
