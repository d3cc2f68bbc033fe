package storage

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// What Pebble reports about the store's health, and how it reaches the
// operator (issue 13, items 3 and 4).
//
// Pebble's defaults do not suit a server that must stay readable: a
// checksum mismatch found by any read calls Logger.Fatalf (a panic with a
// hundred-line stack), and a flush that fails for lack of space is retried
// at once and logged every time (about 51,000 lines in 20 s on a full disk).
// So the engine:
//
//   - records the first file Pebble reports corrupt (Engine.CorruptFile) and
//     lets the read fail with the corruption error instead of dying: the
//     caller names the file in one line, and the node at start refuses the
//     store (kvserver's store check);
//   - logs each kind of Pebble error at most once per LogIntervalMin, with
//     the count of the lines it held back;
//   - hands Pebble's fatal errors (a WAL write that failed: the commit
//     pipeline cannot continue) to Options.Fatal, so that the command can
//     print one error line and exit rather than panic.
//
// Rejected: filtering Pebble's messages by content. The kinds are few and
// the format strings identify them.

// LogIntervalMin is the least time between two log lines of one kind of
// Pebble error (the format string).
const LogIntervalMin = 10 * time.Second

// engineLogger implements pebble.Logger.
type engineLogger struct {
	out io.Writer
	// fatal, if not nil, is Options.Fatal; it must not return.
	fatal func(msg string)
	now   func() time.Time

	mu struct {
		sync.Mutex
		// last[format] is when a line of that format was last written;
		// held[format] how many lines were held back since.
		last map[string]time.Time
		held map[string]int
	}
}

func newEngineLogger(fatal func(string)) *engineLogger {
	l := &engineLogger{out: os.Stdout, fatal: fatal, now: time.Now}
	l.mu.last = map[string]time.Time{}
	l.mu.held = map[string]int{}
	return l
}

func (l *engineLogger) Infof(string, ...interface{}) {}

// Errorf writes a line unless one of the same format was written less than
// LogIntervalMin ago. The number of lines held back since is appended.
func (l *engineLogger) Errorf(format string, args ...interface{}) {
	now := l.now()
	l.mu.Lock()
	if t, ok := l.mu.last[format]; ok && now.Sub(t) < LogIntervalMin {
		l.mu.held[format]++
		l.mu.Unlock()
		return
	}
	held := l.mu.held[format]
	l.mu.last[format] = now
	l.mu.held[format] = 0
	l.mu.Unlock()
	line := pebbleMessage(format, args...)
	if held > 0 {
		line += fmt.Sprintf(" (%d similar lines held back in the last %v)", held, LogIntervalMin)
	}
	fmt.Fprintln(l.out, line)
}

func (l *engineLogger) Fatalf(format string, args ...interface{}) {
	msg := pebbleMessage(format, args...)
	if l.fatal != nil {
		l.fatal(msg)
	}
	panic(msg)
}

// pebbleMessage formats one of Pebble's messages with the "pebble: "
// prefix, once: many of Pebble's formats carry it already ("pebble: fatal
// commit error: %v", the line after a failed WAL fsync), and adding it
// again printed "pebble: pebble:".
func pebbleMessage(format string, args ...interface{}) string {
	msg := fmt.Sprintf(format, args...)
	if strings.HasPrefix(msg, "pebble: ") {
		return msg
	}
	return "pebble: " + msg
}

// corruptionRecorder remembers the first file Pebble found corrupt.
type corruptionRecorder struct {
	mu   sync.Mutex
	path string
}

func (c *corruptionRecorder) record(info pebble.DataCorruptionInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" {
		c.path = info.Path
	}
}

func (c *corruptionRecorder) file() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.path
}

// CorruptFile returns the path of the first file in which Pebble found
// corruption since the engine opened, or "".
func (e *Engine) CorruptFile() string { return e.corrupt.file() }
