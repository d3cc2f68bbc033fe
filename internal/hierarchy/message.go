package hierarchy

import (
	"fmt"
	"strings"
)

// TxnID identifies a transaction (in Canopy, its start_ts).
type TxnID uint64

// ClientID names where a transaction's result goes (the coordinator).
type ClientID uint64

// Part is what one data node hands its leaf when a client asks it to commit
// a transaction (3.2.4): the keys the transaction read and wrote on that
// node. The node has written the writes as intents (the thesis's tentative
// versions) once the leaf has accepted the part (see the contract in doc.go).
type Part struct {
	Txn    TxnID
	Client ClientID
	// Snapshot is the timestamp the transaction read at (its start_ts).
	Snapshot uint64
	// Nodes are all the data nodes the transaction involves, sorted, the
	// same list in every part (the client computes it); it decides which
	// validator decides.
	Nodes []NodeID
	// Reads and Writes are the keys read and written on this node. A key
	// both read and written is listed in both.
	Reads, Writes []string
	// Conflict is set by a node whose storage shows a conflict the leaf
	// cannot know of: a version above the snapshot or another
	// transaction's intent on one of the part's keys, written while
	// another node led the range (a lease moved) or before the leaf
	// restarted. The part then fails its check like any conflicting part.
	Conflict bool
}

// Vote is a partial validation result travelling up the tree (3.2.5.B): the
// merged verdict of the parts below the sender.
type Vote struct {
	Txn      TxnID
	Client   ClientID
	Snapshot uint64
	Nodes    []NodeID
	// OK is false if some part below failed its check.
	OK bool
	// TS is the largest leaf timestamp of the parts below (the thesis's
	// "maximum commit timestamp received from its children").
	TS uint64
	// Steps is this vote's share of communication steps so far (counts.go).
	Steps float64
}

// Decision is the outcome of a transaction, made by its deciding validator
// and sent to the client and to every involved node.
type Decision struct {
	Txn    TxnID
	Commit bool
	// TS is the commit timestamp; 0 for an abort, so that every abort of a
	// transaction is the same decision wherever it is made.
	TS uint64
}

func (d Decision) String() string {
	if d.Commit {
		return fmt.Sprintf("txn %d commit@%d", d.Txn, d.TS)
	}
	return fmt.Sprintf("txn %d abort", d.Txn)
}

// MsgKind is the kind of a Message.
type MsgKind uint8

const (
	// MsgVotes goes from a validator to its parent: a batch of votes, and in
	// the timestamp variant the sender's watermark.
	MsgVotes MsgKind = iota + 1
	// MsgRaise goes from a validator to a child (timestamp variant): move
	// your watermark to at least TS and report it.
	MsgRaise
	// MsgDecisions goes from a deciding validator to a data node: a batch of
	// decisions. The node hands it to its leaf (Step) after reading it.
	MsgDecisions
	// MsgResult goes from a deciding validator to a transaction's client.
	MsgResult
)

func (k MsgKind) String() string {
	switch k {
	case MsgVotes:
		return "votes"
	case MsgRaise:
		return "raise"
	case MsgDecisions:
		return "decisions"
	case MsgResult:
		return "result"
	}
	return fmt.Sprintf("MsgKind(%d)", uint8(k))
}

// Message is what validators send. The transport must deliver the messages
// from one sender to one receiver in the order sent (FIFO per link) and not
// duplicate them; it may lose them only when the sender or receiver
// crashes (then the restart protocol makes up for it). Messages of
// different links may arrive in any order.
type Message struct {
	Kind MsgKind
	From ValidatorID
	// To is the receiving validator (MsgVotes, MsgRaise).
	To ValidatorID
	// Node is the receiving data node (MsgDecisions).
	Node NodeID
	// Client is the receiving client (MsgResult).
	Client ClientID

	Votes []Vote
	// Watermark (MsgVotes, timestamp variant): every successful vote the
	// sender sends after this message has a timestamp above it (a failing
	// vote's timestamp does not matter). 0 promises nothing.
	Watermark uint64
	// TS is the watermark a MsgRaise asks for.
	TS        uint64
	Decisions []Decision
	// Result is the decision a MsgResult carries.
	Result Decision
}

func (m Message) String() string {
	var b strings.Builder
	switch m.Kind {
	case MsgVotes:
		fmt.Fprintf(&b, "v%d->v%d votes", m.From, m.To)
		for _, v := range m.Votes {
			ok := "ok"
			if !v.OK {
				ok = "fail"
			}
			fmt.Fprintf(&b, " [txn %d %s ts=%d]", v.Txn, ok, v.TS)
		}
		if m.Watermark != 0 {
			fmt.Fprintf(&b, " watermark=%d", m.Watermark)
		}
	case MsgRaise:
		fmt.Fprintf(&b, "v%d->v%d raise %d", m.From, m.To, m.TS)
	case MsgDecisions:
		fmt.Fprintf(&b, "v%d->node %d", m.From, m.Node)
		for _, d := range m.Decisions {
			fmt.Fprintf(&b, " [%s]", d)
		}
	case MsgResult:
		fmt.Fprintf(&b, "v%d->client %d %s", m.From, m.Client, m.Result)
	default:
		fmt.Fprintf(&b, "%v", m.Kind)
	}
	return b.String()
}

// PartResult is a leaf's verdict on a part: what the node must make durable
// (with the part's intents) before the vote leaves the leaf, and what
// Recovery gives back after a crash.
type PartResult struct {
	Part Part
	OK   bool
	TS   uint64
}

// Ready is what the validator asks its caller to do, in this order (see
// doc.go for why):
//
//  1. Make Parts and Decisions durable (a leaf: the part results beside the
//     part's intents; a decision: the status table).
//  2. Send Messages, and apply Resolve to the node's intents (leaves only).
//  3. Look up Lookups in the status table; call Decided for those decided.
type Ready struct {
	Parts     []PartResult
	Decisions []Decision
	Messages  []Message
	// Resolve (leaves) lists the decisions for this leaf's own node, each
	// once: commit the transaction's intents at TS, or remove them. It
	// includes the leaf's own decisions (local transactions), which cost no
	// message.
	Resolve []Decision
	// Lookups (leaves) are pending transactions whose decision is overdue:
	// the caller looks each up in the status table and, if it is decided,
	// calls Decided (a decision message may have been lost with a crashed
	// validator after it was made durable).
	Lookups []TxnID
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return len(r.Parts) == 0 && len(r.Decisions) == 0 && len(r.Messages) == 0 && len(r.Resolve) == 0 && len(r.Lookups) == 0
}

// Recovery is what a restarted leaf starts from. An inner validator
// recovers nothing: the leaves vote again, every Config.ResendAfter, for
// every part still undecided, and the decisions already made are durable.
type Recovery struct {
	// ClockFloor (leaves) is at or above every timestamp the leaf issued or
	// observed before the crash. Canopy takes a fresh oracle timestamp, which
	// is above every snapshot served before, maxed with the highest
	// timestamp in the node's part results and versions.
	ClockFloor uint64
	// LatestFloor (leaves) is at or above every version committed on the
	// node: the latest-version table starts empty with this floor.
	LatestFloor uint64
	// Pending (leaves) are the part results made durable and not yet
	// decided (the node still holds their intents).
	Pending []PartResult
}
