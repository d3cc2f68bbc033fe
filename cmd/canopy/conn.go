package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
}

// addConnFlags registers the connection flags on cmd (persistent, so that
// a parent such as `kv` gives them to its subcommands).
func addConnFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&conn.hosts, "host", DefaultHost, "comma-separated node addresses (env CANOPY_HOST)")
	f.DurationVar(&conn.timeout, "timeout", DefaultTimeout, "give up on the command after this long (env CANOPY_TIMEOUT)")
	f.DurationVar(&conn.dialTimeout, "dial-timeout", DefaultDialTimeout,
		"how long to wait for any of the --host nodes to answer before failing (env CANOPY_DIAL_TIMEOUT)")
}

// applyEnv sets every connection flag of cmd that is not on the command
// line from its environment variable. A bad value is a usage error naming
// the variable.
func applyEnv(flags *pflag.FlagSet) error {
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		env, ok := connEnv[f.Name]
		if !ok || f.Changed || err != nil {
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
func (c connFlags) clientOptions() client.Options {
	return client.Options{DialTimeout: c.dialTimeout}
}

func openDB(ctx context.Context) (*client.DB, error) {
	if err := conn.check(); err != nil {
		return nil, err
	}
	return client.Open(ctx, splitHosts(conn.hosts), client.WithOptions(conn.clientOptions()))
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
