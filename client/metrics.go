package client

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Prometheus metrics of a DB (docs/OPERATIONS.md, "Metrics and health"):
// the counters of Stats, read when the registry is scraped, plus
// transaction retries by reason. The server counts the rest of a
// transaction's story (status-table writes and lookups, intents resolved
// at the leaseholders).

// retryReasonLabels are the label values of canopy_client_txn_retries_total
// by RetryReason; index 0 (an unknown reason) is "other".
var retryReasonLabels = [...]string{
	0:                          "other",
	ReasonWriteTooOld:          "write_too_old",
	ReasonReadConflict:         "read_conflict",
	ReasonIntentPending:        "intent_pending",
	ReasonAborted:              "aborted",
	ReasonDeadlock:             "deadlock",
	ReasonPipelinedWriteFailed: "pipelined_write_failed",
}

// retryReasons counts retries by reason, indexed as retryReasonLabels.
type retryReasons [len(retryReasonLabels)]countingInt

// countRetry counts one retry of DB.Txn after an attempt that failed with
// err.
func (s *stats) countRetry(err error) {
	s.retries.add(1)
	var re *RetryableError
	i := 0
	if errors.As(err, &re) && re.Reason > 0 && int(re.Reason) < len(retryReasonLabels) {
		i = int(re.Reason)
	}
	s.retryReasons[i].add(1)
}

// RegisterMetrics registers the DB's counters on reg as Prometheus
// metrics named canopy_client_* (read from the DB when reg is scraped;
// they keep their last values after Close). It fails if reg has them
// already: register one DB per registry, or wrap reg with
// prometheus.WrapRegistererWith and a label that tells the DBs apart.
func (db *DB) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(&statsCollector{db: db})
}

type statsCollector struct{ db *DB }

func clientDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("canopy_client_"+name, help, labels, nil)
}

// clientCounters are the counters of Stats exported as they are.
var clientCounters = []struct {
	desc *prometheus.Desc
	get  func(s *Stats) int64
}{
	{clientDesc("txn_commits_total", "Transactions committed (read-only ones included)."), func(s *Stats) int64 { return s.Commits }},
	{clientDesc("txn_aborts_total", "Transaction attempts that ended aborted (rolled back, lost a conflict, or found aborted by another)."), func(s *Stats) int64 { return s.Aborts }},
	{clientDesc("txn_one_pc_commits_total", "Transactions committed by one-phase commit (one CommitOnePC request)."), func(s *Stats) int64 { return s.OnePCCommits }},
	{clientDesc("txn_parallel_commits_total", "Transactions acknowledged as implicitly committed (parallel commits)."), func(s *Stats) int64 { return s.ParallelCommits }},
	{clientDesc("ambiguous_total", "Operations that returned ErrAmbiguous."), func(s *Stats) int64 { return s.Ambiguous }},
	{clientDesc("ambiguous_resolved_total", "Commits whose outcome was first unknown and then looked up in the status table."), func(s *Stats) int64 { return s.AmbiguousResolved }},
	{clientDesc("aborted_others_total", "Transactions of others this client aborted because their heartbeat had expired."), func(s *Stats) int64 { return s.AbortedOthers }},
	{clientDesc("wounded_total", "Younger live transactions this client aborted rather than wait for their intents (wound-wait, Options.IntentWoundAfter)."), func(s *Stats) int64 { return s.Wounded }},
	{clientDesc("recovered_total", "STAGING transactions of others this client settled as a reader (parallel-commit recovery)."), func(s *Stats) int64 { return s.Recovered }},
	{clientDesc("intents_resolved_total", "ResolveIntent requests acknowledged."), func(s *Stats) int64 { return s.IntentsResolved }},
	{clientDesc("intent_resolutions_dropped_total", "Decided transactions whose asynchronous intent resolution was skipped (readers resolve those intents)."), func(s *Stats) int64 { return s.ResolveDropped }},
	{clientDesc("timestamp_rpcs_total", "Timestamp oracle RPCs (each serves a batch of callers)."), func(s *Stats) int64 { return s.TimestampRPCs }},
	{clientDesc("pipelined_writes_total", "Transactional writes sent with pipelining (answered once proposed)."), func(s *Stats) int64 { return s.PipelinedWrites }},
	{clientDesc("pipeline_stalls_total", "Reads and writes that first proved in-flight writes of their keys."), func(s *Stats) int64 { return s.PipelineStalls }},
	{clientDesc("pipelined_writes_failed_total", "Pipelined writes a proof found missing (each made its transaction retry)."), func(s *Stats) int64 { return s.PipelinedWritesFailed }},
}

var retriesDesc = clientDesc("txn_retries_total", "DB.Txn attempts after the first, by the reason the attempt before failed.", "reason")

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range clientCounters {
		ch <- m.desc
	}
	ch <- retriesDesc
}

// Collect implements prometheus.Collector.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.db.Stats()
	for _, m := range clientCounters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.get(&s)))
	}
	for i, l := range retryReasonLabels {
		ch <- prometheus.MustNewConstMetric(retriesDesc, prometheus.CounterValue, float64(c.db.stats.retryReasons[i].load()), l)
	}
}
