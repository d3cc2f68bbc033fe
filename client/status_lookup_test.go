package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/txnstatus"
	"github.com/cockroachdb/datadriven"
)

// TestStatusLookupDataDriven steps the batched status lookup
// (lookupStatuses) against a fake cluster: see testdata/status_lookup.
//
//	open cc=N sq=N cache=N      a new client with these limits
//	decide ts=N commit=N        write the status record (commit=0: aborted)
//	lookup ts=N,N,...           look up; prints each decision or "pending",
//	                            the requests sent, the cache hits and size
func TestStatusLookupDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/status_lookup", func(t *testing.T, path string) {
		c := newFakeCluster(t, 1)
		var db *DB
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "open":
				var cc, sq, cache int
				d.ScanArgs(t, "cc", &cc)
				d.ScanArgs(t, "sq", &sq)
				d.ScanArgs(t, "cache", &cache)
				db = c.open(func(o *Options) {
					o.StatusLookupCrossColumnMax, o.StatusLookupSingleQueryMax, o.StatusCacheEntriesMax = cc, sq, cache
				})
				return ""
			case "decide":
				var ts, commit uint64
				d.ScanArgs(t, "ts", &ts)
				d.ScanArgs(t, "commit", &commit)
				v, err := db.statusValue(ts, commit)
				if err != nil {
					t.Fatal(err)
				}
				ok, _, err := db.putUnlessExists(ctx, db.statusKey(ts), v)
				if err != nil || !ok {
					t.Fatalf("decide %d: %v %v", ts, ok, err)
				}
				return ""
			case "lookup":
				var list string
				d.ScanArgs(t, "ts", &list)
				var starts []uint64
				for _, f := range strings.Split(list, ",") {
					if lo, hi, ok := strings.Cut(f, "-"); ok {
						a, _ := strconv.ParseUint(lo, 10, 64)
						b, _ := strconv.ParseUint(hi, 10, 64)
						for s := a; s <= b; s++ {
							starts = append(starts, s)
						}
						continue
					}
					s, err := strconv.ParseUint(f, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					starts = append(starts, s)
				}
				before := db.Stats()
				got, err := db.lookupStatuses(ctx, starts)
				if err != nil {
					return "error: " + err.Error()
				}
				after := db.Stats()
				var out strings.Builder
				if len(starts) <= 8 {
					for _, s := range starts {
						c, ok := got[s]
						switch {
						case !ok:
							fmt.Fprintf(&out, "%d: pending\n", s)
						case c == txnstatus.Aborted:
							fmt.Fprintf(&out, "%d: aborted\n", s)
						default:
							fmt.Fprintf(&out, "%d: committed at %d\n", s, c)
						}
					}
				} else {
					fmt.Fprintf(&out, "%d decided of %d\n", len(got), len(starts))
				}
				fmt.Fprintf(&out, "requests %d, cache hits %d, cached %d\n",
					after.StatusLookupRequests-before.StatusLookupRequests,
					after.StatusCacheHits-before.StatusCacheHits, db.statuses.len())
				return out.String()
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// TestStatusLookupLimitsValidated: CC and SQ outside 1 <= CC <= SQ <=
// keys.TxnKeysMax are refused at Open's validation.
func TestStatusLookupLimitsValidated(t *testing.T) {
	for _, tc := range []struct{ cc, sq int }{{300, 200}, {200, 50_000}} {
		o := Options{StatusLookupCrossColumnMax: tc.cc, StatusLookupSingleQueryMax: tc.sq}
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("CC %d SQ %d: %v, want ErrInvalidArgument", tc.cc, tc.sq, err)
		}
	}
	var o Options
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
