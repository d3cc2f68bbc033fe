package statuspage

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/clusterstatus"
	"github.com/prometheus/client_golang/prometheus"
)

//go:embed assets
var assets embed.FS

// Limits of the page's server side.
const (
	// SampleInterval is the time between two points of /api/metrics.
	SampleInterval = 2 * time.Second
	// SampleHistory is how far back /api/metrics goes.
	SampleHistory = 10 * time.Minute
	// StatusTimeout bounds the gathering of one /api/status report (a
	// node that does not answer is reported unreachable within the
	// client's RPC timeout).
	StatusTimeout = 15 * time.Second
	// StatusReuse: a report younger than this answers the next request
	// too, so that many open pages cost the cluster one report a second.
	StatusReuse = time.Second
)

// Config configures a Page.
type Config struct {
	// Open returns a client of the cluster (called until it succeeds;
	// the Page closes the client in Close).
	Open func(ctx context.Context) (*client.DB, error)
	// Gatherer holds the metrics the charts are computed from (the
	// node's canopy_kv_* and canopy_txn_decisions_total).
	Gatherer prometheus.Gatherer
	// NodeID returns the serving node's ID (0 before it has one).
	NodeID func() uint64
	// Secure: the node runs with certificates, so user keys are shown only
	// to requests with a verified client certificate.
	Secure bool
	Logger *slog.Logger
}

// Page is the status page of one node.
type Page struct {
	cfg     Config
	sampler *sampler

	mu struct {
		sync.Mutex
		db     *client.DB
		closed bool
		// last report and when it was gathered.
		last   *clusterstatus.Report
		lastAt time.Time
	}
	// gather serializes the gathering of reports.
	gather sync.Mutex
}

// New returns the page of cfg. Run its sampler with Run.
func New(cfg Config) *Page {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Page{cfg: cfg, sampler: newSampler(cfg.Gatherer, int(SampleHistory/SampleInterval)+1)}
}

// Register adds the page's routes to mux: / (the page), /assets/ (its
// files), /api/status and /api/metrics.
func (p *Page) Register(mux *http.ServeMux) {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory exists: a build error
	}
	files := http.FileServerFS(sub)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", noCache(files)))
	mux.HandleFunc("GET /api/status", p.serveStatus)
	mux.HandleFunc("GET /api/metrics", p.serveMetrics)
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// Run samples the metrics every SampleInterval until stop is closed.
func (p *Page) Run(stop <-chan struct{}) {
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	p.sampler.sample(time.Now())
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			p.sampler.sample(now)
		}
	}
}

// Close closes the page's client of the cluster.
func (p *Page) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.closed = true
	if p.mu.db != nil {
		p.mu.db.Close()
		p.mu.db = nil
	}
}

// statusResponse is the body of /api/status.
type statusResponse struct {
	*clusterstatus.JSON
	ServedBy uint64 `json:"served_by"`
	// Error: why there is no report (the node is not initialized, the
	// cluster does not answer).
	Error string `json:"error,omitempty"`
}

func (p *Page) serveStatus(w http.ResponseWriter, r *http.Request) {
	resp := statusResponse{ServedBy: p.cfg.NodeID()}
	code := http.StatusOK
	rep, err := p.report(r.Context())
	if err != nil {
		resp.Error, code = errText(err), http.StatusServiceUnavailable
	} else {
		j := rep.JSON(errText)
		if p.cfg.Secure && !verifiedClient(r.TLS) {
			j.Redact()
		}
		resp.JSON = &j
	}
	writeJSON(w, code, resp)
}

// verifiedClient: the request came with a client certificate the
// cluster's CA signed (the HTTPS server verified it).
func verifiedClient(cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.VerifiedChains) > 0
}

// report returns a report at most StatusReuse old.
func (p *Page) report(ctx context.Context) (*clusterstatus.Report, error) {
	p.gather.Lock()
	defer p.gather.Unlock()
	p.mu.Lock()
	if p.mu.last != nil && time.Since(p.mu.lastAt) < StatusReuse {
		rep := p.mu.last
		p.mu.Unlock()
		return rep, nil
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, StatusTimeout)
	defer cancel()
	db, err := p.db(ctx)
	if err != nil {
		return nil, err
	}
	rep, err := clusterstatus.Gather(ctx, db)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.mu.last, p.mu.lastAt = rep, time.Now()
	p.mu.Unlock()
	return rep, nil
}

// db returns the page's client, opening it if needed.
func (p *Page) db(ctx context.Context) (*client.DB, error) {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil, errors.New("the node is stopping")
	}
	if db := p.mu.db; db != nil {
		p.mu.Unlock()
		return db, nil
	}
	p.mu.Unlock()
	db, err := p.cfg.Open(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		db.Close()
		return nil, errors.New("the node is stopping")
	}
	p.mu.db = db
	return db, nil
}

// errText renders err without gRPC's framing.
func errText(err error) string { return clusterstatus.ErrorText(err) }

// metricsResponse is the body of /api/metrics.
type metricsResponse struct {
	NodeID          uint64  `json:"node_id"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Points          []point `json:"points"`
}

func (p *Page) serveMetrics(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, metricsResponse{NodeID: p.cfg.NodeID(), IntervalSeconds: SampleInterval.Seconds(),
		Points: p.sampler.points()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
