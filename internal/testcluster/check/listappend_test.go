package check

import (
	"strings"
	"testing"
)

func ap(key string, v int) MicroOp { return MicroOp{Kind: OpAppend, Key: key, Value: v} }

func rd(key string, list ...int) MicroOp { return MicroOp{Kind: OpRead, Key: key, List: list} }

func committed(id int, ops ...MicroOp) TxnRecord {
	return TxnRecord{ID: id, Committed: true, Ops: ops}
}

func aborted(id int, ops ...MicroOp) TxnRecord { return TxnRecord{ID: id, Ops: ops} }

func ambiguous(id int, ops ...MicroOp) TxnRecord {
	return TxnRecord{ID: id, Ambiguous: true, Ops: ops}
}

// txnCase is one hand-written history and what a checker must say about it:
// want lists prefixes of which each must start some anomaly (empty: the
// history must pass), and wantText substrings that some anomaly must hold.
type txnCase struct {
	name     string
	txns     []TxnRecord
	want     []string
	wantText []string
}

func runTxnCases(t *testing.T, check func([]TxnRecord) (bool, []string), cases []txnCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, got := check(tc.txns)
			if ok != (len(got) == 0) {
				t.Fatalf("ok = %v with anomalies %q", ok, got)
			}
			if len(tc.want) == 0 {
				if !ok {
					t.Fatalf("serializable history rejected:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			if ok {
				t.Fatalf("anomalous history passed, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !hasAnomaly(got, w) {
					t.Errorf("no anomaly starting with %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
			for _, w := range tc.wantText {
				if !strings.Contains(strings.Join(got, "\n"), w) {
					t.Errorf("no anomaly containing %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
			t.Logf("anomalies:\n%s", strings.Join(got, "\n"))
		})
	}
}

func hasAnomaly(anomalies []string, prefix string) bool {
	for _, a := range anomalies {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}

func TestCheckListAppend(t *testing.T) {
	runTxnCases(t, CheckListAppend, []txnCase{
		{name: "empty history"},
		{
			name: "serial read-modify-write chain",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, rd("x", 1), ap("x", 2)),
				committed(3, rd("x", 1, 2), ap("y", 1)),
				committed(4, rd("y", 1), rd("x", 1, 2)),
			},
		},
		{
			name: "reads of own appends",
			txns: []TxnRecord{
				committed(1, ap("x", 1), rd("x", 1)),
				committed(2, rd("x", 1), ap("x", 2), rd("x", 1, 2), ap("x", 3), rd("x", 1, 2, 3)),
				committed(3, ap("x", 4), rd("x", 1, 2, 3, 4)),
			},
		},
		{
			name: "concurrent appends seen in one order by everyone",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, ap("x", 2)),
				committed(3, rd("x", 2)),
				committed(4, rd("x", 2, 1)),
			},
		},
		{
			name: "record order does not matter",
			txns: []TxnRecord{
				committed(4, rd("y", 1), rd("x", 1, 2)),
				committed(2, rd("x", 1), ap("x", 2)),
				committed(3, rd("x", 1, 2), ap("y", 1)),
				committed(1, ap("x", 1)),
			},
		},
		{
			name: "write skew",
			txns: []TxnRecord{
				committed(1, rd("x"), rd("y"), ap("x", 1)),
				committed(2, rd("x"), rd("y"), ap("y", 1)),
				committed(3, rd("x", 1), rd("y", 1)),
			},
			want:     []string{"G2: "},
			wantText: []string{"T1 -rw-> T2 -rw-> T1"},
		},
		{
			name: "write skew with no later observer",
			txns: []TxnRecord{
				committed(1, rd("x"), rd("y"), ap("x", 1)),
				committed(2, rd("x"), rd("y"), ap("y", 1)),
			},
			want: []string{"G2: "},
		},
		{
			name: "lost update",
			txns: []TxnRecord{
				committed(1, rd("x"), ap("x", 1)),
				committed(2, rd("x"), ap("x", 2)),
				committed(3, rd("x", 1, 2)),
			},
			want:     []string{"G2 (G-single): "},
			wantText: []string{"-ww->", "-rw->"},
		},
		{
			name: "IDs may be zero or negative",
			txns: []TxnRecord{
				committed(0, rd("x"), ap("x", 1)),
				committed(-1, rd("x"), ap("x", 2)),
				committed(5, rd("x", 2, 1)),
			},
			want:     []string{"G2 (G-single): "},
			wantText: []string{"T-1 -ww-> T0 -rw-> T-1"},
		},
		{
			name: "read skew",
			txns: []TxnRecord{
				committed(1, ap("x", 1), ap("y", 1)),
				committed(2, rd("x"), rd("y", 1)),
			},
			want:     []string{"G2 (G-single): "},
			wantText: []string{"T1 -wr-> T2 -rw-> T1"},
		},
		{
			name: "G1c: circular information flow",
			txns: []TxnRecord{
				committed(1, ap("x", 1), rd("y", 1)),
				committed(2, ap("y", 1), rd("x", 1)),
			},
			want:     []string{"G1c: "},
			wantText: []string{"T1 -wr-> T2 -wr-> T1"},
		},
		{
			name: "G1c through a ww edge",
			txns: []TxnRecord{
				committed(1, ap("x", 1), rd("y", 1)),
				committed(2, ap("x", 2), ap("y", 1)),
				committed(3, rd("x", 1, 2)),
			},
			want:     []string{"G1c: "},
			wantText: []string{"T1 -ww-> T2 -wr-> T1"},
		},
		{
			name: "G0: appends interleaved in opposite orders",
			txns: []TxnRecord{
				committed(1, ap("x", 1), ap("y", 1)),
				committed(2, ap("x", 2), ap("y", 2)),
				committed(3, rd("x", 1, 2), rd("y", 2, 1)),
			},
			want:     []string{"G0: "},
			wantText: []string{"T1 -ww-> T2 -ww-> T1"},
		},
		{
			name: "aborted read",
			txns: []TxnRecord{
				aborted(1, ap("x", 1)),
				committed(2, rd("x", 1)),
			},
			want:     []string{"G1a: "},
			wantText: []string{"T1, which did not commit"},
		},
		{
			name: "reads of aborted transactions are not evidence",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				aborted(2, rd("x", 7, 7), ap("x", 2)),
				committed(3, rd("x", 1)),
			},
		},
		{
			name: "ambiguous append observed: it committed",
			txns: []TxnRecord{
				ambiguous(1, ap("x", 1)),
				committed(2, rd("x", 1), ap("x", 2)),
				committed(3, rd("x", 1, 2)),
			},
		},
		{
			name: "ambiguous append never observed is dropped",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				ambiguous(2, ap("x", 2)),
				committed(3, rd("x", 1)),
			},
		},
		{
			name: "ambiguous observed, its other append joins the history",
			// T1 committed (T2 saw its x), so T2 must also see its y.
			txns: []TxnRecord{
				ambiguous(1, ap("x", 1), ap("y", 1)),
				committed(2, rd("x", 1), rd("y")),
			},
			want:     []string{"G2 (G-single): "},
			wantText: []string{"T1 -wr-> T2 -rw-> T1"},
		},
		{
			name: "intermediate read",
			txns: []TxnRecord{
				committed(1, ap("x", 1), ap("x", 2)),
				committed(2, rd("x", 1)),
			},
			want: []string{"G1b: "},
		},
		{
			name: "incompatible order",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, ap("x", 2)),
				committed(3, rd("x", 1, 2)),
				committed(4, rd("x", 2, 1)),
			},
			want: []string{"incompatible order: "},
		},
		{
			name: "duplicate elements",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, rd("x", 1, 1)),
			},
			want: []string{"duplicate elements: "},
		},
		{
			name: "garbage read",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, rd("x", 1, 9)),
			},
			want: []string{"garbage read: "},
		},
		{
			name: "internal inconsistency: own append missing",
			txns: []TxnRecord{
				committed(1, ap("x", 1), rd("x")),
			},
			want: []string{"internal inconsistency: "},
		},
		{
			name: "internal inconsistency: second read disagrees with the first",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, ap("x", 2)),
				committed(3, rd("x", 1), ap("x", 3), rd("x", 1, 2, 3)),
				committed(4, rd("x", 1, 2, 3)),
			},
			want: []string{"internal inconsistency: "},
		},
		{
			name: "malformed: duplicate appended value",
			txns: []TxnRecord{
				committed(1, ap("x", 1)),
				committed(2, ap("x", 1)),
			},
			want: []string{"malformed: "},
		},
		{
			name: "malformed: both committed and ambiguous, duplicate ID, unknown kind",
			txns: []TxnRecord{
				{ID: 1, Committed: true, Ambiguous: true},
				committed(2, MicroOp{Kind: "w", Key: "x", Value: 1}),
				committed(2),
			},
			want: []string{"malformed: T1 is both", "malformed: T2 op 0", "malformed: T2 appears"},
		},
	})
}

func TestAnomaliesAreCapped(t *testing.T) {
	var txns []TxnRecord
	txns = append(txns, aborted(0, ap("x", 1)))
	for i := 1; i <= 3*AnomaliesPerClassMax; i++ {
		txns = append(txns, committed(i, rd("x", 1)))
	}
	ok, got := CheckListAppend(txns)
	if ok {
		t.Fatal("aborted reads passed")
	}
	if len(got) != AnomaliesPerClassMax+1 {
		t.Fatalf("got %d anomalies, want %d:\n%s", len(got), AnomaliesPerClassMax+1, strings.Join(got, "\n"))
	}
	if last := got[len(got)-1]; last != "G1a: 20 more not shown" {
		t.Fatalf("summary line %q", last)
	}
}

func TestFmtList(t *testing.T) {
	for _, tc := range []struct {
		list []int
		want string
	}{
		{nil, "[]"},
		{[]int{1, 2, 3}, "[1 2 3]"},
		{[]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "[1 2 3 4 5 6 7 8 9 10]"},
		{[]int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "[1 2 3 ...2 more... 6 7 8 9 10 11]"},
	} {
		if got := fmtList(tc.list); got != tc.want {
			t.Errorf("fmtList(%v) = %q, want %q", tc.list, got, tc.want)
		}
	}
}
