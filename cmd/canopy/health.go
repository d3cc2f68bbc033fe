package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/spf13/cobra"
)

// HealthBodyBytesMax bounds what `canopy health` reads of a node's answer.
const HealthBodyBytesMax = 64 << 10

func init() {
	var httpAddr string
	var live bool
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Ask one node whether it is ready (exit status 0) or not (7); for container health checks",
		Long: fmt.Sprintf(`Ask one node over HTTP whether it is ready: GET /health?ready=1 (initialized, a
member of the cluster, caught up), or with --live whether its process serves
(GET /health). Prints the node's answer; exit status 0 if healthy, 7 if the
node answered that it is not, 4 if it did not answer. With --certs-dir it asks
over HTTPS and checks the node's certificate against ca.crt (no client
certificate needed); with --insecure, over plain HTTP.

The node's HTTP address is --http-addr, by default the first --host's host
with its port plus %d (the default of start --http-addr). The binary needs no
shell or curl, so this is the health check of the container image:

  HEALTHCHECK CMD ["/canopy", "health", "--http-addr", "127.0.0.1:8080"]`, HTTPPortOffset),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := conn.check(); err != nil {
				return err
			}
			addr := httpAddr
			if addr == "" {
				var err error
				if addr, err = defaultHTTPAddr(conn.firstHost()); err != nil {
					return err
				}
			} else if err := checkHostPort("http-addr", addr, false, false); err != nil {
				return usageErrorf("%v", err)
			}
			if err := conn.checkSecurity(); err != nil { // conn.go
				return err
			}
			var caTLS *tls.Config
			if !conn.insecure {
				var err error
				if caTLS, err = security.LoadCATLS(conn.certsDir); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), conn.timeout)
			defer cancel()
			ok, body, err := checkHealth(ctx, addr, !live, caTLS)
			if err != nil {
				return err
			}
			fmt.Println(body)
			if !ok {
				return errDegraded
			}
			return nil
		},
	}
	addConnFlags(cmd)
	cmd.Flags().StringVar(&httpAddr, "http-addr", "", fmt.Sprintf("the node's HTTP address (default: --host's host, port + %d)", HTTPPortOffset))
	cmd.Flags().BoolVar(&live, "live", false, "ask only whether the node's process serves (GET /health), not whether it is ready")
	rootCmd.AddCommand(cmd)
}

// defaultHTTPAddr is the HTTP address a node at grpcAddr serves by default.
func defaultHTTPAddr(grpcAddr string) (string, error) {
	host, port, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "", usageErrorf("--host %q: %v", grpcAddr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p+HTTPPortOffset > 65535 {
		return "", usageErrorf("--host %q: no default HTTP port for it; give --http-addr", grpcAddr)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+HTTPPortOffset)), nil
}

// checkHealth asks the node at addr for its health and returns whether it
// is healthy and its answer, on one line: over HTTPS verified by caTLS, or
// plain HTTP if caTLS is nil. A node that does not answer is
// client.ErrUnavailable.
func checkHealth(ctx context.Context, addr string, ready bool, caTLS *tls.Config) (bool, string, error) {
	scheme, hc := "http", http.DefaultClient
	if caTLS != nil {
		scheme, hc = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: caTLS}}
	}
	url := scheme + "://" + addr + "/health"
	if ready {
		url += "?ready=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, "", usageErrorf("--http-addr %q: %v", addr, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, "", fmt.Errorf("%w: node at %s did not answer: %v", client.ErrUnavailable, addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, HealthBodyBytesMax))
	body := strings.Join(strings.Fields(string(b)), " ")
	if body == "" {
		body = resp.Status
	}
	return resp.StatusCode == http.StatusOK, body, nil
}
