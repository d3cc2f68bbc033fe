package main

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Logging flags, on every command: where the log goes, in which format,
// from which level. A node's log is its record of events (init, joins,
// leases and leadership, snapshots, splits, refusals); client commands log
// warnings only.
var logFlags struct {
	level  string
	format string
	file   string
}

// logger is the process's logger, set up by setupLogging before any
// command runs (and the slog default).
var logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

// logFile is the open --log-file, if any.
var logFile *os.File

func init() {
	f := rootCmd.PersistentFlags()
	f.StringVar(&logFlags.level, "log-level", "info", "least severe log lines written: debug, info, warn or error")
	f.StringVar(&logFlags.format, "log-format", "text", "log line format: text (key=value) or json (one object a line)")
	f.StringVar(&logFlags.file, "log-file", "", "append log lines to this file instead of standard error")
}

// newLogHandler returns the handler the logging flags describe, writing to w.
func newLogHandler(w io.Writer, level, format string) (slog.Handler, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", level)
	}
	o := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.NewTextHandler(w, o), nil
	case "json":
		return slog.NewJSONHandler(w, o), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", format)
}

func setupLogging(*cobra.Command) error {
	var w io.Writer = os.Stderr
	if logFlags.file != "" {
		f, err := os.OpenFile(logFlags.file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return usageErrorf("--log-file: %v", err)
		}
		logFile, w = f, f
	}
	h, err := newLogHandler(w, logFlags.level, logFlags.format)
	if err != nil {
		return err
	}
	logger = slog.New(h)
	slog.SetDefault(logger)
	return nil
}
