package bench

import (
	"fmt"
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
}

// ThisMachine describes the running machine, dated now (UTC).
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Kernel: runtime.GOOS, Go: runtime.Version(), Date: time.Now().UTC()}
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

// String is one line, for tables and plot subtitles.
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (nproc), %s, %s, %s", m.CPUs, m.Kernel, m.Go, m.Date.Format("2006-01-02 15:04 UTC"))
}
