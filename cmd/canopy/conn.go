package main

import (
	"context"
	"crypto/tls"
	"os"
	"strings"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Connection flags: every command that talks to a running cluster takes
// the same ones (addConnFlags), each also read from its environment
// variable when the flag is not given (connEnv), as etcdctl reads
// ETCDCTL_ENDPOINTS and cockroach COCKROACH_HOST. Flags for the
// connection's security belong here too, so that every client command
// gets them at once.
type connFlags struct {
	// hosts is a comma-separated list of node addresses (--host).
	hosts string
	// timeout bounds a whole command (--timeout).
	timeout time.Duration
	// dialTimeout bounds the first contact with the cluster
	// (client.Options.DialTimeout; --dial-timeout).
	dialTimeout time.Duration
	// The connection's security (addSecurityFlags): certsDir is the
	// certificates directory (--certs-dir), insecure asks for no TLS
	// (--insecure), user picks the client certificate (--user).
	certsDir string
	insecure bool
	user     string
}

var conn connFlags

// Defaults and limits of the connection flags.
const (
	DefaultHost        = "127.0.0.1:26257"
	DefaultTimeout     = 60 * time.Second
	DefaultDialTimeout = 2 * time.Second
	// TimeoutMax bounds --timeout and DialTimeoutMax --dial-timeout.
	TimeoutMax     = 24 * time.Hour
	DialTimeoutMax = 10 * time.Minute
)

// connEnv maps each connection flag to the environment variable read when
// the flag is not on the command line.
var connEnv = map[string]string{
	"host":         "CANOPY_HOST",
	"timeout":      "CANOPY_TIMEOUT",
	"dial-timeout": "CANOPY_DIAL_TIMEOUT",
	"certs-dir":    "CANOPY_CERTS_DIR",
	"insecure":     "CANOPY_INSECURE",
	"user":         "CANOPY_USER",
}

// securityModeFlags are the two flags of which exactly one is needed: one
// given on the command line keeps the other's environment variable out
// (a command line asking for --insecure wins over CANOPY_CERTS_DIR).
var securityModeFlags = [2]string{"certs-dir", "insecure"}

// addConnFlags registers the connection flags on cmd (persistent, so that
// a parent such as `kv` gives them to its subcommands).
func addConnFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&conn.hosts, "host", DefaultHost, "comma-separated node addresses (env CANOPY_HOST)")
	f.DurationVar(&conn.timeout, "timeout", DefaultTimeout, "give up on the command after this long (env CANOPY_TIMEOUT)")
	f.DurationVar(&conn.dialTimeout, "dial-timeout", DefaultDialTimeout,
		"how long to wait for any of the --host nodes to answer before failing (env CANOPY_DIAL_TIMEOUT)")
	addSecurityFlags(cmd, true)
}

// addSecurityFlags registers --certs-dir and --insecure on cmd
// (persistent), and --user if client (a command that presents a client
// certificate; a node presents its node certificate).
func addSecurityFlags(cmd *cobra.Command, client bool) {
	f := cmd.PersistentFlags()
	f.StringVar(&conn.certsDir, "certs-dir", "",
		"directory of the cluster's certificates: ca.crt, and client.USER.crt/key (commands) or node.crt/key (start); see canopy cert (env CANOPY_CERTS_DIR)")
	f.BoolVar(&conn.insecure, "insecure", false,
		"no TLS and no authentication: a node serves anyone who reaches it; a command talks to such a node (env CANOPY_INSECURE)")
	if client {
		f.StringVar(&conn.user, "user", security.AdminUserDefault, "the user whose client certificate (client.USER.crt in --certs-dir) the command presents (env CANOPY_USER)")
	}
}

// checkSecurity refuses both or neither of --certs-dir and --insecure.
func (c connFlags) checkSecurity() error {
	switch {
	case c.certsDir != "" && c.insecure:
		return usageErrorf("--certs-dir %q and --insecure: give one of them (from the command line or CANOPY_CERTS_DIR / CANOPY_INSECURE)", c.certsDir)
	case c.certsDir == "" && !c.insecure:
		return usageErrorf("no --certs-dir and no --insecure: give --certs-dir DIR (certificates made with canopy cert), or --insecure for a cluster started with --insecure")
	}
	return nil
}

// clientTLS returns the TLS configuration of a command that connects to a
// node: nil with --insecure, else ca.crt and the --user's client
// certificate from --certs-dir.
func (c connFlags) clientTLS() (*tls.Config, error) {
	if err := c.checkSecurity(); err != nil {
		return nil, err
	}
	if c.insecure {
		return nil, nil
	}
	return security.LoadClientTLS(c.certsDir, c.user)
}

// clientCredentials are clientTLS's gRPC transport credentials.
func (c connFlags) clientCredentials() (credentials.TransportCredentials, error) {
	cfg, err := c.clientTLS()
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

// applyEnv sets every connection flag of cmd that is not on the command
// line from its environment variable. A bad value is a usage error naming
// the variable.
func applyEnv(flags *pflag.FlagSet) error {
	var err error
	modeOnCommandLine := false
	for _, name := range securityModeFlags {
		if f := flags.Lookup(name); f != nil && f.Changed {
			modeOnCommandLine = true
		}
	}
	flags.VisitAll(func(f *pflag.Flag) {
		env, ok := connEnv[f.Name]
		if !ok || f.Changed || err != nil {
			return
		}
		if modeOnCommandLine && (f.Name == securityModeFlags[0] || f.Name == securityModeFlags[1]) {
			return
		}
		v, set := os.LookupEnv(env)
		if !set {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = usageErrorf("%s=%q: %v", env, v, e)
		}
	})
	return err
}

// check validates the connection flags.
func (c connFlags) check() error {
	if len(splitHosts(c.hosts)) == 0 {
		return usageErrorf("--host is empty: give at least one node address")
	}
	for _, h := range splitHosts(c.hosts) {
		if err := checkHostPort("host", h, false, false); err != nil {
			return usageErrorf("%v", err)
		}
	}
	if c.timeout <= 0 || c.timeout > TimeoutMax {
		return usageErrorf("--timeout %v: want a duration in (0, %v]", c.timeout, TimeoutMax)
	}
	if c.dialTimeout <= 0 || c.dialTimeout > DialTimeoutMax {
		return usageErrorf("--dial-timeout %v: want a duration in (0, %v]", c.dialTimeout, DialTimeoutMax)
	}
	return nil
}

// firstHost is the address of commands that talk to one node.
func (c connFlags) firstHost() string { return splitHosts(c.hosts)[0] }

// clientOptions are the client options the connection flags imply.
func (c connFlags) clientOptions() (client.Options, error) {
	tlsConfig, err := c.clientTLS()
	if err != nil {
		return client.Options{}, err
	}
	return client.Options{DialTimeout: c.dialTimeout, TLS: tlsConfig}, nil
}

func openDB(ctx context.Context) (*client.DB, error) {
	if err := conn.check(); err != nil {
		return nil, err
	}
	o, err := conn.clientOptions()
	if err != nil {
		return nil, err
	}
	return client.Open(ctx, splitHosts(conn.hosts), client.WithOptions(o))
}

// withDB runs f with a DB connected to --host, within --timeout.
func withDB(f func(ctx context.Context, db *client.DB) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := conn.check(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), conn.timeout)
		defer cancel()
		db, err := openDB(ctx)
		if err != nil {
			return err
		}
		defer db.Close()
		return f(ctx, db)
	}
}

func splitHosts(s string) []string {
	var out []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}
