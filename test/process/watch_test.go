package process

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
)

// watchLines collects the lines `canopy watch` prints.
type watchLines struct {
	mu    sync.Mutex
	lines []string
}

func (w *watchLines) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// lastResolved is the last resolved timestamp printed, 0 if none.
func (w *watchLines) lastResolved() uint64 {
	ls := w.snapshot()
	for i := len(ls) - 1; i >= 0; i-- {
		if f := strings.Split(ls[i], "\t"); len(f) == 2 && f[1] == "resolved" {
			ts, _ := strconv.ParseUint(f[0], 10, 64)
			return ts
		}
	}
	return 0
}

// TestWatchSurvivesLeaseholderKill runs `canopy watch w/ --resolved` as a
// process against three node processes while a client writes, kills the
// watched range's leaseholder with SIGKILL and restarts it. The watch must
// print every acknowledged write exactly once, nothing that was not
// written, each key's changes in commit order, and no change at or below
// a resolved timestamp printed before it.
func TestWatchSurvivesLeaseholderKill(t *testing.T) {
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

	// The watch process.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	cmd := exec.CommandContext(wctx, binPath, "watch", "w/", "--resolved", c.hostFlag(), "--insecure")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := &watchLines{}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.mu.Lock()
			out.lines = append(out.lines, sc.Text())
			out.mu.Unlock()
		}
	}()
	c.eventually("canopy watch printing a resolved timestamp", func() error {
		if out.lastResolved() == 0 {
			return fmt.Errorf("nothing resolved yet; stderr: %s", stderr.String())
		}
		return nil
	})

	// Writes: w/00 .. w/19, unique values, each retried until acknowledged
	// (a retry after an unknown outcome may land twice: both values are
	// then allowed, each once).
	acked := map[string]string{} // value -> key
	maybe := map[string]bool{}
	i := 0
	write := func(n int) {
		for end := i + n; i < end; i++ {
			k, v := fmt.Sprintf("w/%02d", i%20), fmt.Sprintf("v%d", i)
			for attempt := 0; ; attempt++ {
				octx, cancel := context.WithTimeout(ctx, opMax)
				err := db.Put(octx, []byte(k), []byte(v))
				cancel()
				if err == nil {
					acked[v] = k
					break
				}
				maybe[v] = true
				if attempt > 100 {
					t.Fatalf("put %s=%s: %v", k, v, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	write(100)
	slot, rangeID := leaseholderOf(c, db, keys.UserKey([]byte("w/00")))
	t.Logf("killing node %d, leaseholder of r%d", slot+1, rangeID)
	c.kill9(slot)
	write(100)
	c.start(slot)
	c.waitLive(3)
	write(100)

	end, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.eventually(fmt.Sprintf("canopy watch resolving %d", end), func() error {
		if r := out.lastResolved(); r < end {
			return fmt.Errorf("resolved %d; stderr: %s", r, stderr.String())
		}
		return nil
	})
	wcancel()
	<-readDone
	_ = cmd.Wait()

	var resolved uint64
	last := map[string]uint64{}
	seen := map[string]bool{}
	for n, l := range out.snapshot() {
		f := strings.Split(l, "\t")
		ts, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			t.Fatalf("line %d %q: %v", n, l, err)
		}
		if len(f) == 2 && f[1] == "resolved" {
			if ts < resolved {
				t.Fatalf("line %d: resolved went down from %d to %d", n, resolved, ts)
			}
			resolved = ts
			continue
		}
		if len(f) != 3 {
			t.Fatalf("line %d: %q is neither a change nor a resolved timestamp", n, l)
		}
		k, v := f[1], f[2]
		switch {
		case ts <= resolved:
			t.Fatalf("line %d: change %q at or below the resolved timestamp %d printed before it", n, l, resolved)
		case ts <= last[k]:
			t.Fatalf("line %d: change %q after one at %d of the same key", n, l, last[k])
		case seen[v] && !maybe[v]:
			t.Fatalf("line %d: value %s printed twice", n, v)
		case acked[v] != k && !maybe[v]:
			t.Fatalf("line %d: %q was never written", n, l)
		}
		last[k], seen[v] = ts, true
	}
	for v, k := range acked {
		if !seen[v] {
			t.Fatalf("acknowledged write %s=%s was not printed", k, v)
		}
	}
	t.Logf("%d writes acknowledged, %d lines printed, last resolved %d", len(acked), len(out.snapshot()), resolved)
}
