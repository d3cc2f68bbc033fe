package check

import (
	"fmt"
	"sort"
)

// Micro-operation kinds of a TxnRecord.
const (
	// OpAppend appends MicroOp.Value to the list at MicroOp.Key
	// (list-append workload).
	OpAppend = "append"
	// OpRead reads MicroOp.Key: the observed list in MicroOp.List
	// (list-append) or the observed value in MicroOp.Value (register).
	OpRead = "r"
	// OpWrite writes MicroOp.Value to the register at MicroOp.Key (register
	// workload).
	OpWrite = "w"
)

// TxnRecord is one transaction of a recorded multi-key history.
type TxnRecord struct {
	// ID names the transaction in reports ("T<ID>"). Invariant: unique
	// within a history.
	ID int
	// Committed: the client received an acknowledgement of its commit.
	Committed bool
	// Ambiguous: the client does not know whether it committed (timeout,
	// lost connection, ambiguous-result error). Invariant: not both
	// Committed and Ambiguous. A record with neither definitely did not
	// commit (aborted, or failed before its commit point).
	Ambiguous bool
	// Ops are the transaction's micro-operations in the order the client
	// issued them.
	Ops []MicroOp
	// StartTs and CommitTs are the transaction's TSO timestamps when the
	// recorder knows them, 0 when not. CheckRegister uses CommitTs (see
	// there); CheckListAppend uses neither, since list reads reveal the
	// version order by themselves.
	StartTs, CommitTs uint64
}

// MicroOp is one read or write inside a TxnRecord.
type MicroOp struct {
	// Kind is OpAppend or OpRead (list-append), or OpWrite or OpRead
	// (register).
	Kind string
	Key  string
	// Value is the appended element (OpAppend, unique per key), the written
	// value (OpWrite, unique per key and non-zero), or the observed value
	// (register OpRead, 0 meaning "never written").
	Value int
	// List is the observed list of a list-append OpRead (nil or empty for
	// an empty or absent list).
	List []int
}

// txnStatus is what the record says about a transaction's outcome.
type txnStatus int

const (
	statusAborted txnStatus = iota
	statusCommitted
	statusAmbiguous
)

func (s txnStatus) String() string {
	switch s {
	case statusCommitted:
		return "committed"
	case statusAmbiguous:
		return "ambiguous"
	default:
		return "aborted"
	}
}

func statusOf(t *TxnRecord) txnStatus {
	switch {
	case t.Committed:
		return statusCommitted
	case t.Ambiguous:
		return statusAmbiguous
	default:
		return statusAborted
	}
}

// writeRef locates one write: the i-th transaction of the input and the
// index of its micro-operation.
type writeRef struct {
	txn int // index into the input slice
	op  int // index into TxnRecord.Ops
}

// validateTxns checks what every transaction checker needs: unique IDs,
// known kinds, consistent status flags, and written values unique per key.
// It returns, for each key, the write of each value. writeKind is the one
// micro-operation kind allowed besides OpRead.
func validateTxns(txns []TxnRecord, writeKind string, a *report) map[string]map[int]writeRef {
	writers := make(map[string]map[int]writeRef)
	ids := make(map[int]bool, len(txns))
	for i := range txns {
		t := &txns[i]
		if ids[t.ID] {
			a.add("malformed", fmt.Sprintf("T%d appears more than once", t.ID))
		}
		ids[t.ID] = true
		if t.Committed && t.Ambiguous {
			a.add("malformed", fmt.Sprintf("T%d is both committed and ambiguous", t.ID))
		}
		for j, op := range t.Ops {
			switch op.Kind {
			case OpRead:
			case writeKind:
				if writeKind == OpWrite && op.Value == 0 {
					a.add("malformed", fmt.Sprintf("T%d writes 0 to %q; 0 means \"never written\"", t.ID, op.Key))
				}
				byValue := writers[op.Key]
				if byValue == nil {
					byValue = make(map[int]writeRef)
					writers[op.Key] = byValue
				}
				if prev, ok := byValue[op.Value]; ok {
					a.add("malformed", fmt.Sprintf("value %d written to %q by T%d and T%d; values must be unique per key",
						op.Value, op.Key, txns[prev.txn].ID, t.ID))
					continue
				}
				byValue[op.Value] = writeRef{txn: i, op: j}
			default:
				a.add("malformed", fmt.Sprintf("T%d op %d has kind %q, want %q or %q", t.ID, j, op.Kind, writeKind, OpRead))
			}
		}
	}
	return writers
}

// AnomaliesPerClassMax bounds how many anomalies of one class a checker
// reports; the rest are counted in one summary line. A broken history can
// otherwise produce one line per read.
const AnomaliesPerClassMax = 10

// report collects anomaly lines, at most AnomaliesPerClassMax per class,
// in the order they were added.
type report struct {
	lines   []string
	counts  map[string]int
	classes []string // in order of first appearance, for the summary lines
}

func (a *report) add(class, detail string) {
	if a.counts == nil {
		a.counts = make(map[string]int)
	}
	if a.counts[class] == 0 {
		a.classes = append(a.classes, class)
	}
	a.counts[class]++
	if a.counts[class] <= AnomaliesPerClassMax {
		a.lines = append(a.lines, class+": "+detail)
	}
}

func (a *report) empty() bool { return len(a.lines) == 0 }

// result returns ok and the report, with a summary line for each class that
// exceeded its cap.
func (a *report) result() (bool, []string) {
	out := a.lines
	for _, class := range a.classes {
		if n := a.counts[class]; n > AnomaliesPerClassMax {
			out = append(out, fmt.Sprintf("%s: %d more not shown", class, n-AnomaliesPerClassMax))
		}
	}
	return len(out) == 0, out
}

// sortedKeys returns the keys of m in increasing order, so that reports do
// not depend on map iteration order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
