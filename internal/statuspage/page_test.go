package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
)

// TestPageServesEmbeddedFiles checks that the page and its files come
// from the binary, refer to nothing outside the node, and that
// /api/status answers 503 with the reason when the cluster cannot be
// asked (here: a node not initialized), while /api/metrics still answers.
func TestPageServesEmbeddedFiles(t *testing.T) {
	p := New(Config{
		Open: func(context.Context) (*client.DB, error) {
			return nil, errors.New("not initialized: run canopy init")
		},
		NodeID: func() uint64 { return 7 },
	})
	defer p.Close()
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string) (int, string, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	for _, f := range []struct{ path, ctype, holds string }{
		{"/", "text/html", `<script src="/assets/app.js">`},
		{"/assets/app.js", "text/javascript", "/api/status"},
		{"/assets/style.css", "text/css", "table"},
	} {
		code, ctype, body := get(f.path)
		if code != http.StatusOK || !strings.HasPrefix(ctype, f.ctype) || !strings.Contains(body, f.holds) {
			t.Fatalf("GET %s: %d %s, body holds %q: %v", f.path, code, ctype, f.holds, strings.Contains(body, f.holds))
		}
		for _, outside := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(body, outside) {
				t.Fatalf("GET %s refers to %q: the page must load nothing from outside the node", f.path, outside)
			}
		}
	}
	if code, _, _ := get("/nothing"); code != http.StatusNotFound {
		t.Fatalf("GET /nothing: %d, want 404", code)
	}

	code, _, body := get("/api/status")
	var st struct {
		ServedBy uint64 `json:"served_by"`
		Error    string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusServiceUnavailable ||
		st.ServedBy != 7 || !strings.Contains(st.Error, "canopy init") {
		t.Fatalf("GET /api/status: %d %s (%v); want 503 naming canopy init, served_by 7", code, body, err)
	}
	code, _, body = get("/api/metrics")
	if code != http.StatusOK || !strings.Contains(body, `"node_id":7`) || !strings.Contains(body, `"points":[]`) {
		t.Fatalf("GET /api/metrics: %d %s", code, body)
	}
}
