package check

import (
	"cmp"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// Randomized tests: generate a serial execution of random transactions on
// an in-memory map, record it as a client would (with aborted and ambiguous
// transactions), shuffle the record, and require the checkers to pass it;
// then corrupt one read so that the history is provably not serializable
// and require them to fail it. Every failure prints its seed; rerun one
// with -check.seed=N.

var seedFlag = flag.Uint64("check.seed", 0, "run the randomized history tests with only this seed")

// randomSeeds returns fixed seeds plus one from the clock, or only the
// seed given with -check.seed.
func randomSeeds(t *testing.T) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	clock := uint64(time.Now().UnixNano())
	t.Logf("clock seed %d", clock)
	return append(seeds, clock)
}

// genConfig shapes a random history.
type genConfig struct {
	txns      int // transactions
	keys      int // distinct keys
	opsMax    int // micro-operations per transaction, at least 1
	withTs    bool
	finalRead bool // end with a committed transaction that reads every key
}

var genConfigs = []genConfig{
	{txns: 50, keys: 2, opsMax: 4},
	{txns: 200, keys: 4, opsMax: 5, finalRead: true},
	{txns: 300, keys: 8, opsMax: 3},
}

// outcome draws a recorded outcome: 70% committed, 10% aborted, 20%
// ambiguous, of which half took effect.
func drawOutcome(rng *rand.Rand, t *TxnRecord) (applied bool) {
	switch p := rng.IntN(10); {
	case p < 7:
		t.Committed = true
		return true
	case p < 8:
		return false
	default:
		t.Ambiguous = true
		return rng.IntN(2) == 0
	}
}

// genListAppend runs random transactions one at a time on a map of lists.
// It returns the record and, for each key and element, its appender's ID.
func genListAppend(rng *rand.Rand, cfg genConfig) ([]TxnRecord, map[string]map[int]int) {
	state := make(map[string][]int)
	appender := make(map[string]map[int]int)
	next := 0
	var txns []TxnRecord
	for id := 1; id <= cfg.txns; id++ {
		t := TxnRecord{ID: id}
		own := make(map[string][]int) // appends visible to t's own reads
		for range 1 + rng.IntN(cfg.opsMax) {
			key := fmt.Sprintf("k%d", rng.IntN(cfg.keys))
			if rng.IntN(2) == 0 {
				next++
				own[key] = append(own[key], next)
				if appender[key] == nil {
					appender[key] = make(map[int]int)
				}
				appender[key][next] = id
				t.Ops = append(t.Ops, ap(key, next))
			} else {
				t.Ops = append(t.Ops, rd(key, slices.Concat(state[key], own[key])...))
			}
		}
		if drawOutcome(rng, &t) {
			for key, vs := range own {
				state[key] = append(state[key], vs...)
			}
		}
		txns = append(txns, t)
	}
	if cfg.finalRead {
		t := TxnRecord{ID: cfg.txns + 1, Committed: true}
		for k := range cfg.keys {
			key := fmt.Sprintf("k%d", k)
			t.Ops = append(t.Ops, rd(key, slices.Clone(state[key])...))
		}
		txns = append(txns, t)
	}
	return txns, appender
}

func cloneTxns(txns []TxnRecord) []TxnRecord {
	out := slices.Clone(txns)
	for i := range out {
		out[i].Ops = slices.Clone(out[i].Ops)
		for j := range out[i].Ops {
			out[i].Ops[j].List = slices.Clone(out[i].Ops[j].List)
		}
	}
	return out
}

// opsOn returns the indexes of t's micro-operations on key.
func opsOn(t *TxnRecord, key string) []int {
	var idx []int
	for j, op := range t.Ops {
		if op.Key == key {
			idx = append(idx, j)
		}
	}
	return idx
}

// readsOnly reports whether t's operations on key are all reads (and there
// is at least one).
func readsOnly(t *TxnRecord, key string) bool {
	idx := opsOn(t, key)
	for _, j := range idx {
		if t.Ops[j].Kind != OpRead {
			return false
		}
	}
	return len(idx) > 0
}

// staleListRead corrupts one read into a stale one that must close a
// cycle: a committed R whose only operation on x is a read that includes
// elements of W, and whose reads of another key y also include an element
// of W. Cutting R's read of x short of W's first element gives R -rw-> W on
// x, while y still orders W before R. It returns a description, or false if
// the history has no such R.
func staleListRead(txns []TxnRecord, appender map[string]map[int]int) (string, bool) {
	for i := range txns {
		r := &txns[i]
		if !r.Committed {
			continue
		}
		for _, j := range r.Ops {
			x := j.Key
			idx := opsOn(r, x)
			if len(idx) != 1 || r.Ops[idx[0]].Kind != OpRead {
				continue
			}
			read := &r.Ops[idx[0]]
			for pos, e := range read.List {
				w := appender[x][e]
				if w == r.ID || !seesWriterOn(r, w, x, appender) {
					continue
				}
				before := slices.Clone(read.List)
				read.List = read.List[:pos]
				return fmt.Sprintf("T%d read %q = %v, now %v (cut before T%d's appends)", r.ID, x, before, read.List, w), true
			}
		}
	}
	return "", false
}

// seesWriterOn reports whether r reads some key other than x, and only
// reads it, and sees an element w appended.
func seesWriterOn(r *TxnRecord, w int, x string, appender map[string]map[int]int) bool {
	for _, op := range r.Ops {
		if op.Key == x || !readsOnly(r, op.Key) {
			continue
		}
		for _, e := range op.List {
			if appender[op.Key][e] == w {
				return true
			}
		}
	}
	return false
}

// abortedListRead makes a committed read observe an element of an aborted
// transaction.
func abortedListRead(txns []TxnRecord) (string, bool) {
	for _, a := range txns {
		if a.Committed || a.Ambiguous {
			continue
		}
		for _, op := range a.Ops {
			if op.Kind != OpAppend {
				continue
			}
			for i := range txns {
				r := &txns[i]
				for j := range r.Ops {
					if r.Committed && r.Ops[j].Kind == OpRead && r.Ops[j].Key == op.Key {
						r.Ops[j].List = append(r.Ops[j].List, op.Value)
						return fmt.Sprintf("T%d read %q now ends with T%d's %d", r.ID, op.Key, a.ID, op.Value), true
					}
				}
			}
		}
	}
	return "", false
}

func TestRandomListAppendHistories(t *testing.T) {
	for _, seed := range randomSeeds(t) {
		for ci, cfg := range genConfigs {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			txns, appender := genListAppend(rng, cfg)
			rng.Shuffle(len(txns), func(i, j int) { txns[i], txns[j] = txns[j], txns[i] })
			if ok, anomalies := CheckListAppend(txns); !ok {
				t.Fatalf("seed %d config %d: serial history rejected:\n%s", seed, ci, strings.Join(anomalies, "\n"))
			}

			for _, c := range []struct {
				name    string
				corrupt func([]TxnRecord) (string, bool)
				want    string
			}{
				{"stale read", func(txns []TxnRecord) (string, bool) { return staleListRead(txns, appender) }, "G2"},
				{"aborted read", abortedListRead, "G1a: "},
			} {
				bad := cloneTxns(txns)
				what, found := c.corrupt(bad)
				if !found {
					t.Logf("seed %d config %d: no candidate for a %s", seed, ci, c.name)
					continue
				}
				ok, anomalies := CheckListAppend(bad)
				if ok || !hasAnomaly(anomalies, c.want) {
					t.Fatalf("seed %d config %d: %s (%s) not reported as %q; got:\n%s",
						seed, ci, c.name, what, c.want, strings.Join(anomalies, "\n"))
				}
			}
		}
	}
}

// regVersion is one committed (or applied ambiguous) version of a register.
type regVersion struct{ value, writer int }

// genRegister runs random transactions one at a time on a map of
// registers. It returns the record and, per key, the versions in order.
func genRegister(rng *rand.Rand, cfg genConfig) ([]TxnRecord, map[string][]regVersion) {
	state := make(map[string]int)
	versions := make(map[string][]regVersion)
	next := 0
	var txns []TxnRecord
	for id := 1; id <= cfg.txns; id++ {
		t := TxnRecord{ID: id, StartTs: uint64(2 * id)}
		own := make(map[string]int)
		var ownOrder []string
		for range 1 + rng.IntN(cfg.opsMax) {
			key := fmt.Sprintf("k%d", rng.IntN(cfg.keys))
			if rng.IntN(2) == 0 {
				next++
				if _, ok := own[key]; !ok {
					ownOrder = append(ownOrder, key)
				}
				own[key] = next
				t.Ops = append(t.Ops, wr(key, next))
			} else if v, ok := own[key]; ok {
				t.Ops = append(t.Ops, rr(key, v))
			} else {
				t.Ops = append(t.Ops, rr(key, state[key]))
			}
		}
		applied := drawOutcome(rng, &t)
		// The recorder knows commit_ts of acknowledged commits, and of
		// ambiguous ones only sometimes.
		if cfg.withTs && (t.Committed || t.Ambiguous && rng.IntN(2) == 0) {
			t.CommitTs = uint64(2*id + 1)
		}
		if applied {
			for _, key := range ownOrder {
				state[key] = own[key]
				versions[key] = append(versions[key], regVersion{own[key], id})
			}
		}
		txns = append(txns, t)
	}
	if cfg.finalRead {
		t := TxnRecord{ID: cfg.txns + 1, Committed: true}
		for k := range cfg.keys {
			key := fmt.Sprintf("k%d", k)
			t.Ops = append(t.Ops, rr(key, state[key]))
		}
		if cfg.withTs {
			t.CommitTs = uint64(2*cfg.txns + 3)
		}
		txns = append(txns, t)
	}
	return txns, versions
}

// staleRegisterRead corrupts one read into a stale one that must close a
// cycle, given commit timestamps: a committed R whose only operation on x
// is a read of W's version, W committed and stamped, R also reading some y
// (reads only) from a stamped writer W2 that W precedes on y (or W
// itself). R's read of x is set to the version before W's, whose writer is
// committed and stamped, or to the initial 0. Then R -rw-> W on x, while y
// orders W before R.
func staleRegisterRead(txns []TxnRecord, versions map[string][]regVersion) (string, bool) {
	byID := make(map[int]*TxnRecord)
	for i := range txns {
		byID[txns[i].ID] = &txns[i]
	}
	writerOf := func(key string, value int) (int, int) { // writer ID, version index
		for i, v := range versions[key] {
			if v.value == value {
				return v.writer, i
			}
		}
		return 0, -1
	}
	stamped := func(id int) bool { return byID[id].Committed && byID[id].CommitTs != 0 }
	for i := range txns {
		r := &txns[i]
		if !r.Committed {
			continue
		}
		for _, op := range r.Ops {
			x := op.Key
			idx := opsOn(r, x)
			if len(idx) != 1 || op.Kind != OpRead || op.Value == 0 {
				continue
			}
			w, vi := writerOf(x, op.Value)
			if !stamped(w) {
				continue
			}
			prev := 0
			if vi > 0 {
				p := versions[x][vi-1]
				if !stamped(p.writer) {
					continue
				}
				prev = p.value
			}
			for _, other := range r.Ops {
				y := other.Key
				if y == x || !readsOnly(r, y) || other.Value == 0 {
					continue
				}
				w2, _ := writerOf(y, other.Value)
				if !stamped(w2) || !wroteBefore(byID[w], y, byID[w2]) {
					continue
				}
				r.Ops[idx[0]].Value = prev
				return fmt.Sprintf("T%d read %q = %d (T%d's), now %d", r.ID, x, op.Value, w, prev), true
			}
		}
	}
	return "", false
}

// wroteBefore reports whether w wrote key and w2 is w or committed later.
func wroteBefore(w *TxnRecord, key string, w2 *TxnRecord) bool {
	if len(opsOn(w, key)) == 0 || slices.IndexFunc(w.Ops, func(op MicroOp) bool { return op.Key == key && op.Kind == OpWrite }) < 0 {
		return false
	}
	return w.ID == w2.ID || w.CommitTs < w2.CommitTs
}

// abortedRegisterRead makes a committed read observe an aborted write.
func abortedRegisterRead(txns []TxnRecord) (string, bool) {
	for _, a := range txns {
		if a.Committed || a.Ambiguous {
			continue
		}
		for _, op := range a.Ops {
			if op.Kind != OpWrite {
				continue
			}
			for i := range txns {
				r := &txns[i]
				for j := range r.Ops {
					if r.Committed && r.Ops[j].Kind == OpRead && r.Ops[j].Key == op.Key {
						r.Ops[j].Value = op.Value
						return fmt.Sprintf("T%d read %q = T%d's %d", r.ID, op.Key, a.ID, op.Value), true
					}
				}
			}
		}
	}
	return "", false
}

func TestRandomRegisterHistories(t *testing.T) {
	for _, seed := range randomSeeds(t) {
		for ci, cfg := range genConfigs {
			for _, withTs := range []bool{false, true} {
				cfg.withTs = withTs
				rng := rand.New(rand.NewPCG(seed, uint64(ci)))
				txns, versions := genRegister(rng, cfg)
				rng.Shuffle(len(txns), func(i, j int) { txns[i], txns[j] = txns[j], txns[i] })
				if ok, anomalies := CheckRegister(txns); !ok {
					t.Fatalf("seed %d config %d ts %v: serial history rejected:\n%s",
						seed, ci, withTs, strings.Join(anomalies, "\n"))
				}

				corruptions := []struct {
					name    string
					corrupt func([]TxnRecord) (string, bool)
					want    string
				}{
					{"aborted read", abortedRegisterRead, "G1a: "},
				}
				if withTs {
					corruptions = append(corruptions, struct {
						name    string
						corrupt func([]TxnRecord) (string, bool)
						want    string
					}{"stale read", func(txns []TxnRecord) (string, bool) { return staleRegisterRead(txns, versions) }, "G2"})
				}
				for _, c := range corruptions {
					bad := cloneTxns(txns)
					what, found := c.corrupt(bad)
					if !found {
						t.Logf("seed %d config %d ts %v: no candidate for a %s", seed, ci, withTs, c.name)
						continue
					}
					ok, anomalies := CheckRegister(bad)
					if ok || !hasAnomaly(anomalies, c.want) {
						t.Fatalf("seed %d config %d ts %v: %s (%s) not reported as %q; got:\n%s",
							seed, ci, withTs, c.name, what, c.want, strings.Join(anomalies, "\n"))
					}
				}
			}
		}
	}
}

// genKVHistory simulates concurrent clients on a map: each operation takes
// effect at a random instant inside its interval (an ambiguous put at a
// random instant after its call, or never), gets return what the map holds
// at their instant. The history is linearizable by construction.
func genKVHistory(rng *rand.Rand, clients, opsPerClient, keys int) []KVOp {
	type pending struct {
		op    KVOp
		point int64 // linearization instant; -1 = never takes effect
	}
	var all []*pending
	next := 0
	for c := range clients {
		now := int64(rng.IntN(10))
		for range opsPerClient {
			call := now + int64(rng.IntN(5))
			ret := call + int64(rng.IntN(30))
			op := KVOp{ClientID: c, Key: fmt.Sprintf("k%d", rng.IntN(keys)), Call: call, Return: ret, Outcome: OK}
			switch p := rng.IntN(10); {
			case p < 5:
				op.Kind = OpGet
			case p < 8:
				op.Kind = OpPut
				next++
				op.Value = fmt.Sprintf("v%d", next)
			default:
				op.Kind = OpDel
			}
			point := call + int64(rng.IntN(int(ret-call)+1))
			switch p := rng.IntN(20); {
			case p == 0 && op.Kind != OpGet:
				op.Outcome = Failed
				point = -1
			case p == 1:
				op.Outcome = Unknown
				point = -1
				if op.Kind != OpGet && rng.IntN(2) == 0 {
					point = call + int64(rng.IntN(200)) // possibly long after
				}
			}
			all = append(all, &pending{op: op, point: point})
			now = ret + 1
		}
	}
	byPoint := slices.Clone(all)
	slices.SortStableFunc(byPoint, func(a, b *pending) int { return cmp.Compare(a.point, b.point) })
	state := make(map[string]string)
	for _, p := range byPoint {
		if p.point < 0 {
			continue
		}
		switch p.op.Kind {
		case OpGet:
			p.op.Value, p.op.Found = state[p.op.Key]
		case OpPut:
			state[p.op.Key] = p.op.Value
		case OpDel:
			delete(state, p.op.Key)
		}
	}
	ops := make([]KVOp, len(all))
	for i, p := range all {
		ops[i] = p.op
		if p.op.Outcome == Unknown && p.op.Kind == OpGet {
			ops[i].Value, ops[i].Found = "garbage of an unanswered get", true
		}
	}
	return ops
}

// staleGet makes a get return the value of a put P1 that completed before
// another put P2 of the same key began, P2 having completed before the get
// began: no linearization can order P1 after P2.
func staleGet(ops []KVOp) (string, bool) {
	for gi := range ops {
		g := &ops[gi]
		if g.Kind != OpGet || g.Outcome != OK {
			continue
		}
		for _, p2 := range ops {
			if p2.Kind != OpPut || p2.Outcome != OK || p2.Key != g.Key || p2.Return >= g.Call {
				continue
			}
			for _, p1 := range ops {
				if p1.Kind == OpPut && p1.Outcome == OK && p1.Key == g.Key && p1.Return < p2.Call {
					g.Value, g.Found = p1.Value, true
					return fmt.Sprintf("get %q at [%d, %d] now returns %q", g.Key, g.Call, g.Return, p1.Value), true
				}
			}
		}
	}
	return "", false
}

func TestRandomLinearizableHistories(t *testing.T) {
	for _, seed := range randomSeeds(t) {
		rng := rand.New(rand.NewPCG(seed, 0))
		ops := genKVHistory(rng, 5, 40, 3)
		rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		ok, info, err := CheckLinearizable(ops, checkTimeout)
		if err != nil || !ok {
			t.Fatalf("seed %d: linearizable history rejected: ok=%v err=%v info=%s", seed, ok, err, info)
		}
		what, found := staleGet(ops)
		if !found {
			t.Logf("seed %d: no candidate for a stale get", seed)
			continue
		}
		ok, info, err = CheckLinearizable(ops, checkTimeout)
		if err != nil || ok {
			t.Fatalf("seed %d: %s: got ok=%v err=%v info=%s, want a violation", seed, what, ok, err, info)
		}
	}
}
