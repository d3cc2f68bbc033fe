package allocator

import (
	"fmt"
	"slices"
	"sort"
)

// ReplicaKind is a replica's role in the range's configuration.
type ReplicaKind int

const (
	Voter ReplicaKind = iota
	Learner
	VoterIncoming
	VoterOutgoing
)

func (k ReplicaKind) String() string {
	return [...]string{"voter", "learner", "incoming", "outgoing"}[k]
}

// Replica is one replica of the range.
type Replica struct {
	NodeID uint64
	Kind   ReplicaKind
	// Damaged: the replica found its data damaged (corruption found when
	// read) and reported it. It serves nothing; it is replaced like a
	// replica on a bad node, and where no other node can take its place
	// it is removed first (while a majority of the other voters remains)
	// so that a new replica on its node can be filled by a snapshot.
	Damaged bool
}

// Membership is a node's place in the cluster.
type Membership int

const (
	Active Membership = iota
	Decommissioning
	Removed
)

func (m Membership) String() string {
	return [...]string{"active", "decommissioning", "removed"}[m]
}

// Node is what Decide knows of one node.
type Node struct {
	ID         uint64
	Membership Membership
	// Live: heard from lately (within an election timeout or so).
	Live bool
	// Dead: not heard from for longer than the dead-node timeout.
	// Invariant: Dead implies !Live.
	Dead bool
	// Replicas is how many replicas the node holds (from the meta
	// records; learners included).
	Replicas int
}

// healthy: the node may take a replica.
func (n Node) healthy() bool { return n.Live && n.Membership == Active }

// bad: a replica there must be replaced.
func (n Node) bad() bool { return n.Dead || n.Membership != Active }

// Range is what Decide knows of one range, as its leaseholder sees it.
type Range struct {
	Replicas []Replica
	// Leaseholder is the node of the leaseholder (the caller).
	Leaseholder uint64
	// LearnersReady lists the nodes of the learners that take appends.
	LearnersReady []uint64
	// CaughtUp lists the nodes of the voters whose log matches the
	// leader's: where the lease may go.
	CaughtUp []uint64
	// LearnersStuck lists the nodes of the learners that have not been
	// ready for longer than the caller allows (a learner whose snapshot
	// keeps failing): they are removed, and tried again later.
	LearnersStuck []uint64
}

// Config holds the placement settings.
type Config struct {
	// ReplicationFactor is the number of voters a range should have.
	ReplicationFactor int
	// RebalanceThreshold is how many more replicas a node must hold than
	// another before a replica moves between them (default 2).
	RebalanceThreshold int
}

// ActionKind is the kind of step Decide asks for.
type ActionKind int

const (
	None ActionKind = iota
	LeaveJoint
	AddLearner
	Promote
	RemoveLearner
	RemoveVoter
	TransferLease
)

// Action is one step. Target is the node acted on (the learner to add,
// promote or remove, the voter to remove, the lease's new node); Remove,
// for Promote, the voter swapped out (0: none). Reason says why.
type Action struct {
	Kind           ActionKind
	Target, Remove uint64
	Reason         string
}

func (a Action) String() string {
	switch a.Kind {
	case None:
		return "none: " + a.Reason
	case LeaveJoint:
		return "leave-joint: " + a.Reason
	case AddLearner:
		return fmt.Sprintf("add-learner n%d: %s", a.Target, a.Reason)
	case Promote:
		if a.Remove != 0 {
			return fmt.Sprintf("promote n%d, remove n%d: %s", a.Target, a.Remove, a.Reason)
		}
		return fmt.Sprintf("promote n%d: %s", a.Target, a.Reason)
	case RemoveLearner:
		return fmt.Sprintf("remove-learner n%d: %s", a.Target, a.Reason)
	case RemoveVoter:
		return fmt.Sprintf("remove-voter n%d: %s", a.Target, a.Reason)
	case TransferLease:
		return fmt.Sprintf("transfer-lease n%d: %s", a.Target, a.Reason)
	}
	return "?"
}

// Decide returns the next step for r (see the package comment).
func Decide(r Range, nodes map[uint64]Node, cfg Config) Action {
	if cfg.RebalanceThreshold <= 0 {
		cfg.RebalanceThreshold = 2
	}
	rf := max(cfg.ReplicationFactor, 1)
	node := func(id uint64) (Node, bool) { n, ok := nodes[id]; return n, ok }
	damaged := map[uint64]bool{}
	for _, rep := range r.Replicas {
		if rep.Damaged {
			damaged[rep.NodeID] = true
		}
	}
	isBad := func(id uint64) (bool, string) {
		n, ok := node(id)
		switch {
		case damaged[id]:
			return true, "the replica on n" + fmt.Sprint(id) + " is damaged"
		case !ok:
			return false, ""
		case n.Membership != Active:
			return true, "n" + fmt.Sprint(id) + " is " + n.Membership.String()
		case n.Dead:
			return true, "n" + fmt.Sprint(id) + " is dead"
		}
		return false, ""
	}
	var voters, learners []uint64
	for _, rep := range r.Replicas {
		switch rep.Kind {
		case VoterIncoming, VoterOutgoing:
			return Action{Kind: LeaveJoint, Reason: "the configuration is joint"}
		case Learner:
			learners = append(learners, rep.NodeID)
		default:
			voters = append(voters, rep.NodeID)
		}
	}
	has := func(id uint64) bool {
		for _, rep := range r.Replicas {
			if rep.NodeID == id {
				return true
			}
		}
		return false
	}
	count := func(id uint64) int { n, _ := node(id); return n.Replicas }
	allVotersLive := true
	for _, v := range voters {
		if n, ok := node(v); !ok || (!n.Live && v != r.Leaseholder) {
			allVotersLive = false
		}
	}
	// removable picks the voter to take out: a bad one first, else (if
	// every voter is live) the one on the fullest node; never the
	// leaseholder's. ok is false if only the leaseholder's would do.
	removable := func(exclude uint64) (id uint64, why string, leaseholderOnly bool) {
		for _, v := range voters {
			if bad, w := isBad(v); bad && v != exclude {
				if v == r.Leaseholder {
					leaseholderOnly = true
					continue
				}
				return v, w, false
			}
		}
		if leaseholderOnly || !allVotersLive {
			return 0, "", leaseholderOnly
		}
		cands := slices.Clone(voters)
		sort.Slice(cands, func(i, j int) bool {
			if ci, cj := count(cands[i]), count(cands[j]); ci != cj {
				return ci > cj
			}
			return cands[i] < cands[j]
		})
		for _, v := range cands {
			if v == exclude {
				continue
			}
			if v == r.Leaseholder {
				leaseholderOnly = true
				continue
			}
			return v, fmt.Sprintf("n%d holds the most replicas (%d)", v, count(v)), false
		}
		return 0, "", leaseholderOnly
	}
	leaseTarget := func() uint64 {
		for _, id := range r.CaughtUp {
			if n, ok := node(id); ok && n.healthy() && id != r.Leaseholder && slices.Contains(voters, id) && !damaged[id] {
				return id
			}
		}
		return 0
	}

	// 2. Learners.
	for _, l := range learners {
		if n, ok := node(l); !ok || !n.Live || n.Membership != Active {
			return Action{Kind: RemoveLearner, Target: l, Reason: fmt.Sprintf("n%d cannot take a replica", l)}
		}
		if damaged[l] {
			return Action{Kind: RemoveLearner, Target: l, Reason: fmt.Sprintf("the learner on n%d is damaged", l)}
		}
	}
	for _, l := range learners {
		if !slices.Contains(r.LearnersReady, l) {
			if slices.Contains(r.LearnersStuck, l) {
				return Action{Kind: RemoveLearner, Target: l, Reason: fmt.Sprintf("the learner on n%d has not caught up in time", l)}
			}
			return Action{Kind: None, Reason: fmt.Sprintf("waiting for the learner on n%d to catch up", l)}
		}
		if len(voters) < rf {
			return Action{Kind: Promote, Target: l, Reason: fmt.Sprintf("%d of %d voters", len(voters), rf)}
		}
		rm, why, lhOnly := removable(0)
		if rm != 0 {
			return Action{Kind: Promote, Target: l, Remove: rm, Reason: why}
		}
		if lhOnly {
			if t := leaseTarget(); t != 0 {
				return Action{Kind: TransferLease, Target: t, Reason: "the leaseholder's replica is to be replaced"}
			}
			return Action{Kind: None, Reason: "the leaseholder's replica is to be replaced but no voter can take the lease"}
		}
		// Nothing to swap out (a voter went down meanwhile): not now.
		return Action{Kind: RemoveLearner, Target: l, Reason: "no voter to replace with it"}
	}

	// 3. The lease off a node that is leaving.
	if n, ok := node(r.Leaseholder); ok && n.Membership != Active {
		if t := leaseTarget(); t != 0 {
			return Action{Kind: TransferLease, Target: t, Reason: fmt.Sprintf("n%d is %s", r.Leaseholder, n.Membership)}
		}
	}

	// 4. Replace bad voters, fill missing ones.
	target := func() uint64 {
		var best uint64
		for id, n := range nodes {
			if !n.healthy() || has(id) {
				continue
			}
			if best == 0 || n.Replicas < count(best) || (n.Replicas == count(best) && id < best) {
				best = id
			}
		}
		return best
	}
	var badVoter uint64
	var badWhy string
	for _, v := range voters {
		if bad, w := isBad(v); bad {
			badVoter, badWhy = v, w
			break
		}
	}
	if badVoter != 0 || len(voters) < rf {
		why := badWhy
		if badVoter == 0 {
			why = fmt.Sprintf("%d of %d voters", len(voters), rf)
		}
		if t := target(); t != 0 {
			return Action{Kind: AddLearner, Target: t, Reason: why}
		}
		// A damaged voter with no node to replace it on is removed, as
		// long as the others keep a majority of three or more voters:
		// its node can then take a new replica, which a snapshot fills.
		if badVoter != 0 && (len(voters) > rf || (damaged[badVoter] && len(voters) >= 3)) {
			if badVoter == r.Leaseholder {
				if t := leaseTarget(); t != 0 {
					return Action{Kind: TransferLease, Target: t, Reason: badWhy}
				}
				return Action{Kind: None, Reason: badWhy + ", and no voter can take the lease"}
			}
			return Action{Kind: RemoveVoter, Target: badVoter, Reason: badWhy}
		}
		return Action{Kind: None, Reason: why + ", and no node can take a replica"}
	}

	// 5. Too many voters.
	if len(voters) > rf {
		rm, why, lhOnly := removable(0)
		if rm != 0 {
			return Action{Kind: RemoveVoter, Target: rm, Reason: fmt.Sprintf("%d voters for %d: %s", len(voters), rf, why)}
		}
		if lhOnly {
			if t := leaseTarget(); t != 0 {
				return Action{Kind: TransferLease, Target: t, Reason: fmt.Sprintf("%d voters for %d: the leaseholder's is to go", len(voters), rf)}
			}
		}
		return Action{Kind: None, Reason: fmt.Sprintf("%d voters for %d, none removable now", len(voters), rf)}
	}

	// 6. Rebalance.
	if !allVotersLive {
		return Action{Kind: None, Reason: "a voter's node is not live"}
	}
	t := target()
	if t == 0 {
		return Action{Kind: None, Reason: "balanced"}
	}
	fullest := uint64(0)
	for _, v := range voters {
		if v != r.Leaseholder && (fullest == 0 || count(v) > count(fullest)) {
			fullest = v
		}
	}
	if fullest != 0 && count(fullest)-count(t) >= cfg.RebalanceThreshold {
		return Action{Kind: AddLearner, Target: t, Reason: fmt.Sprintf("rebalance: n%d holds %d replicas, n%d %d", fullest, count(fullest), t, count(t))}
	}
	return Action{Kind: None, Reason: "balanced"}
}
