package process

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
)

// coordinatorEnv, when set, makes this test binary a transaction
// coordinator for TestCoordinatorKilledDuringParallelCommit (see
// TestCoordinatorChild): "hosts|step|keyA|keyB".
const coordinatorEnv = "CANOPY_TEST_COORDINATOR"

// killSteps are the points of a parallel commit at which the coordinator
// is killed, in commit order, with the outcome recovery must reach when it
// does not depend on timing ("" when it may be either).
var killSteps = []struct{ step, want string }{
	// Nothing of the commit sent: readers fence the staging key and abort.
	{"before-staging", "aborted"},
	// STAGING written, no proof sent: the pipelined writes may or may not
	// have applied by then, so either outcome is right.
	{"after-staging", ""},
	// STAGING written and the first write proven: either.
	{"between-proofs", ""},
	// STAGING written and every write proven: implicitly committed, so
	// recovery must commit.
	{"after-proofs", "committed"},
}

// TestCoordinatorKilledDuringParallelCommit kills a coordinator process
// (SIGKILL) at each step of a parallel commit of a transaction writing
// two keys on two ranges, with a three-node cluster of real processes.
// Then a reader in this process reads both keys: once the dead
// coordinator's transaction has expired (HeartbeatTTL), the reader recovers
// it or aborts it. Checked: the transaction is decided once (its status
// record, never both committed and aborted; committed exactly when the
// keys hold its writes, both or neither), the outcome at the steps where
// it is determined, and that no intent is left (a second, fresh reader
// resolves nothing).
func TestCoordinatorKilledDuringParallelCommit(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	if out := c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "4"); !strings.Contains(out, "initialized") {
		t.Fatalf("canopy init printed %q", out)
	}
	c.waitLive(3)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The switches are a cluster setting, changed at run time from the
	// CLI and read by clients (here: at Open).
	if out := c.mustCLI("admin", "setting", c.hostFlag(), "--one-pc=off"); !strings.Contains(out, "one_pc=off") {
		t.Fatalf("canopy admin setting --one-pc=off printed %q", out)
	}
	if out := c.mustCLI("admin", "setting", c.hostFlag()); !strings.Contains(out, "pipelining=default parallel_commits=default one_pc=off") {
		t.Fatalf("canopy admin setting printed %q", out)
	}
	for _, ks := range killSteps {
		t.Run(ks.step, func(t *testing.T) {
			// '0' and 'a' are in different ranges (--initial-ranges 4).
			keyA, keyB := "0pc/"+ks.step, "apc/"+ks.step
			startTs := runCoordinatorUntil(t, c, exe, ks.step, keyA, keyB)

			reader := openClient(t, c)
			var va, vb []byte
			var fa, fb bool
			c.eventually("reading the keys of the dead coordinator's transaction", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 4*opMax)
				defer cancel()
				return reader.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
					var err error
					if va, fa, err = txn.Get(ctx, []byte(keyA)); err != nil {
						return err
					}
					vb, fb, err = txn.Get(ctx, []byte(keyB))
					return err
				}, client.WithAttemptsMax(1))
			})
			var st client.TxnStatus
			c.eventually("the transaction's status", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), opMax)
				defer cancel()
				st, err = reader.TxnStatus(ctx, startTs)
				return err
			})
			t.Logf("%s: status %+v; %s=%q (%v), %s=%q (%v); reader stats %+v", ks.step, st, keyA, va, fa, keyB, vb, fb, reader.Stats())
			if !st.Decided {
				t.Fatalf("transaction %d is not decided after a reader met its intents: %+v", startTs, st)
			}
			if fa != fb {
				t.Fatalf("one of the transaction's writes is visible and the other not: %s %v, %s %v", keyA, fa, keyB, fb)
			}
			committed := !st.Aborted
			if committed != fa {
				t.Fatalf("status says committed=%v, but the writes are visible=%v", committed, fa)
			}
			if committed && (string(va) != "va" || string(vb) != "vb") {
				t.Fatalf("committed, but the keys hold %q and %q", va, vb)
			}
			if st.Staged && committed && st.StagedTs != st.CommitTs {
				t.Fatalf("committed at %d, staged at %d", st.CommitTs, st.StagedTs)
			}
			switch ks.want {
			case "aborted":
				if committed {
					t.Fatalf("killed %s: committed, want aborted", ks.step)
				}
			case "committed":
				if !committed {
					t.Fatalf("killed %s (implicitly committed): aborted, want committed", ks.step)
				}
			}
			// No intent left: the first reader resolved every one it met
			// (both keys of the transaction).
			fresh := openClient(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			for _, k := range []string{keyA, keyB} {
				if _, _, err := fresh.Get(ctx, []byte(k)); err != nil {
					t.Fatal(err)
				}
			}
			if s := fresh.Stats(); s.IntentsResolved != 0 || s.Recovered != 0 || s.AbortedOthers != 0 {
				t.Fatalf("intents were left after recovery: a fresh reader %+v", s)
			}
		})
	}
}

// openClient opens a client on c, closed at the end of the test.
func openClient(t *testing.T, c *cluster) *client.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// runCoordinatorUntil starts this test binary as a coordinator that writes
// keyA and keyB in one pipelined transaction and commits it in parallel,
// waits until it reports that it has reached step (where it blocks), kills
// it with SIGKILL, and returns the transaction's start timestamp.
func runCoordinatorUntil(t *testing.T, c *cluster, exe, step, keyA, keyB string) uint64 {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^TestCoordinatorChild$", "-test.v")
	cmd.Env = append(os.Environ(), coordinatorEnv+"="+strings.Join([]string{strings.Join(c.addrs, ","), step, keyA, keyB}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var lines []string
	var mu sync.Mutex
	found := make(chan uint64, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			lines = append(lines, line)
			mu.Unlock()
			if rest, ok := strings.CutPrefix(line, "KILLPOINT "+step+" "); ok {
				if ts, err := strconv.ParseUint(rest, 10, 64); err == nil {
					found <- ts
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = cmd.Wait()
	}()
	select {
	case ts := <-found:
		// The coordinator is blocked at the step: kill it there.
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		return ts
	case <-exited:
	case <-time.After(waitMax):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("the coordinator never reached %s; its output:\n%s", step, strings.Join(lines, "\n"))
	return 0
}

// TestCoordinatorChild is the coordinator process of
// TestCoordinatorKilledDuringParallelCommit; without coordinatorEnv it is
// skipped. It writes two keys in one transaction with pipelining and
// parallel commits, and at the requested step of the commit prints
// "KILLPOINT <step> <start_ts>" and blocks until it is killed.
func TestCoordinatorChild(t *testing.T) {
	spec := os.Getenv(coordinatorEnv)
	if spec == "" {
		t.Skip("the coordinator process of TestCoordinatorKilledDuringParallelCommit")
	}
	parts := strings.Split(spec, "|")
	if len(parts) != 4 {
		t.Fatalf("%s=%q", coordinatorEnv, spec)
	}
	hosts, target, keyA, keyB := strings.Split(parts[0], ","), parts[1], parts[2], parts[3]
	staged := make(chan struct{})
	var once sync.Once
	stop := func(startTs uint64) {
		fmt.Printf("KILLPOINT %s %d\n", target, startTs)
		_ = os.Stdout.Sync()
		select {} // until SIGKILL
	}
	hook := func(startTs uint64, step string) {
		if step == "staged" {
			once.Do(func() { close(staged) })
		}
		switch {
		case target == "before-staging" && step == "staging":
			stop(startTs)
		case target == "after-staging" && step == "proof 0":
			<-staged
			stop(startTs)
		case target == "between-proofs" && step == "proof 1":
			<-staged
			stop(startTs)
		case target == "after-proofs" && step == "proven":
			stop(startTs)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	db, err := client.Open(ctx, hosts, func(o *client.Options) {
		o.Pipelining, o.ParallelCommits = client.ToggleOn, client.ToggleOn
		o.TestingCommitStep = hook
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		if err := txn.Put(ctx, []byte(keyA), []byte("va")); err != nil {
			return err
		}
		return txn.Put(ctx, []byte(keyB), []byte("vb"))
	}, client.WithAttemptsMax(1))
	// Reached only if the commit never came to the step.
	t.Fatalf("the transaction ended (%v) without reaching %s", err, target)
}
