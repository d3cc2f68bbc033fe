package pipelinebench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc"
)

// Limits on the sweep, enforced by Validate.
const (
	// RangesMax bounds Keyspace.Ranges: keys are placed by the first byte of
	// the user key (keys.UserSplitKeys), which divides at most 256 ways.
	RangesMax = 256
	// WritesMax bounds Shape.Writes (the post's sweep ends at 256).
	WritesMax = 1024
	// ReadsMax bounds Shape.Reads.
	ReadsMax = 64
	// TxnsMax bounds Limits.TxnsMax, the transactions of one point.
	TxnsMax = 100_000
	// ReadKeysPerRangeMax bounds Keyspace.ReadKeysPerRange.
	ReadKeysPerRangeMax = 10_000
	// ValueBytes is the size of every value written.
	ValueBytes = 32
)

// Mode is one of the three protocol settings each point runs in.
type Mode struct {
	Name            string
	Pipelining      bool
	ParallelCommits bool
}

// Modes are the three settings, in the order of the tables.
var Modes = []Mode{
	{Name: "off"},
	{Name: "pipelined", Pipelining: true},
	{Name: "parallel", Pipelining: true, ParallelCommits: true},
}

// ModeByName returns the mode called name.
func ModeByName(name string) (Mode, bool) {
	for _, m := range Modes {
		if m.Name == name {
			return m, true
		}
	}
	return Mode{}, false
}

// TxnOptions are the per-transaction switches of m. One-phase commit is off
// in every mode: the post sets it aside (it needs the writes handed to the
// commit, which a conversational transaction does not do).
func (m Mode) TxnOptions() []client.TxnOption {
	return []client.TxnOption{
		client.WithPipelining(m.Pipelining),
		client.WithParallelCommits(m.ParallelCommits),
		client.WithOnePC(false),
	}
}

// Shape is a transaction: Reads Gets, then Writes Puts, each its own
// statement (the next is sent once the previous has returned).
type Shape struct{ Reads, Writes int }

// NewOrder is the post's New-Order transaction: "as few as 4 read-only
// statements and 5 read-write statements".
var NewOrder = Shape{Reads: 4, Writes: 5}

// Validate checks the bounds.
func (s Shape) Validate() error {
	if s.Reads < 0 || s.Reads > ReadsMax || s.Writes < 1 || s.Writes > WritesMax {
		return fmt.Errorf("pipelinebench: shape of %d reads and %d writes: need reads in [0, %d] and writes in [1, %d]",
			s.Reads, s.Writes, ReadsMax, WritesMax)
	}
	return nil
}

// Keyspace places a transaction's keys over Ranges user ranges, which the
// caller has split by keys.UserSplitKeys(Ranges): statement i of a
// transaction goes to range i mod Ranges, so consecutive statements touch
// different ranges. Reads read ReadKeysPerRange keys loaded once (Load);
// writes write fresh random keys, so that no transaction meets another's
// intents.
type Keyspace struct {
	Ranges           int
	ReadKeysPerRange int
}

// Validate checks the bounds.
func (k Keyspace) Validate() error {
	if k.Ranges < 1 || k.Ranges > RangesMax || k.ReadKeysPerRange < 1 || k.ReadKeysPerRange > ReadKeysPerRangeMax {
		return fmt.Errorf("pipelinebench: keyspace of %d ranges and %d read keys per range: need [1, %d] and [1, %d]",
			k.Ranges, k.ReadKeysPerRange, RangesMax, ReadKeysPerRangeMax)
	}
	return nil
}

// rangeKey is a user key in range i (of k.Ranges): its first byte is the
// first byte of the range's split key.
func (k Keyspace) rangeKey(i int, kind byte, suffix uint64) []byte {
	b := []byte{byte((i % k.Ranges) * 256 / k.Ranges), kind}
	return binary.BigEndian.AppendUint64(b, suffix)
}

// readKey is read key j of range i.
func (k Keyspace) readKey(i, j int) []byte { return k.rangeKey(i, 'r', uint64(j)) }

// Load writes the read keys, ReadKeysPerRange in every range.
func Load(ctx context.Context, db *client.DB, k Keyspace) error {
	if err := k.Validate(); err != nil {
		return err
	}
	v := make([]byte, ValueBytes)
	for i := 0; i < k.Ranges; i++ {
		for j := 0; j < k.ReadKeysPerRange; j++ {
			if err := db.Put(ctx, k.readKey(i, j), v); err != nil {
				return fmt.Errorf("pipelinebench: loading: %w", err)
			}
		}
	}
	return nil
}

// Limits bound one point: it measures transactions until Duration has
// passed or TxnsMax have committed, after WarmupTxns uncounted ones.
type Limits struct {
	Duration   time.Duration
	TxnsMax    int
	WarmupTxns int
}

// Validate checks the bounds.
func (l Limits) Validate() error {
	if l.Duration <= 0 || l.TxnsMax < 1 || l.TxnsMax > TxnsMax || l.WarmupTxns < 0 || l.WarmupTxns > TxnsMax {
		return fmt.Errorf("pipelinebench: limits %v, %d txns, %d warm-up: need a positive duration and counts in [1, %d] (warm-up [0, %d])",
			l.Duration, l.TxnsMax, l.WarmupTxns, TxnsMax, TxnsMax)
	}
	return nil
}

// RaftCounts are what the nodes counted so far, summed over ranges.
type RaftCounts struct {
	// Entries: Raft log entries committed, on every range and on the
	// oracle's range (its bound).
	Entries, OracleEntries uint64
	// ReadIndex: ReadIndex rounds that requests waited for (a read at a
	// leaseholder whose lease had lapsed; on the oracle's range, a
	// timestamp confirming the oracle's leadership), on every range other
	// than the oracle's, and on the oracle's.
	ReadIndex, OracleReadIndex uint64
	// DelayedBatches and DelayedHeld: Raft batches the transports held for
	// the injected link delay, and the time they were held in fact (Go's
	// timers make it longer than asked), over every node.
	DelayedBatches int64
	DelayedHeld    time.Duration
}

// Point is one measured point: a mode at one round trip and shape.
type Point struct {
	Mode  string
	RTTMs float64
	// RealRTT is the round trip the Raft links realized at this point: twice
	// the mean time a delayed batch was held (0 where none was delayed).
	RealRTT time.Duration
	Reads   int
	Writes  int
	// Txns committed and measured; Failed the transactions that returned an
	// error (not measured); Retries the extra attempts of the measured ones.
	Txns, Failed, Retries int64
	Elapsed               time.Duration
	// Latency of the committed transactions, DB.Txn call to return.
	Mean, P50, P99, Max time.Duration
	// Per committed transaction (failed ones included in the sums, which
	// are then divided by Txns only if Failed is 0; see Failed).
	ConsensusRounds            float64 // client.RoundCounts.ConsensusRounds, mean
	ConsensusRoundsMin         int64
	ConsensusRoundsMax         int64
	ConsensusBatches           float64 // client.RoundCounts.ConsensusBatches, mean
	PathBatchRPCs              float64 // Batch RPCs sent with the transaction's context
	PathRemoteRPCs             float64 // RPCs with its context to a node other than the gateway
	TimestampRPCs              float64 // oracle RPCs (client.Stats delta)
	AllRPCs                    float64 // every RPC of the client, background work included
	RaftEntries, OracleEntries float64 // Raft entries committed (RaftCounts delta)
	ReadIndexRounds            float64 // RaftCounts.ReadIndex delta
	OracleReadIndexRounds      float64 // RaftCounts.OracleReadIndex delta
	// CPU is the process's CPU time (user + system) over the point per
	// committed transaction: the client's and all three nodes', since the
	// cluster runs in this process, background work included.
	CPU time.Duration
}

// Runner runs points on one client.
type Runner struct {
	DB    *client.DB
	Calls *CallCounter
	Keys  Keyspace
	// Raft returns the Raft entries committed so far (nil: not counted).
	Raft func(ctx context.Context) (RaftCounts, error)
	// Progress receives one line per point (nil: none).
	Progress io.Writer
	// Rand picks read keys and write keys; seeded by the caller.
	Rand *rand.Rand
}

// Run measures shape in mode, with the network delays already set to
// rttMs (recorded in the point, not applied here).
func (r *Runner) Run(ctx context.Context, mode Mode, shape Shape, rttMs float64, lim Limits) (Point, error) {
	if err := errors.Join(shape.Validate(), lim.Validate(), r.Keys.Validate()); err != nil {
		return Point{}, err
	}
	p := Point{Mode: mode.Name, RTTMs: rttMs, Reads: shape.Reads, Writes: shape.Writes}
	for i := 0; i < lim.WarmupTxns; i++ {
		if _, _, _, err := r.txn(ctx, mode, shape); err != nil && ctx.Err() != nil {
			return p, ctx.Err()
		}
	}
	st0, calls0, cpu0 := r.DB.Stats(), r.Calls.Total(), kvbench.ProcessCPU()
	var raft0 RaftCounts
	if r.Raft != nil {
		var err error
		if raft0, err = r.Raft(ctx); err != nil {
			return p, err
		}
	}
	var (
		lat                     []time.Duration
		rounds, batches         int64
		pathBatches, pathRemote int64
		roundsMin, roundsMax    int64 = -1, 0
		start                         = time.Now()
		lastErr                 error
	)
	for len(lat) < lim.TxnsMax && time.Since(start) < lim.Duration {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		t0 := time.Now()
		attempts, rc, cc, err := r.txn(ctx, mode, shape)
		d := time.Since(t0)
		rounds += rc.ConsensusRounds
		batches += rc.ConsensusBatches
		pathBatches += cc.Batches
		pathRemote += cc.Remote
		if err != nil {
			p.Failed++
			lastErr = err
			continue
		}
		lat = append(lat, d)
		p.Retries += int64(attempts - 1)
		if roundsMin < 0 || rc.ConsensusRounds < roundsMin {
			roundsMin = rc.ConsensusRounds
		}
		roundsMax = max(roundsMax, rc.ConsensusRounds)
	}
	p.Elapsed = time.Since(start)
	st1, calls1, cpu1 := r.DB.Stats(), r.Calls.Total(), kvbench.ProcessCPU()
	if r.Raft != nil {
		raft1, err := r.Raft(ctx)
		if err != nil {
			return p, err
		}
		n := float64(max(len(lat), 1))
		p.RaftEntries = float64(raft1.Entries-raft0.Entries) / n
		p.OracleEntries = float64(raft1.OracleEntries-raft0.OracleEntries) / n
		p.ReadIndexRounds = float64(raft1.ReadIndex-raft0.ReadIndex) / n
		p.OracleReadIndexRounds = float64(raft1.OracleReadIndex-raft0.OracleReadIndex) / n
		if b := raft1.DelayedBatches - raft0.DelayedBatches; b > 0 {
			p.RealRTT = 2 * (raft1.DelayedHeld - raft0.DelayedHeld) / time.Duration(b)
		}
	}
	p.Txns = int64(len(lat))
	if p.Txns == 0 {
		return p, fmt.Errorf("pipelinebench: %s: no transaction committed in %v (%d failed; last: %w)", mode.Name, p.Elapsed, p.Failed, lastErr)
	}
	n := float64(p.Txns)
	p.ConsensusRounds = float64(rounds) / n
	p.ConsensusRoundsMin, p.ConsensusRoundsMax = roundsMin, roundsMax
	p.ConsensusBatches = float64(batches) / n
	p.PathBatchRPCs = float64(pathBatches) / n
	p.PathRemoteRPCs = float64(pathRemote) / n
	p.TimestampRPCs = float64(st1.TimestampRPCs-st0.TimestampRPCs) / n
	p.AllRPCs = float64(calls1-calls0) / n
	p.CPU = (cpu1 - cpu0) / time.Duration(p.Txns)
	p.Mean, p.P50, p.P99, p.Max = summarize(lat)
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, "  [%-9s rtt %3g ms, %d reads, %3d writes] %4d txns in %5.1fs: p50 %8.2f ms, mean %8.2f ms; rounds %.2f; failed %d\n",
			mode.Name, rttMs, shape.Reads, shape.Writes, p.Txns, p.Elapsed.Seconds(), Ms(p.P50), Ms(p.Mean), p.ConsensusRounds, p.Failed)
	}
	return p, nil
}

// txn runs one transaction of shape in mode and returns its attempts and
// what was counted on its context.
func (r *Runner) txn(ctx context.Context, mode Mode, shape Shape) (int, client.RoundCounts, ScopeCounts, error) {
	var rc client.RoundCounter
	sc := &scope{}
	ctx = withScope(client.WithRoundCounter(ctx, &rc), sc)
	reads := make([][]byte, shape.Reads)
	for i := range reads {
		reads[i] = r.Keys.readKey(i, r.Rand.IntN(r.Keys.ReadKeysPerRange))
	}
	writes := make([][]byte, shape.Writes)
	for j := range writes {
		writes[j] = r.Keys.rangeKey(shape.Reads+j, 'w', r.Rand.Uint64())
	}
	value := make([]byte, ValueBytes)
	attempts := 0
	err := r.DB.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		attempts++
		for _, k := range reads {
			if _, _, err := txn.Get(ctx, k); err != nil {
				return err
			}
		}
		for _, k := range writes {
			if err := txn.Put(ctx, k, value); err != nil {
				return err
			}
		}
		return nil
	}, mode.TxnOptions()...)
	return attempts, rc.Counts(), sc.counts(), err
}

// summarize returns mean, p50, p99 and max of lat (not empty).
func summarize(lat []time.Duration) (mean, p50, p99, mx time.Duration) {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))] }
	return sum / time.Duration(len(s)), at(0.5), at(0.99), s[len(s)-1]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// CallCounter is a gRPC unary client interceptor that delays every call to
// a node other than the gateway by the round trip set with SetRemoteDelay
// (the client is co-located with the gateway, as the post's SQL gateway is
// with its leaseholders) and counts calls: all of them, and those made with
// a transaction's context (Runner.txn) in that transaction's scope.
type CallCounter struct {
	gateway string
	mu      struct {
		sync.Mutex
		delay time.Duration
		total int64
	}
}

// NewCallCounter delays calls to every target but gateway (an address as
// the client dials it).
func NewCallCounter(gateway string) *CallCounter { return &CallCounter{gateway: gateway} }

// SetRemoteDelay sets the delay of calls to the other nodes: the round
// trip between the client's node and theirs.
func (c *CallCounter) SetRemoteDelay(d time.Duration) {
	c.mu.Lock()
	c.mu.delay = d
	c.mu.Unlock()
}

// Total is the number of calls so far.
func (c *CallCounter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.total
}

// Interceptor is the grpc.UnaryClientInterceptor to install with
// client.WithDialOptions(grpc.WithChainUnaryInterceptor(...)).
func (c *CallCounter) Interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		remote := cc.Target() != c.gateway
		c.mu.Lock()
		c.mu.total++
		delay := c.mu.delay
		c.mu.Unlock()
		if s, _ := ctx.Value(scopeKey{}).(*scope); s != nil {
			s.add(method, remote)
		}
		if remote && delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// ScopeCounts are the calls made with one transaction's context.
type ScopeCounts struct {
	Batches int64 // Batch RPCs
	Remote  int64 // calls to nodes other than the gateway
}

type scope struct {
	mu sync.Mutex
	c  ScopeCounts
}

type scopeKey struct{}

func withScope(ctx context.Context, s *scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

func (s *scope) add(method string, remote bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if method == rpcpb.KV_Batch_FullMethodName {
		s.c.Batches++
	}
	if remote {
		s.c.Remote++
	}
}

func (s *scope) counts() ScopeCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}
