package hierarchy

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestDataDriven runs the step-by-step scripts in testdata/. Every command
// prints what the validators persisted, sent, resolved and looked up in
// response. Commands:
//
//	tree [variant=locking|timestamps] [batch=<n>] [node-batch=<n>]
//	     [timeout-ms=<ms>] [resend-ms=<ms>]       a new tree of validators,
//	<tree's written form>                         its shape in the input
//	propose node=<n> txn=<id> [snap=<ts>] nodes=(<n>,...) [reads=(<k>,...)] [writes=(<k>,...)] [conflict=true]
//	round node=<n>                              parts taken together (keys disjoint): each
//	<part: txn=<id> [snap=..] nodes=(..) ...>   checked (Check) before any is admitted, then
//	...                                         admitted in order (ProposeChecked); one Ready
//	observe node=<n> ts=<ts>                    the node served a read at ts
//	deliver [link=<from->to>] [count=<c>]       deliver queued messages (all links: until none)
//	tick ms=<ms>                                set the time on every validator
//	crash v=<id>                                the validator loses its memory, its inbox and its outbox
//	restart v=<id> [floor=<ts>]                 a leaf recovers from its node's durable parts
//	state                                       every validator's state
//	queues                                      the messages waiting, per link
//	counts                                      the tree's message counts
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var h *harness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := map[string][]string{}
			for _, a := range d.CmdArgs {
				args[a.Key] = a.Vals
			}
			str := func(key, def string) string {
				if v, ok := args[key]; ok && len(v) > 0 {
					return v[0]
				}
				return def
			}
			num := func(key string, def uint64) uint64 {
				s := str(key, "")
				if s == "" {
					return def
				}
				n, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					d.Fatalf(t, "%s=%q: %v", key, s, err)
				}
				return n
			}
			if d.Cmd != "tree" && h == nil {
				d.Fatalf(t, "no tree yet")
			}
			if h != nil {
				h.log.Reset()
			}
			switch d.Cmd {
			case "tree":
				tr, err := ParseTree(strings.TrimSpace(d.Input))
				if err != nil {
					return err.Error() + "\n"
				}
				variant, err := ParseVariant(str("variant", "locking"))
				if err != nil {
					return err.Error() + "\n"
				}
				timeout := time.Duration(num("timeout-ms", 1)) * time.Millisecond
				h = newHarness(t, Config{Tree: tr, Variant: variant,
					ValidatorBatch: Batching{SizeMax: int(num("batch", 1)), Timeout: timeout},
					NodeBatch:      Batching{SizeMax: int(num("node-batch", 1)), Timeout: timeout},
					ResendAfter:    time.Duration(num("resend-ms", 100)) * time.Millisecond,
					LatestKeysMax:  int(num("latest-max", 0)),
				})
				var b strings.Builder
				for l, ids := range tr.Levels() {
					fmt.Fprintf(&b, "level %d:", l)
					for _, id := range ids {
						if tr.IsLeaf(id) {
							fmt.Fprintf(&b, " v%d(node %d, slot %d)", id, tr.Node(id), tr.Slot(id))
						} else {
							fmt.Fprintf(&b, " v%d(nodes %v)", id, tr.Nodes(id))
						}
					}
					b.WriteByte('\n')
				}
				return b.String()
			case "propose":
				if err := h.propose(NodeID(num("node", 0)), partOf(t, d, args)); err != nil {
					h.logf("error: %v", err)
				}
			case "round":
				var parts []Part
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					_, cargs, err := datadriven.ParseLine("part " + line)
					if err != nil {
						d.Fatalf(t, "%q: %v", line, err)
					}
					pa := map[string][]string{}
					for _, a := range cargs {
						pa[a.Key] = a.Vals
					}
					parts = append(parts, partOf(t, d, pa))
				}
				if err := h.round(NodeID(num("node", 0)), parts); err != nil {
					h.logf("error: %v", err)
				}
			case "observe":
				h.leaf(NodeID(num("node", 0))).Observe(num("ts", 0))
			case "deliver":
				if l := str("link", ""); l != "" {
					for i := uint64(0); i < num("count", 1); i++ {
						if !h.deliver(l) {
							h.logf("nothing on %s", l)
							break
						}
					}
				} else {
					h.drain()
				}
			case "tick":
				h.tick(time.Duration(num("ms", 0)) * time.Millisecond)
			case "crash":
				id := ValidatorID(num("v", 0))
				h.gone = h.gone.Add(h.vals[id].Counts())
				h.vals[id] = nil
				for _, l := range h.order {
					q := h.queues[l]
					// Lost: what was addressed to it, and what it had not sent.
					if strings.HasSuffix(l, fmt.Sprintf("->v%d", id)) || strings.HasPrefix(l, fmt.Sprintf("v%d->", id)) ||
						h.tree.IsLeaf(id) && strings.HasSuffix(l, fmt.Sprintf("->node%d", h.tree.Node(id))) {
						for _, m := range q {
							h.logf("lost %v", m)
						}
						h.queues[l] = nil
					}
				}
			case "restart":
				id := ValidatorID(num("v", 0))
				c := h.cfg
				c.ID = id
				var rec Recovery
				if h.tree.IsLeaf(id) {
					rec.ClockFloor = num("floor", 0)
					rec.LatestFloor = num("floor", 0)
					parts := h.parts[h.tree.Node(id)]
					txns := make([]TxnID, 0, len(parts))
					for txn := range parts {
						txns = append(txns, txn)
					}
					slices.Sort(txns)
					for _, txn := range txns {
						if dec, ok := h.status[txn]; ok {
							h.logf("node %d resolves txn %d from the status table: %v", h.tree.Node(id), txn, dec)
							delete(parts, txn)
							continue
						}
						rec.Pending = append(rec.Pending, parts[txn])
					}
				}
				v, err := New(c, rec)
				if err != nil {
					return err.Error() + "\n"
				}
				v.Tick(h.now)
				h.vals[id] = v
				h.process(v)
			case "state":
				return h.state()
			case "queues":
				return strings.Join(h.pendingLinks(), "\n") + "\n"
			case "counts":
				c := h.counts()
				return fmt.Sprintf("messages %d: parts %d, vote messages %d (votes %d), decision messages %d (decisions %d), results %d, watermarks %d, raises %d\nsteps %.2f over %d decided (%d committed)\n",
					c.Messages(), c.Parts, c.VoteMessages, c.Votes, c.DecisionMessages, c.Decisions, c.ResultMessages, c.WatermarkMessages, c.RaiseMessages, c.Steps, c.Decided, c.Committed)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return h.log.String()
		})
	})
}

func (h *harness) state() string {
	var b strings.Builder
	for id := 0; id < h.tree.Size(); id++ {
		v := h.vals[ValidatorID(id)]
		if v == nil {
			fmt.Fprintf(&b, "v%d: down\n", id)
			continue
		}
		if v.isLeaf() {
			fmt.Fprintf(&b, "v%d leaf of node %d: clock %d", id, h.tree.Node(v.id), v.clock)
			if v.cfg.Variant == Timestamps {
				fmt.Fprintf(&b, " watermark %d", v.leafWatermark())
			}
			var keys []string
			for k := range v.latest {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			b.WriteString(" latest [")
			for i, k := range keys {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%s@%d", k, v.latest[k])
			}
			fmt.Fprintf(&b, "] floor %d", v.latestFloor)
			var txns []TxnID
			for txn := range v.pending {
				txns = append(txns, txn)
			}
			slices.Sort(txns)
			b.WriteString(" pending [")
			for i, txn := range txns {
				if i > 0 {
					b.WriteByte(' ')
				}
				pp := v.pending[txn]
				ok := "ok"
				if !pp.OK {
					ok = "fail"
				}
				fmt.Fprintf(&b, "%d:%s@%d", txn, ok, pp.TS)
			}
			b.WriteString("]")
			keys = keys[:0]
			for k := range v.holds {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(keys) > 0 {
				b.WriteString(" holds [")
				for i, k := range keys {
					if i > 0 {
						b.WriteByte(' ')
					}
					hd := v.holds[k]
					fmt.Fprintf(&b, "%s:w%d/r%v", k, hd.writer, hd.readers)
				}
				b.WriteString("]")
			}
			b.WriteByte('\n')
			continue
		}
		fmt.Fprintf(&b, "v%d inner:", id)
		var txns []TxnID
		for txn := range v.running {
			txns = append(txns, txn)
		}
		slices.Sort(txns)
		b.WriteString(" running [")
		for i, txn := range txns {
			if i > 0 {
				b.WriteByte(' ')
			}
			r := v.running[txn]
			fmt.Fprintf(&b, "%d:%d/%d", txn, len(r.got), len(r.need))
		}
		b.WriteString("]")
		if v.cfg.Variant == Timestamps {
			b.WriteString(" held [")
			for i, r := range v.held {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%d@%d", r.vote.Txn, r.vote.TS)
			}
			b.WriteString("] watermarks [")
			for i, c := range h.tree.Children(v.id) {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "v%d:%d", c, v.watermarks[c])
			}
			fmt.Fprintf(&b, "] stable %d", v.stable())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// partOf is the part a propose command's (or a round line's) arguments
// name: txn=<id> [snap=<ts>] nodes=(<n>,...) [reads=(..)] [writes=(..)]
// [conflict=true].
func partOf(t *testing.T, d *datadriven.TestData, args map[string][]string) Part {
	num := func(key string) uint64 {
		if len(args[key]) == 0 {
			return 0
		}
		n, err := strconv.ParseUint(args[key][0], 10, 64)
		if err != nil {
			d.Fatalf(t, "%s: %v", key, err)
		}
		return n
	}
	var nodes []NodeID
	for _, s := range args["nodes"] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			d.Fatalf(t, "nodes: %v", err)
		}
		nodes = append(nodes, NodeID(n))
	}
	return Part{Txn: TxnID(num("txn")), Client: 1, Snapshot: num("snap"), Nodes: nodes,
		Reads: args["reads"], Writes: args["writes"], Conflict: len(args["conflict"]) > 0 && args["conflict"][0] == "true"}
}
