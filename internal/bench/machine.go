package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where figures were measured; every benchmark prints it
// with its table, since figures only compare within one machine and run.
type Machine struct {
	CPUs   int    // runtime.NumCPU(), what nproc prints
	Kernel string // `uname -sr`, or GOOS if uname is missing
	Go     string // runtime.Version()
	Date   time.Time
	// LoadAverage is the first three fields of /proc/loadavg when the
	// figures were taken ("" where there is none): other work on the
	// machine shifts the figures, and readers should know.
	LoadAverage string
}

// ThisMachine describes the running machine, dated now (UTC).
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Kernel: runtime.GOOS, Go: runtime.Version(), Date: time.Now().UTC()}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAverage = strings.Join(f[:3], " ")
		}
	}
	return m
}

// String is one line, for tables and plot subtitles.
func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs (nproc), %s, %s, %s", m.CPUs, m.Kernel, m.Go, m.Date.Format("2006-01-02 15:04 UTC"))
	if m.LoadAverage != "" {
		s += ", load average " + m.LoadAverage + " at start"
	}
	return s
}
