package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicksPerSecond is USER_HZ, the unit of /proc/stat: 100 on every
// Linux architecture Go supports (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicksPerSecond = 100

// SystemBusyCPU returns the CPU time all processes of the machine have
// spent busy (user, nice, system, irq, softirq, steal) since boot, from
// /proc/stat, and false where there is no /proc/stat. Taken before and
// after a run, and less the benchmark process's own CPU time, it tells how
// much CPU other work took from the run: figures taken beside a busy
// neighbour are not comparable with figures taken alone.
func SystemBusyCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: skip idle, iowait.
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, true
}

// ProcessesCPU returns the CPU time (user + system, utime + stime of
// /proc/<pid>/stat) the given processes have used since they started,
// summed. Taken before and after a run, it is what server processes
// outside the benchmark's own process (say, a cluster started by a script)
// spent on the run. The threads' time is included (the kernel sums it
// into the process's line); children's time is not. An error names the
// process that could not be read: a server that exited during a run
// makes the run's figures meaningless, and the caller should say so.
func ProcessesCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
		}
		d, err := parseProcStatCPU(string(b))
		if err != nil {
			return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
		}
		sum += d
	}
	return sum, nil
}

// parseProcStatCPU returns utime + stime of one /proc/<pid>/stat line.
// The second field, the command name in parentheses, may itself hold
// spaces and parentheses, so fields are counted from the last ')':
// after it come state (field 3), ... utime (14) and stime (15).
func parseProcStatCPU(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat line %q", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("stat line has %d fields after the name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[14-3 : 15-3+1] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("malformed CPU ticks %q in stat line", s)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, nil
}
