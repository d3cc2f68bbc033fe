package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/clusterstatus"
	"github.com/spf13/cobra"
)

// Exit statuses. Scripts tell outcomes apart by them; `canopy --help`
// lists them (exitCodesHelp), and an outcome keeps its number for good.
const (
	ExitOK = 0
	// ExitError: a failure none of the classes below covers (an internal
	// error, a damaged store, a file that cannot be read).
	ExitError = 1
	// ExitInvalidArgument: a bad flag, argument or environment variable, or a
	// request the cluster refuses as invalid (a key or value over its limit).
	// Running it again unchanged fails the same way.
	ExitInvalidArgument = 2
	// ExitNotFound: the key does not exist (kv get).
	ExitNotFound = 3
	// ExitUnavailable: no node answered, or the cluster could not serve the
	// request before --timeout. Nothing was written: safe to run again.
	ExitUnavailable = 4
	// ExitAmbiguous: a write may or may not have taken effect; read before
	// writing again.
	ExitAmbiguous = 5
	// ExitRetryable: a transaction lost conflicts with others on every
	// attempt and gave up; nothing was written. Running it again may succeed.
	ExitRetryable = 6
	// ExitDegraded: `canopy status` or `canopy health` found the cluster or
	// node unwell (a node unreachable, a range under-replicated, a node not
	// ready).
	ExitDegraded = 7
	// ExitPermission: a node refused the command's credentials: no client
	// certificate, or a --user who may not do this (administration needs
	// the admin user). Nothing was done.
	ExitPermission = 8
	// ExitInterrupted: the command was interrupted (SIGINT, SIGTERM) and
	// cleaned up: 128 + SIGINT, as shells report it.
	ExitInterrupted = 130
)

const exitCodesHelp = `Exit status:
  0  success
  1  error not listed below (internal error, damaged store, unreadable file)
  2  invalid argument: bad flag, argument or environment variable, or a request
     the cluster refuses (a key or value over its limit); retrying cannot help
  3  not found (kv get of a missing key)
  4  unavailable: no node answered or the cluster could not serve the request
     within --timeout; nothing was written, safe to retry
  5  ambiguous: a write may or may not have taken effect; read before retrying
  6  retryable conflict: the transaction gave up after its attempts; nothing was
     written, running it again may succeed
  7  degraded: status found a node unreachable or a range under-replicated;
     health found the node not ready
  8  permission denied: the node refused the command's certificate or --user
     (administration needs the admin user, root by default); nothing was done
  130 interrupted (Ctrl-C) after cleaning up
`

// usageError is a mistake in how the command was called: exit status
// ExitInvalidArgument.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errNotFound: kv get of a missing key.
var errNotFound = errors.New("not found")

// errInterrupted: the command stopped at SIGINT or SIGTERM and cleaned up.
var errInterrupted = errors.New("interrupted")

// errDegraded: status or health found something unwell (already printed).
var errDegraded = errors.New("degraded")

// exitCode maps an error returned by a command to its exit status.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue), errors.Is(err, client.ErrInvalidArgument):
		return ExitInvalidArgument
	case errors.Is(err, errNotFound):
		return ExitNotFound
	case errors.Is(err, errDegraded):
		return ExitDegraded
	case errors.Is(err, errInterrupted):
		return ExitInterrupted
	case errors.Is(err, client.ErrPermission):
		return ExitPermission
	case errors.Is(err, client.ErrAmbiguous):
		return ExitAmbiguous
	case errors.Is(err, client.ErrRetryable):
		return ExitRetryable
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return ExitUnavailable
	}
	return ExitError
}

// errorLine renders err as one line without gRPC framing
// (clusterstatus.ErrorText): users see "dial tcp 127.0.0.1:1: connect:
// connection refused", not the transport's framing.
func errorLine(err error) string {
	s := clusterstatus.ErrorText(err)
	if errors.Is(err, context.DeadlineExceeded) && !strings.Contains(s, "--timeout") {
		s += " (the command's --timeout passed)"
	}
	return s
}

// reportError prints a failed command's usage line and error to w and
// returns its exit status. A degraded status prints nothing more: the
// command said what is wrong.
func reportError(w io.Writer, cmd *cobra.Command, err error) int {
	code := exitCode(err)
	switch code {
	case ExitDegraded:
		return code
	case ExitInterrupted:
		fmt.Fprintln(w, "interrupted")
		return code
	}
	// The usage line comes first and the error last, where the eye lands
	// and where scripts (and the damaged-store tests) read it.
	if cmd != nil {
		fmt.Fprintf(w, "usage: %s (canopy %s--help for more)\n", cmd.UseLine(), commandPathArgs(cmd))
	}
	fmt.Fprintln(w, "error:", errorLine(err))
	return code
}

func commandPathArgs(cmd *cobra.Command) string {
	p := strings.TrimPrefix(cmd.CommandPath(), "canopy")
	p = strings.TrimSpace(p)
	if p == "" {
		return ""
	}
	return p + " "
}

// wrapArgs makes the argument checks of cmd and its subcommands return
// usage errors.
func wrapArgs(cmd *cobra.Command) {
	if a := cmd.Args; a != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := a(c, args); err != nil {
				return &usageError{msg: err.Error()}
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		wrapArgs(c)
	}
}
