package kvserver

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/tso"
	"github.com/canopy-db/canopy/internal/txnstatus"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// This file defines the node's Prometheus metrics (docs/OPERATIONS.md,
// "Metrics and health"). Each package registers its own on the registry
// passed down through its configuration (Config.Metrics here; the engine's
// in storage.Options, the Raft scheduler's in replica.SchedulerConfig, the
// oracle's in tso.Options); this one holds the node's:
//
//   - gRPC: grpc_server_* from go-grpc-middleware's Prometheus provider
//     (the names etcd and most gRPC dashboards use), by service, method
//     and gRPC code, with the handling-time histogram.
//   - KV batches: the gRPC code of Batch is OK even when the batch fails,
//     since the outcome is in the response; canopy_kv_batches_total and
//     canopy_kv_batch_duration_seconds count them by request method and
//     Canopy error code.
//   - Requests served, intents resolved, status-table writes and lookups.
//   - Ranges: gauges computed from the replicas when scraped (rangeGauges).
//
// Rejected: a registry of the package's own (prometheus.DefaultRegisterer):
// the in-process test clusters run several nodes in one process, and each
// node's figures must stay its own.

// metrics is the node's own metrics. Registered by newMetrics, removed by
// unregister (Stop), so that a node restarted in the same process can
// register again on the same registry.
type metrics struct {
	reg  *prometheus.Registry
	grpc *grpcprom.ServerMetrics
	// batches and batchSeconds: KV batches, by method (of the batch's
	// first request) and code (OK or the rpcpb.ErrorCode of the answer).
	batches      *prometheus.CounterVec
	batchSeconds *prometheus.HistogramVec
	// requests: requests of successful batches, by method.
	requests *prometheus.CounterVec
	// intentsResolved: ResolveIntent requests of successful batches.
	intentsResolved prometheus.Counter
	// statusRequests: status-table requests served by this node as
	// leaseholder, by op (write: put-unless-exists; lookup: get), the
	// status encoding in effect for the record's start timestamp (by the
	// schedule; "unknown" for a key no era's encoding reads), and range
	// (their spread over the status ranges).
	statusRequests *prometheus.CounterVec
	// decisions: transaction decisions recorded by this node as
	// leaseholder, by outcome (committed, aborted) and path (status_record:
	// a put-unless-exists of the final status that succeeded; one_pc: a
	// CommitOnePC). Read-only transactions record nothing.
	decisions *prometheus.CounterVec
	// gcRemoved: what the GC commands this node proposed as leader
	// removed, by kind (version; staging_record and fence_record: status
	// records of decided transactions; refusal and one_pc_entry: entries of
	// key records below the GC threshold).
	gcRemoved *prometheus.CounterVec
	// tso: the oracle's and the timestamp batcher's.
	tso *tso.Metrics
	// damagedReplicas: replicas found damaged here (damage.go).
	damagedReplicas prometheus.Counter

	collectors []prometheus.Collector
	// charts holds the metrics of the status page's charts (batches,
	// requests, latency, decisions) again, so that its sampler gathers
	// them alone every few seconds (internal/statuspage).
	charts *prometheus.Registry
}

// newMetrics makes the node's metrics and registers them on reg.
func newMetrics(n *Node, reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		reg: reg,
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(replica.LatencyBuckets))),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_kv_batches_total",
			Help: "KV batches answered by this node, by method (of the batch's first request) and code (OK, or the Canopy error code of the answer)."},
			[]string{"method", "code"}),
		batchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "canopy_kv_batch_duration_seconds",
			Help:    "Time to answer one KV batch, by method and code (as canopy_kv_batches_total).",
			Buckets: replica.LatencyBuckets}, []string{"method", "code"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_kv_requests_total",
			Help: "Requests of the KV batches this node served successfully as leaseholder, by method."}, []string{"method"}),
		intentsResolved: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_intents_resolved_total",
			Help: "Intents resolved (ResolveIntent requests applied) by this node as leaseholder."}),
		statusRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_status_table_requests_total",
			Help: "Transaction status table requests served by this node as leaseholder, by op (write: put-unless-exists of a record; lookup: a read), the status encoding in effect for the record's start timestamp (by the cluster's status encoding schedule), and range."},
			[]string{"op", "encoding", "range"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_txn_decisions_total",
			Help: "Transaction decisions recorded by this node as leaseholder, by outcome (committed, aborted) and path (status_record: the final status written to the status table; one_pc: a one-phase commit). Read-only transactions record none."},
			[]string{"outcome", "path"}),
		gcRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_gc_removed_total",
			Help: "What the GC commands this node proposed as leader removed, by kind: version (old MVCC versions), staging_record and fence_record (parallel commits' records of decided transactions), refusal and one_pc_entry (key-record entries of transactions that started below the GC threshold)."},
			[]string{"kind"}),
		damagedReplicas: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_replicas_damaged_total",
			Help: "Replicas of this node found damaged (a value failed its checksum when read or scrubbed); each is replaced from a healthy replica."}),
	}
	var err error
	if m.tso, err = tso.NewMetrics(reg); err != nil {
		return nil, err
	}
	for _, outcome := range []string{"committed", "aborted"} {
		m.decisions.WithLabelValues(outcome, "status_record") // listed at 0 from the start
	}
	m.decisions.WithLabelValues("committed", "one_pc")
	for _, k := range []string{"version", "staging_record", "fence_record", "refusal", "one_pc_entry"} {
		m.gcRemoved.WithLabelValues(k)
	}
	m.charts = prometheus.NewRegistry()
	m.charts.MustRegister(m.batches, m.batchSeconds, m.requests, m.decisions)
	transportSent := func(count func(*transport) uint64) func() float64 {
		return func() float64 {
			if t := n.transport; t != nil { // made after the metrics (Start)
				return float64(count(t))
			}
			return 0
		}
	}
	m.collectors = []prometheus.Collector{m.grpc, m.batches, m.batchSeconds, m.requests, m.intentsResolved, m.statusRequests, m.decisions, m.gcRemoved, m.damagedReplicas, &rangeGauges{n: n},
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "canopy_raft_transport_batches_sent_total",
			Help: "Batches of Raft messages this node handed to its peers' streams."},
			transportSent(func(t *transport) uint64 { return t.batchesSent.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "canopy_raft_transport_messages_sent_total",
			Help: "Raft messages in those batches (divided by the batches: how well the senders batch)."},
			transportSent(func(t *transport) uint64 { return t.messagesSent.Load() })),
	}
	m.collectors = append(m.collectors, &hierGauges{n: n})
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			m.tso.Unregister()
			return nil, fmt.Errorf("kvserver: registering metrics: %w", err)
		}
	}
	return m, nil
}

// unregister removes the node's metrics from its registry.
func (m *metrics) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.tso.Unregister()
}

// observeBatch counts a KV batch answered after starting at start.
func (n *Node) observeBatch(req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse, start time.Time) {
	m := n.ops.metrics
	method := rpcpb.MethodNone.String()
	if len(req.Requests) > 0 {
		method = req.Requests[0].Method().String()
	}
	code := "OK"
	if resp.Error != nil {
		code = resp.Error.Code.String()
	}
	m.batches.WithLabelValues(method, code).Inc()
	m.batchSeconds.WithLabelValues(method, code).Observe(time.Since(start).Seconds())
	if resp.Error != nil {
		return
	}
	var rangeLabel string
	for i, ru := range req.Requests {
		meth := ru.Method()
		m.requests.WithLabelValues(meth.String()).Inc()
		op := ""
		switch meth {
		case rpcpb.MethodResolveIntent:
			m.intentsResolved.Inc()
		case rpcpb.MethodCommitOnePC:
			m.decisions.WithLabelValues("committed", "one_pc").Inc()
		case rpcpb.MethodPlainGet:
			op = "lookup"
		case rpcpb.MethodPlainPutUnlessExists:
			op = "write"
		}
		if op == "" || !bytes.HasPrefix(ru.Key(), keys.StatusPrefix) {
			continue
		}
		if rangeLabel == "" {
			rangeLabel = strconv.FormatUint(req.RangeId, 10)
		}
		// The encoding in effect for the record's start timestamp, by the
		// schedule (not the bootstrap encoding: the cluster may have
		// moved since).
		enc, ts, staging, ok := n.statusRecordEra(ru.Key()[len(keys.StatusPrefix):])
		encoding := "unknown"
		if ok {
			encoding = enc.Name()
		}
		m.statusRequests.WithLabelValues(op, encoding, rangeLabel).Inc()
		if ok && op == "write" && i < len(resp.Responses) && resp.Responses[i].GetPlainPutUnlessExists().GetSucceeded() {
			if outcome := decisionOf(enc, ts, staging, ru.GetPlainPutUnlessExists().GetValue()); outcome != "" {
				m.decisions.WithLabelValues(outcome, "status_record").Inc()
			}
		}
	}
}

// decisionOf returns the outcome ("committed" or "aborted") a status-table
// record written at key (without keys.StatusPrefix) with value holds, read
// with enc, the encoding in effect for the record (statusRecordEra), or ""
// for a STAGING record or bytes enc does not decode.
func decisionOf(enc txnstatus.Encoding, ts uint64, staging bool, value []byte) string {
	if staging {
		return "" // a staging key (parallel commits): not a decision
	}
	_, aborted, err := enc.DecodeValue(ts, value)
	switch {
	case err != nil:
		return ""
	case aborted:
		return "aborted"
	}
	return "committed"
}

// rangeGauges computes the node's range gauges from its replicas when the
// registry is scraped (a read of each replica's published status: no lock
// of the Raft work is taken).
//
// Under-replicated and unavailable ranges are counted as their leader
// sees them, so that the sum over the nodes counts each range once: a
// follower is up if it takes the leader's appends (replica.Status
// .Replicating) and its node was heard from lately (liveness.go). A range
// with no leader has no such node; it is counted by its lowest live voter
// that knows no leader.
type rangeGauges struct{ n *Node }

var (
	rangesDesc = prometheus.NewDesc("canopy_ranges",
		"Ranges of which this node holds an initialized replica.", nil, nil)
	replicasDesc = prometheus.NewDesc("canopy_replicas",
		"Replicas on this node, initialized or not (an uninitialized replica waits for its first snapshot).", nil, nil)
	replicasUninitializedDesc = prometheus.NewDesc("canopy_replicas_uninitialized",
		"Replicas on this node waiting for their first snapshot.", nil, nil)
	leadersDesc = prometheus.NewDesc("canopy_replicas_leaders",
		"Replicas on this node that are their range's Raft leader.", nil, nil)
	leaseholdersDesc = prometheus.NewDesc("canopy_replicas_leaseholders",
		"Replicas on this node that are their range's leaseholder (the leader, once it applied an entry of its term).", nil, nil)
	quiescentDesc = prometheus.NewDesc("canopy_replicas_quiescent",
		"Replicas on this node that are quiescent (idle: no ticks, no heartbeats).", nil, nil)
	underReplicatedDesc = prometheus.NewDesc("canopy_ranges_underreplicated",
		"Ranges led by this node with fewer voters than the replication factor, or with a follower that does not take appends (not heard from lately, waiting for a snapshot, or being probed).", nil, nil)
	unavailableDesc = prometheus.NewDesc("canopy_ranges_unavailable",
		"Ranges that cannot commit: led by this node with fewer than a quorum of voters taking appends, or with no leader (counted by their lowest live voter).", nil, nil)
)

// Describe implements prometheus.Collector.
func (g *rangeGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{rangesDesc, replicasDesc, replicasUninitializedDesc, leadersDesc,
		leaseholdersDesc, quiescentDesc, underReplicatedDesc, unavailableDesc} {
		ch <- d
	}
}

// rangeCounts are the figures of rangeGauges.
type rangeCounts struct {
	ranges, replicas, uninitialized, leaders, leaseholders, quiescent int
	underReplicated, unavailable                                      int
}

// Collect implements prometheus.Collector.
func (g *rangeGauges) Collect(ch chan<- prometheus.Metric) {
	c := g.n.rangeCounts()
	for _, x := range []struct {
		d *prometheus.Desc
		v int
	}{{rangesDesc, c.ranges}, {replicasDesc, c.replicas}, {replicasUninitializedDesc, c.uninitialized},
		{leadersDesc, c.leaders}, {leaseholdersDesc, c.leaseholders}, {quiescentDesc, c.quiescent},
		{underReplicatedDesc, c.underReplicated}, {unavailableDesc, c.unavailable}} {
		ch <- prometheus.MustNewConstMetric(x.d, prometheus.GaugeValue, float64(x.v))
	}
}

// rangeCounts counts the node's replicas for rangeGauges.
func (n *Node) rangeCounts() rangeCounts {
	var c rangeCounts
	self := n.NodeID()
	rf := int(n.settings().GetReplicationFactor())
	if nodes := len(n.nodeList()); rf > nodes {
		rf = nodes // capped, as Bootstrap caps it
	}
	for _, rr := range n.replicaList() {
		c.replicas++
		d := rr.sm.Desc()
		if d == nil {
			c.uninitialized++
			continue
		}
		c.ranges++
		st := rr.r.Status()
		if st.Quiescent {
			c.quiescent++
		}
		if st.Leaseholder {
			c.leaseholders++
		}
		vs := voters(d)
		switch {
		case st.IsLeader:
			c.leaders++
			up := 0
			for _, v := range vs {
				// A quiescent leader's status is as of when it quiesced,
				// and a range quiesces with a follower on a dead node
				// (replica.maybeQuiesceLeader): liveness says whether
				// that follower is still there.
				if v == self || (slices.Contains(st.Replicating, v) && n.liveness.heardLately(v)) {
					up++
				}
			}
			if up < len(vs) || len(vs) < rf {
				c.underReplicated++
			}
			if up < len(vs)/2+1 {
				c.unavailable++
			}
		case st.Leader == 0:
			if n.lowestLiveVoter(vs) == self {
				c.unavailable++
			}
		}
	}
	return c
}

// lowestLiveVoter returns the lowest of vs that is this node or a peer
// heard from lately (0 if none).
func (n *Node) lowestLiveVoter(vs []uint64) uint64 {
	self := n.NodeID()
	var low uint64
	for _, v := range vs {
		if (v == self || n.liveness.heardLately(v)) && (low == 0 || v < low) {
			low = v
		}
	}
	return low
}

// hierGauges are the hierarchy protocols' metrics, read from the node's
// HierarchyStatus (built once per scrape) when the registry is scraped;
// all 0 in a cluster of another protocol. Counts of validators are those
// they made on this node, including inner validators this node ran
// before another took them over.
type hierGauges struct{ n *Node }

var (
	hierPartsDesc = prometheus.NewDesc("canopy_hierarchy_parts_total",
		"Parts taken by this node's leaf validator (hierarchy protocols).", nil, nil)
	hierRefusedDesc = prometheus.NewDesc("canopy_hierarchy_parts_refused_total",
		"Parts this node's leaf refused as overloaded (PendingMax): their transactions abort and retry.", nil, nil)
	hierDecisionsDesc = prometheus.NewDesc("canopy_hierarchy_decisions_total",
		"Transactions decided by validators on this node, by outcome (committed, aborted).", []string{"outcome"}, nil)
	hierSentDesc = prometheus.NewDesc("canopy_hierarchy_messages_sent_total",
		"Validator messages sent by validators on this node (votes, decisions, results, watermarks, raises).", nil, nil)
	hierResentDesc = prometheus.NewDesc("canopy_hierarchy_votes_resent_total",
		"Votes this node's leaf sent again after waiting ResendAfter for a decision.", nil, nil)
	hierDroppedDesc = prometheus.NewDesc("canopy_hierarchy_messages_dropped_total",
		"Validator messages lost at this node: an inbox or link queue full, a link down, a receiver not hosted here.", nil, nil)
	hierOverriddenDesc = prometheus.NewDesc("canopy_hierarchy_decisions_overridden_total",
		"Decisions the status table held otherwise than a validator on this node made them.", nil, nil)
	hierAgedDesc = prometheus.NewDesc("canopy_hierarchy_aged_aborts_total",
		"Transactions aborted by this node's validators for being older than HierarchyTxnAgeMax.", nil, nil)
	hierRecoveredDesc = prometheus.NewDesc("canopy_hierarchy_parts_recovered_total",
		"Part records this node's leaf read back when it started, by outcome: pending (voted for again) or ended (decided in the status table, or aborted there as too old).", []string{"outcome"}, nil)
	hierRecordsDroppedDesc = prometheus.NewDesc("canopy_hierarchy_part_records_dropped_total",
		"Part record writes and deletions not made (their queue full, or a failed batch): a record lost costs its part's recovery after a crash.", nil, nil)
	hierPendingDesc = prometheus.NewDesc("canopy_hierarchy_pending",
		"Parts this node's leaf holds undecided, plus transactions its inner validators hold.", nil, nil)
)

// Describe implements prometheus.Collector.
func (g *hierGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{hierPartsDesc, hierRefusedDesc, hierDecisionsDesc, hierSentDesc, hierResentDesc,
		hierDroppedDesc, hierOverriddenDesc, hierAgedDesc, hierRecoveredDesc, hierRecordsDroppedDesc, hierPendingDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *hierGauges) Collect(ch chan<- prometheus.Metric) {
	s := g.n.HierarchyStatus()
	var leaf, all hierarchy.Counts
	pending := 0
	for _, v := range s.Validators {
		all = all.Add(v.Counts)
		if v.Leaf {
			leaf = leaf.Add(v.Counts)
		}
		if v.Running {
			pending += v.Pending
		}
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(hierPartsDesc, int64(leaf.Parts))
	counter(hierRefusedDesc, int64(leaf.Refused))
	counter(hierDecisionsDesc, int64(all.Committed), "committed")
	counter(hierDecisionsDesc, int64(all.Decided-all.Committed), "aborted")
	counter(hierSentDesc, int64(all.VoteMessages+all.DecisionMessages+all.ResultMessages+all.WatermarkMessages+all.RaiseMessages))
	counter(hierResentDesc, int64(leaf.Resent))
	counter(hierDroppedDesc, s.Dropped)
	counter(hierOverriddenDesc, s.Overridden)
	counter(hierAgedDesc, s.AgedAborts)
	counter(hierRecoveredDesc, s.Recovered, "pending")
	counter(hierRecoveredDesc, s.RecoveredEnded, "ended")
	counter(hierRecordsDroppedDesc, s.RecordsDropped)
	ch <- prometheus.MustNewConstMetric(hierPendingDesc, prometheus.GaugeValue, float64(pending))
}
