package hierarchy

// Counts are what one validator sent and decided, so that the network cost
// of the protocol can be set beside the thesis's analysis (3.5). Sum them
// over the validators of a tree (Add) for the totals.
//
// The thesis counts, per transaction on N nodes decided at level H with
// batch size B (formulas 3.3 and 3.4):
//
//   - messages: N commit requests from the client to the nodes (Parts, a
//     leaf counts the part its node handed it), H*N/B votes up
//     (VoteMessages), N/B decisions to the nodes (DecisionMessages) and one
//     result to the client (ResultMessages); a local transaction costs 2
//     (its part and its result: a leaf tells its own node without a
//     message);
//   - communication steps: 2 (the client's requests go out in parallel, the
//     result comes back) plus H/B: each hop up the tree is one step, shared
//     by the B votes that travel in the same message. A vote carries its
//     share (Vote.Steps: 1/k for each message of k votes it rode in; the
//     largest over the votes merged, which is the critical path), and the
//     deciding validator adds 2 + that share to Steps.
//
// Messages the thesis has no line for are counted apart: WatermarkMessages
// and RaiseMessages (the timestamp variant's stable timestamp when some
// child has nothing to send) and the votes sent again after a crash
// (Resent, which are also in Votes and VoteMessages).
type Counts struct {
	// Parts is the number of parts a leaf took (one commit request from the
	// client to its node each).
	Parts int
	// VoteMessages and Votes: messages up the tree with at least one vote,
	// and the votes in them.
	VoteMessages, Votes int
	// VotesIn is the votes received (including duplicates).
	VotesIn int
	// DecisionMessages and Decisions: messages to data nodes, and the
	// decisions in them.
	DecisionMessages, Decisions int
	// ResultMessages is one per decision told to a client.
	ResultMessages int
	// WatermarkMessages are votes messages with no vote (a watermark only);
	// RaiseMessages ask a child for a higher watermark.
	WatermarkMessages, RaiseMessages int
	// Decided and Committed count the decisions told.
	Decided, Committed int
	// Steps is the sum over decided transactions of their communication
	// steps (see above); Steps/Decided is the thesis's steps per transaction.
	Steps float64
	// Resent are votes sent again because their decision was overdue;
	// DuplicateVotes and DuplicateDecisions were received and ignored;
	// Forgotten are transactions an inner validator dropped because no vote
	// came for them in 2*ResendAfter.
	Resent, DuplicateVotes, DuplicateDecisions, Forgotten int
	// Refused are parts a leaf refused (over a limit) by aborting their
	// transaction itself; such an abort is counted in Decided both there
	// and, if its failing vote arrives, at the decider.
	Refused int
}

// Messages is every network message counted: the client's commit requests,
// votes, decisions, results, watermarks and raises.
func (c Counts) Messages() int {
	return c.Parts + c.VoteMessages + c.DecisionMessages + c.ResultMessages + c.WatermarkMessages + c.RaiseMessages
}

// Add sums two Counts.
func (c Counts) Add(o Counts) Counts {
	c.Parts += o.Parts
	c.VoteMessages += o.VoteMessages
	c.Votes += o.Votes
	c.VotesIn += o.VotesIn
	c.DecisionMessages += o.DecisionMessages
	c.Decisions += o.Decisions
	c.ResultMessages += o.ResultMessages
	c.WatermarkMessages += o.WatermarkMessages
	c.RaiseMessages += o.RaiseMessages
	c.Decided += o.Decided
	c.Committed += o.Committed
	c.Steps += o.Steps
	c.Resent += o.Resent
	c.DuplicateVotes += o.DuplicateVotes
	c.DuplicateDecisions += o.DuplicateDecisions
	c.Forgotten += o.Forgotten
	c.Refused += o.Refused
	return c
}

// FormulaSteps is the thesis's formula 3.3: communication steps to commit
// one transaction on n nodes decided at level h with batch size b.
func FormulaSteps(n, h int, b float64) float64 {
	if n == 1 {
		return 2
	}
	return 2 + float64(h)/b
}

// FormulaMessages is the thesis's formula 3.4: messages to commit one
// transaction on n nodes decided at level h with batch size b.
func FormulaMessages(n, h int, b float64) float64 {
	if n == 1 {
		return 2
	}
	return float64(n) + (float64(h*n)+float64(n))/b + 1
}

// Formula2PCSteps and Formula2PCMessages are the thesis's figures for
// client-coordinated two-phase commit (3.5.1: prepare, vote, commit,
// acknowledgement): 4 steps and 4 messages per node. They are formulas
// only; the 2PC baseline's own counts come with the baseline.
func Formula2PCSteps(n int) float64    { return 4 }
func Formula2PCMessages(n int) float64 { return 4 * float64(n) }
