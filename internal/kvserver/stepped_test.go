package kvserver

// The stepped range harness: the replicas of one range (and of the ranges
// split from it) on a few nodes, each node with its own in-memory Pebble
// engine, driven by hand like etcd raft's InteractionEnv. Nothing runs
// unless a command says so: no goroutine, no scheduler, no real clock.
//
//   - Each replica is a real replica.Replica with the real state machine
//     (rangeSM), never started: its inbox fills and Replica.HandleReady
//     handles it (drain, Ready, persist, send, apply, advance) when a
//     command asks.
//   - Messages a replica sends wait in one outbox until `deliver` (or
//     `stabilize`) steps them into their receivers' inboxes, or drops them.
//   - Time is a shared fake clock that moves one tick interval per `tick`;
//     replica leases are computed on it (replica.Config.Now) and printed in
//     ticks (t=8.1 is 8.1 tick intervals after the start).
//   - Requests follow the server's path, one step per command: a write
//     waits to be leaseholder, sequences its latches, evaluates with
//     evaluateWrite (the server's own), is proposed with
//     Replica.ProposeNoWait, and releases its latches once applied or
//     dropped; a read serves under a valid lease or after a ReadIndex
//     round, under read latches. Requests still waiting are retried after
//     every command, and their outcomes are printed when they happen.
//     Writes take timestamps from a counter (1, 2, ...), not the oracle.
//     A split is proposed as splitLocal proposes it, with the right hand
//     side's range ID given by the test instead of allocated in range 1.
//   - Messages are received as Node.receiveRaft receives them: an unknown
//     range gets an uninitialized replica, and a snapshot that would
//     initialize one over another replica's span is refused.
//
//   - Quiescence, when new-range says quiesce=N: a leader quiesces its
//     group on the first tick after N idle ticks (0, the default of
//     canopy's nodes: the first tick that finds it idle) by sending
//     quiesce heartbeats (printed
//     `send quiesce 1->2 MsgHeartbeat ...`), which are delivered by
//     Replica.StepQuiesce; a quiescent replica ignores ticks. Without it
//     the transport has no quiesce heartbeats and no group quiesces.
//
// Not modelled: the scheduler (HandleReady handles one range per round,
// so there is no group commit across ranges), node liveness (every peer
// is live), the oracle, intents and the lock table, restarts.
//
// Reading the testdata (testdata/stepped/*): each file starts with what it
// tests. `nX/rY` is the replica of range Y on node X. A Ready is printed as
// its soft state, hard state, new entries and snapshot, followed by what
// handling it did, in order: messages sent, entries applied (with their
// outcome), requests finished. An entry that carries an evaluated write
// prints the writes in its batch, `put a@3=x`: followers apply those bytes,
// not the request. `state` prints every replica and checks I5 (replicas of
// a range at the same applied index hold the same descriptor and data).
//
// Commands (n: node IDs, r: range IDs, both default to all):
//
//	new-range ids=1,2,3 [election=10] [log-keep=500] [quiesce=N]
//	                                    r1 over all user keys; quiesce: groups
//	                                    quiesce, after N idle ticks
//	campaign n=1 [r=..]                 queue a campaign (process it to see it)
//	transfer-leader n=1 to=2 [r=..]
//	tick [n=..] [r=..] [count=1]        per tick: clock +1, Tick, handle Ready
//	process-ready [n=..] [r=..]         one HandleReady per replica
//	deliver [from=..] [to=..] [r=..] [type=MsgApp] [drop]
//	stabilize [quiet]                   deliver and process until nothing moves;
//	                                    quiet prints only the requests that
//	                                    finished and the final state
//	partition n=1                       messages to or from n1 are dropped
//	cut n=1,2                           messages between n1 and n2 are dropped
//	heal                                ends partitions and cuts
//	propose-put n=1 key=a value=x [name=p1] [term=T] [gen=G]
//	                                    term/gen forge the command's proposer
//	                                    term / range generation, as if it had
//	                                    been evaluated under an older lease
//	get n=1 key=a [name=g1] [expect=x@3]  expect: the test fails on another
//	                                    result (x@3: value x at timestamp 3)
//	split n=1 key=m rhs=2 [name=s1]
//	requests                            requests still in flight
//	lease [n=..] [r=..]                 each replica's view of its lease
//	state [n=..] [r=..]                 each replica's Raft state and data; I5

import (
	"bytes"
	"cmp"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestSteppedRange runs testdata/stepped (see the comment above).
func TestSteppedRange(t *testing.T) {
	datadriven.Walk(t, "testdata/stepped", func(t *testing.T, path string) {
		env := &steppedEnv{t: t}
		defer env.close()
		datadriven.RunTest(t, path, env.handle)
	})
}

// steppedTick is the harness's tick interval; the clock starts at
// steppedEpoch.
const steppedTick = time.Second

var steppedEpoch = time.Unix(1_000_000, 0)

// steppedStabilizeRoundsMax bounds the rounds of one stabilize.
const steppedStabilizeRoundsMax = 100

type steppedEnv struct {
	t     *testing.T
	now   time.Time
	nodes map[uint64]*steppedNode
	ids   []uint64 // node IDs, sorted
	// electionTicks, logKeep, quiesce and quiesceTicks configure every
	// replica.
	electionTicks int
	logKeep       uint64
	quiesce       bool
	quiesceTicks  int
	// outbox holds the messages sent and not yet delivered, in send order.
	outbox []steppedMsg
	// isolated: messages to or from these nodes are dropped; cut: messages
	// between these two nodes (lower ID first) are dropped.
	isolated map[uint64]bool
	cut      map[[2]uint64]bool
	// requests in flight, in start order; reqSeq numbers unnamed ones.
	requests []*steppedRequest
	reqSeq   map[byte]int
	nextTs   uint64
	// events collects what happens while a command runs (sends, applies,
	// finished requests); out is the command's output. finished repeats
	// the requests' outcomes, for stabilize quiet.
	events   *strings.Builder
	out      *strings.Builder
	finished []string
}

type steppedMsg struct {
	rangeID uint64
	m       raftpb.Message
	// quiesce: sent by SendQuiesce, delivered by StepQuiesce.
	quiesce bool
}

func (sm steppedMsg) describe() string {
	if sm.quiesce {
		return "quiesce " + describeMsg(sm.m)
	}
	return describeMsg(sm.m)
}

// steppedNode is one node: an engine and its replicas. It is the host of
// its ranges' state machines (rangeHost) and their transport.
type steppedNode struct {
	env      *steppedEnv
	id       uint64
	eng      *storage.Engine
	replicas map[uint64]*rangeReplica
	outSnaps snapshotRegistry
}

func (n *steppedNode) Engine() *storage.Engine { return n.eng }

// snapshots implements rangeHost: deliverOne turns a streamed snapshot
// into an inline one from this registry.
func (n *steppedNode) snapshots() *snapshotRegistry { return &n.outSnaps }

// startRange implements rangeHost as Node.startRange does, without
// starting the replica (nor campaigning: the testdata says who campaigns).
func (n *steppedNode) startRange(d *rpcpb.RangeDescriptor) {
	old := n.replicas[d.RangeId]
	if old != nil && old.sm.Desc() != nil {
		return
	}
	var refuseVotesUntil time.Time
	if old != nil {
		old.r.Stop()
		// As Node.startRange: the replaced replica may have acknowledged a
		// leader's heartbeat.
		c := replica.Config{ElectionTicks: n.env.electionTicks, TickInterval: steppedTick}
		c.EnsureDefaults()
		refuseVotesUntil = n.env.now.Add(c.LeaseDuration())
	}
	n.newReplicaRefusingVotes(d.RangeId, d, refuseVotesUntil)
	n.env.event("n%d/r%d created by the split", n.id, d.RangeId)
}

// Send implements replica.Transport: messages wait in the outbox.
func (n *steppedNode) Send(rangeID uint64, msgs []raftpb.Message) {
	for _, m := range msgs {
		n.env.outbox = append(n.env.outbox, steppedMsg{rangeID: rangeID, m: m})
		n.env.event("send %s", describeMsg(m))
	}
}

// steppedQuiesceNode is a node's transport when its groups quiesce
// (new-range quiesce=N): it implements replica.QuiesceTransport.
type steppedQuiesceNode struct{ *steppedNode }

// SendQuiesce implements replica.QuiesceTransport.
func (n steppedQuiesceNode) SendQuiesce(rangeID uint64, msgs []raftpb.Message) {
	for _, m := range msgs {
		sm := steppedMsg{rangeID: rangeID, m: m, quiesce: true}
		n.env.outbox = append(n.env.outbox, sm)
		n.env.event("send %s", sm.describe())
	}
}

func (n *steppedNode) newReplica(rangeID uint64, desc *rpcpb.RangeDescriptor) *rangeReplica {
	return n.newReplicaRefusingVotes(rangeID, desc, time.Time{})
}

func (n *steppedNode) newReplicaRefusingVotes(rangeID uint64, desc *rpcpb.RangeDescriptor, refuseVotesUntil time.Time) *rangeReplica {
	t := n.env.t
	if desc == nil {
		var err error
		if desc, err = loadDesc(n.eng, rangeID); err != nil {
			t.Fatal(err)
		}
	}
	sm := &rangeSM{n: n, rangeID: rangeID}
	sm.setDesc(desc)
	rr := &rangeReplica{sm: sm, latches: concurrency.NewLatchManager()}
	var tr replica.Transport = n
	if n.env.quiesce {
		tr = steppedQuiesceNode{n}
	}
	r, err := replica.New(replica.Config{
		RangeID:          rangeID,
		PeerID:           n.id,
		Engine:           n.eng,
		SM:               &steppedSM{rangeSM: sm, env: n.env},
		Transport:        tr,
		QuiesceIdleTicks: n.env.quiesceTicks,
		ElectionTicks:    n.env.electionTicks,
		LogEntriesKeep:   n.env.logKeep,
		TickInterval:     steppedTick,
		Now:              func() time.Time { return n.env.now },
		RefuseVotesUntil: refuseVotesUntil,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rr.r = r
	n.replicas[rangeID] = rr
	return rr
}

// steppedSM is the range's state machine, printing what it applies.
type steppedSM struct {
	*rangeSM
	env *steppedEnv
}

func (s *steppedSM) Apply(b *storage.Batch, index, term uint64, data []byte) (any, func()) {
	res, after := s.rangeSM.Apply(b, index, term, data)
	var outcome string
	switch r := res.(type) {
	case appliedResult:
		outcome = "applied"
	case splitResult:
		outcome = fmt.Sprintf("split into %s and %s", describeDesc(r.left), describeDesc(r.right))
	case *rpcpb.BatchResponse:
		outcome = describeResp(r)
	default:
		outcome = fmt.Sprintf("%v", r)
	}
	s.env.event("apply %d/%d %s: %s", term, index, describeCommand(data), outcome)
	return res, after
}

func (s *steppedSM) ApplySnapshot(b *storage.Batch, data []byte) (func(), error) {
	after, err := s.rangeSM.ApplySnapshot(b, data)
	if err != nil {
		s.env.event("apply snapshot: %v", err)
	} else if st, _, e := snapshotState(data); e == nil {
		s.env.event("apply snapshot of %s", describeDesc(st.Range))
	}
	return after, err
}

func (e *steppedEnv) event(format string, args ...any) {
	if e.events != nil {
		fmt.Fprintf(e.events, format+"\n", args...)
	}
}

func (e *steppedEnv) close() {
	for _, id := range e.ids {
		n := e.nodes[id]
		for _, rr := range n.replicas {
			rr.r.Stop()
		}
		_ = n.eng.Close()
	}
}

func (e *steppedEnv) handle(t *testing.T, d *datadriven.TestData) string {
	e.t = t
	e.out = &strings.Builder{}
	e.events = &strings.Builder{}
	e.finished = nil
	if d.Cmd != "new-range" && e.nodes == nil {
		t.Fatalf("%s: no range yet (new-range)", d.Pos)
	}
	switch d.Cmd {
	case "new-range":
		e.newRange(d)
	case "campaign":
		if !d.HasArg("n") {
			t.Fatalf("%s: campaign needs n=", d.Pos)
		}
		for _, rr := range e.selectReplicas(d, "n") {
			rr.r.Campaign()
		}
	case "transfer-leader":
		var to uint64
		d.ScanArgs(t, "to", &to)
		if !d.HasArg("n") {
			t.Fatalf("%s: transfer-leader needs n=", d.Pos)
		}
		for _, rr := range e.selectReplicas(d, "n") {
			rr.r.TransferLeader(to)
		}
	case "tick":
		count := 1
		if d.HasArg("count") {
			d.ScanArgs(t, "count", &count)
		}
		e.tick(d, count)
	case "process-ready":
		for _, rr := range e.selectReplicas(d, "n") {
			e.handleReady(rr)
		}
	case "deliver":
		e.deliver(d)
	case "stabilize":
		e.stabilize(d)
	case "partition":
		e.isolated = map[uint64]bool{}
		for _, id := range scanIDs(t, d, "n") {
			e.isolated[id] = true
		}
	case "cut":
		ids := scanIDs(t, d, "n")
		if e.cut == nil {
			e.cut = map[[2]uint64]bool{}
		}
		for _, a := range ids {
			for _, b := range ids {
				if a < b {
					e.cut[[2]uint64{a, b}] = true
				}
			}
		}
	case "heal":
		e.isolated, e.cut = nil, nil
	case "propose-put", "get", "split":
		e.startRequest(d)
	case "requests":
		for _, rq := range e.requests {
			fmt.Fprintf(e.out, "%s at n%d/r%d: %s\n", rq.name, rq.node, rq.rangeID, rq.waiting)
		}
	case "lease":
		e.printLeases(d)
	case "state":
		e.printState(d)
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	e.advanceRequests()
	e.flushEvents("")
	return e.out.String()
}

// tick moves the clock count ticks ahead and ticks the selected replicas
// at each, handling their Readies. The output is grouped by replica, not
// by tick: a follower's election timeout is randomised by Raft (in
// [ElectionTicks, 2*ElectionTicks)), so the tick at which it campaigns
// varies from run to run, but what it does over 2*ElectionTicks-1 ticks
// does not: a follower whose election clock is at zero (it just heard from
// its leader, or became a follower) campaigns exactly once in them.
func (e *steppedEnv) tick(d *datadriven.TestData, count int) {
	rrs := e.selectReplicas(d, "n")
	outs := make([]*strings.Builder, len(rrs))
	for j := range outs {
		outs[j] = &strings.Builder{}
	}
	main := e.out
	for i := 0; i < count; i++ {
		e.now = e.now.Add(steppedTick)
		for j, rr := range rrs {
			rr.r.Tick()
			e.out = outs[j]
			e.handleReady(rr)
		}
		e.out = main
		e.advanceRequests()
		e.flushEvents("")
	}
	fmt.Fprintf(e.out, "t=%s\n", e.ticks(e.now))
	for j := range rrs {
		e.out.WriteString(outs[j].String())
	}
}

// flushEvents moves the events collected so far to the output, indented.
func (e *steppedEnv) flushEvents(indent string) {
	s := e.events.String()
	e.events.Reset()
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			e.out.WriteString(indent + line)
		}
	}
}

func (e *steppedEnv) ticks(t time.Time) string {
	return strconv.FormatFloat(float64(t.Sub(steppedEpoch))/float64(steppedTick), 'f', -1, 64)
}

func scanIDs(t *testing.T, d *datadriven.TestData, key string) []uint64 {
	var s string
	d.ScanArgs(t, key, &s)
	var ids []uint64
	for _, f := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%s: %v", d.Pos, key, s, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// newRange makes the nodes and range 1 over the user keyspace, written as
// a node's join writes an initial range (descriptor, Raft state at
// replica.InitialIndex, registry entry).
func (e *steppedEnv) newRange(d *datadriven.TestData) {
	t := e.t
	if e.nodes != nil {
		t.Fatalf("%s: one range per file", d.Pos)
	}
	e.ids = scanIDs(t, d, "ids")
	slices.Sort(e.ids)
	e.electionTicks, e.logKeep = 10, 500
	if d.HasArg("election") {
		d.ScanArgs(t, "election", &e.electionTicks)
	}
	if d.HasArg("log-keep") {
		d.ScanArgs(t, "log-keep", &e.logKeep)
	}
	if d.HasArg("quiesce") {
		e.quiesce = true
		d.ScanArgs(t, "quiesce", &e.quiesceTicks)
		if e.quiesceTicks < 0 {
			t.Fatalf("%s: quiesce=%d: idle ticks cannot be negative", d.Pos, e.quiesceTicks)
		}
	}
	e.now = steppedEpoch
	e.nextTs = 1
	e.reqSeq = map[byte]int{}
	desc := &rpcpb.RangeDescriptor{RangeId: 1, StartKey: keys.UserPrefix, EndKey: keys.UserEnd}
	for _, id := range e.ids {
		desc.Replicas = append(desc.Replicas, &rpcpb.ReplicaDescriptor{NodeId: id})
	}
	e.nodes = map[uint64]*steppedNode{}
	for _, id := range e.ids {
		eng, err := storage.Open("store", storage.Options{FS: vfs.NewMem(), CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		n := &steppedNode{env: e, id: id, eng: eng, replicas: map[uint64]*rangeReplica{}}
		e.nodes[id] = n
		b := eng.NewBatch()
		if err := writeDesc(b, desc); err != nil {
			t.Fatal(err)
		}
		if err := replica.WriteInitialState(b, 1, voters(desc), raftpb.HardState{}); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(registryKey(1), nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		b.Close()
		n.newReplica(1, desc)
	}
	e.printState(d)
}

// replicas returns every replica, by node then range.
func (e *steppedEnv) replicas() []*rangeReplica {
	var out []*rangeReplica
	for _, id := range e.ids {
		n := e.nodes[id]
		rids := make([]uint64, 0, len(n.replicas))
		for rid := range n.replicas {
			rids = append(rids, rid)
		}
		slices.Sort(rids)
		for _, rid := range rids {
			out = append(out, n.replicas[rid])
		}
	}
	return out
}

// selectReplicas returns the replicas on the nodes of argument nodeKey
// (all nodes if absent) of the ranges of argument r (all if absent).
func (e *steppedEnv) selectReplicas(d *datadriven.TestData, nodeKey string) []*rangeReplica {
	var nodes, ranges []uint64
	if d.HasArg(nodeKey) {
		nodes = scanIDs(e.t, d, nodeKey)
	}
	if d.HasArg("r") {
		ranges = scanIDs(e.t, d, "r")
	}
	var out []*rangeReplica
	for _, rr := range e.replicas() {
		st := rr.r.Status()
		if (nodes == nil || slices.Contains(nodes, e.nodeOf(rr))) && (ranges == nil || slices.Contains(ranges, st.RangeID)) {
			out = append(out, rr)
		}
	}
	return out
}

func (e *steppedEnv) nodeOf(rr *rangeReplica) uint64 { return rr.sm.n.(*steppedNode).id }

func replicaName(node, rangeID uint64) string { return fmt.Sprintf("n%d/r%d", node, rangeID) }

// handleReady runs one HandleReady on rr and prints it: the Ready, then
// what handling it did.
func (e *steppedEnv) handleReady(rr *rangeReplica) bool {
	name := replicaName(e.nodeOf(rr), rr.r.RangeID())
	rd, ok := rr.r.HandleReady()
	if !ok {
		// The inbox was drained all the same; anything it did (a dropped
		// proposal) is an event.
		if e.events.Len() > 0 {
			fmt.Fprintf(e.out, "> %s handled its inbox\n", name)
			e.flushEvents("  ")
		}
		return false
	}
	fmt.Fprintf(e.out, "> %s handling Ready\n", name)
	if rd.SoftState != nil {
		fmt.Fprintf(e.out, "  %s\n", raft.DescribeSoftState(*rd.SoftState))
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		fmt.Fprintf(e.out, "  HardState %s\n", raft.DescribeHardState(rd.HardState))
	}
	for _, en := range rd.Entries {
		fmt.Fprintf(e.out, "  append %s\n", raft.DescribeEntry(en, describeCmd))
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		fmt.Fprintf(e.out, "  snapshot %s\n", raft.DescribeSnapshot(rd.Snapshot))
	}
	e.flushEvents("  ")
	return true
}

// deliver steps the outbox's messages that match the filters into their
// receivers, or drops them (drop, or an isolated node).
func (e *steppedEnv) deliver(d *datadriven.TestData) {
	var from, to, ranges []uint64
	if d.HasArg("from") {
		from = scanIDs(e.t, d, "from")
	}
	if d.HasArg("to") {
		to = scanIDs(e.t, d, "to")
	}
	if d.HasArg("r") {
		ranges = scanIDs(e.t, d, "r")
	}
	var typ string
	if d.HasArg("type") {
		d.ScanArgs(e.t, "type", &typ)
	}
	drop := d.HasArg("drop")
	e.sortOutbox()
	kept := e.outbox[:0:0]
	for _, sm := range e.outbox {
		m := sm.m
		if (from != nil && !slices.Contains(from, m.From)) || (to != nil && !slices.Contains(to, m.To)) ||
			(ranges != nil && !slices.Contains(ranges, sm.rangeID)) || (typ != "" && m.Type.String() != typ) {
			kept = append(kept, sm)
			continue
		}
		e.deliverOne(sm, drop)
	}
	e.outbox = kept
	e.flushEvents("")
}

// sortOutbox orders the outbox by sender, then receiver, keeping the
// order of the messages between two nodes: the order in which different
// replicas sent does not show in the output (see tick).
func (e *steppedEnv) sortOutbox() {
	slices.SortStableFunc(e.outbox, func(a, b steppedMsg) int {
		if c := cmp.Compare(a.m.From, b.m.From); c != 0 {
			return c
		}
		return cmp.Compare(a.m.To, b.m.To)
	})
}

// deliverAll delivers every message in the outbox; it reports whether
// there were any.
func (e *steppedEnv) deliverAll() bool {
	e.sortOutbox()
	msgs := e.outbox
	e.outbox = nil
	for _, sm := range msgs {
		e.deliverOne(sm, false)
	}
	return len(msgs) > 0
}

// deliverOne hands a message to its receiver as Node.receiveRaft does:
// a replica of a range the node does not know is created uninitialized,
// and a snapshot that would initialize a replica over the span of another
// one (which has yet to apply the split that made the range) is refused
// and reported to the sender as failed.
func (e *steppedEnv) deliverOne(sm steppedMsg, drop bool) {
	m := sm.m
	if m.Type == raftpb.MsgSnap {
		// Node streams the snapshot's data from the sender's engine
		// snapshot (snapshot.go); here it travels inline.
		from := e.nodes[m.From]
		data, err := inlineSnapshot(from.snapshots(), m.Snapshot.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		snap := *m.Snapshot
		snap.Data = data
		m.Snapshot = &snap
		sm.m = m
	}
	desc := sm.describe()
	if drop || e.isolated[m.From] || e.isolated[m.To] || e.cut[[2]uint64{min(m.From, m.To), max(m.From, m.To)}] {
		e.event("dropped %s", desc)
		if m.Type == raftpb.MsgSnap {
			e.reportSnapshotFailure(sm)
		}
		return
	}
	n := e.nodes[m.To]
	if n == nil {
		e.event("dropped %s (no node %d)", desc, m.To)
		return
	}
	rr := n.replicas[sm.rangeID]
	if m.Type == raftpb.MsgSnap && (rr == nil || rr.sm.Desc() == nil) {
		st, _, err := snapshotState(m.Snapshot.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, other := range n.replicas {
			od := other.sm.Desc()
			if other.r.RangeID() != sm.rangeID && od != nil &&
				bytes.Compare(od.StartKey, st.Range.EndKey) < 0 && bytes.Compare(st.Range.StartKey, od.EndKey) < 0 {
				e.event("refused %s: it overlaps n%d/r%d, which has yet to apply the split", desc, n.id, other.r.RangeID())
				e.reportSnapshotFailure(sm)
				return
			}
		}
	}
	e.event("%s", desc)
	if rr == nil {
		rr = n.newReplica(sm.rangeID, nil)
		e.event("n%d/r%d created uninitialized", n.id, sm.rangeID)
	}
	if sm.quiesce {
		rr.r.StepQuiesce(m)
		return
	}
	rr.r.Step(m)
}

func (e *steppedEnv) reportSnapshotFailure(sm steppedMsg) {
	if n := e.nodes[sm.m.From]; n != nil {
		if rr := n.replicas[sm.rangeID]; rr != nil {
			rr.r.ReportSnapshotFailure(sm.m.To)
			e.event("n%d/r%d told the snapshot to n%d failed", n.id, sm.rangeID, sm.m.To)
		}
	}
}

// stabilize delivers every message and handles every Ready until nothing
// moves. With quiet, only the final state of the replicas is printed.
func (e *steppedEnv) stabilize(d *datadriven.TestData) {
	quiet := d.HasArg("quiet")
	for round := 0; ; round++ {
		if round == steppedStabilizeRoundsMax {
			e.t.Fatalf("%s: still moving after %d rounds", d.Pos, round)
		}
		moved := false
		if len(e.outbox) > 0 {
			e.out.WriteString("> deliver\n")
			e.deliverAll()
			e.flushEvents("  ")
			moved = true
		}
		for _, rr := range e.replicas() {
			if e.handleReady(rr) {
				moved = true
			}
		}
		e.advanceRequests()
		if e.events.Len() > 0 {
			e.out.WriteString("> requests\n")
			e.flushEvents("  ")
		}
		if !moved {
			break
		}
	}
	if quiet {
		e.out = &strings.Builder{}
		e.events.Reset()
		for _, f := range e.finished {
			fmt.Fprintln(e.out, f)
		}
		e.printState(d)
	}
}

// A steppedRequest is a client request at one replica, advanced one step
// at a time (advance) by the harness, as the server's handler would go.
type steppedRequest struct {
	name    string
	node    uint64
	rangeID uint64
	kind    string // "put", "get", "split"
	req     *rpcpb.BatchRequest
	// forgeTerm, forgeGen (if set) replace the proposer term and range
	// generation in the evaluated command.
	forgeTerm, forgeGen *uint64
	splitKey            []byte
	rhs                 uint64
	// expect, for a get: the value it must read (a linearizable read
	// returns the last write acknowledged before it started); pos is the
	// command's position in the testdata, for the error.
	expect, pos string

	// waiting says what the request waits for.
	waiting string
	term    uint64
	byLease bool
	readIdx <-chan error
	guard   *concurrency.LatchGuard
	latches *concurrency.LatchManager // the one guard is from
	done    bool
}

func (e *steppedEnv) startRequest(d *datadriven.TestData) {
	t := e.t
	var node uint64
	var key string
	d.ScanArgs(t, "n", &node)
	d.ScanArgs(t, "key", &key)
	prefix := map[string]byte{"propose-put": 'p', "get": 'g', "split": 's'}[d.Cmd]
	rq := &steppedRequest{node: node}
	if d.HasArg("name") {
		d.ScanArgs(t, "name", &rq.name)
	} else {
		e.reqSeq[prefix]++
		rq.name = fmt.Sprintf("%c%d", prefix, e.reqSeq[prefix])
	}
	n := e.nodes[node]
	if n == nil {
		t.Fatalf("%s: no node %d", d.Pos, node)
	}
	k := keys.UserKey([]byte(key))
	for _, rr := range e.replicas() {
		if e.nodeOf(rr) == node && eval.ContainsKey(rr.sm.Desc(), k) {
			rq.rangeID = rr.r.RangeID()
		}
	}
	if rq.rangeID == 0 {
		t.Fatalf("%s: n%d holds no range with key %q", d.Pos, node, key)
	}
	switch d.Cmd {
	case "propose-put":
		var value string
		d.ScanArgs(t, "value", &value)
		rq.kind = "put"
		rq.req = &rpcpb.BatchRequest{RangeId: rq.rangeID, Requests: []*rpcpb.RequestUnion{
			{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: k, Value: []byte(value)}}}}}
		if d.HasArg("term") {
			var v uint64
			d.ScanArgs(t, "term", &v)
			rq.forgeTerm = &v
		}
		if d.HasArg("gen") {
			var v uint64
			d.ScanArgs(t, "gen", &v)
			rq.forgeGen = &v
		}
	case "get":
		rq.kind = "get"
		rq.pos = d.Pos
		if d.HasArg("expect") {
			d.ScanArgs(t, "expect", &rq.expect)
		}
		rq.req = &rpcpb.BatchRequest{RangeId: rq.rangeID, Requests: []*rpcpb.RequestUnion{
			{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: k}}}}}
	case "split":
		rq.kind = "split"
		rq.splitKey = k
		d.ScanArgs(t, "rhs", &rq.rhs)
	}
	e.requests = append(e.requests, rq)
	e.advanceRequests()
	if !rq.done {
		e.event("%s waits: %s", rq.name, rq.waiting)
	}
}

// advanceRequests moves every request in flight as far as it can go.
func (e *steppedEnv) advanceRequests() {
	kept := e.requests[:0]
	for _, rq := range e.requests {
		if !rq.done {
			e.advance(rq)
		}
		if !rq.done {
			kept = append(kept, rq)
		}
	}
	e.requests = kept
}

func (e *steppedEnv) finish(rq *steppedRequest, format string, args ...any) {
	rq.done = true
	if rq.guard != nil {
		rq.latches.Release(rq.guard)
		rq.guard = nil
	}
	line := fmt.Sprintf("%s: %s", rq.name, fmt.Sprintf(format, args...))
	e.finished = append(e.finished, line)
	e.event("%s", line)
}

// advance takes rq as far as it can go now; it leaves rq.waiting saying
// what it waits for, or finishes it.
func (e *steppedEnv) advance(rq *steppedRequest) {
	rr := e.nodes[rq.node].replicas[rq.rangeID]
	if rr == nil {
		e.finish(rq, "range gone")
		return
	}
	for !rq.done {
		st := rr.r.Status()
		switch {
		case rq.waiting == "proposal":
			return // its finished callback ends it
		case rq.guard == nil && rq.readIdx == nil:
			// Start (server.batch, writeOnce, readOnce, splitLocal).
			if !st.IsLeader {
				e.finish(rq, "refused: %s", describeErr(e.notLeaseholder(rr)))
				return
			}
			// A write evaluates only on a current state (writeOnce waits
			// for it); splitLocal asks only for leadership.
			if rq.kind == "put" && !st.Leaseholder {
				rq.waiting = "leaseholder (an entry of its term to apply)"
				return
			}
			rq.term = st.Term
			// As the server: a read by the lease is noted (ReadByLease), so
			// that it counts as activity for quiescence.
			if rq.kind == "get" && !rr.r.ReadByLease(st.Term) {
				rq.readIdx = rr.r.ReadIndexNoWait()
				rq.waiting = "ReadIndex (no valid lease)"
				continue
			}
			rq.byLease = rq.kind == "get"
			rq.guard, rq.latches = rr.latches.Sequence(e.latchSpans(rq, rr)), rr.latches
		case rq.readIdx != nil && rq.guard == nil:
			select {
			case err := <-rq.readIdx:
				rq.readIdx = nil
				if err != nil {
					e.finish(rq, "refused: %v", err)
					return
				}
				rq.guard, rq.latches = rr.latches.Sequence(e.latchSpans(rq, rr)), rr.latches
			default:
				return
			}
		default:
			if !rq.guard.Ready() {
				rq.waiting = "latches (a write in flight)"
				return
			}
			e.evaluate(rq, rr)
		}
	}
}

func (e *steppedEnv) latchSpans(rq *steppedRequest, rr *rangeReplica) []concurrency.LatchSpan {
	d := rr.sm.Desc()
	if rq.kind == "split" {
		// splitLocal: a write latch over the whole range.
		return []concurrency.LatchSpan{{Span: concurrency.Span{Key: d.StartKey, EndKey: d.EndKey}, Access: concurrency.Write}}
	}
	return eval.Declare(rq.req, d)
}

// evaluate runs rq under its latches: a read on an engine snapshot, a
// write by evaluateWrite and then a proposal, a split by a proposal.
func (e *steppedEnv) evaluate(rq *steppedRequest, rr *rangeReplica) {
	n := e.nodes[rq.node]
	switch rq.kind {
	case "get":
		snap := n.eng.NewSnapshot()
		defer snap.Close()
		rq.latches.Release(rq.guard)
		rq.guard = nil
		if rq.byLease {
			if st := rr.r.Status(); !st.LeaseValid(rr.r.Now()) || st.Term != rq.term {
				rq.byLease = false
				return // start again, by ReadIndex
			}
		}
		gc, err := rr.sm.gcThreshold()
		if err != nil {
			e.t.Fatal(err)
		}
		resp := eval.EvalRead(eval.Context{Desc: rr.sm.Desc(), GCThreshold: gc}, snap, rq.req)
		how := "after ReadIndex"
		if rq.byLease {
			how = "under the lease"
		}
		got := describeResp(resp)
		e.finish(rq, "%s (%s)", got, how)
		if rq.expect != "" && got != rq.expect {
			e.t.Errorf("%s: %s read %s, want %s", rq.pos, rq.name, got, rq.expect)
		}
	case "put":
		ts := e.nextTs
		e.nextTs++
		resp, _, data, err := evaluateWrite(n.eng, rq.term, eval.Context{Desc: rr.sm.Desc(), WriteTs: ts}, rq.req)
		if err != nil {
			e.t.Fatal(err)
		}
		if resp.Error != nil || data == nil {
			e.finish(rq, "%s", describeResp(resp))
			return
		}
		if rq.forgeTerm != nil || rq.forgeGen != nil {
			var c rpcpb.RaftCommand
			if err := proto.Unmarshal(data, &c); err != nil {
				e.t.Fatal(err)
			}
			if rq.forgeTerm != nil {
				c.ProposerTerm = *rq.forgeTerm
			}
			if rq.forgeGen != nil {
				c.RangeGeneration = *rq.forgeGen
			}
			if data, err = proto.Marshal(&c); err != nil {
				e.t.Fatal(err)
			}
		}
		e.propose(rq, rr, data, rq.term)
	case "split":
		d := rr.sm.Desc()
		data, err := proto.Marshal(&rpcpb.RaftCommand{Split: &rpcpb.SplitCommand{SplitKey: rq.splitKey, NewRangeId: rq.rhs, ExpectedGeneration: d.Generation}})
		if err != nil {
			e.t.Fatal(err)
		}
		e.propose(rq, rr, data, 0)
	}
}

func (e *steppedEnv) propose(rq *steppedRequest, rr *rangeReplica, data []byte, term uint64) {
	e.event("%s: proposed at %s: %s", rq.name, replicaName(rq.node, rq.rangeID), describeCommand(data))
	rq.waiting = "proposal"
	rr.r.ProposeNoWait(data, term, func(res any, err error) {
		if err != nil {
			e.finish(rq, "dropped: %v", err)
			return
		}
		switch r := res.(type) {
		case appliedResult:
			e.finish(rq, "applied")
		case splitResult:
			e.finish(rq, "applied")
		case *rpcpb.BatchResponse:
			e.finish(rq, "%s", describeResp(r))
		default:
			e.finish(rq, "%v", r)
		}
	})
}

func (e *steppedEnv) notLeaseholder(rr *rangeReplica) *rpcpb.Error {
	st := rr.r.Status()
	return pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "n%d is not the leaseholder of r%d (leader: n%d)", e.nodeOf(rr), st.RangeID, st.Leader)
}

func (e *steppedEnv) printLeases(d *datadriven.TestData) {
	fmt.Fprintf(e.out, "t=%s\n", e.ticks(e.now))
	for _, rr := range e.selectReplicas(d, "n") {
		st := rr.r.Status()
		name := replicaName(e.nodeOf(rr), st.RangeID)
		switch {
		case !st.IsLeader && st.Leader == 0:
			fmt.Fprintf(e.out, "%s: not leader in term %d, no leader known\n", name, st.Term)
		case !st.IsLeader && rr.r.Quiescent():
			fmt.Fprintf(e.out, "%s: follower in term %d (leader n%d), quiescent\n", name, st.Term, st.Leader)
		case !st.IsLeader:
			fmt.Fprintf(e.out, "%s: follower in term %d (leader n%d)\n", name, st.Term, st.Leader)
		case !st.Leaseholder:
			fmt.Fprintf(e.out, "%s: leader in term %d, not yet leaseholder\n", name, st.Term)
		case st.LeaseExpiry.IsZero():
			fmt.Fprintf(e.out, "%s: leaseholder in term %d, no lease: reads go through ReadIndex\n", name, st.Term)
		default:
			valid := "valid"
			if !st.LeaseValid(rr.r.Now()) {
				valid = "expired: reads go through ReadIndex"
			}
			if rr.r.Quiescent() {
				valid += ", quiescent"
			}
			fmt.Fprintf(e.out, "%s: leaseholder in term %d, lease until t=%s (%s)\n", name, st.Term, e.ticks(st.LeaseExpiry), valid)
		}
	}
}

// printState prints every replica's Raft state, descriptor and data, and
// checks I5: replicas of a range that applied the same index hold the same
// descriptor and data.
func (e *steppedEnv) printState(d *datadriven.TestData) {
	type seen struct {
		name   string
		digest uint64
	}
	byIndex := map[[2]uint64]seen{}
	for _, rr := range e.selectReplicas(d, "n") {
		st := rr.r.Status()
		name := replicaName(e.nodeOf(rr), st.RangeID)
		desc := rr.sm.Desc()
		if desc == nil {
			fmt.Fprintf(e.out, "%s: uninitialized, term %d\n", name, st.Term)
			continue
		}
		role := "follower"
		if st.IsLeader {
			role = "leader"
		}
		data, digest := e.rangeData(rr)
		fmt.Fprintf(e.out, "%s: %s term=%d applied=%d commit=%d truncated=%d %s\n", name, role, st.Term, st.Applied, st.Commit, st.Truncated, describeDesc(desc))
		fmt.Fprintf(e.out, "  data: %s\n", data)
		k := [2]uint64{st.RangeID, st.Applied}
		if other, ok := byIndex[k]; ok && other.digest != digest {
			fmt.Fprintf(e.out, "  I5 VIOLATED: %s and %s applied %d but differ\n", other.name, name, st.Applied)
			e.t.Errorf("%s: I5: %s and %s applied index %d of r%d but differ", d.Pos, other.name, name, st.Applied, st.RangeID)
		} else if !ok {
			byIndex[k] = seen{name, digest}
		}
	}
}

// rangeData lists the range's data as this replica holds it (every
// version) and hashes its descriptor and the raw keys and values.
func (e *steppedEnv) rangeData(rr *rangeReplica) (string, uint64) {
	desc := rr.sm.Desc()
	h := fnv.New64a()
	db, _ := proto.Marshal(desc)
	h.Write(db)
	var parts []string
	err := mvcc.IterateSpan(e.nodes[e.nodeOf(rr)].eng, desc.StartKey, desc.EndKey, func(k, v []byte) error {
		h.Write(k)
		h.Write(v)
		parts = append(parts, describeKV(k, v))
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if parts == nil {
		return "(none)", h.Sum64()
	}
	return strings.Join(parts, " "), h.Sum64()
}

// Formatting.

func describeMsg(m raftpb.Message) string { return raft.DescribeMessage(m, describeCmd) }

// describeCmd formats an entry's data: an 8-byte proposal ID (random, not
// printed), then a RaftCommand.
func describeCmd(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	if len(data) <= 8 {
		return "(read index)"
	}
	return describeCommand(data[8:])
}

// describeCommand formats a RaftCommand.
func describeCommand(data []byte) string {
	var c rpcpb.RaftCommand
	if err := proto.Unmarshal(data, &c); err != nil {
		return fmt.Sprintf("(undecodable: %v)", err)
	}
	switch {
	case c.ProposerTerm != 0:
		return fmt.Sprintf("[term=%d gen=%d] %s", c.ProposerTerm, c.RangeGeneration, describeRepr(c.WriteBatch))
	case c.Split != nil:
		return fmt.Sprintf("split at %s -> r%d (gen %d)", describeKey(c.Split.SplitKey), c.Split.NewRangeId, c.Split.ExpectedGeneration)
	}
	return strings.TrimSpace(fmt.Sprint(&c))
}

// describeRepr lists the writes of an engine batch (a leaseholder's
// evaluated write): put key@ts=value for MVCC versions.
func describeRepr(repr []byte) string {
	r := batchrepr.Read(repr)
	var parts []string
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return fmt.Sprintf("(bad batch: %v)", err)
		}
		if !ok {
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if len(v) > 0 {
				v = v[1:] // the storage tag: data values are inline in a batch
			}
			parts = append(parts, describeKV(k, v))
		default:
			parts = append(parts, fmt.Sprintf("%v %q", kind, k))
		}
	}
	return strings.Join(parts, " ")
}

// describeKV formats a physical data key and its stored value (storage
// tag stripped for a batch; the engine's values read back without it).
func describeKV(k, v []byte) string {
	logical, kind, ts, err := mvcc.DecodeKey(k)
	if err != nil {
		return fmt.Sprintf("%q", k)
	}
	switch kind {
	case mvcc.KindVersion:
		val, del, err := mvcc.DecodeVersionValue(v)
		switch {
		case err != nil:
			return fmt.Sprintf("%s@%d=(%v)", describeKey(logical), ts, err)
		case del:
			return fmt.Sprintf("del %s@%d", describeKey(logical), ts)
		}
		return fmt.Sprintf("put %s@%d=%s", describeKey(logical), ts, val)
	case mvcc.KindIntent:
		return fmt.Sprintf("intent %s", describeKey(logical))
	}
	return fmt.Sprintf("plain %s=%q", describeKey(logical), v)
}

// describeKey prints a user key without its prefix, and the ends of the
// user keyspace as "" and end.
func describeKey(k []byte) string {
	switch {
	case bytes.Equal(k, keys.UserEnd):
		return "end"
	case keys.IsUser(k):
		k = k[1:]
		for _, c := range k {
			if c <= ' ' || c > '~' || c == '"' || c == '@' || c == '=' {
				return strconv.Quote(string(k))
			}
		}
		if len(k) == 0 {
			return `""`
		}
		return string(k)
	}
	return fmt.Sprintf("%q", k)
}

func describeDesc(d *rpcpb.RangeDescriptor) string {
	return fmt.Sprintf("r%d [%s, %s) gen=%d", d.RangeId, describeKey(d.StartKey), describeKey(d.EndKey), d.Generation)
}

func describeErr(e *rpcpb.Error) string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

func describeResp(r *rpcpb.BatchResponse) string {
	if r.Error != nil {
		return "error " + describeErr(r.Error)
	}
	var parts []string
	for _, ru := range r.Responses {
		switch v := ru.Value.(type) {
		case *rpcpb.ResponseUnion_Get:
			if !v.Get.Found {
				parts = append(parts, "not found")
			} else {
				parts = append(parts, fmt.Sprintf("%s@%d", v.Get.Value, v.Get.Ts))
			}
		case *rpcpb.ResponseUnion_Put:
			parts = append(parts, fmt.Sprintf("put at %d", v.Put.Ts))
		default:
			parts = append(parts, fmt.Sprint(ru))
		}
	}
	if parts == nil {
		return "ok"
	}
	return strings.Join(parts, ", ")
}
