package kvserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/statuspage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The node's HTTP server (Config.HTTPAddr): the status page at /
// (internal/statuspage), Prometheus metrics at /metrics and health checks
// at /health (health.go). Nothing on it changes the node. With
// Config.Certs it serves HTTPS with the node certificate and verifies a
// client certificate if one is given, without requiring one: only the
// status page's user keys need it (statuspage's doc).

// Limits of the HTTP server.
const (
	// HTTPReadHeaderTimeout bounds the wait for a request's headers (a
	// slow client holds a connection no longer).
	HTTPReadHeaderTimeout = 10 * time.Second
	// HTTPShutdownMax bounds Stop's wait for requests in flight.
	HTTPShutdownMax = 5 * time.Second
)

// ops is the node's operational surface: metrics, health and the HTTP
// server that serves them.
type ops struct {
	metrics *metrics
	health  *healthService
	// httpSrv and httpLis are nil without Config.HTTPAddr.
	httpSrv *http.Server
	httpLis net.Listener
	// page is the status page (nil without an HTTP server).
	page *statuspage.Page
}

// initOps makes the node's metrics and health service. Config.Metrics is
// set (ensureDefaults).
func (n *Node) initOps() error {
	m, err := newMetrics(n, n.cfg.Metrics)
	if err != nil {
		return err
	}
	n.ops.metrics = m
	n.ops.health = &healthService{Server: health.NewServer(), n: n}
	for _, s := range healthServices {
		n.ops.health.SetServingStatus(s, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	return nil
}

// registerOps registers the health service on the gRPC server and gives
// every gRPC method a zero count, so that /metrics lists each one before
// it is first called.
func (n *Node) registerOps() {
	healthpb.RegisterHealthServer(n.srv, n.ops.health)
	n.ops.metrics.grpc.InitializeMetrics(n.srv)
}

// startOps starts the HTTP server, if configured, and the health updates.
func (n *Node) startOps() error {
	n.wg.Add(1)
	go n.runEvery(HealthUpdateInterval, n.updateHealth)
	n.updateHealth()
	lis := n.cfg.HTTPListener
	if lis == nil {
		if n.cfg.HTTPAddr == "" {
			return nil
		}
		var err error
		if lis, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
			return fmt.Errorf("kvserver: listen for HTTP on %s: %w", n.cfg.HTTPAddr, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.cfg.Metrics, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
		// Counts scrape errors in promhttp_metric_handler_errors_total.
		Registry: n.cfg.Metrics,
	}))
	mux.HandleFunc("GET /health", n.serveHealth)
	n.ops.page = statuspage.New(statuspage.Config{
		Open:     n.openSelfClient,
		Gatherer: n.ops.metrics.charts,
		NodeID:   n.NodeID,
		Secure:   n.cfg.Certs != nil,
		Logger:   n.log,
	})
	n.ops.page.Register(mux)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.ops.page.Run(n.stopc)
	}()
	if n.cfg.FaultInjection {
		n.registerFaultHandlers(mux) // faultinject.go
	}
	n.ops.httpLis = lis
	scheme := "http"
	if n.cfg.Certs != nil {
		// HTTPS with the node certificate; no client certificate asked
		// (security.NodeCerts.HTTPTLS): health checkers and scrapers
		// verify the node against ca.crt, or skip verification.
		lis = tls.NewListener(lis, n.cfg.Certs.HTTPTLS())
		scheme = "https"
	}
	n.ops.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: HTTPReadHeaderTimeout,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.ops.httpSrv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server", "addr", lis.Addr().String(), "err", err)
		}
	}()
	n.log.Info("serving HTTP (status page, metrics, health)", "addr", lis.Addr().String(), "scheme", scheme)
	return nil
}

// openSelfClient opens the status page's client of the cluster: through
// this node's own gRPC address, with the node certificate (a node may call
// every RPC) or without TLS on an insecure node.
func (n *Node) openSelfClient(ctx context.Context) (*client.DB, error) {
	opts := client.Options{Logger: n.log.With("component", "status page")}
	if n.cfg.Certs != nil {
		opts.TLS = n.cfg.Certs.PeerTLS()
	}
	return client.Open(ctx, []string{n.Addr()}, client.WithOptions(opts))
}

// stopOps stops the HTTP server, waiting at most HTTPShutdownMax for
// requests in flight, before the node stops its ranges and closes its
// store (so that no scrape reads a closed engine), and reports NOT_SERVING
// to gRPC health watchers.
func (n *Node) stopOps() {
	if n.ops.health != nil {
		n.ops.health.Shutdown()
	}
	if n.ops.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), HTTPShutdownMax)
		defer cancel()
		if err := n.ops.httpSrv.Shutdown(ctx); err != nil {
			_ = n.ops.httpSrv.Close()
		}
	}
	if n.ops.page != nil {
		n.ops.page.Close()
	}
}

// unregisterOps removes the node's metrics from its registry (Stop, once
// nothing serves them).
func (n *Node) unregisterOps() {
	if n.ops.metrics != nil {
		n.ops.metrics.unregister()
	}
}

// HTTPAddr returns the address the node serves HTTP on ("" if none).
func (n *Node) HTTPAddr() string {
	if n.ops.httpLis == nil {
		return ""
	}
	return n.ops.httpLis.Addr().String()
}

// Metrics returns the registry the node's metrics are registered on
// (Config.Metrics, or the node's own).
func (n *Node) Metrics() *prometheus.Registry { return n.cfg.Metrics }

// Ready returns "" when the node is ready (see health.go), else why not.
func (n *Node) Ready() string { return n.notReadyReason() }

// healthResponse is the one-line JSON body of /health.
type healthResponse struct {
	Status string `json:"status"` // "live", "ready" or "not ready"
	NodeID uint64 `json:"node_id"`
	Reason string `json:"reason,omitempty"`
}

// serveHealth answers GET /health: 200 while the process serves; with
// ready=1 (or true), 200 only when the node is ready, else 503 with the
// reason.
func (n *Node) serveHealth(w http.ResponseWriter, r *http.Request) {
	resp, code := healthResponse{Status: "live", NodeID: n.NodeID()}, http.StatusOK
	switch r.URL.Query().Get("ready") {
	case "", "0", "false":
	default:
		if reason := n.notReadyReason(); reason != "" {
			resp.Status, resp.Reason, code = "not ready", reason, http.StatusServiceUnavailable
		} else {
			resp.Status = "ready"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(resp) // one line, newline-terminated
}
