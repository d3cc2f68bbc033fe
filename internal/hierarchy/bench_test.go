package hierarchy

import (
	"fmt"
	"testing"
)

// BenchmarkLocal is a leaf deciding local transactions of 8 read-modify-
// writes (the thesis's transaction shape, on one node): the validation
// cost per transaction that the thesis found to dominate (4.3).
func BenchmarkLocal(b *testing.B) {
	tr, _ := DefaultTree([]NodeID{1, 2, 3, 4, 5, 6, 7, 8})
	leaf, _ := tr.Leaf(1)
	v, err := New(Config{Tree: tr, ID: leaf}, Recovery{})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([][]string, 1024)
	for i := range keys {
		for j := 0; j < 8; j++ {
			keys[i] = append(keys[i], fmt.Sprintf("k%d", i*8+j))
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ks := keys[i%len(keys)]
		snap := v.Clock()
		if err := v.Propose(Part{Txn: TxnID(i + 1), Snapshot: snap, Nodes: []NodeID{1}, Reads: ks, Writes: ks}); err != nil {
			b.Fatal(err)
		}
		if rd := v.Ready(); len(rd.Decisions) != 1 || !rd.Decisions[0].Commit {
			b.Fatalf("%+v", rd.Decisions)
		}
	}
}

// BenchmarkDistributed is the thesis's workload through a whole tree of 8
// leaves and a root: each transaction does one read-modify-write on each
// of the 8 nodes; parts are proposed, votes handed to the root and
// decisions back to the leaves as soon as they are sent, batched by 50.
// Per transaction, with no network, disk or logging: the core alone.
func BenchmarkDistributed(b *testing.B) {
	for _, variant := range []Variant{Locking, Timestamps} {
		b.Run(variant.String(), func(b *testing.B) {
			nodes := []NodeID{1, 2, 3, 4, 5, 6, 7, 8}
			tr, _ := DefaultTree(nodes)
			vals := make([]*Validator, tr.Size())
			for id := range vals {
				v, err := New(Config{Tree: tr, ID: ValidatorID(id), Variant: variant,
					ValidatorBatch: Batching{SizeMax: 50}, NodeBatch: Batching{SizeMax: 50}}, Recovery{})
				if err != nil {
					b.Fatal(err)
				}
				vals[id] = v
			}
			var queue []Message
			run := func(v *Validator) {
				for _, m := range v.Ready().Messages {
					if m.Kind != MsgResult {
						queue = append(queue, m)
					}
				}
			}
			keys := make([]string, 8*1024)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			committed := 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				for j, n := range nodes {
					k := keys[(i%1024)*8+j]
					leafID, _ := tr.Leaf(n)
					leaf := vals[leafID]
					p := Part{Txn: TxnID(i + 1), Snapshot: leaf.Clock(), Nodes: nodes, Reads: []string{k}, Writes: []string{k}}
					if err := leaf.Propose(p); err != nil {
						b.Fatal(err)
					}
					run(leaf)
				}
				for len(queue) > 0 {
					m := queue[0]
					queue = queue[1:]
					to := m.To
					if m.Kind == MsgDecisions {
						to, _ = tr.Leaf(m.Node)
					}
					if err := vals[to].Step(m); err != nil {
						b.Fatal(err)
					}
					if m.Kind == MsgDecisions {
						committed += len(vals[to].Ready().Resolve)
						continue
					}
					run(vals[to])
				}
			}
			b.ReportMetric(float64(committed)/8/float64(b.N), "committed/op")
		})
	}
}
