package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/storage"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Errors returned by Propose and Read.
var (
	// ErrNotLeader: this replica is not the Raft leader (the leaseholder).
	// Nothing was proposed. The leader hint is in Status().
	ErrNotLeader = errors.New("replica: not the leader")
	// ErrProposalDropped: the proposal definitely never applied.
	ErrProposalDropped = errors.New("replica: proposal dropped")
	// ErrAmbiguous: the proposal may or may not apply.
	ErrAmbiguous = errors.New("replica: proposal outcome unknown")
	// ErrStopped: the replica was stopped.
	ErrStopped = errors.New("replica: stopped")
)

// StateMachine is the range's deterministic state, kept in the engine.
type StateMachine interface {
	// Apply applies the command cmd of the entry at (index, term), writing
	// into b, an indexed batch that the committed entries of one Ready share
	// (so that they reach the engine in one write). A command that fails
	// must write nothing to b. It returns its result for the proposer, and
	// a function to run once b is committed (side effects such as starting
	// the right hand side of a split; nil if none): the replica then commits
	// b before it applies the next entry, so that the next entry sees the
	// side effect. The replica records the applied index in b and commits it.
	// Apply panics on an engine error: a replica that cannot apply its log
	// must stop rather than diverge (I5).
	Apply(b *storage.Batch, index, term uint64, cmd []byte) (result any, after func())
	// SnapshotData returns the data of a snapshot of the range as of snap,
	// an engine snapshot taken at the applied index. It owns snap and
	// closes it, at once or once the snapshot is sent (a state machine may
	// stream the range's data from it, see kvserver/snapshot.go).
	SnapshotData(snap *storage.Snapshot) ([]byte, error)
	// ApplySnapshot replaces the range's data with data, writing into b.
	ApplySnapshot(b *storage.Batch, data []byte) (after func(), err error)
}

// ConfChangeStateMachine is a StateMachine that takes part in Raft
// configuration changes (ProposeConfChange). Without it, every
// configuration change entry is applied to Raft as it is.
type ConfChangeStateMachine interface {
	StateMachine
	// ApplyConfChange decides, deterministically from the replicated state
	// (every replica decides alike, I5), whether the configuration change
	// cc of the entry at (index, term), proposed with command cmd, takes
	// effect, and if so writes its effect into b (as Apply). A refused
	// change writes nothing and leaves Raft's configuration as it is. The
	// result and after are as Apply's.
	ApplyConfChange(b *storage.Batch, index, term uint64, cc raftpb.ConfChangeV2, cmd []byte) (accept bool, result any, after func())
}

// Transport sends Raft messages of a range to other nodes. Send must not
// block on the network; messages may be lost (Raft retransmits).
type Transport interface {
	Send(rangeID uint64, msgs []raftpb.Message)
}

// QuiesceTransport is a Transport that can mark heartbeats as quiesce
// heartbeats (see quiescence in the package comment). A replica quiesces
// only if its Transport implements it.
type QuiesceTransport interface {
	Transport
	// SendQuiesce sends msgs (MsgHeartbeat) marked so that the receiving
	// node hands them to Replica.StepQuiesce rather than Replica.Step.
	SendQuiesce(rangeID uint64, msgs []raftpb.Message)
}

// testingAfterQuiesceStore, if set (tests only, before any replica
// starts), runs in maybeQuiesceLeader right after the leader marks itself
// quiescent, under mu: where a racing lease read may land.
var testingAfterQuiesceStore func(*Replica)

// QuiesceIdleTicks is the default of Config.QuiesceIdleTicks: a leader
// quiesces on the first tick that finds its group idle.
const QuiesceIdleTicks = 0

// Config configures a Replica. Zero fields take defaults.
type Config struct {
	RangeID uint64
	// PeerID is the Raft ID of this replica: its replica ID and node ID
	// packed (PeerID, peer.go; one replica per node per range).
	PeerID uint64
	Engine *storage.Engine
	// State, if set, is where New reads the replica's persisted Raft
	// state instead of Engine: an engine snapshot, so that the caller
	// reads its own state of the range (kvserver: the descriptor) from
	// the same point in time.
	State     storage.Reader
	SM        StateMachine
	Transport Transport
	// Scheduler processes the replica's Ready work. It must persist to
	// Engine. nil: Start makes a scheduler of one worker for this replica
	// alone, closed by Stop (tests and tools with a single range).
	Scheduler *Scheduler
	// ElectionTicks is the election timeout in ticks (default 10). Raft
	// randomises it in [ElectionTicks, 2*ElectionTicks).
	ElectionTicks int
	// HeartbeatTicks is the leader's heartbeat interval in ticks (default 1).
	HeartbeatTicks int
	// LogEntriesKeep is how many applied entries stay in the log after a
	// truncation; the log is truncated when it exceeds twice this number
	// (default 500). Followers further behind catch up by snapshot.
	LogEntriesKeep uint64
	// ProposalsMax bounds proposals waiting in the queue (default 4096).
	ProposalsMax int
	Logger       *slog.Logger
	// TickInterval is the wall time between two calls of Tick. With it the
	// leader holds a lease (see leaderLease); 0 means no lease: every
	// current read goes through ReadIndex.
	TickInterval time.Duration
	// ClockRateDriftMax bounds how much faster one node's monotonic clock
	// may run than another's, as a fraction (default 0.1). The lease is
	// shortened by it. A drift beyond it, or a pause of a leader between
	// its lease check and its read, can serve a stale read.
	ClockRateDriftMax float64
	// Now is the clock (default time.Now); tests pass their own.
	Now func() time.Time
	// QuiesceIdleTicks is how many ticks a leader must see without a
	// proposal, a read or a change of its commit index before the tick on
	// which it quiesces the group (default QuiesceIdleTicks, 0: the first
	// tick that finds nothing pending and the whole log replicated and
	// applied). Quiescence needs a QuiesceTransport; without one the
	// group never quiesces.
	QuiesceIdleTicks int
	// PeerLive reports whether the node nodeID has been heard from lately
	// (node liveness). A leader quiesces only if every follower is live.
	// nil: every peer counts as live.
	PeerLive func(nodeID uint64) bool
	// OnWake, if not nil, is called when the replica leaves quiescence
	// (a proposal, a read, a message, a campaign, a transfer or Unquiesce
	// woke it), with the replica's lock held: it must not call back into
	// the replica. The node keeps its set of replicas to tick with it, so
	// that a tick costs nothing per quiescent replica.
	OnWake func()
	// RefuseVotesUntil: before this time (by Now) the replica drops vote
	// and pre-vote requests. A replica that replaces another of the same
	// range on this node (a placeholder replaced when the split creating
	// its range applies) is given a lease duration: its predecessor may
	// have acknowledged a leader's heartbeat, and a leader's lease rests
	// on the acknowledging followers not voting for another leader
	// meanwhile (see leaderLease). A restarted node guards the same way.
	RefuseVotesUntil time.Time
}

// EnsureDefaults fills the zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.LogEntriesKeep == 0 {
		c.LogEntriesKeep = 500
	}
	if c.ProposalsMax == 0 {
		c.ProposalsMax = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClockRateDriftMax == 0 {
		c.ClockRateDriftMax = 0.1
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// LeaseDuration is how long after a quorum acknowledged its leadership the
// leader may serve reads without another round: (ElectionTicks - 1) ticks,
// shortened by the clock drift bound; 0 when leases are off.
func (c *Config) LeaseDuration() time.Duration {
	if c.TickInterval <= 0 || c.ElectionTicks < 2 {
		return 0
	}
	return time.Duration(float64(time.Duration(c.ElectionTicks-1)*c.TickInterval) * (1 - c.ClockRateDriftMax))
}

// Status is a snapshot of the replica's Raft state.
type Status struct {
	RangeID  uint64
	Leader   uint64
	IsLeader bool
	Term     uint64
	Commit   uint64
	Applied  uint64
	// Truncated is the index of the last entry removed from the log.
	Truncated uint64
	// LeaderPeer is the leader's Raft peer ID (Leader is its node).
	LeaderPeer uint64
	// CaughtUp lists, on the leader, the nodes of the voting followers
	// whose log matches the leader's and that were recently active: safe
	// targets for a leadership transfer. Node IDs, as Leader,
	// Replicating and LearnersReplicating.
	CaughtUp []uint64
	// LearnersReplicating lists, on the leader, the nodes of the learners
	// that take appends (StateReplicate) and were recently active: they
	// hold a snapshot and follow the log, ready to be promoted.
	LearnersReplicating []uint64
	// Joint: the configuration is joint (a voter is being swapped).
	Joint bool
	// Replicating lists, on the leader, the followers that were recently
	// active and take appends (Raft's StateReplicate): neither waiting for
	// a snapshot nor probed for where their log diverges. They may lag by
	// the appends in flight. A follower missing from it is not caught up
	// (metrics: under-replicated ranges).
	Replicating []uint64
	// Leaseholder: this replica is the leader and has applied an entry of
	// its own term (the empty entry Raft appends on election). Every entry
	// of an earlier term is then applied here, and every later entry is
	// this leader's own proposal: its state is current for every key that
	// no proposal in flight touches, so it may evaluate requests.
	// Invariant: Leaseholder implies IsLeader.
	Leaseholder bool
	// LeaseExpiry: while Leaseholder and before this time (by Config.Now),
	// no other replica can have been elected, so the replica's applied
	// state is current without a ReadIndex round (see leaderLease).
	LeaseExpiry time.Time
	// Quiescent: the replica is quiesced and takes no ticks (see the
	// package comment).
	Quiescent bool
}

// LeaseValid reports whether the replica may serve a current read at now
// without a ReadIndex round.
func (s Status) LeaseValid(now time.Time) bool {
	return s.Leaseholder && now.Before(s.LeaseExpiry)
}

type proposal struct {
	id   uint64
	data []byte
	// term, if not 0, is the Raft term in which the command was evaluated:
	// the proposal is dropped unless the replica still leads in that term.
	term uint64
	// finished, if not nil, is called once with the proposal's final
	// outcome (applied, dropped, or ambiguous because the replica stopped),
	// even after the proposer has stopped waiting. It runs on a scheduler
	// worker (or in Stop, or in the proposer) and must not block.
	finished func(result any, err error)
	done     chan proposalResult // buffered, receives once
	// cc, if not nil, makes this a configuration change proposal: its
	// Context is the proposal id followed by the command (data).
	cc     *raftpb.ConfChangeV2
	handed bool // given to RawNode.Propose; guarded by Replica.mu
	// over: finish was called. Guarded by Replica.raftMu once the
	// proposal is in the inbox; before that, by the proposer alone.
	over bool
}

// finish delivers the proposal's outcome, once.
func (p *proposal) finish(res proposalResult) {
	if p.over {
		return
	}
	p.over = true
	p.done <- res
	if p.finished != nil {
		p.finished(res.result, res.err)
	}
}

type proposalResult struct {
	result any
	err    error
}

// readRequest is one ReadIndex round: the reads it serves, and when and in
// which term it was issued (its answer extends the lease from then).
type readRequest struct {
	waiters []*readWaiter
	issued  time.Time
	term    uint64
}

// leaderLease: a leader's lease, from ReadIndex rounds.
//
// A ReadIndex round that is answered proves that a quorum acknowledged
// this leader's heartbeat after the round was issued. With CheckQuorum
// (and PreVote), a follower that heard from the leader refuses to vote
// for ElectionTicks of its ticks, that is for at least ElectionTicks-1
// tick intervals; a new leader needs a vote from that quorum, and a
// follower's own campaign also starts only after ElectionTicks ticks
// without the leader. So no other leader exists before issued +
// LeaseDuration (which takes off the clock drift bound). Exceptions, and
// what covers them:
//   - a leadership transfer (MsgTimeoutNow) makes the target campaign at
//     once: the leader ends its lease when it starts one, and takes no
//     new lease in that term;
//   - a follower that restarts forgets whom it heard from and would vote
//     at once: the node drops vote requests for a LeaseDuration after it
//     starts (kvserver);
//   - a new term: the lease belongs to a term and ends with it.
//
// The lease is renewed in the background, by a ReadIndex round once half
// of it has passed, while the replica leads.
//
// Rejected: etcd raft's ReadOnlyLeaseBased, which trusts leadership until
// the leader's own CheckQuorum step-down; that step-down can come up to
// two election timeouts after a partition, later than a new leader.
type leaderLease struct {
	expiry time.Time
	term   uint64
	// blockedTerm: a transfer started in this term; no lease in it.
	blockedTerm uint64
	// renewIssued: when the last background renewal was issued (zero: none
	// in flight).
	renewIssued time.Time
}

type readWaiter struct {
	done  chan error // buffered, receives once
	index uint64
}

// Replica is one member of a range's Raft group on this node.
//
// It has no goroutine of its own: callers put work in its inbox (mu) and
// queue it with its Scheduler, whose workers drain the inbox into the
// RawNode and handle its Ready (ready.go). Lock order: raftMu, then mu,
// then Scheduler.mu. Scheduler.mu is never held while calling out; mu only
// while a proposal dropped from the inbox runs its finished callback.
type Replica struct {
	cfg Config
	rs  *raftStorage

	// mu guards the inbox; a worker drains it.
	mu struct {
		sync.Mutex
		msgs      []raftpb.Message
		props     []*proposal
		reads     []*readWaiter
		ticks     int
		campaign  bool
		transfer  uint64
		unreach   []uint64
		snapFails []uint64
		// quiesceMsg: a quiesce heartbeat from the leader (StepQuiesce),
		// stepped like msgs but then allowed to quiesce the follower.
		quiesceMsg *raftpb.Message
		started    bool
		stopped    bool
	}
	// quiescent: the replica takes no ticks (Tick is a no-op) until
	// something unquiesces it. Written under mu, read without it.
	quiescent atomic.Bool
	stopc     chan struct{}

	// scheduler processes the replica's work (set by New or, at the
	// latest, by Start under mu before mu.started; fixed after); sched is
	// the replica's place there (guarded by scheduler.mu). ownScheduler:
	// made by Start for this replica alone, closed by Stop.
	scheduler    *Scheduler
	sched        schedState
	ownScheduler bool
	// workers counts the workers inside a round with this replica; more
	// than one is a scheduler bug and panics (Scheduler.work).
	workers atomic.Int32
	// readIndexRounds: see ReadIndexRounds (metrics.go). Atomic.
	readIndexRounds readIndexRounds
	// leaseRead: a read was served by the lease since the last drain
	// (NoteLeaseRead); the drain counts it as activity.
	leaseRead atomic.Bool

	// raftMu guards the RawNode and everything below it. A worker holds it
	// while it handles the replica's Ready (see Scheduler.round), Stop
	// while it marks the replica stopped and fails its waiters: after Stop
	// returns, the replica touches neither its RawNode nor the engine.
	raftMu      sync.Mutex
	rn          *raft.RawNode
	confState   raftpb.ConfState
	applied     uint64
	appliedTerm uint64 // the term of the entry at applied
	truncIndex  uint64
	lastIndex   uint64
	// hardDurable is the HardState last written to the engine, less its
	// commit index when only that changed since (prepareReady).
	hardDurable raftpb.HardState
	// pendingConfIndex is the index of the last configuration change
	// appended to the log (0: none yet). Raft silently turns a conf change
	// into an empty entry while an earlier one is not applied, so none is
	// proposed before applied reaches it (drainInbox).
	pendingConfIndex uint64
	proposals        map[uint64]*proposal // by proposal id, handed to Raft
	byIndex          map[uint64]*proposal // by log index, once appended
	readCtx          map[string]*readRequest
	lease            leaderLease
	applyWait        []*readWaiter // have a read index, wait for applied >= index
	// idleTicks counts the ticks a leader has taken since the last
	// proposal, read, campaign, transfer or commit index change;
	// idleCommit is the commit index at the last of those.
	idleTicks  int
	idleCommit uint64
	// readSinceRenewal: a read was served by the lease since the last
	// ReadIndex round was issued (any round extends the lease). The tick
	// on which the leader would quiesce renews the lease instead
	// (maybeQuiesceLeader), so that a range read now and then keeps its
	// lease through quiescence for a LeaseDuration after its last read.
	readSinceRenewal bool
	// dropHeartbeatResp: the follower just quiesced on a quiesce
	// heartbeat from this leader; the response Raft made is not sent (it
	// would wake the leader).
	dropHeartbeatResp uint64

	status atomic.Pointer[Status]
	// statusCh is closed and replaced whenever leadership or the
	// Leaseholder flag changes (see WaitLeaseholder).
	statusCh atomic.Pointer[chan struct{}]
}

// New loads a replica's Raft state from the engine and returns it, not yet
// running. An uninitialized replica (no state for the range) has an empty
// configuration and can only receive a snapshot.
func New(cfg Config) (*Replica, error) {
	cfg.EnsureDefaults()
	state := cfg.State
	if state == nil {
		state = cfg.Engine
	}
	ps, err := loadState(state, cfg.RangeID)
	if err != nil {
		return nil, err
	}
	if cfg.Scheduler != nil && cfg.Scheduler.cfg.Engine != cfg.Engine {
		return nil, fmt.Errorf("replica r%d: the scheduler persists to another engine", cfg.RangeID)
	}
	r := &Replica{
		cfg:       cfg,
		stopc:     make(chan struct{}),
		scheduler: cfg.Scheduler,
		proposals: map[uint64]*proposal{},
		byIndex:   map[uint64]*proposal{},
		readCtx:   map[string]*readRequest{},
	}
	ms := raft.NewMemoryStorage()
	if ps.truncIndex > 0 {
		if err := ms.ApplySnapshot(raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{
			Index: ps.truncIndex, Term: ps.truncTerm, ConfState: ps.conf}}); err != nil {
			return nil, err
		}
	}
	if err := ms.Append(ps.entries); err != nil {
		return nil, err
	}
	if err := ms.SetHardState(ps.hard); err != nil {
		return nil, err
	}
	r.rs = &raftStorage{MemoryStorage: ms, r: r}
	r.confState = ps.conf
	r.applied = ps.applied
	r.appliedTerm = ps.appliedTerm
	r.hardDurable = ps.hard
	r.truncIndex = ps.truncIndex
	r.lastIndex, _ = ms.LastIndex()
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        cfg.PeerID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   r.rs,
		Applied:                   ps.applied,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxCommittedSizePerReady:  8 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		// A leader removed from its range's configuration steps down (the
		// node moves the lease away before it removes the leader's own
		// replica; this is the backstop).
		StepDownOnRemoval:         true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		DisableProposalForwarding: true,
		Logger:                    raftLogger{cfg.Logger.With("component", "raft", "node", fmt.Sprintf("n%d", NodeOf(cfg.PeerID)), "range", cfg.RangeID)},
	})
	if err != nil {
		return nil, fmt.Errorf("replica r%d: %w", cfg.RangeID, err)
	}
	r.rn = rn
	ch := make(chan struct{})
	r.statusCh.Store(&ch)
	r.publishStatus()
	return r, nil
}

// Start registers the replica with its scheduler, which processes its
// work until Stop. With no Config.Scheduler, Start makes one of one worker.
func (r *Replica) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.started || r.mu.stopped {
		return
	}
	if r.scheduler == nil {
		s, err := NewScheduler(SchedulerConfig{Engine: r.cfg.Engine, Workers: 1})
		if err != nil {
			panic(fmt.Sprintf("replica r%d: %v", r.cfg.RangeID, err))
		}
		r.scheduler, r.ownScheduler = s, true
	}
	r.mu.started = true
	// Under mu, so that a concurrent Stop unregisters after this.
	r.scheduler.register(r)
}

// Stopped reports whether Stop has been called. A caller that reads the
// replica's persisted state and then sees Stopped false knows that state
// was not yet being deleted by a removal (which stops the replica first).
func (r *Replica) Stopped() bool {
	select {
	case <-r.stopc:
		return true
	default:
		return false
	}
}

// Stop unregisters the replica and fails waiting callers: queued proposals
// and reads with ErrStopped, proposals handed to Raft with ErrAmbiguous.
// It waits until no worker is inside the replica's critical section (at
// most the end of one group commit) and not for a whole round: once Stop
// returns the replica neither touches its RawNode nor writes the engine.
// So Stop may be called from a StateMachine's Apply side effect for
// another replica, including one of the same round. A replica never
// started just becomes unusable.
func (r *Replica) Stop() {
	r.raftMu.Lock()
	r.mu.Lock()
	if r.mu.stopped {
		r.mu.Unlock()
		r.raftMu.Unlock()
		return
	}
	r.mu.stopped = true
	s, own := r.scheduler, r.ownScheduler
	r.mu.Unlock()
	close(r.stopc)
	// No longer leading, before any proposer hears "ambiguous" (see
	// prepareReady's step-down).
	if old := r.status.Load(); old != nil && old.IsLeader {
		st := *old
		st.IsLeader, st.Leaseholder, st.LeaseExpiry = false, false, time.Time{}
		r.storeStatus(&st)
	}
	r.failAll(ErrStopped)
	r.raftMu.Unlock()
	if s != nil {
		s.unregister(r)
		if own {
			// Not Close: Stop may run on that scheduler's worker.
			s.closeAsync()
		}
	}
}

func (r *Replica) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.stopped
}

// RangeID returns the range's ID.
func (r *Replica) RangeID() uint64 { return r.cfg.RangeID }

// Status returns the latest published Raft status.
func (r *Replica) Status() Status { return *r.status.Load() }

// Step hands an incoming Raft message to the replica. It unquiesces the
// replica.
func (r *Replica) Step(m raftpb.Message) {
	if (m.Type == raftpb.MsgVote || m.Type == raftpb.MsgPreVote) && !r.cfg.RefuseVotesUntil.IsZero() &&
		r.cfg.Now().Before(r.cfg.RefuseVotesUntil) {
		// The candidate retries after its election timeout.
		return
	}
	r.enqueue(func() { r.mu.msgs = append(r.mu.msgs, m) })
}

// StepQuiesce hands the replica a quiesce heartbeat (a MsgHeartbeat the
// leader sent by QuiesceTransport.SendQuiesce). It is stepped like any
// message; then, if the replica is a follower of that leader in its term
// and knows its commit index, and nothing else is waiting in the inbox,
// the replica quiesces (and does not answer the heartbeat, which would
// wake the leader). Otherwise the replica stays awake and answers.
func (r *Replica) StepQuiesce(m raftpb.Message) {
	if m.Type != raftpb.MsgHeartbeat {
		r.Step(m)
		return
	}
	r.mu.Lock()
	if r.mu.quiesceMsg != nil {
		r.mu.msgs = append(r.mu.msgs, *r.mu.quiesceMsg)
	}
	r.mu.quiesceMsg = &m
	started := r.mu.started
	r.mu.Unlock()
	if started {
		r.scheduler.enqueue(r)
	}
}

// Tick advances the replica's logical clock by one tick. A quiescent
// replica ignores it (and is not queued with the scheduler).
func (r *Replica) Tick() {
	if r.quiescent.Load() {
		return
	}
	r.mu.Lock()
	if r.quiescent.Load() {
		r.mu.Unlock()
		return
	}
	// Ticks that pile up while the replica waits in the scheduler's queue
	// count as one: under overload, a backlog of ticks taken at once would
	// fire election timeouts before the heartbeats waiting behind them in
	// the inbox are stepped (an election storm that feeds the overload).
	// Counting fewer ticks is safe for the lease: a follower then refuses
	// votes for longer, never shorter, than ElectionTicks tick intervals.
	r.mu.ticks = 1
	started := r.mu.started
	r.mu.Unlock()
	if started {
		r.scheduler.enqueue(r)
	}
}

// Quiescent reports whether the replica is quiesced: it takes no ticks
// until a proposal, a read, a message, a campaign, a transfer or
// Unquiesce wakes it.
func (r *Replica) Quiescent() bool { return r.quiescent.Load() }

// Unquiesce wakes a quiesced replica: it takes ticks again (node liveness
// calls it when the leader's node, or a leader's follower's node, went
// silent). The replica's election clock starts where it stopped, which is
// at most a tick after the last heartbeat it stepped.
func (r *Replica) Unquiesce() {
	if !r.quiescent.Load() {
		return
	}
	r.mu.Lock()
	r.wakeLocked()
	r.mu.Unlock()
}

// ReadByLease reports whether the replica holds a valid lease in Raft
// term term now (Status.LeaseValid on the replica's clock), so that a read
// it serves, or an oracle window it confirms, needs no ReadIndex round;
// if so it records the read (NoteLeaseRead).
func (r *Replica) ReadByLease(term uint64) bool {
	if st := r.Status(); !st.LeaseValid(r.Now()) || st.Term != term {
		return false
	}
	r.NoteLeaseRead()
	return true
}

// NoteLeaseRead tells the replica that its leader served a read by its
// lease (Status.LeaseValid), with no ReadIndex round: the read counts as
// activity, as a ReadIndex read does, so the group does not quiesce on the
// next tick, and the tick on which it would quiesce after that renews the
// lease first (maybeQuiesceLeader); a quiesced leader wakes. Without it a
// range that serves only lease reads (or the oracle's range, which
// confirms its window by the lease) quiesces, its lease runs out (a
// quiescent leader renews nothing), and the next read after LeaseDuration
// waits for a quorum round. Safety does not depend on it:
// it changes only when the lease is renewed. Cheap on the read path: two
// atomic loads when the flag is already set and the replica awake.
func (r *Replica) NoteLeaseRead() {
	if !r.leaseRead.Load() {
		r.leaseRead.Store(true)
	}
	r.Unquiesce()
}

// wakeLocked ends quiescence and tells Config.OnWake. r.mu must be held.
func (r *Replica) wakeLocked() {
	if !r.quiescent.Load() {
		return
	}
	r.quiescent.Store(false)
	if r.cfg.OnWake != nil {
		r.cfg.OnWake()
	}
}

// Campaign asks the replica to start an election now.
func (r *Replica) Campaign() { r.enqueue(func() { r.mu.campaign = true }) }

// inboxEmptyLocked reports whether nothing waits in the inbox. mu must be
// held.
func (r *Replica) inboxEmptyLocked() bool {
	return len(r.mu.msgs) == 0 && len(r.mu.props) == 0 && len(r.mu.reads) == 0 && !r.mu.campaign &&
		r.mu.transfer == 0 && len(r.mu.unreach) == 0 && len(r.mu.snapFails) == 0 && r.mu.quiesceMsg == nil
}

// TransferLeader asks the leader to hand leadership to node to.
func (r *Replica) TransferLeader(to uint64) { r.enqueue(func() { r.mu.transfer = to }) }

// ReportUnreachable tells Raft that node to could not be reached.
func (r *Replica) ReportUnreachable(to uint64) {
	r.enqueue(func() { r.mu.unreach = append(r.mu.unreach, to) })
}

// ReportSnapshotFailure tells Raft that a snapshot to node to was lost.
func (r *Replica) ReportSnapshotFailure(to uint64) {
	r.enqueue(func() { r.mu.snapFails = append(r.mu.snapFails, to) })
}

// enqueue runs f on the inbox under mu, wakes the replica and queues it.
func (r *Replica) enqueue(f func()) {
	r.mu.Lock()
	f()
	r.wakeLocked()
	started := r.mu.started
	r.mu.Unlock()
	if started {
		r.scheduler.enqueue(r)
	}
}

// queueProposal is the queueing half of ProposeEvaluated and
// ProposeNoWait: unless the replica no longer leads in term (0: any), it
// queues cmd as a new proposal and wakes the replica. On an error the
// proposal is finished (finished, if not nil, has been called).
func (r *Replica) queueProposal(cmd []byte, term uint64, finished func(result any, err error)) (*proposal, error) {
	if st := r.Status(); !st.IsLeader || (term != 0 && st.Term != term) {
		if finished != nil {
			finished(nil, ErrNotLeader)
		}
		return nil, ErrNotLeader
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	return r.queueProposalWithID(cmd, term, finished, binary.BigEndian.Uint64(idb[:])|1, nil) // 0 marks "no id"
}

// queueProposalWithID is queueProposal with the proposal's id given, and
// for a configuration change (cc not nil, its Context already holding id).
func (r *Replica) queueProposalWithID(cmd []byte, term uint64, finished func(result any, err error), id uint64, cc *raftpb.ConfChangeV2) (*proposal, error) {
	if st := r.Status(); !st.IsLeader || (term != 0 && st.Term != term) {
		if finished != nil {
			finished(nil, ErrNotLeader)
		}
		return nil, ErrNotLeader
	}
	p := &proposal{
		id:       id,
		term:     term,
		finished: finished,
		done:     make(chan proposalResult, 1),
		cc:       cc,
	}
	if cc == nil {
		p.data = make([]byte, 8, 8+len(cmd))
		binary.BigEndian.PutUint64(p.data, p.id)
		p.data = append(p.data, cmd...)
	}
	r.mu.Lock()
	if r.mu.stopped {
		r.mu.Unlock()
		p.finish(proposalResult{err: ErrStopped})
		return nil, ErrStopped
	}
	if len(r.mu.props) >= r.cfg.ProposalsMax {
		r.mu.Unlock()
		err := fmt.Errorf("%w: %d proposals queued (ProposalsMax)", ErrProposalDropped, r.cfg.ProposalsMax)
		p.finish(proposalResult{err: err})
		return nil, err
	}
	r.mu.props = append(r.mu.props, p)
	r.wakeLocked()
	started := r.mu.started
	r.mu.Unlock()
	if started {
		r.scheduler.enqueue(r)
	}
	return p, nil
}

// Propose replicates cmd and returns the result of applying it. See the
// package comment for the three outcomes.
func (r *Replica) Propose(ctx context.Context, cmd []byte) (any, error) {
	return r.ProposeEvaluated(ctx, cmd, 0, nil)
}

// ProposeEvaluated is Propose for a command evaluated by this replica as
// leaseholder in Raft term term (0: no condition): the command is dropped
// (ErrNotLeader) unless the replica still leads in that term when it hands
// the command to Raft. finished, if not nil, is called once with the final
// outcome, also when ctx ends first (the caller then got ErrAmbiguous but
// the command may still apply): the caller keeps its latches until then.
func (r *Replica) ProposeEvaluated(ctx context.Context, cmd []byte, term uint64, finished func(result any, err error)) (any, error) {
	p, err := r.queueProposal(cmd, term, finished)
	if err != nil {
		return nil, err
	}
	select {
	case res := <-p.done:
		return res.result, res.err
	case <-ctx.Done():
		r.mu.Lock()
		defer r.mu.Unlock()
		if !p.handed {
			for i, q := range r.mu.props {
				if q == p {
					r.mu.props = append(r.mu.props[:i], r.mu.props[i+1:]...)
					err := fmt.Errorf("%w: %v", ErrProposalDropped, ctx.Err())
					p.finish(proposalResult{err: err})
					return nil, err
				}
			}
		}
		return nil, fmt.Errorf("%w: %v", ErrAmbiguous, ctx.Err())
	case <-r.stopc:
		return nil, ErrAmbiguous
	}
}

// ProposeConfChange proposes the configuration change cc, carrying cmd for
// the state machine (ConfChangeStateMachine.ApplyConfChange), and returns
// the result of applying it, with Propose's three outcomes. A change Raft
// would refuse now (an earlier one not applied yet, a joint configuration
// to leave first) is dropped (ErrProposalDropped) and may be retried.
func (r *Replica) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeV2, cmd []byte) (any, error) {
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint64(idb[:]) | 1
	cc.Context = append(binary.BigEndian.AppendUint64(nil, id), cmd...)
	p, err := r.queueProposalWithID(nil, 0, nil, id, &cc)
	if err != nil {
		return nil, err
	}
	select {
	case res := <-p.done:
		return res.result, res.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %v", ErrAmbiguous, ctx.Err())
	case <-r.stopc:
		return nil, ErrAmbiguous
	}
}

// WaitLeaseholder waits until the replica is the leaseholder (see
// Status.Leaseholder). It returns ErrNotLeader as soon as the replica is not
// the leader: a new leader becomes leaseholder within one Raft round.
func (r *Replica) WaitLeaseholder(ctx context.Context) error {
	for {
		ch := *r.statusCh.Load()
		st := r.Status()
		if st.Leaseholder {
			return nil
		}
		if !st.IsLeader {
			return ErrNotLeader
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stopc:
			return ErrStopped
		}
	}
}

// ReadIndex waits until this replica, as leader, has confirmed its
// leadership with a quorum and applied every entry committed before the
// call. A read of the engine after it returns nil is linearizable.
func (r *Replica) ReadIndex(ctx context.Context) error {
	if st := r.Status(); !st.IsLeader {
		return ErrNotLeader
	}
	w := &readWaiter{done: make(chan error, 1)}
	r.enqueue(func() { r.mu.reads = append(r.mu.reads, w) })
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopc:
		return ErrStopped
	}
}

func (r *Replica) publishStatus() {
	select {
	case <-r.stopc:
		return // Stop published the last status: not leading
	default:
	}
	bs := r.rn.BasicStatus()
	var caughtUp, replicating, learners []uint64
	if bs.RaftState == raft.StateLeader {
		r.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
			if id == r.cfg.PeerID || !pr.RecentActive {
				return
			}
			if typ == raft.ProgressTypeLearner {
				if pr.State == tracker.StateReplicate {
					learners = append(learners, NodeOf(id))
				}
				return
			}
			if pr.Match == r.lastIndex {
				caughtUp = append(caughtUp, NodeOf(id))
			}
			if pr.State == tracker.StateReplicate {
				replicating = append(replicating, NodeOf(id))
			}
		})
	}
	isLeader := bs.RaftState == raft.StateLeader
	st := &Status{
		CaughtUp:            caughtUp,
		Replicating:         replicating,
		LearnersReplicating: learners,
		Joint:               len(r.confState.VotersOutgoing) > 0,
		RangeID:             r.cfg.RangeID,
		Leader:              NodeOf(bs.Lead),
		LeaderPeer:          bs.Lead,
		IsLeader:            isLeader,
		Term:                bs.Term,
		Commit:              bs.Commit,
		Applied:             r.applied,
		Truncated:           r.truncIndex,
		Leaseholder:         isLeader && r.appliedTerm == bs.Term,
		Quiescent:           r.quiescent.Load(),
	}
	if st.Leaseholder && r.lease.term == bs.Term && r.lease.blockedTerm != bs.Term {
		st.LeaseExpiry = r.lease.expiry
	}
	r.storeStatus(st)
}

// storeStatus makes st the published status, logs a leadership change and
// wakes the status waiters (WaitLeaseholder) if leadership moved.
func (r *Replica) storeStatus(st *Status) {
	old := r.status.Swap(st)
	if old != nil {
		r.logLeadership(old, st)
	}
	if old == nil || old.IsLeader != st.IsLeader || old.Leaseholder != st.Leaseholder || old.Term != st.Term {
		ch := make(chan struct{})
		close(*r.statusCh.Swap(&ch))
	}
}

// logLeadership writes a line when this replica becomes its range's
// leader, takes the lease (it applied an entry of its term), or steps
// down. Only the replica concerned writes it, so that a change is one line
// in one node's log.
func (r *Replica) logLeadership(old, st *Status) {
	becameLeader := st.IsLeader && !old.IsLeader
	steppedDown := old.IsLeader && !st.IsLeader
	tookLease := st.Leaseholder && (!old.Leaseholder || old.Term != st.Term)
	if !becameLeader && !steppedDown && !tookLease {
		return // the common case, on every Ready: no logger built
	}
	l := r.cfg.Logger.With("node", fmt.Sprintf("n%d", NodeOf(r.cfg.PeerID)))
	switch {
	case st.IsLeader && !old.IsLeader:
		l.Info("became the range's leader", "range", r.cfg.RangeID, "term", st.Term)
	case old.IsLeader && !st.IsLeader:
		lead := "unknown"
		if st.Leader != 0 {
			lead = fmt.Sprintf("n%d", st.Leader)
		}
		l.Info("stepped down as the range's leader", "range", r.cfg.RangeID, "term", st.Term, "leader", lead)
	}
	if tookLease {
		l.Info("took the range's lease", "range", r.cfg.RangeID, "term", st.Term)
	}
}

func (r *Replica) drainInbox() {
	r.mu.Lock()
	msgs, props, reads := r.mu.msgs, r.mu.props, r.mu.reads
	ticks, campaign, transfer := r.mu.ticks, r.mu.campaign, r.mu.transfer
	unreach, snapFails := r.mu.unreach, r.mu.snapFails
	quiesceMsg := r.mu.quiesceMsg
	r.mu.msgs, r.mu.props, r.mu.reads = nil, nil, nil
	r.mu.ticks, r.mu.campaign, r.mu.transfer = 0, false, 0
	r.mu.unreach, r.mu.snapFails = nil, nil
	r.mu.quiesceMsg = nil
	for _, p := range props {
		p.handed = true
	}
	onlyTicks := len(msgs) == 0 && len(props) == 0 && len(reads) == 0 && !campaign &&
		transfer == 0 && len(unreach) == 0 && len(snapFails) == 0 && quiesceMsg == nil
	onlyQuiesce := quiesceMsg != nil && len(msgs) == 0 && len(props) == 0 && len(reads) == 0 &&
		!campaign && transfer == 0 && len(unreach) == 0 && len(snapFails) == 0
	r.mu.Unlock()

	leaseRead := r.leaseRead.Swap(false)
	if len(props) > 0 || len(reads) > 0 || campaign || transfer != 0 || leaseRead {
		r.idleTicks = 0
	}
	if leaseRead {
		r.readSinceRenewal = true
	}
	// A lease read drained now is activity: this tick heartbeats (and
	// renews past half the lease) rather than quiescing, so that a range
	// under steady lease reads does not force a renewal every tick; the
	// first tick without one renews the lease and quiesces after it
	// (maybeQuiesceLeader).
	if ticks > 0 && onlyTicks && !leaseRead && r.maybeQuiesceLeader() {
		// Quiesced instead of ticking: the ticks are dropped, as a
		// quiescent replica's are.
		ticks = 0
	}
	for i := 0; i < ticks; i++ {
		r.rn.Tick()
		r.idleTicks++
	}
	for _, m := range msgs {
		// Errors here are messages for an unknown peer or a stale term;
		// Raft has already ignored them.
		_ = r.rn.Step(m)
	}
	if quiesceMsg != nil {
		_ = r.rn.Step(*quiesceMsg)
		if onlyQuiesce {
			r.maybeQuiesceFollower(*quiesceMsg)
		}
	}
	for _, to := range unreach {
		r.rn.ReportUnreachable(to)
	}
	for _, to := range snapFails {
		r.rn.ReportSnapshot(to, raft.SnapshotFailure)
	}
	if campaign {
		_ = r.rn.Campaign()
	}
	if transfer != 0 {
		if to := r.voterPeerOn(transfer); to != 0 {
			r.lease = leaderLease{blockedTerm: r.rn.BasicStatus().Term}
			r.rn.TransferLeader(to)
		}
	}
	isLeader := r.rn.BasicStatus().RaftState == raft.StateLeader
	term := r.rn.BasicStatus().Term
	// The commands are stepped into Raft as one MsgProp per run of them
	// (proposeBatch), not one Propose each: the leader then sends each
	// follower one append carrying them all, and the follower answers
	// once, where one Propose each sent an append, and drew an answer, per
	// command. A run is cut at proposeBatchBytes, so that Raft's
	// uncommitted-entries limit, which takes or drops a MsgProp whole,
	// still admits the leading commands of a large round.
	var batch []*proposal
	batchBytes := 0
	for _, p := range props {
		if !isLeader || (p.term != 0 && p.term != term) {
			p.finish(proposalResult{err: ErrNotLeader})
			continue
		}
		if p.cc != nil {
			// A configuration change goes after the commands queued
			// before it, in order.
			r.proposeBatch(batch)
			batch = batch[:0]
			// Raft would turn a conf change it refuses into an empty entry
			// without a word: refuse here what it would refuse.
			if why := r.confChangeRefusal(*p.cc, term); why != "" {
				p.finish(proposalResult{err: fmt.Errorf("%w: %s", ErrProposalDropped, why)})
				continue
			}
			if err := r.rn.ProposeConfChange(*p.cc); err != nil {
				p.finish(proposalResult{err: fmt.Errorf("%w: %v", ErrProposalDropped, err)})
				continue
			}
			// Above applied until persisted records the entry's index.
			r.pendingConfIndex = max(r.pendingConfIndex, r.lastIndex+1)
			r.proposals[p.id] = p
			r.prom().proposals.Inc()
			continue
		}
		if len(batch) > 0 && batchBytes+len(p.data) > proposeBatchBytes {
			r.proposeBatch(batch)
			batch, batchBytes = batch[:0], 0
		}
		batch = append(batch, p)
		batchBytes += len(p.data)
	}
	r.proposeBatch(batch)
	if len(reads) > 0 {
		if !isLeader {
			for _, w := range reads {
				w.done <- ErrNotLeader
			}
		} else {
			// One ReadIndex serves every read queued so far.
			r.readIndexRounds.Add(1)
			r.readIndex(reads, term)
		}
	}
	if isLeader && ticks > 0 {
		r.renewLease(term, false)
	}
}

// proposeBatchBytes bounds the commands' bytes in one MsgProp
// (proposeBatch), as MaxSizePerMsg bounds an append; a command larger than
// it goes alone.
const proposeBatchBytes = 1 << 20

// proposeBatch steps the commands of batch into Raft as one MsgProp, in
// order, and records them as pending; if Raft drops the message (a leader
// transfer under way, the uncommitted-entries limit), every one of them
// fails with ErrProposalDropped, as one Propose each would have failed.
// raftMu must be held, and this replica must lead.
func (r *Replica) proposeBatch(batch []*proposal) {
	if len(batch) == 0 {
		return
	}
	ents := make([]raftpb.Entry, len(batch))
	for i, p := range batch {
		ents[i] = raftpb.Entry{Data: p.data}
	}
	if err := r.rn.Step(raftpb.Message{Type: raftpb.MsgProp, From: r.cfg.PeerID, Entries: ents}); err != nil {
		for _, p := range batch {
			p.finish(proposalResult{err: fmt.Errorf("%w: %v", ErrProposalDropped, err)})
		}
		return
	}
	for _, p := range batch {
		r.proposals[p.id] = p
	}
	r.prom().proposals.Add(float64(len(batch)))
}

// maybeQuiesceLeader quiesces the group if this replica leads it and the
// group is idle: it has taken QuiesceIdleTicks ticks with no proposal,
// read or commit; nothing is pending (proposals, reads, lease renewals,
// a transfer, a Ready); every follower is live, recently active and
// holds the whole log, which is committed and applied here. It then sends
// every follower a quiesce heartbeat carrying the commit index and stops
// ticking. It reports whether it quiesced. raftMu must be held.
//
// If the lease served reads since the last ReadIndex round was issued,
// or the leader holds no lease in its term yet (just elected), it renews
// or takes the lease on this tick instead and quiesces on a later one,
// once the round is answered: a range read now and then keeps a lease
// for a LeaseDuration after its last read, with one round per read
// rather than a heartbeat per tick (docs/design-notes.md, "No idle
// tick"). The lease is not renewed while the leader is quiescent: it
// runs out, and the first read after that goes through ReadIndex, which
// wakes the group. That is safe: the lease needs followers that refuse
// votes for ElectionTicks of their ticks after they acknowledged the
// leader, and a quiescent follower takes no ticks.
func (r *Replica) maybeQuiesceLeader() bool {
	qt, ok := r.cfg.Transport.(QuiesceTransport)
	if !ok || r.rn.HasReady() {
		return false
	}
	bs := r.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		r.idleTicks = 0
		return false
	}
	if bs.Commit != r.idleCommit {
		r.idleCommit = bs.Commit
		r.idleTicks = 0
	}
	if r.idleTicks < r.cfg.QuiesceIdleTicks || bs.LeadTransferee != 0 ||
		bs.Commit != r.lastIndex || r.applied != r.lastIndex || r.appliedTerm != bs.Term ||
		len(r.proposals) > 0 || len(r.byIndex) > 0 || len(r.readCtx) > 0 || len(r.applyWait) > 0 {
		return false
	}
	// Every live follower must hold the whole log; a follower on a node
	// that is not live neither stops the group quiescing (as in
	// CockroachDB: a range with a dead replica would otherwise never
	// quiesce) nor gets the quiesce heartbeat, as long as the leader and
	// the live followers are a quorum. When that node is live again the
	// node wakes this leader (kvserver: Node.tick), which catches it up.
	var followers []uint64
	all := true
	voters, live := 0, 1
	r.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		voters++
		if id == r.cfg.PeerID {
			return
		}
		if r.cfg.PeerLive != nil && !r.cfg.PeerLive(NodeOf(id)) {
			return
		}
		if pr.Match != r.lastIndex || pr.State != tracker.StateReplicate || !pr.RecentActive {
			all = false
		}
		live++
		followers = append(followers, id)
	})
	if !all || live < voters/2+1 || len(r.confState.Learners) > 0 || len(r.confState.VotersOutgoing) > 0 {
		// A configuration change is under way: stay awake for it.
		return false
	}
	if (r.readSinceRenewal || r.lease.term != bs.Term) && r.renewLease(bs.Term, true) {
		// Reads were served by the lease since the last round, or the
		// leader has yet to take a lease in its term: renew (or take) it
		// now, whether or not half of it has passed, and quiesce on a
		// later tick, once the round is answered (readCtx is empty). The
		// next read within a LeaseDuration of now finds a valid lease.
		return false
	}
	// Under mu, and only if the inbox is still empty: whatever arrived
	// meanwhile has queued the replica and must find it awake.
	r.mu.Lock()
	empty := r.inboxEmptyLocked()
	if empty {
		r.quiescent.Store(true)
		if h := testingAfterQuiesceStore; h != nil {
			h(r)
		}
		// A lease read that came after the drain took leaseRead saw the
		// replica awake (NoteLeaseRead sets the flag, then checks
		// quiescent; this sets quiescent, then checks the flag): wake
		// again, telling OnWake (the node's tick loop may have dropped
		// the replica from its active set meanwhile), so that the read
		// counts as activity on the next handling.
		if r.leaseRead.Load() {
			r.wakeLocked()
			empty = false
		}
	}
	r.mu.Unlock()
	if !empty {
		return false
	}
	msgs := make([]raftpb.Message, 0, len(followers))
	for _, id := range followers {
		msgs = append(msgs, raftpb.Message{Type: raftpb.MsgHeartbeat, From: r.cfg.PeerID, To: id, Term: bs.Term, Commit: bs.Commit})
	}
	qt.SendQuiesce(r.cfg.RangeID, msgs)
	return true
}

// maybeQuiesceFollower quiesces the replica after it stepped m, a quiesce
// heartbeat, if it follows m's sender in m's term and has m's commit index.
// Its election clock was just reset by m. raftMu must be held.
func (r *Replica) maybeQuiesceFollower(m raftpb.Message) {
	bs := r.rn.BasicStatus()
	if bs.RaftState != raft.StateFollower || bs.Lead != m.From || bs.Term != m.Term || bs.Commit != m.Commit {
		return
	}
	r.mu.Lock()
	empty := r.inboxEmptyLocked()
	if empty {
		r.quiescent.Store(true)
		r.dropHeartbeatResp = m.From
	}
	r.mu.Unlock()
}

func (r *Replica) readIndex(reads []*readWaiter, term uint64) {
	r.readSinceRenewal = false
	var ctx [8]byte
	_, _ = rand.Read(ctx[:])
	r.readCtx[string(ctx[:])] = &readRequest{waiters: reads, issued: r.cfg.Now(), term: term}
	r.rn.ReadIndex(ctx[:])
}

// renewLease issues a ReadIndex round for the lease in term if the
// replica may hold one (a lease duration, no transfer started in term),
// no renewal has been waiting for less than a lease (a renewal gone
// unanswered for a whole lease is issued again), and either force is set
// (maybeQuiesceLeader) or half of the lease has passed (every tick of a
// leader). It reports whether it issued one.
func (r *Replica) renewLease(term uint64, force bool) bool {
	d := r.cfg.LeaseDuration()
	if d == 0 || r.lease.blockedTerm == term {
		return false
	}
	now := r.cfg.Now()
	if !force && r.lease.term == term && now.Before(r.lease.expiry.Add(-d/2)) {
		return false
	}
	if !r.lease.renewIssued.IsZero() && now.Sub(r.lease.renewIssued) < d {
		return false
	}
	r.lease.renewIssued = now
	r.readIndex(nil, term)
	return true
}

// extendLease records that a quorum acknowledged this leader after rq was
// issued.
func (r *Replica) extendLease(rq *readRequest) {
	d := r.cfg.LeaseDuration()
	term := r.rn.BasicStatus().Term
	if d == 0 || rq.term != term || r.lease.blockedTerm == term || r.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	if r.lease.term != term {
		r.lease = leaderLease{term: term}
	}
	if exp := rq.issued.Add(d); exp.After(r.lease.expiry) {
		r.lease.expiry = exp
	}
	if rq.waiters == nil {
		r.lease.renewIssued = time.Time{}
	}
}

func entryID(e raftpb.Entry) uint64 {
	if e.Type == raftpb.EntryConfChangeV2 {
		var cc raftpb.ConfChangeV2
		if err := cc.Unmarshal(e.Data); err != nil || len(cc.Context) < 8 {
			return 0
		}
		return binary.BigEndian.Uint64(cc.Context[:8])
	}
	if e.Type != raftpb.EntryNormal || len(e.Data) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(e.Data[:8])
}

// applyEntries applies committed entries in one engine batch. The batch
// is committed early, before the next entry, after an entry whose command
// has a side effect (a split), so that the next entry sees it. Proposers
// get their results once the batch holding their entry is committed.
func (r *Replica) applyEntries(ents []raftpb.Entry) {
	var b *storage.Batch
	type delivery struct {
		p   *proposal
		res proposalResult
	}
	var deliveries []delivery
	flush := func(last raftpb.Entry) {
		// The applied index moves with the entries' writes. No sync: the
		// entries are durable in the log, so a lost batch is re-applied at
		// restart.
		_ = b.Set(storage.RangeLocalKey(r.cfg.RangeID, storage.SuffixApplied), encodeIndexTerm(last.Index, last.Term))
		if err := b.Commit(false); err != nil {
			panic(fmt.Sprintf("replica r%d: applying entries up to %d: %v", r.cfg.RangeID, last.Index, err))
		}
		b.Close()
		b = nil
		r.applied, r.appliedTerm = last.Index, last.Term
		if fo, ok := r.cfg.SM.(FlushObserver); ok {
			fo.Flushed(last.Index) // flush.go: before the proposers learn
		}
		for _, d := range deliveries {
			d.p.finish(d.res)
		}
		deliveries = deliveries[:0]
	}
	var last raftpb.Entry
	for _, e := range ents {
		if e.Index <= r.applied {
			continue
		}
		if b == nil {
			b = r.cfg.Engine.NewBatch()
		}
		var res proposalResult
		var a func()
		switch e.Type {
		case raftpb.EntryNormal:
			if len(e.Data) >= 8 {
				res.result, a = r.cfg.SM.Apply(b, e.Index, e.Term, e.Data[8:])
			}
		case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
			res.result, a = r.applyConfChange(b, e)
		}
		last = e
		if p := r.byIndex[e.Index]; p != nil {
			delete(r.byIndex, e.Index)
			delete(r.proposals, p.id)
			if p.id != entryID(e) {
				res = proposalResult{err: ErrProposalDropped}
			}
			deliveries = append(deliveries, delivery{p, res})
		}
		if a != nil {
			flush(e)
			a()
		}
	}
	if b != nil {
		flush(last)
	}
}

// applyConfChange applies a configuration change entry: to the state
// machine, if it takes part (ConfChangeStateMachine), which may refuse it,
// and to Raft. A refused change is applied to Raft as the empty ConfChange,
// which changes nothing (etcd raft's way to reject a committed change).
func (r *Replica) applyConfChange(b *storage.Batch, e raftpb.Entry) (result any, after func()) {
	var cc raftpb.ConfChangeI
	if e.Type == raftpb.EntryConfChange {
		var c raftpb.ConfChange
		if err := c.Unmarshal(e.Data); err != nil {
			panic(err)
		}
		cc = c
	} else {
		var c raftpb.ConfChangeV2
		if err := c.Unmarshal(e.Data); err != nil {
			panic(err)
		}
		cc = c
		if sm, ok := r.cfg.SM.(ConfChangeStateMachine); ok {
			var cmd []byte
			if len(c.Context) >= 8 {
				cmd = c.Context[8:]
			}
			var accept bool
			accept, result, after = sm.ApplyConfChange(b, e.Index, e.Term, c, cmd)
			if !accept {
				cc = raftpb.ConfChange{}
			}
		}
	}
	r.confState = *r.rn.ApplyConfChange(cc)
	cb, err := r.confState.Marshal()
	if err != nil {
		panic(err)
	}
	_ = b.Set(storage.RangeLocalKey(r.cfg.RangeID, storage.SuffixConfState), cb)
	return result, after
}

// confChangeRefusal says why Raft would refuse to append cc now, "" if it
// would not (see raft.go, stepLeader, MsgProp): a configuration change is
// appended only once every earlier one has applied, and one that is not
// leaving a joint configuration only outside of one. Being leaseholder
// (an entry of this term applied) covers the changes of earlier terms,
// which a new leader conservatively counts as pending. raftMu must be
// held.
func (r *Replica) confChangeRefusal(cc raftpb.ConfChangeV2, term uint64) string {
	joint := len(r.confState.VotersOutgoing) > 0
	leave := len(cc.Changes) == 0
	switch {
	case r.appliedTerm != term:
		return "the leader has not applied an entry of its term yet"
	case r.pendingConfIndex > r.applied:
		return fmt.Sprintf("a configuration change at index %d has not applied yet (applied %d)", r.pendingConfIndex, r.applied)
	case joint && !leave:
		return "the configuration is joint: it must be left first"
	case !joint && leave:
		return "the configuration is not joint: nothing to leave"
	}
	return ""
}

// voterPeerOn returns the peer ID of the voter on node nodeID, 0 if none.
// raftMu must be held.
func (r *Replica) voterPeerOn(nodeID uint64) uint64 {
	for _, ids := range [][]uint64{r.confState.Voters, r.confState.VotersOutgoing} {
		for _, id := range ids {
			if NodeOf(id) == nodeID {
				return id
			}
		}
	}
	return 0
}

// PeerProgress is the leader's view of one member of the range.
type PeerProgress struct {
	PeerID  uint64
	Learner bool
	// Match is the last index known to be on the peer; Lag is the
	// leader's last index minus Match.
	Match, Lag uint64
	// State is Raft's progress state: probe, replicate or snapshot.
	State        string
	RecentActive bool
}

// Progress returns, on the leader, every other member's progress (nil on
// a follower). It waits for the replica's Raft work in progress, if any.
func (r *Replica) Progress() []PeerProgress {
	r.raftMu.Lock()
	defer r.raftMu.Unlock()
	if r.isStopped() || r.rn.BasicStatus().RaftState != raft.StateLeader {
		return nil
	}
	var out []PeerProgress
	r.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		if id == r.cfg.PeerID {
			return
		}
		p := PeerProgress{PeerID: id, Learner: typ == raft.ProgressTypeLearner, Match: pr.Match,
			State: strings.ToLower(strings.TrimPrefix(pr.State.String(), "State")), RecentActive: pr.RecentActive}
		if r.lastIndex > pr.Match {
			p.Lag = r.lastIndex - pr.Match
		}
		out = append(out, p)
	})
	return out
}

// ConfState returns the replica's Raft configuration as last applied.
func (r *Replica) ConfState() raftpb.ConfState {
	r.raftMu.Lock()
	defer r.raftMu.Unlock()
	return r.confState
}

func (r *Replica) serveReads() {
	kept := r.applyWait[:0]
	for _, w := range r.applyWait {
		if w.index <= r.applied {
			w.done <- nil
		} else {
			kept = append(kept, w)
		}
	}
	r.applyWait = kept
}

func (r *Replica) maybeTruncate() {
	keep := r.cfg.LogEntriesKeep
	if r.applied < r.truncIndex+2*keep {
		return
	}
	newTrunc := r.applied - keep
	term, err := r.rs.Term(newTrunc)
	if err != nil {
		return
	}
	b := r.cfg.Engine.NewWriteBatch()
	defer b.Close()
	_ = b.DeleteRange(storage.RaftLogKey(r.cfg.RangeID, r.truncIndex+1), storage.RaftLogKey(r.cfg.RangeID, newTrunc+1))
	_ = b.Set(storage.RangeLocalKey(r.cfg.RangeID, storage.SuffixTruncated), encodeIndexTerm(newTrunc, term))
	if err := b.Commit(false); err != nil {
		panic(err)
	}
	if err := r.rs.Compact(newTrunc); err != nil {
		panic(err)
	}
	r.truncIndex = newTrunc
}

func (r *Replica) makeSnapshot() (raftpb.Snapshot, error) {
	term, err := r.rs.Term(r.applied)
	if err != nil {
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	data, err := r.cfg.SM.SnapshotData(r.cfg.Engine.NewSnapshot())
	if err != nil {
		r.cfg.Logger.Error("building snapshot", "range", r.cfg.RangeID, "err", err)
		return raftpb.Snapshot{}, raft.ErrSnapshotTemporarilyUnavailable
	}
	return raftpb.Snapshot{Data: data, Metadata: raftpb.SnapshotMetadata{
		Index: r.applied, Term: term, ConfState: r.confState}}, nil
}

func (r *Replica) applySnapshot(b *storage.Batch, snap raftpb.Snapshot) (func(), error) {
	after, err := r.cfg.SM.ApplySnapshot(b, snap.Data)
	if err != nil {
		return nil, err
	}
	id := r.cfg.RangeID
	_ = b.DeleteRange(storage.RaftLogKey(id, 0), raftLogEnd(id))
	m := snap.Metadata
	cb, err := m.ConfState.Marshal()
	if err != nil {
		return nil, err
	}
	_ = b.Set(storage.RangeLocalKey(id, storage.SuffixConfState), cb)
	_ = b.Set(storage.RangeLocalKey(id, storage.SuffixApplied), encodeIndexTerm(m.Index, m.Term))
	_ = b.Set(storage.RangeLocalKey(id, storage.SuffixTruncated), encodeIndexTerm(m.Index, m.Term))
	return after, nil
}

func (r *Replica) failAll(err error) {
	r.mu.Lock()
	props, reads := r.mu.props, r.mu.reads
	r.mu.props, r.mu.reads = nil, nil
	r.mu.Unlock()
	for _, p := range props {
		p.finish(proposalResult{err: err})
	}
	for _, w := range reads {
		w.done <- err
	}
	for _, p := range r.proposals {
		p.finish(proposalResult{err: ErrAmbiguous})
	}
	for _, rq := range r.readCtx {
		for _, w := range rq.waiters {
			w.done <- err
		}
	}
	for _, w := range r.applyWait {
		w.done <- err
	}
}

// raftLogger adapts slog to raft.Logger: Raft's info lines (elections,
// votes, configuration changes) at debug, its warnings and errors as
// such. Each line names the node and the range (Raft's own text names
// replicas by Raft ID alone, which is the node ID).
type raftLogger struct{ l *slog.Logger }

func (l raftLogger) Debug(v ...interface{})                 {}
func (l raftLogger) Debugf(format string, v ...interface{}) {}
func (l raftLogger) Info(v ...interface{}) {
	if l.l.Enabled(context.Background(), slog.LevelDebug) {
		l.l.Debug(fmt.Sprint(v...))
	}
}
func (l raftLogger) Infof(format string, v ...interface{}) {
	if l.l.Enabled(context.Background(), slog.LevelDebug) {
		l.l.Debug(fmt.Sprintf(format, v...))
	}
}
func (l raftLogger) Warning(v ...interface{})                 { l.l.Warn(fmt.Sprint(v...)) }
func (l raftLogger) Warningf(format string, v ...interface{}) { l.l.Warn(fmt.Sprintf(format, v...)) }
func (l raftLogger) Error(v ...interface{})                   { l.l.Error(fmt.Sprint(v...)) }
func (l raftLogger) Errorf(format string, v ...interface{})   { l.l.Error(fmt.Sprintf(format, v...)) }
func (l raftLogger) Fatal(v ...interface{})                   { panic(fmt.Sprint(v...)) }
func (l raftLogger) Fatalf(format string, v ...interface{})   { panic(fmt.Sprintf(format, v...)) }
func (l raftLogger) Panic(v ...interface{})                   { panic(fmt.Sprint(v...)) }
func (l raftLogger) Panicf(format string, v ...interface{})   { panic(fmt.Sprintf(format, v...)) }
