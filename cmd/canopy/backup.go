package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/backup"
	"github.com/spf13/cobra"
)

// ProgressInterval is how often backup and restore print their progress
// line (on standard error).
const ProgressInterval = time.Second

func init() {
	var at string
	bk := &cobra.Command{
		Use:   "backup DIR",
		Short: "Write a consistent copy of every user key as of a timestamp into a new directory",
		Long: `Write every user key's value as of --at (default: now) into DIR, which must
not exist or be empty: data files in key order and a MANIFEST with their
checksums, written last. Intents are resolved as any reader at --at resolves
them, so the copy holds committed values only. The backup must finish within
the cluster's GC TTL (10 minutes by default) after --at. See
docs/OPERATIONS.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLongDB(cmd, func(ctx context.Context, db *client.DB) error {
				ts, err := parseTs(ctx, db, "at", at)
				if err != nil {
					return err
				}
				now, err := db.Timestamp(ctx)
				if err != nil {
					return err
				}
				if ts > now {
					return fmt.Errorf("--at %d is above the oracle's latest timestamp %d: a backup reads at a timestamp already handed out", ts, now)
				}
				p := newProgressLine("backup")
				m, err := backup.Backup(ctx, db, args[0], ts, backup.Options{
					ClusterID: db.Settings().GetClusterId(), StatusEncoding: db.Settings().GetStatusEncoding(),
					Progress: p.update,
				})
				p.end()
				if err != nil {
					return err
				}
				fmt.Printf("backup of %d keys (%s) as of %d (%s) in %s: %d data files and %s\n",
					m.Keys, byteSize(m.Bytes), m.AtTs, m.AtTime, args[0], len(m.Files), backup.ManifestName)
				return nil
			})
		},
	}
	addConnFlags(bk) // conn.go
	bk.Flags().StringVar(&at, "at", "now", "timestamp to back up at (a timestamp, now, or -DURATION)")
	rootCmd.AddCommand(bk)

	rs := &cobra.Command{
		Use:   "restore DIR",
		Short: "Load a backup into a new, empty cluster",
		Long: `Check the backup in DIR (its MANIFEST and every data file's size and
checksum) and load it into the cluster, which must hold no user key. A damaged
backup is refused before anything is written. See docs/OPERATIONS.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLongDB(cmd, func(ctx context.Context, db *client.DB) error {
				p := newProgressLine("restore")
				m, err := backup.Restore(ctx, db, args[0], backup.Options{Progress: p.update})
				p.end()
				if err != nil {
					return err
				}
				fmt.Printf("restored %d keys (%s) from %s, a backup of cluster %s as of %d (%s)\n",
					m.Keys, byteSize(m.Bytes), args[0], m.ClusterID, m.AtTs, m.AtTime)
				return nil
			})
		},
	}
	addConnFlags(rs)
	rootCmd.AddCommand(rs)
}

// withLongDB runs f with a client, for commands that may run long: the
// default --timeout (DefaultTimeout, meant for one request) does not apply,
// only a --timeout given on the command line or in CANOPY_TIMEOUT; SIGINT
// and SIGTERM cancel it.
func withLongDB(cmd *cobra.Command, f func(ctx context.Context, db *client.DB) error) error {
	if err := conn.check(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd.Flags().Changed("timeout") || os.Getenv(connEnv["timeout"]) != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, conn.timeout)
		defer cancel()
	}
	db, err := openDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	return f(ctx, db)
}

// progressLine prints "what: N keys, SIZE, F files, at key K" on standard
// error at most once per ProgressInterval, and at the end if the last
// line printed is not the final count.
type progressLine struct {
	what string
	mu   struct {
		sync.Mutex
		last  time.Time
		p     backup.Progress
		shown *backup.Progress // the last line printed
	}
}

func newProgressLine(what string) *progressLine { return &progressLine{what: what} }

func (l *progressLine) update(p backup.Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.p = p
	if now := time.Now(); now.Sub(l.mu.last) >= ProgressInterval {
		l.mu.last = now
		l.printLocked()
	}
}

func (l *progressLine) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.mu.shown; s != nil && (s.Keys != l.mu.p.Keys || s.Bytes != l.mu.p.Bytes || s.Files != l.mu.p.Files) {
		l.printLocked()
	}
}

func (l *progressLine) printLocked() {
	p := l.mu.p
	l.mu.shown = &p
	fmt.Fprintf(os.Stderr, "%s: %d keys, %s, %d files", l.what, p.Keys, byteSize(p.Bytes), p.Files)
	if len(p.LastKey) > 0 {
		fmt.Fprintf(os.Stderr, ", at key %q", truncateKey(p.LastKey))
	}
	fmt.Fprintln(os.Stderr)
}

func truncateKey(k []byte) []byte {
	if len(k) > 40 {
		return append(k[:40:40], "..."...)
	}
	return k
}

// byteSize prints a byte count in binary units.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
