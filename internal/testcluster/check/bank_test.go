package check

import (
	"errors"
	"math"
	"testing"
)

func TestCheckBankTotal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		balances map[string]int64
		want     int64
		ok       bool
	}{
		{"empty", nil, 0, true},
		{"conserved", map[string]int64{"a": 70, "b": 20, "c": 10}, 100, true},
		{"negative balances still sum", map[string]int64{"a": -30, "b": 130}, 100, true},
		{"money created", map[string]int64{"a": 70, "b": 31}, 100, false},
		{"money destroyed", map[string]int64{"a": 70}, 100, false},
		{"overflow", map[string]int64{"a": math.MaxInt64, "b": 1}, 0, false},
		{"negative overflow", map[string]int64{"a": math.MinInt64, "b": -1}, 0, false},
		{"large but fine", map[string]int64{"a": math.MaxInt64, "b": math.MinInt64}, -1, true},
		{"intermediate sums beyond int64", map[string]int64{"a": math.MaxInt64, "b": math.MaxInt64, "c": math.MinInt64, "d": math.MinInt64}, -2, true},
		{"wraps around to the right total", map[string]int64{"a": math.MaxInt64, "b": math.MaxInt64, "c": 2}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBankTotal(tc.balances, tc.want)
			if tc.ok && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrBankTotal) {
				t.Fatalf("got %v, want ErrBankTotal", err)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}
