package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/bank"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/spf13/cobra"
)

func init() {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a three-node cluster in this process with a bank-transfer workload, restart a node halfway, and check the total",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), o)
		},
	}
	cmd.Flags().DurationVar(&o.duration, "duration", 30*time.Second, "how long the transfers run")
	cmd.Flags().IntVar(&o.concurrency, "concurrency", 8, "concurrent transfer workers")
	cmd.Flags().IntVar(&o.nodes, "nodes", 3, "nodes in the cluster")
	cmd.Flags().IntVar(&o.accounts, "accounts", 1000, "bank accounts")
	cmd.Flags().IntVar(&o.ranges, "initial-ranges", 4, "user ranges to pre-split into")
	cmd.Flags().StringVar(&o.dir, "dir", "", "directory for the stores (default: a temporary directory, removed at the end)")
	cmd.Flags().BoolVar(&o.noRestart, "no-restart", false, "do not stop and restart a node halfway")
	rootCmd.AddCommand(cmd)
}

type demoOptions struct {
	duration    time.Duration
	concurrency int
	nodes       int
	accounts    int
	ranges      int
	dir         string
	noRestart   bool
}

func runDemo(ctx context.Context, o demoOptions) error {
	if o.nodes < 1 || o.concurrency < 1 || o.accounts < 2 || o.duration <= 0 {
		return fmt.Errorf("invalid flags: need nodes >= 1, concurrency >= 1, accounts >= 2, duration > 0")
	}
	fmt.Printf("starting a %d-node cluster in this process...\n", o.nodes)
	c, err := testcluster.Start(testcluster.Options{Nodes: o.nodes, Dir: o.dir, InitialRanges: o.ranges, TickInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("cluster up: nodes at %v, stores in %s\n", c.Addrs(), c.Dir())
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		return err
	}
	defer db.Close()
	if ctx.Err() != nil {
		return errInterrupted
	}
	b := bank.New(db, bank.Options{Accounts: o.accounts})
	fmt.Printf("creating %d accounts with %d each (total %d)...\n", o.accounts, 1000, b.Want())
	if err := b.Setup(ctx); err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}

	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	lastErr := map[string]int{}
	for w := 0; w < o.concurrency; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			for runCtx.Err() == nil {
				if err := b.Transfer(runCtx, rng); err != nil && runCtx.Err() == nil {
					errMu.Lock()
					lastErr[client.ErrorClass(err)]++
					errMu.Unlock()
				}
			}
		}(uint64(w) + 1)
	}

	// Halfway: stop the node holding the accounts' leaseholder, restart it
	// a sixth of the run later.
	stopAt, restartAt := o.duration/2, o.duration/2+o.duration/6
	stopped := -1
	event := ""
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prevCommits, prevStats := int64(0), db.Stats()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-tick.C:
		}
		el := time.Since(start)
		if !o.noRestart && o.nodes > 1 && stopped < 0 && el >= stopAt && event == "" {
			stopped = accountsLeaseholder(ctx, db, c)
			event = fmt.Sprintf("stopped n%d", stopped+1)
			fmt.Printf("\n>>> %5.1fs stopping node n%d (leaseholder of the accounts' range)\n", el.Seconds(), stopped+1)
			c.StopNode(stopped)
		}
		if stopped >= 0 && el >= restartAt {
			fmt.Printf("\n>>> %5.1fs restarting node n%d from its store\n", el.Seconds(), stopped+1)
			if err := c.RestartNode(stopped); err != nil {
				return fmt.Errorf("restarting node: %w", err)
			}
			event = fmt.Sprintf("restarted n%d", stopped+1)
			stopped = -2
		}
		commits, _ := b.Counts()
		st := db.Stats()
		lat := b.Latency.Take(true)
		fmt.Printf("\r%5.1fs  %6.0f txn/s  p50 %6.1fms  p99 %7.1fms  committed %7d  retries %6d  ambiguous %3d  %-14s",
			el.Seconds(), float64(commits-prevCommits)/time.Second.Seconds(),
			ms(lat.P50), ms(lat.P99), commits, st.Retries-prevStats.Retries, st.Ambiguous, event)
		prevCommits, prevStats = commits, st
	}
	fmt.Println()
	wg.Wait()
	if ctx.Err() != nil {
		// Interrupted (Ctrl-C): the deferred Close stops the nodes and
		// removes the temporary directory.
		if o.dir == "" {
			fmt.Printf("interrupted: stopping the cluster and removing %s\n", c.Dir())
		} else {
			fmt.Printf("interrupted: stopping the cluster (stores kept in %s)\n", c.Dir())
		}
		return errInterrupted
	}
	if stopped >= 0 {
		if err := c.RestartNode(stopped); err != nil {
			return err
		}
	}

	checkCtx, cancelCheck := context.WithTimeout(ctx, 60*time.Second)
	defer cancelCheck()
	total, err := b.Check(checkCtx)
	committed, failed := b.Counts()
	st := db.Stats()
	fmt.Println()
	fmt.Println("summary")
	fmt.Printf("  transfers committed   %d (%.0f/s over %v)\n", committed, float64(committed)/o.duration.Seconds(), o.duration)
	fmt.Printf("  transfers given up    %d\n", failed)
	for k, v := range lastErr {
		fmt.Printf("    %-20s %d\n", k, v)
	}
	fmt.Printf("  attempts retried      %d\n", st.Retries)
	fmt.Printf("  ambiguous, resolved   %d, %d\n", st.Ambiguous, st.AmbiguousResolved)
	fmt.Printf("  abandoned txns aborted by readers  %d\n", st.AbortedOthers)
	if err != nil {
		fmt.Printf("  total balance         FAILED: %v\n", err)
		return err
	}
	fmt.Printf("  total balance         %d == %d: invariant holds\n", total, b.Want())
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// accountsLeaseholder returns the 0-based index of the node holding the
// lease of the range with the first account.
func accountsLeaseholder(ctx context.Context, db *client.DB, c *testcluster.Cluster) int {
	ranges, err := db.Ranges(ctx)
	if err == nil {
		k := keys.UserKey([]byte("acct/"))
		for _, r := range ranges {
			if keys.Contains(r.Desc.StartKey, r.Desc.EndKey, k) && r.LeaseholderNodeID > 0 {
				return int(r.LeaseholderNodeID - 1)
			}
		}
	}
	fmt.Fprintln(os.Stderr, "could not find the accounts' leaseholder; stopping n1")
	return 0
}
