package main

import "testing"

func TestParseTxnOp(t *testing.T) {
	for _, tc := range []struct {
		in  string
		ok  bool
		out txnOp
	}{
		{"get a", true, txnOp{verb: "get", key: "a"}},
		{"PUT a 1", true, txnOp{verb: "put", key: "a", value: "1"}},
		{"del a", true, txnOp{verb: "del", key: "a"}},
		{"scan a", true, txnOp{verb: "scan", key: "a", limit: 1000}},
		{"scan a z 5", true, txnOp{verb: "scan", key: "a", end: "z", limit: 5}},
		{"scan a z 0", false, txnOp{}},
		{"put a", false, txnOp{}},
		{"get", false, txnOp{}},
		{"", false, txnOp{}},
		{"frob a", false, txnOp{}},
	} {
		got, err := parseTxnOp(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.out) {
			t.Errorf("parseTxnOp(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.out, tc.ok)
		}
	}
}
