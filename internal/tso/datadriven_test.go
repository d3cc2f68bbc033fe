package tso

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// scriptPersister is a MemPersister that logs every call and can be told to
// fail or to let someone else move the bound.
type scriptPersister struct {
	mem MemPersister
	log strings.Builder
	// failNext makes the next CASBound return an error; if appliedToo, the
	// CAS happens anyway (an unknown outcome that did apply).
	failNext, appliedToo bool
}

func (p *scriptPersister) CASBound(ctx context.Context, expected, new uint64) (uint64, bool, error) {
	if p.failNext {
		p.failNext = false
		if p.appliedToo {
			_, _, _ = p.mem.CASBound(ctx, expected, new)
		}
		fmt.Fprintf(&p.log, "cas %d -> %d: error (applied: %v)\n", expected, new, p.appliedToo)
		return 0, false, errors.New("injected")
	}
	cur, ok, err := p.mem.CASBound(ctx, expected, new)
	if ok {
		fmt.Fprintf(&p.log, "cas %d -> %d: ok\n", expected, new)
	} else {
		fmt.Fprintf(&p.log, "cas %d -> %d: failed, stored %d\n", expected, new, cur)
	}
	return cur, ok, err
}

func (p *scriptPersister) LoadBound(ctx context.Context) (uint64, error) {
	b, err := p.mem.LoadBound(ctx)
	fmt.Fprintf(&p.log, "load -> %d\n", b)
	return b, err
}

// TestDataDriven runs the step-by-step scripts in testdata/. Commands:
//
//	new name=<n> [ahead-ms=<ms>] [bits=<b>] [ms=<clock>]  an Oracle with its own clock
//	clock name=<n> ms=<ms>                                set its clock
//	allocate name=<n> [count=<c>]                         print the span and persister calls
//	reset name=<n>
//	steal to=<bound>                                      someone else stores a bound
//	fail-next-cas [applied]                               the next CASBound errors
//	bound                                                 print the stored bound
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		p := &scriptPersister{}
		oracles := map[string]*Oracle{}
		clocks := map[string]*fakeClock{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var name string
			if d.HasArg("name") {
				d.ScanArgs(t, "name", &name)
			}
			intArg := func(key string, def int) int {
				v := def
				if d.HasArg(key) {
					d.ScanArgs(t, key, &v)
				}
				return v
			}
			switch d.Cmd {
			case "new":
				clocks[name] = newClock(int64(intArg("ms", 100)))
				oracles[name] = New(Options{
					Clock:       clocks[name].now,
					BoundAhead:  time.Duration(intArg("ahead-ms", 2)) * time.Millisecond,
					LogicalBits: uint(intArg("bits", 4)),
				}, p)
				return ""
			case "clock":
				clocks[name].set(int64(intArg("ms", 0)))
				return ""
			case "allocate":
				count := intArg("count", 1)
				first, err := oracles[name].Allocate(context.Background(), uint32(count))
				out := p.log.String()
				p.log.Reset()
				if err != nil {
					return out + fmt.Sprintf("error: %v\n", err)
				}
				return out + fmt.Sprintf("[%d, %d] won %d\n", first, first+uint64(count)-1, oracles[name].wonForTest())
			case "reset":
				oracles[name].Reset()
				return ""
			case "steal":
				cur, _ := p.mem.LoadBound(context.Background())
				_, _, _ = p.mem.CASBound(context.Background(), cur, uint64(intArg("to", 0)))
				return ""
			case "fail-next-cas":
				p.failNext, p.appliedToo = true, d.HasArg("applied")
				return ""
			case "bound":
				b, _ := p.mem.LoadBound(context.Background())
				return fmt.Sprintf("%d\n", b)
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}
