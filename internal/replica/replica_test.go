package replica

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/storage"
	"go.etcd.io/raft/v3/raftpb"
)

// kvSM is a plain twin of a range: commands are "key=value" plain writes
// under storage.PrefixData.
type kvSM struct{}

func (kvSM) Apply(b *storage.Batch, index, _ uint64, cmd []byte) (any, func()) {
	i := bytes.IndexByte(cmd, '=')
	if err := b.Set(storage.DataKey(cmd[:i]), cmd[i+1:]); err != nil {
		panic(err)
	}
	return index, nil
}

func (kvSM) SnapshotData(snap *storage.Snapshot) ([]byte, error) {
	defer snap.Close()
	return kvData(snap)
}

// kvData serialises the data keys read from r.
func kvData(r storage.Reader) ([]byte, error) {
	it, err := r.NewIter([]byte{storage.PrefixData}, storage.DataSpanEnd())
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []byte
	for ok := it.First(); ok; ok = it.Next() {
		v, _ := it.Value()
		out = binary.AppendUvarint(out, uint64(len(it.Key())))
		out = append(out, it.Key()...)
		out = binary.AppendUvarint(out, uint64(len(v)))
		out = append(out, v...)
	}
	return out, nil
}

func (kvSM) ApplySnapshot(b *storage.Batch, data []byte) (func(), error) {
	_ = b.DeleteRange([]byte{storage.PrefixData}, storage.DataSpanEnd())
	for len(data) > 0 {
		n, w := binary.Uvarint(data)
		k := data[w : w+int(n)]
		data = data[w+int(n):]
		n, w = binary.Uvarint(data)
		v := data[w : w+int(n)]
		data = data[w+int(n):]
		_ = b.Set(k, v)
	}
	return nil, nil
}

// memNet routes messages between replicas of one range in memory.
type memNet struct {
	mu       sync.Mutex
	replicas map[uint64]*Replica
}

func (n *memNet) Send(_ uint64, msgs []raftpb.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range msgs {
		if r := n.replicas[m.To]; r != nil {
			r.Step(m)
		} else if from := n.replicas[m.From]; from != nil {
			from.ReportUnreachable(m.To)
			if m.Type == raftpb.MsgSnap {
				from.ReportSnapshotFailure(m.To)
			}
		}
	}
}

func (n *memNet) set(id uint64, r *Replica) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r == nil {
		delete(n.replicas, id)
	} else {
		n.replicas[id] = r
	}
}

// quiesceNet is memNet with quiesce heartbeats: groups on it quiesce.
type quiesceNet struct{ *memNet }

func (n quiesceNet) SendQuiesce(_ uint64, msgs []raftpb.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range msgs {
		if r := n.replicas[m.To]; r != nil {
			r.StepQuiesce(m)
		}
	}
}

type group struct {
	t *testing.T
	// quiesce: the replicas use quiesceNet, and the ticker plays node
	// liveness: a quiesced replica whose leader is stopped is woken.
	quiesce bool
	// mod, if set, adjusts each replica's config.
	mod     func(*Config)
	net     *memNet
	engines map[uint64]*storage.Engine
	// scheds: one scheduler per node (engine), shared by its replicas.
	scheds   map[uint64]*Scheduler
	stopTick chan struct{}
}

func newGroup(t *testing.T, keep uint64) *group { return newGroupWith(t, keep, nil) }

func newGroupWith(t *testing.T, keep uint64, mod func(*Config)) *group {
	return newGroupOpts(t, keep, mod, false)
}

func newGroupOpts(t *testing.T, keep uint64, mod func(*Config), quiesce bool) *group {
	g := &group{t: t, mod: mod, net: &memNet{replicas: map[uint64]*Replica{}}, engines: map[uint64]*storage.Engine{},
		scheds: map[uint64]*Scheduler{}, stopTick: make(chan struct{}), quiesce: quiesce}
	for id := uint64(1); id <= 3; id++ {
		eng, err := storage.Open(t.TempDir(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g.engines[id] = eng
		if g.scheds[id], err = NewScheduler(SchedulerConfig{Engine: eng}); err != nil {
			t.Fatal(err)
		}
		b := eng.NewWriteBatch()
		if err := WriteInitialState(b, 1, []uint64{1, 2, 3}, raftpb.HardState{}); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		b.Close()
		g.start(id, keep)
	}
	go func() {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-g.stopTick:
				return
			case <-tk.C:
				g.net.mu.Lock()
				for _, r := range g.net.replicas {
					if st := r.Status(); st.Quiescent && g.net.replicas[st.Leader] == nil {
						r.Unquiesce() // the leader's node is silent
					}
					r.Tick()
				}
				g.net.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		close(g.stopTick)
		for id := uint64(1); id <= 3; id++ {
			g.stop(id)
			g.scheds[id].Close()
			_ = g.engines[id].Close()
		}
	})
	return g
}

func (g *group) start(id, keep uint64) {
	cfg := Config{RangeID: 1, PeerID: id, Engine: g.engines[id], SM: kvSM{}, Transport: g.net, LogEntriesKeep: keep, Scheduler: g.scheds[id]}
	if g.quiesce {
		cfg.Transport = quiesceNet{g.net}
	}
	if g.mod != nil {
		g.mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	g.net.set(id, r)
	r.Start()
}

func (g *group) stop(id uint64) {
	g.net.mu.Lock()
	r := g.net.replicas[id]
	g.net.mu.Unlock()
	if r != nil {
		g.net.set(id, nil)
		r.Stop()
	}
}

func (g *group) replica(id uint64) *Replica {
	g.net.mu.Lock()
	defer g.net.mu.Unlock()
	return g.net.replicas[id]
}

// leader waits for a leader among the running replicas (a liveness wait,
// not an assertion on time).
func (g *group) leader() *Replica {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		g.net.mu.Lock()
		for _, r := range g.net.replicas {
			if r.Status().IsLeader {
				g.net.mu.Unlock()
				return r
			}
		}
		g.net.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	g.t.Fatal("no leader elected")
	return nil
}

func (g *group) propose(cmd string) {
	for attempt := 0; attempt < 100; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := g.leader().Propose(ctx, []byte(cmd))
		cancel()
		if err == nil {
			return
		}
	}
	g.t.Fatalf("proposal %q never applied", cmd)
}

func (g *group) waitApplied(id, index uint64) {
	deadline := time.Now().Add(30 * time.Second)
	for g.replica(id).Status().Applied < index {
		if time.Now().After(deadline) {
			g.t.Fatalf("replica %d stuck at applied %d, want %d", id, g.replica(id).Status().Applied, index)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dataOf(t *testing.T, eng *storage.Engine) string {
	data, err := kvData(eng)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestReplicateRestartSnapshot: a replica that misses writes beyond the
// truncated log catches up by snapshot after restart, and then every
// replica holds the same data at the same applied index (I5).
func TestReplicateRestartSnapshot(t *testing.T) {
	g := newGroup(t, 20)
	g.replica(1).Campaign()
	for i := 0; i < 30; i++ {
		g.propose(fmt.Sprintf("k%03d=v%d", i, i))
	}
	g.stop(3)
	for i := 0; i < 200; i++ {
		g.propose(fmt.Sprintf("k%03d=w%d", i, i))
	}
	lead := g.leader()
	if lead.Status().Truncated <= InitialIndex+30 {
		t.Fatalf("log was not truncated past the stopped replica (truncated at %d)", lead.Status().Truncated)
	}
	g.start(3, 20)
	g.propose("last=1")
	target := lead.Status().Applied
	for id := uint64(1); id <= 3; id++ {
		g.waitApplied(id, target)
	}
	want := dataOf(t, g.engines[1])
	for id := uint64(2); id <= 3; id++ {
		if got := dataOf(t, g.engines[id]); got != want {
			t.Fatalf("replica %d diverged from replica 1", id)
		}
	}
	if !bytes.Contains([]byte(want), []byte("w199")) {
		t.Fatal("last write missing")
	}
	// Restart everything: state survives from the engines alone.
	for id := uint64(1); id <= 3; id++ {
		g.stop(id)
	}
	for id := uint64(1); id <= 3; id++ {
		g.start(id, 20)
	}
	g.propose("after=restart")
	target = g.leader().Status().Applied
	for id := uint64(1); id <= 3; id++ {
		g.waitApplied(id, target)
		if got := dataOf(t, g.engines[id]); !bytes.Contains([]byte(got), []byte("restart")) {
			t.Fatalf("replica %d lost the write after restart", id)
		}
	}
}

// TestFollowerRejectsProposals: proposals on a follower are dropped, never
// ambiguous, and ReadIndex on a follower is refused.
func TestFollowerRejectsProposals(t *testing.T) {
	g := newGroup(t, 100)
	g.replica(2).Campaign()
	lead := g.leader()
	for id := uint64(1); id <= 3; id++ {
		r := g.replica(id)
		if r == lead {
			continue
		}
		if _, err := r.Propose(context.Background(), []byte("a=b")); err != ErrNotLeader {
			t.Fatalf("follower proposal: got %v, want ErrNotLeader", err)
		}
		if err := r.ReadIndex(context.Background()); err != ErrNotLeader {
			t.Fatalf("follower read: got %v, want ErrNotLeader", err)
		}
	}
	g.propose("a=b")
	if err := lead.ReadIndex(context.Background()); err != nil {
		t.Fatalf("leader read: %v", err)
	}
}

// TestConcurrentProposalsOneRound: commands proposed at once, many of them
// and together larger than proposeBatchBytes (so that a round holding
// several of them is stepped in more than one run), all apply, and every
// replica ends with the same data. It checks the outcome, not how the
// rounds were cut, which the timing of the proposals decides.
func TestConcurrentProposalsOneRound(t *testing.T) {
	g := newGroup(t, 1000)
	g.replica(1).Campaign()
	lead := g.leader()
	const n = 24
	big := bytes.Repeat([]byte("v"), 300<<10) // 24 x 300 KiB: several runs
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := []byte(fmt.Sprintf("k%02d=", i))
			if i%2 == 1 {
				cmd = append(cmd, big...)
			} else {
				cmd = append(cmd, 's')
			}
			_, errs[i] = lead.Propose(ctx, cmd)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("proposal %d: %v", i, err)
		}
	}
	target := lead.Status().Applied
	for id := uint64(1); id <= 3; id++ {
		g.waitApplied(id, target)
	}
	want := dataOf(t, g.engines[1])
	for id := uint64(2); id <= 3; id++ {
		if dataOf(t, g.engines[id]) != want {
			t.Fatalf("replica %d diverged from replica 1", id)
		}
	}
	for i := 0; i < n; i++ {
		if !bytes.Contains([]byte(want), []byte(fmt.Sprintf("k%02d", i))) {
			t.Fatalf("k%02d missing", i)
		}
	}
}
