package hierarchy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// harness runs a tree of validators by hand: inputs go in when a test
// says, messages wait in per-link FIFO queues until delivered, and every
// Ready is carried out at once (durable records kept, messages queued,
// resolutions logged). It is the datadriven tests' world and the counts
// test's.
type harness struct {
	t      testing.TB
	cfg    Config
	tree   *Tree
	vals   map[ValidatorID]*Validator
	now    time.Duration
	queues map[string][]Message // by link "from->to"
	order  []string             // links in order of first use
	// durable state
	parts  map[NodeID]map[TxnID]PartResult
	status map[TxnID]Decision
	log    strings.Builder
	gone   Counts
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{t: t, cfg: cfg, tree: cfg.Tree, vals: map[ValidatorID]*Validator{}, queues: map[string][]Message{},
		parts: map[NodeID]map[TxnID]PartResult{}, status: map[TxnID]Decision{}}
	for id := 0; id < cfg.Tree.Size(); id++ {
		c := cfg
		c.ID = ValidatorID(id)
		v, err := New(c, Recovery{})
		if err != nil {
			t.Fatal(err)
		}
		h.vals[c.ID] = v
	}
	return h
}

func linkOf(m Message) string {
	switch m.Kind {
	case MsgDecisions:
		return fmt.Sprintf("v%d->node%d", m.From, m.Node)
	case MsgResult:
		return fmt.Sprintf("v%d->client%d", m.From, m.Client)
	}
	return fmt.Sprintf("v%d->v%d", m.From, m.To)
}

func (h *harness) logf(format string, args ...any) { fmt.Fprintf(&h.log, format+"\n", args...) }

// process carries out v's Ready: durable records first, then messages and
// resolutions (doc.go's contract).
func (h *harness) process(v *Validator) {
	for v.HasReady() {
		rd := v.Ready()
		name := fmt.Sprintf("v%d", v.ID())
		for _, pr := range rd.Parts {
			n := h.tree.Node(v.ID())
			if h.parts[n] == nil {
				h.parts[n] = map[TxnID]PartResult{}
			}
			h.parts[n][pr.Part.Txn] = pr
			ok := "ok"
			if !pr.OK {
				ok = "fail"
			}
			h.logf("%s persist part txn %d %s ts=%d", name, pr.Part.Txn, ok, pr.TS)
		}
		for _, d := range rd.Decisions {
			if old, ok := h.status[d.Txn]; ok && old != d {
				h.t.Fatalf("txn %d decided %v, then %v", d.Txn, old, d)
			}
			h.status[d.Txn] = d
			h.logf("%s persist decision %v", name, d)
		}
		for _, m := range rd.Messages {
			l := linkOf(m)
			if _, ok := h.queues[l]; !ok {
				h.order = append(h.order, l)
			}
			h.queues[l] = append(h.queues[l], m)
			h.logf("%s send %v", name, m)
		}
		for _, d := range rd.Resolve {
			delete(h.parts[h.tree.Node(v.ID())], d.Txn)
			h.logf("%s resolve %v", name, d)
		}
		for _, txn := range rd.Lookups {
			d, ok := h.status[txn]
			h.logf("%s lookup txn %d: found %v", name, txn, ok)
			if ok {
				v.Decided(d)
			}
		}
	}
}

func (h *harness) leaf(n NodeID) *Validator {
	id, ok := h.tree.Leaf(n)
	if !ok {
		h.t.Fatalf("no leaf for node %d", n)
	}
	return h.vals[id]
}

func (h *harness) propose(n NodeID, p Part) error {
	v := h.leaf(n)
	if v == nil {
		return fmt.Errorf("node %d is down", n)
	}
	err := v.Propose(p)
	h.process(v) // a refused part's abort, if any
	return err
}

// round takes parts together as kvserver's leaf loop does: every part is
// checked before any is admitted, then each is admitted in order, and the
// Ready is carried out once. The parts' keys must be disjoint.
func (h *harness) round(n NodeID, parts []Part) error {
	v := h.leaf(n)
	if v == nil {
		return fmt.Errorf("node %d is down", n)
	}
	owner := map[string]TxnID{}
	for _, p := range parts {
		for _, k := range append(slices.Clone(p.Reads), p.Writes...) {
			if t, ok := owner[k]; ok && t != p.Txn {
				return fmt.Errorf("key %q in two parts of a round", k)
			}
			owner[k] = p.Txn
		}
	}
	oks := make([]bool, len(parts))
	for i, p := range parts {
		oks[i] = v.Check(p)
		h.logf("%s check txn %d: %v", vname(v.ID()), p.Txn, oks[i])
	}
	var first error
	for i, p := range parts {
		if err := v.ProposeChecked(p, oks[i]); err != nil && first == nil {
			first = err
		}
	}
	h.process(v)
	return first
}

// deliver hands the head of a link's queue to its receiver; false if empty.
func (h *harness) deliver(link string) bool {
	q := h.queues[link]
	if len(q) == 0 {
		return false
	}
	m := q[0]
	h.queues[link] = q[1:]
	var v *Validator
	switch m.Kind {
	case MsgResult:
		h.logf("client %d learns %v", m.Client, m.Result)
		return true
	case MsgDecisions:
		leaf, _ := h.tree.Leaf(m.Node)
		v = h.vals[leaf]
	default:
		v = h.vals[m.To]
	}
	if v == nil {
		h.logf("lost %v (receiver down)", m)
		return true
	}
	if err := v.Step(m); err != nil {
		h.t.Fatalf("step %v: %v", m, err)
	}
	h.process(v)
	return true
}

// drain delivers until every queue is empty, links in order of first use.
func (h *harness) drain() {
	for progress := true; progress; {
		progress = false
		for _, l := range h.order {
			for h.deliver(l) {
				progress = true
			}
		}
	}
}

func (h *harness) tick(now time.Duration) {
	h.now = now
	for id := 0; id < h.tree.Size(); id++ {
		if v := h.vals[ValidatorID(id)]; v != nil {
			v.Tick(now)
			h.process(v)
		}
	}
}

func (h *harness) counts() Counts {
	c := h.gone
	for _, v := range h.vals {
		if v != nil {
			c = c.Add(v.Counts())
		}
	}
	return c
}

func (h *harness) pendingLinks() []string {
	var out []string
	for _, l := range h.order {
		if len(h.queues[l]) > 0 {
			out = append(out, fmt.Sprintf("%s: %d", l, len(h.queues[l])))
		}
	}
	slices.Sort(out)
	return out
}
