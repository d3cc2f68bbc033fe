package changefeed

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestProcessor steps a processor and a closed-timestamp tracker through
// the files in testdata/processor (datadriven; -rewrite to regenerate the
// expected output after checking a diff).
//
//	init index=N              intents in the input: "key start_ts"
//	stage index=N             ops in the input: "intent key start_ts",
//	                          "gone key", "value key ts v", "delete key ts"
//	flush index=N
//	close ts=N
//	register name=R start=K [end=K] from=N after=N
//	drain name=R              the events R buffered, or its end
//	unregister name=R
//	stop
//	state
//	track name=T bound=N      (tracker)
//	done name=T
//	closed candidate=N
func TestProcessor(t *testing.T) {
	datadriven.Walk(t, "testdata/processor", func(t *testing.T, path string) {
		var (
			p      *Processor
			regs   = map[string]*Registration{}
			tr     Tracker
			tokens = map[string]*Token{}
		)
		reset := func(d *datadriven.TestData) {
			var opts Options
			if d.HasArg("events-max") {
				d.ScanArgs(t, "events-max", &opts.EventsMax)
			}
			p = NewProcessor(opts)
			regs = map[string]*Registration{}
		}
		u64 := func(d *datadriven.TestData, key string) uint64 {
			var v uint64
			d.ScanArgs(t, key, &v)
			return v
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if p == nil && d.Cmd != "new" {
				reset(&datadriven.TestData{})
			}
			switch d.Cmd {
			case "new":
				reset(d)
				return ""
			case "init":
				var intents []Intent
				for _, l := range lines(d.Input) {
					f := strings.Fields(l)
					intents = append(intents, Intent{Key: []byte(f[0]), StartTs: parse(t, f[1])})
				}
				p.Init(u64(d, "index"), intents)
				return state(p)
			case "stage":
				var ops []Op
				for _, l := range lines(d.Input) {
					f := strings.Fields(l)
					switch f[0] {
					case "intent":
						ops = append(ops, Op{Kind: OpIntent, Key: []byte(f[1]), Ts: parse(t, f[2])})
					case "gone":
						ops = append(ops, Op{Kind: OpIntentGone, Key: []byte(f[1])})
					case "value":
						ops = append(ops, Op{Kind: OpValue, Key: []byte(f[1]), Ts: parse(t, f[2]), Value: []byte(f[3])})
					case "delete":
						ops = append(ops, Op{Kind: OpValue, Key: []byte(f[1]), Ts: parse(t, f[2]), Deleted: true})
					default:
						t.Fatalf("unknown op %q", l)
					}
				}
				p.Stage(u64(d, "index"), ops)
				return ""
			case "flush":
				p.Flush(u64(d, "index"))
				return state(p)
			case "close":
				p.SetClosed(u64(d, "ts"))
				return state(p)
			case "register":
				var name, start, end string
				d.ScanArgs(t, "name", &name)
				d.ScanArgs(t, "start", &start)
				if d.HasArg("end") {
					d.ScanArgs(t, "end", &end)
				}
				var r *Registration
				var err error
				p.Locked(func() {
					r, err = p.RegisterLocked([]byte(start), []byte(end), u64(d, "from"), u64(d, "after"))
				})
				if err != nil {
					return "error: " + err.Error()
				}
				regs[name] = r
				return ""
			case "drain":
				var name string
				d.ScanArgs(t, "name", &name)
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				evs, err := regs[name].Next(ctx)
				var b strings.Builder
				for _, ev := range evs {
					b.WriteString(eventString(ev) + "\n")
				}
				switch {
				case errors.Is(err, context.Canceled):
					if len(evs) == 0 {
						b.WriteString("(nothing)\n")
					}
				case err != nil:
					b.WriteString("ended: " + err.Error() + "\n")
				}
				return b.String()
			case "unregister":
				var name string
				d.ScanArgs(t, "name", &name)
				regs[name].Close()
				return state(p)
			case "stop":
				p.Stop(errors.New("stopped by the test"))
				return ""
			case "state":
				return state(p)
			case "track":
				var name string
				d.ScanArgs(t, "name", &name)
				tokens[name] = tr.Track(u64(d, "bound"))
				return fmt.Sprintf("tracked %d\n", tr.Len())
			case "done":
				var name string
				d.ScanArgs(t, "name", &name)
				tokens[name].Done()
				return fmt.Sprintf("tracked %d\n", tr.Len())
			case "closed":
				return fmt.Sprintf("closed %d\n", tr.Closed(u64(d, "candidate")))
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func parse(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func eventString(ev Event) string {
	switch {
	case ev.Resolved != 0 && ev.Blocking != nil:
		return fmt.Sprintf("resolved %d (held by %s@%d)", ev.Resolved, ev.Blocking.Key, ev.Blocking.StartTs)
	case ev.Resolved != 0:
		return fmt.Sprintf("resolved %d", ev.Resolved)
	case ev.Deleted:
		return fmt.Sprintf("%s DELETE @%d", ev.Key, ev.Ts)
	}
	return fmt.Sprintf("%s=%s @%d", ev.Key, ev.Value, ev.Ts)
}

func state(p *Processor) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for k, s := range p.mu.intents {
		ks = append(ks, fmt.Sprintf("%s@%d", k, s))
	}
	sort.Strings(ks)
	return fmt.Sprintf("closed %d resolved %d intents [%s] watchers %d\n", p.mu.closed, p.mu.resolved, strings.Join(ks, " "), len(p.mu.regs))
}
