package check

import "testing"

func wr(key string, v int) MicroOp { return MicroOp{Kind: OpWrite, Key: key, Value: v} }

func rr(key string, v int) MicroOp { return MicroOp{Kind: OpRead, Key: key, Value: v} }

func stamped(t TxnRecord, commitTs uint64) TxnRecord {
	t.CommitTs = commitTs
	return t
}

func TestCheckRegister(t *testing.T) {
	runTxnCases(t, CheckRegister, []txnCase{
		{name: "empty history"},
		{
			name: "serial chain with timestamps",
			txns: []TxnRecord{
				stamped(committed(1, wr("x", 1)), 10),
				stamped(committed(2, rr("x", 1), wr("x", 2), wr("y", 1)), 20),
				stamped(committed(3, rr("x", 2), rr("y", 1)), 30),
			},
		},
		{
			name: "serial chain without timestamps",
			txns: []TxnRecord{
				committed(3, rr("x", 2), rr("y", 1)),
				committed(1, wr("x", 1)),
				committed(2, rr("x", 1), wr("x", 2), wr("y", 1)),
				committed(4, rr("z", 0)),
			},
		},
		{
			name: "reads of own writes",
			txns: []TxnRecord{
				committed(1, wr("x", 1), rr("x", 1), wr("x", 2), rr("x", 2)),
				committed(2, rr("x", 2), rr("x", 2)),
			},
		},
		{
			name: "write skew",
			txns: []TxnRecord{
				committed(1, rr("x", 0), rr("y", 0), wr("x", 1)),
				committed(2, rr("x", 0), rr("y", 0), wr("y", 2)),
			},
			want:     []string{"G2: "},
			wantText: []string{"T1 -rw-> T2 -rw-> T1"},
		},
		{
			name: "lost update from the initial state",
			txns: []TxnRecord{
				committed(1, rr("x", 0), wr("x", 1)),
				committed(2, rr("x", 0), wr("x", 2)),
			},
			want: []string{"G2: "},
		},
		{
			name: "lost update, found by writes following reads",
			txns: []TxnRecord{
				committed(1, wr("x", 5)),
				committed(2, rr("x", 5), wr("x", 6)),
				committed(3, rr("x", 5), wr("x", 7)),
			},
			want: []string{"G2: "},
		},
		{
			name: "lost update with timestamps",
			txns: []TxnRecord{
				stamped(committed(1, wr("x", 5)), 1),
				stamped(committed(2, rr("x", 5), wr("x", 6)), 2),
				stamped(committed(3, rr("x", 5), wr("x", 7)), 3),
			},
			want: []string{"G2 (G-single): "},
		},
		{
			name: "G1c: circular information flow",
			txns: []TxnRecord{
				committed(1, wr("x", 1), rr("y", 2)),
				committed(2, wr("y", 2), rr("x", 1)),
			},
			want:     []string{"G1c: "},
			wantText: []string{"T1 -wr-> T2 -wr-> T1"},
		},
		{
			// commit_ts puts T1's x before T2's x, but T1 read T2's y
			// before overwriting it, so T2's y comes first.
			name: "G0: commit_ts and writes-follow-reads disagree",
			txns: []TxnRecord{
				stamped(committed(1, wr("x", 1), rr("y", 2), wr("y", 1)), 10),
				stamped(committed(2, wr("x", 2), wr("y", 2)), 20),
			},
			want:     []string{"G0: "},
			wantText: []string{"T1 -ww-> T2 -ww-> T1"},
		},
		{
			name: "stale read found through commit timestamps",
			txns: []TxnRecord{
				stamped(committed(1, wr("x", 1)), 10),
				stamped(committed(2, wr("x", 2), wr("y", 2)), 20),
				stamped(committed(3, rr("y", 2), rr("x", 1)), 30),
			},
			want:     []string{"G2 (G-single): "},
			wantText: []string{"T2 -wr-> T3 -rw-> T2"},
		},
		{
			// The same stale read with no timestamps: nothing orders T1's
			// and T2's writes of x, so no checker could call it stale.
			// This records the limit of value-only inference.
			name: "stale read is invisible without an order of writes",
			txns: []TxnRecord{
				committed(1, wr("x", 1)),
				committed(2, wr("x", 2), wr("y", 2)),
				committed(3, rr("y", 2), rr("x", 1)),
			},
		},
		{
			name: "aborted read",
			txns: []TxnRecord{
				aborted(1, wr("x", 1)),
				committed(2, rr("x", 1)),
			},
			want: []string{"G1a: "},
		},
		{
			name: "ambiguous write observed joins the history",
			txns: []TxnRecord{
				ambiguous(1, wr("x", 1), wr("y", 1)),
				committed(2, rr("x", 1), rr("y", 0)),
			},
			want:     []string{"G2 (G-single): "},
			wantText: []string{"T1 -wr-> T2 -rw-> T1"},
		},
		{
			name: "ambiguous write never observed is dropped",
			txns: []TxnRecord{
				ambiguous(1, wr("x", 1), wr("y", 1)),
				committed(2, rr("x", 0), rr("y", 0)),
			},
		},
		{
			name: "intermediate read",
			txns: []TxnRecord{
				committed(1, wr("x", 1), wr("x", 2)),
				committed(2, rr("x", 1)),
			},
			want: []string{"G1b: "},
		},
		{
			name: "garbage read",
			txns: []TxnRecord{
				committed(1, rr("x", 9)),
			},
			want: []string{"garbage read: "},
		},
		{
			name: "internal inconsistency",
			txns: []TxnRecord{
				committed(1, wr("x", 1)),
				committed(2, wr("x", 2), rr("x", 1)),
				committed(3, rr("y", 0), rr("y", 1)),
				committed(4, wr("y", 1)),
			},
			want:     []string{"internal inconsistency: "},
			wantText: []string{"(its own write)", "(its previous read)"},
		},
		{
			name: "duplicate commit_ts",
			txns: []TxnRecord{
				stamped(committed(1, wr("x", 1)), 10),
				stamped(committed(2, wr("x", 2)), 10),
			},
			want: []string{"duplicate commit_ts: "},
		},
		{
			name: "malformed: zero written, list-append kind",
			txns: []TxnRecord{
				committed(1, wr("x", 0)),
				committed(2, ap("x", 1)),
			},
			want: []string{"malformed: T1 writes 0", "malformed: T2 op 0"},
		},
	})
}
