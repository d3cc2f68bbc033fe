package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func init() {
	var store, listen, advertise, join, mode, cpuprofile, minFree, rangeMaxSize, httpAddr, adminUser string
	var splitQPS int
	var tick, deadNodeTimeout, scrubInterval time.Duration
	var faultInjection bool
	var threshold int
	var sched replica.SchedulerConfig
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Run a node (then, once, `canopy init` to form the cluster)",
		Long: "Run a node. It needs --certs-dir DIR holding ca.crt, node.crt and node.key (see `canopy cert`):\n" +
			"every connection to and from it is then mutual TLS, and each RPC is authorized by its caller's\n" +
			"certificate; or --insecure, to run without TLS and authentication (the node logs a warning).",
		Example: `  canopy start --certs-dir certs --store /tmp/n1 --listen 127.0.0.1:26257 \
      --join 127.0.0.1:26257,127.0.0.1:26258,127.0.0.1:26259`,
		RunE: func(cmd *cobra.Command, args []string) error {
			peers := splitHosts(join)
			m, err := storage.ParseMode(mode)
			if err != nil {
				return usageErrorf("--storage-mode: %v", err)
			}
			if err := checkStartFlags(listen, advertise, peers, tick, threshold, sched); err != nil {
				return usageErrorf("%v", err) // a bad flag: exit status 2
			}
			if err := checkRange("dead-node-timeout", deadNodeTimeout, kvserver.DeadNodeTimeoutMin, DeadNodeTimeoutMax); err != nil {
				return usageErrorf("%v", err) // a bad flag: exit status 2
			}
			if scrubInterval != 0 {
				if err := checkRange("scrub-interval", scrubInterval, ScrubIntervalMin, ScrubIntervalMax); err != nil {
					return usageErrorf("%v (or 0: off)", err)
				}
			} else {
				scrubInterval = -1 // kvserver: negative is off
			}
			minFreeBytes, err := parseStoreMinFree(minFree)
			if err != nil {
				return usageErrorf("%v", err) // a bad flag: exit status 2
			}
			rangeMaxBytes, err := parseRangeMaxSize(rangeMaxSize)
			if err != nil {
				return usageErrorf("%v", err) // a bad flag: exit status 2
			}
			if splitQPS < 0 {
				return usageErrorf("--range-split-qps %d: must be 0 (off) or more", splitQPS)
			}
			if splitQPS == 0 {
				splitQPS = -1 // kvserver: negative is off, 0 the default
			}
			httpAddr, err := resolveHTTPAddr(httpAddr, listen)
			if err != nil {
				return usageErrorf("%v", err) // a bad flag: exit status 2
			}
			if err := conn.checkSecurity(); err != nil { // conn.go
				return err
			}
			var certs *security.NodeCerts
			if !conn.insecure {
				if certs, err = security.LoadNodeCerts(conn.certsDir); err != nil {
					return err
				}
			}
			n, err := kvserver.Start(kvserver.Config{
				StoreDir: store, ListenAddr: listen, AdvertiseAddr: advertise,
				Join: peers, TickInterval: tick, Logger: logger,
				Storage:           storage.Options{Mode: m, ThresholdBytes: threshold, Fatal: storeFatal(store)},
				RaftScheduler:     sched,
				StoreMinFreeBytes: minFreeBytes,
				RangeSplitBytes:   rangeMaxBytes,
				RangeSplitQPS:     splitQPS,
				DeadNodeTimeout:   deadNodeTimeout,
				ScrubInterval:     scrubInterval,
				HTTPAddr:          httpAddr, Metrics: newMetricsRegistry(), // metrics.go
				FaultInjection: faultInjection, // nemesis.go
				Certs:          certs, Insecure: conn.insecure, AdminUser: adminUser,
			})
			if err != nil {
				return err
			}
			setNodeGCPercent()
			if cpuprofile != "" {
				// Profiling starts once the node serves and stops when it is
				// told to stop, so the profile covers the node's working life
				// and not its start-up.
				f, err := os.Create(cpuprofile)
				if err != nil {
					n.Stop()
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					n.Stop()
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if n.NodeID() == 0 {
				logger.Info("node started; waiting for `canopy init`", "addr", n.Addr(), "store", store)
			} else {
				logger.Info("node restarted with its data", "node", n.NodeID(), "addr", n.Addr(), "store", store)
			}
			// SIGHUP too: a node whose terminal or session went away stops
			// cleanly and says so, rather than die silently (the default).
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			select {
			case s := <-sig:
				logger.Info("stopping", "signal", s.String())
			case <-n.Failed():
				// The store was found damaged (the node logged why); the
				// error line and exit status say it once more.
				n.Stop()
				return n.Err()
			}
			n.Stop()
			sm := n.RaftSchedulerMetrics()
			logger.Info("raft scheduler", "rounds", sm.Rounds, "commits", sm.Commits, "syncs", sm.Syncs,
				"ranges_persisted", sm.RangesPersisted, "ranges_synced", sm.RangesSynced)
			return nil
		},
	}
	cmd.Flags().BoolVar(&faultInjection, "enable-fault-injection", false, "serve /debug/fault on --http-addr so that `canopy nemesis` can inject faults (testing only)")
	_ = cmd.Flags().MarkHidden("enable-fault-injection")
	cmd.Flags().StringVar(&store, "store", "canopy-data", "directory of the node's store")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:26257", "address to serve gRPC on")
	cmd.Flags().StringVar(&advertise, "advertise", "", "address peers and clients use (default: --listen)")
	cmd.Flags().StringVar(&join, "join", "", "comma-separated addresses of the cluster's nodes, in the same form as their --listen: of every node of a cluster to form with `canopy init`, or of some nodes of a running cluster for a node with an empty store to join it")
	cmd.Flags().DurationVar(&deadNodeTimeout, "dead-node-timeout", kvserver.DefaultDeadNodeTimeout,
		"a node not heard from for this long is dead: its replicas are rebuilt on live nodes (as CockroachDB's server.time_until_store_dead)")
	cmd.Flags().DurationVar(&scrubInterval, "scrub-interval", kvserver.DefaultScrubInterval,
		fmt.Sprintf("read every value of every replica this often to verify its checksums; a damaged replica is rebuilt from a healthy one (0: off; else %v to %v)", ScrubIntervalMin, ScrubIntervalMax))
	cmd.Flags().DurationVar(&tick, "raft-tick", 100*time.Millisecond, "Raft tick; elections take 10-20 ticks")
	cmd.Flags().StringVar(&mode, "storage-mode", "inline", "value separation of this store: inline, rewrite, punch or pebble (see docs/BENCHMARKS.md)")
	cmd.Flags().IntVar(&threshold, "value-threshold", storage.DefaultThresholdBytes, "values of at least this many bytes go to blob files (separating modes)")
	cmd.Flags().IntVar(&sched.Workers, "raft-workers", 0, fmt.Sprintf("workers handling the Raft work of the node's ranges (0: max(1, min(GOMAXPROCS/2, 8)); at most %d)", replica.SchedulerWorkersMax))
	cmd.Flags().IntVar(&sched.BatchRangesMax, "raft-batch-ranges", 0, fmt.Sprintf("ranges a worker persists in one batch with one sync (0: 64; at most %d; 1: one commit per range)", replica.SchedulerBatchRangesLimit))
	cmd.Flags().IntVar(&splitQPS, "range-split-qps", kvserver.DefaultRangeSplitQPS, fmt.Sprintf("split a range serving more requests a second than this for %v, at a key dividing its load (0: never)", kvserver.DefaultLoadSplitAfter))
	cmd.Flags().StringVar(&rangeMaxSize, "range-max-size", "64MiB", "split a range whose estimated size on disk passes this (off: never); e.g. 512MiB")
	cmd.Flags().StringVar(&minFree, "store-min-free", "0", "refuse writes while the store's disk has less free space than this (0: 1% of the disk, at least 32MiB, at most 1GiB; off: no check); e.g. 512MiB, 2GB")
	cmd.Flags().StringVar(&httpAddr, "http-addr", "", fmt.Sprintf("address to serve HTTP on: the status page at /, Prometheus metrics at /metrics, health at /health and /health?ready=1 (default: --listen's host, port + %d; off: none)", HTTPPortOffset))
	addSecurityFlags(cmd, false) // conn.go
	cmd.Flags().StringVar(&adminUser, "admin-user", security.AdminUserDefault, "the user whose client certificate may call administrative RPCs (init, split, settings)")
	cmd.Flags().StringVar(&cpuprofile, "cpuprofile", "", "write a pprof CPU profile of the node, from start until SIGINT/SIGTERM, to this file")
	rootCmd.AddCommand(cmd)
}

func init() {
	var encoding, protocol string
	var ranges, rf int
	var pq, np uint64
	var hier hierarchyFlags
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Bootstrap a new cluster from the nodes named in --join of the node at --host",
		Long: `Bootstrap a new cluster from the nodes named in --join of the node at --host
(the first address of --host). It waits up to --dial-timeout for that node to
answer, and the node waits, within --timeout, for the others. Run it once: on a
cluster already initialized it fails with exit status 2. The status encoding is
tickets-mix unless --status-encoding names tickets or v1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := conn.check(); err != nil {
				return err
			}
			host := conn.firstHost()
			if err := checkInitFlags(host, ranges, rf, encoding); err != nil {
				return usageErrorf("%v", err)
			}
			cp, err := commitprotocol.Check(protocol)
			if err != nil {
				return usageErrorf("--commit-protocol: %v", err)
			}
			hs, err := hier.settings(cmd, cp) // status_hierarchy.go
			if err != nil {
				return usageErrorf("%v", err)
			}
			creds, err := conn.clientCredentials() // conn.go
			if err != nil {
				return err
			}
			cc, err := grpc.NewClient(host, grpc.WithTransportCredentials(creds))
			if err != nil {
				return usageErrorf("--host %q: %v", host, err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), conn.timeout)
			defer cancel()
			if err := waitForNode(ctx, cc, host); err != nil {
				return err
			}
			resp, err := rpcpb.NewKVClient(cc).Bootstrap(ctx, &rpcpb.BootstrapRequest{
				InitialRanges: uint32(ranges),
				Settings: &rpcpb.ClusterSettings{StatusEncoding: encoding, ReplicationFactor: uint32(rf),
					TicketsPartitioningQuantum: pq, TicketsRowsPerQuantum: np, CommitProtocol: protocol, Hierarchy: hs},
			})
			if err != nil {
				if rpcpb.IsAuthRefusal(err) {
					return fmt.Errorf("%w: %s refused: %s", client.ErrPermission, host, status.Convert(err).Message())
				}
				return fmt.Errorf("%w: contacting %s: %v", client.ErrUnavailable, host, err)
			}
			if resp.Error != nil {
				return initError(resp.Error)
			}
			s := resp.Settings
			fmt.Printf("cluster %s initialized: replication factor %d, status encoding %s (PQ %d, NP %d), commit protocol %s, %d user ranges\n",
				s.ClusterId, s.ReplicationFactor, s.StatusEncoding, s.TicketsPartitioningQuantum, s.TicketsRowsPerQuantum, commitprotocol.Of(s.CommitProtocol), max(ranges, 1))
			if h := s.GetHierarchy(); h != nil {
				fmt.Printf("validator tree %s; %s\n", h.Tree, hierarchyBatching(h))
			}
			return nil
		},
	}
	addConnFlags(cmd)
	cmd.Flags().IntVar(&ranges, "initial-ranges", 1, fmt.Sprintf("pre-split the user keyspace into this many ranges (at most %d)", kvserver.InitialRangesMax))
	cmd.Flags().IntVar(&rf, "replication-factor", 3, "replicas per range (capped at the number of nodes)")
	cmd.Flags().StringVar(&encoding, "status-encoding", kvserver.DefaultStatusEncoding, "transaction status table encoding: tickets-mix (spreads status writes evenly over the status ranges), tickets (the AtlasDB record's layout) or v1")
	cmd.Flags().StringVar(&protocol, "commit-protocol", string(commitprotocol.Default), "the cluster's commit protocol, fixed for its life: "+strings.Join(commitprotocol.Names(), ", ")+"")
	hier.register(cmd)
	cmd.Flags().Uint64Var(&pq, "tickets-partitioning-quantum", kvserver.DefaultPartitioningQuantum, "tickets encoding: timestamps per partition (PQ)")
	cmd.Flags().Uint64Var(&np, "tickets-rows-per-quantum", kvserver.DefaultRowsPerQuantum, "tickets encoding: rows per partition (NP); must divide PQ")
	rootCmd.AddCommand(cmd)
}

// waitForNode waits, up to --dial-timeout within ctx, until the node at
// host answers (init is often run right after the nodes are started).
func waitForNode(ctx context.Context, cc *grpc.ClientConn, host string) error {
	dctx, cancel := context.WithTimeout(ctx, conn.dialTimeout)
	defer cancel()
	_, err := rpcpb.NewKVClient(cc).ClusterInfo(dctx, &rpcpb.ClusterInfoRequest{}, grpc.WaitForReady(true))
	if err == nil || status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Unavailable {
		return nil // it answered (an uninitialized node answers with an error)
	}
	return fmt.Errorf("%w: node %s did not answer within --dial-timeout %v", client.ErrUnavailable, host, conn.dialTimeout)
}

// initError types a Bootstrap refusal for the exit status.
func initError(e *rpcpb.Error) error {
	switch e.Code {
	case rpcpb.ErrorCode_INVALID_ARGUMENT:
		return fmt.Errorf("%w: %s", client.ErrInvalidArgument, e.Message)
	case rpcpb.ErrorCode_UNAVAILABLE:
		return fmt.Errorf("%w: %s", client.ErrUnavailable, e.Message)
	}
	return fmt.Errorf("%s: %s", e.Code, e.Message)
}

// nodeGCPercent is the Go garbage collector's target (GOGC) of a node
// process unless the environment sets GOGC. A node's Go heap is small (about
// 10 MiB under load: Pebble's block cache and memtables live outside it), so
// at Go's default of 100 the collector ran about ten times a second under
// puts, its marking taking 7% of the node's CPU and every cycle shrinking
// the stacks of parked goroutines, which the next request grew again. At
// 400 the heap may reach five times the live data, some tens of MiB more.
const nodeGCPercent = 400

// setNodeGCPercent applies nodeGCPercent unless GOGC is set.
func setNodeGCPercent() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(nodeGCPercent)
	}
}
