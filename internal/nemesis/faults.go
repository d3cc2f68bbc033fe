package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Kind is a kind of fault.
type Kind string

const (
	// KindPartition isolates one node: every Raft link to and from it
	// drops.
	KindPartition Kind = "partition"
	// KindAsymmetric drops the Raft messages one node sends to one peer;
	// the peer's messages to it still arrive.
	KindAsymmetric Kind = "asymmetric"
	// KindOracle isolates the oracle host: the leaseholder of range 1.
	KindOracle Kind = "oracle"
	// KindDelay delays every Raft message to and from one node.
	KindDelay Kind = "delay"
	// KindKill kills one node with SIGKILL; the heal restarts it with its
	// store.
	KindKill Kind = "kill"
	// KindPause stops one node with SIGSTOP; the heal sends SIGCONT.
	KindPause Kind = "pause"
	// KindSkew skews the oracle host's clock (the leaseholder of range 1)
	// by up to kvserver.FaultClockSkewMax, either way.
	KindSkew Kind = "skew"
	// KindDiskStall makes every fsync of one node's store wait until the
	// heal.
	KindDiskStall Kind = "disk-stall"
	// KindSyncError makes every fsync of one node's store fail: the node
	// must stop (one error line, exit status 1) and lose nothing it
	// acknowledged. The heal restarts it.
	KindSyncError Kind = "sync-error"
	// KindLostReply loses, on every node, the replies of the next
	// LostReplies commit writes after they applied, so that the clients'
	// ambiguous-commit lookup runs.
	KindLostReply Kind = "lost-reply"
	// KindClientCut cuts the workload's client off from one node (every
	// connection to it delivers nothing either way until the heal), while
	// the nodes still reach each other (issue 13, item 7, case b).
	KindClientCut Kind = "client-cut"
	// KindMembership changes the cluster's membership under load: a
	// spare node with an empty store joins (start --join) and takes
	// replicas (rebalancing: learners, snapshots, joint configurations);
	// the heal decommissions it (its replicas and leases move back),
	// removes it and stops it. Each one joins with a fresh store.
	KindMembership Kind = "membership"
)

// Kinds is every kind, in the order a schedule of all kinds injects them.
var Kinds = []Kind{KindPartition, KindAsymmetric, KindOracle, KindDelay, KindKill, KindPause,
	KindSkew, KindDiskStall, KindSyncError, KindLostReply, KindClientCut, KindMembership}

// LostReplies is how many commit replies KindLostReply loses per node.
const LostReplies = 2

// SkewMin is the smallest skew of KindSkew.
const SkewMin = 100 * time.Millisecond

// LinkDelay is the one-way delay of KindDelay.
const LinkDelay = 200 * time.Millisecond

// ParseKinds parses a comma-separated list of kinds ("all": every kind).
func ParseKinds(s string) ([]Kind, error) {
	if s == "all" || s == "" {
		return append([]Kind(nil), Kinds...), nil
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		ok := false
		for _, known := range Kinds {
			ok = ok || k == known
		}
		if !ok {
			names := make([]string, len(Kinds))
			for i, k := range Kinds {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("invalid argument: fault kind %q (want all or some of %s)", k, strings.Join(names, ","))
		}
		out = append(out, k)
	}
	return out, nil
}

// fault is one injected fault, until healed.
type fault struct {
	kind   Kind
	target int // slot
	peer   int // slot, KindAsymmetric only
	skew   time.Duration
	at     time.Time
	// nodeID: KindMembership, the node that joined.
	nodeID uint64
}

func (f *fault) String() string {
	switch f.kind {
	case KindAsymmetric:
		return fmt.Sprintf("%s n%d->n%d", f.kind, f.target+1, f.peer+1)
	case KindSkew:
		return fmt.Sprintf("%s n%d %+v", f.kind, f.target+1, f.skew)
	case KindLostReply:
		return fmt.Sprintf("%s (%d per node)", f.kind, LostReplies)
	case KindMembership:
		return fmt.Sprintf("%s n%d", f.kind, f.nodeID)
	}
	return fmt.Sprintf("%s n%d", f.kind, f.target+1)
}

// inject starts a fault of kind k on a node chosen by rng.
func (c *cluster) inject(ctx context.Context, db *client.DB, k Kind, rng *rand.Rand) (*fault, error) {
	f := &fault{kind: k, target: rng.IntN(len(c.procs))}
	f.peer = (f.target + 1 + rng.IntN(len(c.procs)-1)) % len(c.procs)
	if k == KindOracle || k == KindSkew {
		slot, err := c.oracleHost(ctx, db)
		if err != nil {
			return nil, err
		}
		f.target = slot
	}
	f.at = time.Now()
	switch k {
	case KindPartition, KindOracle:
		return f, c.isolate(ctx, f.target, url.Values{"drop": {"1"}})
	case KindDelay:
		return f, c.isolate(ctx, f.target, url.Values{"delay": {LinkDelay.String()}})
	case KindAsymmetric:
		q := url.Values{"peer": {fmt.Sprint(c.procs[f.peer].nodeID)}, "drop": {"1"}}
		return f, c.fault(ctx, f.target, q)
	case KindKill:
		c.kill9(f.target)
		return f, nil
	case KindPause:
		c.procs[f.target].paused = true
		return f, c.signal(f.target, syscall.SIGSTOP)
	case KindSkew:
		f.skew = SkewMin + time.Duration(rng.Int64N(int64(kvserver.FaultClockSkewMax-SkewMin)+1))
		if rng.IntN(2) == 0 {
			f.skew = -f.skew
		}
		return f, c.fault(ctx, f.target, url.Values{"skew": {f.skew.String()}})
	case KindDiskStall:
		// Stalled until the heal (bounded by the stall's own limit).
		return f, c.fault(ctx, f.target, url.Values{"disk": {"stall"}, "for": {storage.FaultStallMax.String()}})
	case KindSyncError:
		return f, c.fault(ctx, f.target, url.Values{"disk": {"sync-error"}})
	case KindClientCut:
		c.cutter.set(c.addrs[f.target])
		return f, nil
	case KindMembership:
		f.target = -1
		id, err := c.addSpare(ctx, db)
		if err != nil {
			// Not joined (or not seen to): stopped, and tried again as
			// any kind that could not be injected.
			c.stopProc(c.spare)
			c.spare = nil
			return nil, err
		}
		f.nodeID = id
		return f, nil
	case KindLostReply:
		f.target = -1
		for i := range c.procs {
			if err := c.fault(ctx, i, url.Values{"lost-replies": {fmt.Sprint(LostReplies)}}); err != nil {
				return f, err
			}
		}
		return f, nil
	}
	return nil, fmt.Errorf("nemesis: unknown fault kind %q", k)
}

// isolate sets the link fault q on every link to and from slot i.
func (c *cluster) isolate(ctx context.Context, i int, q url.Values) error {
	for j, p := range c.procs {
		if j == i {
			continue
		}
		to := url.Values{"peer": {fmt.Sprint(p.nodeID)}}
		from := url.Values{"peer": {fmt.Sprint(c.procs[i].nodeID)}}
		for k, v := range q {
			to[k], from[k] = v, v
		}
		if err := c.fault(ctx, i, to); err != nil {
			return err
		}
		if err := c.fault(ctx, j, from); err != nil {
			return err
		}
	}
	return nil
}

// heal ends f: link faults are cleared on every node, a killed node is
// restarted, a paused one resumed.
func (c *cluster) heal(ctx context.Context, db *client.DB, f *fault) error {
	switch f.kind {
	case KindMembership:
		return c.removeSpare(ctx, db, f.nodeID)
	case KindClientCut:
		c.cutter.set("")
		return nil
	case KindKill:
		return c.start(ctx, f.target)
	case KindPause:
		c.procs[f.target].paused = false
		return c.signal(f.target, syscall.SIGCONT)
	case KindSyncError:
		if !c.procs[f.target].running() {
			c.noteExit(f.target)
			return c.start(ctx, f.target)
		}
	}
	var first error
	for i, p := range c.procs {
		if !p.running() {
			continue
		}
		if err := c.fault(ctx, i, url.Values{"heal": {"1"}}); err != nil && first == nil && p.running() {
			first = err
		}
	}
	return first
}

// oracleHost returns the slot of the leaseholder of range 1.
func (c *cluster) oracleHost(ctx context.Context, db *client.DB) (int, error) {
	var slot int
	err := retryEach(ctx, 30*time.Second, func(rctx context.Context) error {
		ranges, err := db.Ranges(rctx)
		if err != nil {
			return err
		}
		for _, r := range ranges {
			if r.Desc.GetRangeId() != 1 {
				continue
			}
			for i, p := range c.procs {
				if p.nodeID == r.LeaseholderNodeID && p.nodeID != 0 {
					slot = i
					return nil
				}
			}
			return fmt.Errorf("range 1 has no known leaseholder")
		}
		return fmt.Errorf("no range 1")
	})
	return slot, err
}

// learnNodeIDs fills in every proc's node ID from the cluster's view.
func (c *cluster) learnNodeIDs(ctx context.Context, db *client.DB) error {
	return retryEach(ctx, time.Minute, func(rctx context.Context) error {
		info, err := db.ClusterInfo(rctx)
		if err != nil {
			return err
		}
		found := 0
		for _, nd := range info.Nodes {
			for _, p := range c.procs {
				if p.addr == nd.Address {
					p.nodeID = nd.NodeId
					found++
				}
			}
		}
		if found != len(c.procs) {
			return fmt.Errorf("the cluster knows %d of %d nodes", found, len(c.procs))
		}
		return nil
	})
}

// noteExit records how slot i's process ended (after a fault that must
// stop it): its exit status and the last line of its log.
func (c *cluster) noteExit(i int) {
	p := c.procs[i]
	code := p.cmd.ProcessState.ExitCode()
	c.exits = append(c.exits, nodeExit{slot: i, code: code, line: lastLine(p.logPath)})
}

// addSpare starts the spare node with a fresh store, joining the running
// cluster, and returns its node ID once the cluster lists it (0 if it
// never did).
func (c *cluster) addSpare(ctx context.Context, db *client.DB) (uint64, error) {
	c.spares++
	p := &proc{slot: -1, addr: c.spareAddr, httpAddr: c.spareHTTP,
		store:   filepath.Join(c.dir, fmt.Sprintf("spare%d", c.spares)),
		logPath: filepath.Join(c.dir, fmt.Sprintf("spare%d.log", c.spares))}
	c.spare = p
	if err := c.startProc(ctx, p, "spare"); err != nil {
		return 0, err
	}
	err := retryEach(ctx, time.Minute, func(rctx context.Context) error {
		ms, err := db.Members(rctx)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.GetNode().GetAddress() == p.addr && m.GetNode().GetMembership() == rpcpb.NodeMembership_ACTIVE {
				p.nodeID = m.GetNode().GetNodeId()
				return nil
			}
		}
		return fmt.Errorf("the spare node at %s has not joined", p.addr)
	})
	return p.nodeID, err
}

// removeSpare decommissions the spare node nodeID, waits until it holds no
// replica, removes it and stops its process.
func (c *cluster) removeSpare(ctx context.Context, db *client.DB, nodeID uint64) error {
	set := func(m rpcpb.NodeMembership) error {
		return retryEach(ctx, time.Minute, func(rctx context.Context) error {
			_, err := db.ChangeMembership(rctx, nodeID, m)
			return err
		})
	}
	if err := set(rpcpb.NodeMembership_DECOMMISSIONING); err != nil {
		return fmt.Errorf("decommissioning n%d: %w", nodeID, err)
	}
	err := retryEach(ctx, 2*time.Minute, func(rctx context.Context) error {
		ms, err := db.Members(rctx)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.GetNode().GetNodeId() == nodeID && m.GetReplicas() > 0 {
				return fmt.Errorf("n%d still holds %d replicas", nodeID, m.GetReplicas())
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("decommissioning n%d: %w", nodeID, err)
	}
	if err := set(rpcpb.NodeMembership_REMOVED); err != nil {
		return fmt.Errorf("removing n%d: %w", nodeID, err)
	}
	c.stopProc(c.spare)
	c.spare = nil
	return nil
}
