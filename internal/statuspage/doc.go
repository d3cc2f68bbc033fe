// Package statuspage is the status page every node serves on its HTTP
// address (`canopy start --http-addr`): a cluster overview (nodes,
// liveness, version, uptime, store size), the ranges (span, replicas,
// leaseholder, size, each follower's lag, under-replicated or
// unavailable), and live charts of the node's throughput, latency and
// transaction outcomes.
//
// Contract:
//
//   - Every file the browser loads is embedded in the binary (assets/):
//     plain HTML, CSS and JavaScript, charts drawn on a canvas by the
//     page's own code. Nothing is fetched from the internet.
//   - GET /api/status is internal/clusterstatus's report in its JSON form,
//     the document `canopy status -o json` prints, gathered through the
//     node's own client of the cluster (Config.Open), plus served_by. On
//     a node with certificates, a request without a client certificate
//     signed by the cluster's CA gets the report with every user key
//     (range boundaries inside the user keyspace) replaced by
//     clusterstatus.HiddenKey: the layout is for anyone who may reach the
//     port, the keys only for the cluster's users, as on the gRPC port.
//   - GET /api/metrics is a series of points, one per SampleInterval over
//     the last SampleHistory, computed from the node's own Prometheus
//     metrics (Config.Gatherer): requests and batches per second, batch
//     latency quantiles, transaction decisions and conflicts per second.
//     The series starts when the node starts, so a page opened late
//     shows the recent past at once.
//   - Nothing on the page changes the cluster.
package statuspage
