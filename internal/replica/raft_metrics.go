package replica

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// This file defines the Prometheus metrics of the Raft work a Scheduler
// does for its replicas (docs/OPERATIONS.md, "Metrics and health"). They
// are registered on SchedulerConfig.Metrics when the scheduler starts and
// unregistered when it closes, so a node restarted in the same process may
// register a new scheduler's on the same registry. (metrics.go holds the
// per-replica counters read by benchmarks.)
//
// Rejected: package-level metrics on prometheus.DefaultRegisterer, as
// etcd's raft metrics are. Several nodes run in one test process, each
// with its own scheduler, and their counts must not mix.

// LatencyBuckets are the buckets, in seconds, of the latency histograms
// of the Raft work: 50µs doubling to about 6.5s.
var LatencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 18)

// raftMetrics counts what a scheduler's workers do. The fields are never
// nil: without a registerer they count, unread.
type raftMetrics struct {
	reg prometheus.Registerer // nil: none
	// proposals: commands handed to Raft by leaders (the MsgProp that
	// carried them was accepted: proposeBatch).
	proposals prometheus.Counter
	// entriesAppended: log entries persisted to this node's Raft log
	// (Ready.Entries), by leaders and followers.
	entriesAppended prometheus.Counter
	// entriesApplied: committed entries applied to the state machine.
	entriesApplied prometheus.Counter
	// roundSeconds: one scheduler round (the Ready work of a batch of
	// ranges: persist, send, apply, advance).
	roundSeconds prometheus.Histogram
	// appsSuperseded: commit-only MsgApps not sent because a later MsgApp
	// of the same Ready to the same follower carried as much
	// (supersededApps).
	appsSuperseded prometheus.Counter
	// syncSeconds: one synced commit of a round's Raft state (the fsync
	// of the group commit).
	syncSeconds prometheus.Histogram
	// collectors is everything registered, for unregister.
	collectors []prometheus.Collector
}

func newRaftMetrics(s *Scheduler, reg prometheus.Registerer) (*raftMetrics, error) {
	m := &raftMetrics{
		reg: reg,
		proposals: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_raft_proposals_total",
			Help: "Commands handed to Raft by the leaders of this node's ranges."}),
		entriesAppended: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_raft_entries_appended_total",
			Help: "Raft log entries persisted to this node's log (leaders and followers)."}),
		entriesApplied: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_raft_entries_applied_total",
			Help: "Committed Raft log entries applied to this node's ranges."}),
		appsSuperseded: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_raft_appends_superseded_total",
			Help: "Empty (commit-only) Raft appends not sent because a later append of the same Ready to the same follower carried the same or newer log position and commit index."}),
		roundSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "canopy_raft_ready_round_duration_seconds",
			Help:    "Duration of one Raft scheduler round: the Ready work (persist, send, apply, advance) of a batch of ranges.",
			Buckets: LatencyBuckets}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "canopy_raft_log_sync_duration_seconds",
			Help:    "Duration of one synced commit of Raft state to the engine (the fsync of a group commit).",
			Buckets: LatencyBuckets}),
	}
	counter := func(name, help string, load func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(load()) })
	}
	m.collectors = []prometheus.Collector{m.proposals, m.entriesAppended, m.entriesApplied, m.appsSuperseded, m.roundSeconds, m.syncSeconds,
		counter("canopy_raft_scheduler_rounds_total", "Raft scheduler rounds (batches of ranges processed by a worker).", s.metrics.rounds.Load),
		counter("canopy_raft_scheduler_commits_total", "Batches of Raft state committed to the engine.", s.metrics.commits.Load),
		counter("canopy_raft_scheduler_syncs_total", "Batches of Raft state committed with a sync.", s.metrics.syncs.Load),
		counter("canopy_raft_scheduler_ranges_persisted_total", "Ranges whose Raft state went into a commit (its ratio to commits is the group commit size).", s.metrics.rangesPersisted.Load),
		counter("canopy_raft_scheduler_ranges_synced_total", "Ranges whose Raft state went into a synced commit (its ratio to syncs is the mean ranges per fsync).", s.metrics.rangesSynced.Load),
	}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("replica: the scheduler's metrics are registered already (one scheduler per registry): %w", err)
			}
			return nil, fmt.Errorf("replica: registering the scheduler's metrics: %w", err)
		}
	}
	return m, nil
}

// unregister removes the metrics from their registerer.
func (m *raftMetrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// prom returns the metrics of the replica's scheduler. A replica driven by
// hand (manual.go) has no scheduler: it counts into metrics nobody reads.
func (r *Replica) prom() *raftMetrics {
	if r.scheduler == nil {
		return unreadRaftMetrics
	}
	return r.scheduler.prom
}

var unreadRaftMetrics = func() *raftMetrics {
	m, err := newRaftMetrics(&Scheduler{}, nil)
	if err != nil {
		panic(err) // nothing is registered: no error is possible
	}
	return m
}()
