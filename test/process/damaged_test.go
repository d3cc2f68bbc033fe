package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
)

// TestDamagedStoreIsRefused (issue 13, item 3) gives node 3 of a running
// three-node cluster, in turn, the damaged stores of the issue's
// reproductions, and checks that each time the process exits with status 1
// after one `error: store ... ` line that says what to do, with no panic:
//
//   - an older copy of its own store (the others' leaders then send it a
//     commit index past the end of its log: Raft's "tocommit out of range"
//     panic on every start, before the fix); the node marks the store
//     damaged, and the next start is refused at once;
//   - its latest store without Pebble's WAL files;
//   - with its MANIFEST truncated (before the fix: "cannot use none as id");
//   - with a byte flipped in every 4 KiB of every sstable (before the fix: a
//     116-line panic).
//
// Meanwhile the two other nodes serve every acknowledged write, and a store
// wiped as docs/OPERATIONS.md says lets the process start again.
func TestDamagedStoreIsRefused(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "4")
	c.waitLive(3)
	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const victim = 2
	acked := map[string]string{}
	put := func(k, v []byte) {
		t.Helper()
		c.eventually("put "+string(k), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			return db.Put(ctx, k, v)
		})
		acked[string(k)] = string(v)
	}
	// round writes keys in every user range (their first bytes spread over
	// 0-255) and waits until node 3 has applied them all: it acknowledged
	// them to the leaders.
	round := func(name string) {
		t.Helper()
		for i := 0; i < 64; i++ {
			put([]byte{byte(i * 4), 'k'}, []byte(fmt.Sprintf("%s-%d", name, i)))
		}
		waitCaughtUp(t, c, db, victim)
	}
	// Enough bytes that every node's Pebble flushes sstables.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for i := 0; i < 40; i++ {
		put([]byte(fmt.Sprintf("big/%02d", i)), big)
	}
	round("a")
	store := c.nodes[victim].store
	c.stop(victim)
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, store, older)
	c.start(victim)
	round("b")
	c.stop(victim)
	latest := filepath.Join(t.TempDir(), "latest")
	copyDir(t, store, latest)
	if ssts, _ := filepath.Glob(filepath.Join(latest, "*.sst")); len(ssts) == 0 {
		t.Fatal("node 3's store has no sstable to damage")
	}

	// refused starts node 3 on its store as it is and checks the refusal.
	refused := func(what string, want ...string) {
		t.Helper()
		code, out := runUntilExit(t, c, victim)
		last := lastLine(out)
		if code != 1 || !strings.HasPrefix(last, "error: store "+store+" ") || !strings.Contains(last, "docs/OPERATIONS.md") {
			t.Fatalf("%s: exit status %d, last line %q; want 1 and one error line naming the store and what to do; output:\n%s", what, code, last, out)
		}
		for _, w := range want {
			if !strings.Contains(last, w) {
				t.Fatalf("%s: error line %q does not say %q", what, last, w)
			}
		}
		if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
			t.Fatalf("%s: the node panicked:\n%s", what, out)
		}
		t.Logf("%s: %s", what, last)
	}
	replaceStore := func(from string, damage func(dir string)) {
		t.Helper()
		if err := os.RemoveAll(store); err != nil {
			t.Fatal(err)
		}
		copyDir(t, from, store)
		damage(store)
	}

	replaceStore(older, func(string) {})
	refused("restored from an older copy", "lost acknowledged writes", "is damaged")
	refused("restarted after that", "STORE-DAMAGED")

	replaceStore(latest, func(dir string) {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, f := range logs {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	})
	refused("Pebble's WAL deleted", "is damaged")

	replaceStore(latest, func(dir string) {
		ms, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
		for _, f := range ms {
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}
	})
	refused("MANIFEST truncated")

	replaceStore(latest, func(dir string) {
		ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		for _, f := range ssts {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for off := 100; off < len(b); off += 4096 {
				b[off] ^= 0xff
			}
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	refused("every sstable damaged")

	// The two other nodes hold a quorum of every range: every acknowledged
	// write reads back and new writes are accepted.
	c.readBack(db, "with node 3 refused", acked)
	put([]byte("after"), []byte("the refusals"))

	// What brings the process back today: a wiped store (docs/OPERATIONS.md).
	// Re-adding it to the cluster waits for membership changes (item 6).
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	c.start(victim)
	c.eventually("node 3 started on a wiped store", func() error {
		b, _ := os.ReadFile(c.nodes[victim].logPath)
		if !strings.Contains(lastRun(string(b)), "waiting for `canopy init`") {
			return fmt.Errorf("log of the last start:\n%s", lastRun(string(b)))
		}
		return nil
	})
}

// waitCaughtUp waits until node slot has applied, in every range it
// replicates, what the range's leader had committed.
func waitCaughtUp(t *testing.T, c *cluster, db *client.DB, slot int) {
	t.Helper()
	c.eventually(fmt.Sprintf("node %d caught up", slot+1), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		ranges, err := db.Ranges(ctx)
		if err != nil {
			return err
		}
		for _, r := range ranges {
			if err := caughtUp(db, c.addrs, slot, r.Desc.RangeId); err != nil {
				return fmt.Errorf("r%d: %w", r.Desc.RangeId, err)
			}
		}
		return nil
	})
}

// runUntilExit starts node slot without waiting for it to listen, waits
// (at most waitMax) for it to exit, and returns its exit status and what
// it wrote.
func runUntilExit(t *testing.T, c *cluster, slot int) (int, string) {
	t.Helper()
	nd := c.nodes[slot]
	before, _ := os.Stat(nd.logPath)
	c.spawn(slot)
	select {
	case <-nd.exited:
	case <-time.After(waitMax):
		c.kill9(slot)
		t.Fatalf("node %d still running %v after a start on a damaged store", slot+1, waitMax)
	}
	f, err := os.Open(nd.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if before != nil {
		if _, err := f.Seek(before.Size(), io.SeekStart); err != nil {
			t.Fatal(err)
		}
	}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return nd.cmd.ProcessState.ExitCode(), string(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// lastRun returns the part of a node's log written since its last start.
func lastRun(log string) string {
	if i := strings.LastIndex(log, "=== test: starting node"); i >= 0 {
		return log[i:]
	}
	return log
}

// copyDir copies the regular files of directory src, recursively, to dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}
