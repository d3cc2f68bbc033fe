package check

import (
	"errors"
	"fmt"
	"math/big"
)

// ErrBankTotal is returned by CheckBankTotal when the balances do not add up
// to the expected total.
var ErrBankTotal = errors.New("check: bank total changed")

// CheckBankTotal checks the bank workload's invariant: transfers between
// accounts never create or destroy money, so the balances, read in one
// consistent snapshot, add up to want. It returns nil if they do, and an
// error wrapping ErrBankTotal, with the sum and the number of accounts, if
// they do not.
//
// The sum is exact (math/big): a corrupted balance near the int64 limits
// must not wrap around into a plausible total.
//
// It checks the sum only: negative balances are legal or not depending on
// the workload, which checks them itself if it forbids them.
func CheckBankTotal(balances map[string]int64, want int64) error {
	sum := new(big.Int)
	for _, balance := range balances {
		sum.Add(sum, big.NewInt(balance))
	}
	if sum.Cmp(big.NewInt(want)) != 0 {
		diff := new(big.Int).Sub(sum, big.NewInt(want))
		return fmt.Errorf("%w: %d accounts sum to %s, want %d (off by %s)", ErrBankTotal, len(balances), sum, want, diff)
	}
	return nil
}
