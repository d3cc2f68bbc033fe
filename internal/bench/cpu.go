package bench

import (
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
