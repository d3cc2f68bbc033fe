package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEngineLoggerHoldsBackRepeats: one line per format per LogIntervalMin,
// with the count of the lines held back (a flush failing on a full disk is
// retried at once and used to log every attempt).
func TestEngineLoggerHoldsBackRepeats(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	l := newEngineLogger(nil)
	l.out, l.now = &out, func() time.Time { return now }
	for i := 0; i < 1000; i++ {
		l.Errorf("background error: %s", fmt.Sprintf("write %06d.sst: no space left on device", i))
	}
	l.Errorf("other: %d", 1)
	now = now.Add(LogIntervalMin)
	l.Errorf("background error: %s", "again")
	want := "pebble: background error: write 000000.sst: no space left on device\n" +
		"pebble: other: 1\n" +
		"pebble: background error: again (999 similar lines held back in the last 10s)\n"
	if out.String() != want {
		t.Fatalf("logged:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestEngineLoggerFatal: Pebble's fatal errors go to Options.Fatal, with
// the "pebble: " prefix once, whether Pebble's format carries it (the
// fatal commit error after a failed WAL fsync: it said "pebble: pebble:")
// or not.
func TestEngineLoggerFatal(t *testing.T) {
	for _, tc := range []struct{ format, arg, want string }{
		{"pebble: fatal commit error: %v", ErrInjectedSync.Error(), "pebble: fatal commit error: storage: injected fault: fsync failed"},
		{"fatal commit error: %v", "no space left on device", "pebble: fatal commit error: no space left on device"},
		{"%v", "pebble: encountered corruption", "pebble: encountered corruption"},
	} {
		var got string
		l := newEngineLogger(func(msg string) { got = msg; panic("fatal hook") })
		func() {
			defer func() { _ = recover() }()
			l.Fatalf(tc.format, tc.arg)
		}()
		if got != tc.want {
			t.Errorf("Fatalf(%q, %q): Fatal hook got %q; want %q", tc.format, tc.arg, got, tc.want)
		}
	}
	var out bytes.Buffer
	l := newEngineLogger(nil)
	l.out = &out
	l.Errorf("pebble: background error: %s", "x")
	if out.String() != "pebble: background error: x\n" {
		t.Errorf("Errorf logged %q", out.String())
	}
}

// TestCorruptSSTableFailsReads flips a byte in every 4 KiB of every
// sstable of a store and reopens it: reads fail with an error (Pebble's
// default was a panic from a background goroutine or the reader), and the
// engine names the file.
func TestCorruptSSTableFailsReads(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := e.NewBatch()
	for i := 0; i < 2000; i++ {
		if err := b.Set(NodeLocalKey(fmt.Sprintf("k%05d", i)), bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := e.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no sstable after a flush")
	}
	for _, f := range ssts {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for off := 100; off < len(data); off += 4096 {
			data[off] ^= 0xff
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, err = Open(dir, Options{})
	if err != nil {
		// Refused at open: as good, if it says which file.
		if !strings.Contains(err.Error(), ".sst") {
			t.Fatalf("open: %v; want the file named", err)
		}
		return
	}
	defer e.Close()
	it, err := e.NewIter(NodeLocalKey(""), NodeLocalKey("\xff"))
	if err == nil {
		for it.First(); it.Valid(); it.Next() {
		}
		err = it.Error()
		_ = it.Close()
	}
	if err == nil {
		t.Fatal("reading a store with every block damaged succeeded")
	}
	if f := e.CorruptFile(); !strings.HasSuffix(f, ".sst") {
		t.Fatalf("CorruptFile() = %q after %v", f, err)
	}
}
