package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/bench/txnbench"
	"github.com/spf13/cobra"
)

type benchTxnOptions struct {
	benchClusterOptions
	check          bool
	pipelining     bool
	switches       string
	writesAtCommit bool
}

func init() {
	var o benchTxnOptions
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "Two-key read-modify-write transactions: throughput, p50/p99 latency and retries against concurrency (Canopy or etcd)",
		Long: `Runs transfers with N concurrent clients (goroutines sharing one client): each
reads the balances of two keys chosen at random from --keys and writes both,
moving one unit from one to the other, in one transaction. A run per
concurrency, bounded by --duration and by --ops-max. Prints a table (ops are
committed transactions; retries are the extra attempts of the counted
ones), writes <out>.csv and <out>.png, and states the machine.

On Canopy a transfer is client.DB.Txn (serializable; two Txn.Gets, then the
two writes handed to the commit with Txn.CommitWith: a one-phase commit when
both keys lie in one range, else both writes at once and the commit;
--writes-at-commit=false writes with two Txn.Puts, one after the other, and
lets DB.Txn commit, as the runs before 2026-11-27 did; DB.Txn retries lost
conflicts with backoff). On etcd (--target
etcd --endpoints ...) it is two linearizable Gets and a Txn that puts both
keys If both ModRevisions are unchanged, run again at once when the compare
fails (at most 20 runs).

With --pipelining the Canopy transfers run with transactional pipelining
(client.Options.Pipelining): each Txn.Put returns once its leaseholder has
proposed it, and the commit proves the writes before its commit point.

With --switches off or on the Canopy transfers run with all three
transaction switches (pipelining, parallel commits, one-phase commit) off or
on for the client, whatever the cluster setting says: the same binary
measured both ways.

With --check (the default) it reads every key after the runs and fails if
the balances no longer sum to what was loaded: transfers are atomic, so the
total never changes. Cluster flags as for canopy bench kv.`,
		Example: `  canopy bench txn --concurrency 1,16,64 --duration 10s
  canopy bench txn --target etcd --endpoints 127.0.0.1:2379,127.0.0.1:22379 --concurrency 16`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchTxn(ctx, o, strings.Join(os.Args, " "))
		},
	}
	f := cmd.Flags()
	o.register(f, "docs/bench/txn")
	f.BoolVar(&o.check, "check", true, "after the runs, read every key and check that the total balance is unchanged")
	f.BoolVar(&o.pipelining, "pipelining", false, "Canopy: run the transfers with transactional pipelining (client.Options.Pipelining)")
	f.StringVar(&o.switches, "switches", "", "Canopy: off or on: run the transfers with pipelining, parallel commits and one-phase commit all off or all on (default: the cluster setting)")
	f.BoolVar(&o.writesAtCommit, "writes-at-commit", true, "Canopy: hand the transfer's two writes to the commit (Txn.CommitWith); false: two Txn.Puts, then the commit")
	benchCmd.AddCommand(cmd)
}

func runBenchTxn(ctx context.Context, o benchTxnOptions, command string) error {
	if err := o.validate(); err != nil {
		return err
	}
	if o.kv.ValueBytes < 8 || o.kv.Keys < 2 {
		return fmt.Errorf("bench txn needs --value-bytes >= 8 (the balance) and --keys >= 2")
	}
	m := bench.ThisMachine()
	printBenchHeader("txn", command, m, o.benchClusterOptions, "2-key transfers, one client shared by the workers")
	targets, err := openBenchTargets(ctx, o.benchClusterOptions, func(ctx context.Context, kv kvbench.KV) error {
		return txnbench.Load(ctx, kv, o.kv)
	})
	if err != nil {
		return err
	}
	defer closeTargets(targets)
	var sw client.Toggle
	switch o.switches {
	case "":
	case "on":
		sw = client.ToggleOn
	case "off":
		sw = client.ToggleOff
	default:
		return fmt.Errorf("--switches %q: want off or on", o.switches)
	}
	if o.pipelining && sw != 0 {
		return fmt.Errorf("--pipelining and --switches: give one")
	}
	if o.pipelining || sw != 0 {
		co, label := client.Options{Pipelining: client.ToggleOn}, "pipelined"
		if sw != 0 {
			co, label = client.Options{Pipelining: sw, ParallelCommits: sw, OnePC: sw}, "switches "+o.switches
		}
		for i := range targets {
			if err := pipelineTarget(ctx, &targets[i], co, label); err != nil {
				return err
			}
		}
	}
	for i := range targets {
		if c, ok := targets[i].txn.(txnbench.Canopy); ok {
			c.WritesAtCommit = o.writesAtCommit
			targets[i].txn = c
		}
	}
	if o.loadOnly {
		return nil
	}
	rows, err := runBenchPoints(o.benchClusterOptions, targets, len(o.concurrency), func(tg benchTarget, p int, kv kvbench.Options) (kvbench.Result, error) {
		return txnbench.Run(ctx, tg.txn, kv, o.concurrency[p])
	})
	if err != nil {
		return err
	}
	if o.check {
		for _, tg := range targets {
			total, err := txnbench.Check(ctx, tg.kv, o.kv)
			if err != nil {
				return fmt.Errorf("[%s] %w", tg.label, err)
			}
			fmt.Printf("[%s] total balance unchanged: %d over %d keys\n", tg.label, total, o.kv.Keys)
		}
	}
	return writeBenchOutputs(o.benchClusterOptions, rows, m,
		fmt.Sprintf("canopy bench txn (%s): 2-key transfers, %d-byte values, %d keys", o.target, o.kv.ValueBytes, o.kv.Keys))
}

// pipelineTarget makes tg's transfers run on a second client of the same
// cluster with options co (loading and the final check keep the first).
// The addresses come from the cluster itself, so that this works for a
// cluster started here as for --host.
func pipelineTarget(ctx context.Context, tg *benchTarget, co client.Options, label string) error {
	db, ok := tg.kv.(*client.DB)
	if !ok {
		return fmt.Errorf("--pipelining and --switches are for Canopy, not %s", tg.label)
	}
	info, err := db.ClusterInfo(ctx)
	if err != nil {
		return err
	}
	var addrs []string
	for _, n := range info.GetNodes() {
		addrs = append(addrs, n.GetAddress())
	}
	co.TLS = tg.tls
	pdb, err := client.Open(ctx, addrs, client.WithOptions(co))
	if err != nil {
		return err
	}
	tg.txn = txnbench.Canopy{DB: pdb}
	tg.label += ", " + label
	closeFirst := tg.closeFn
	tg.closeFn = func() {
		_ = pdb.Close()
		if closeFirst != nil {
			closeFirst()
		}
	}
	return nil
}
