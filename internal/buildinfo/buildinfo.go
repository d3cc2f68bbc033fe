// Package buildinfo says which build of Canopy is running: its version,
// the commit it was built from and the Go toolchain. The CLI prints it
// (`canopy version`) and every node reports it in its NodeStatus, so that
// `canopy status` shows a cluster running mixed builds.
//
// Version is set at link time (go build -ldflags "-X
// github.com/canopy-db/canopy/internal/buildinfo.Version=v1.2.3"); without
// it, a build from a module proxy reports its module version and a build
// from a checkout reports "dev". The commit comes from the VCS stamp that
// `go build` records in a checkout (runtime/debug.ReadBuildInfo), or from
// -ldflags "-X ...buildinfo.Commit=...".
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version and Commit may be set with -ldflags -X; empty means "read the
// build information".
var (
	Version string
	Commit  string
)

// Info describes one build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"` // the checkout had uncommitted changes
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns this binary's build information.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	return i
}

// String is the one-line form nodes report: "dev (commit 477ac76, go1.26.0)".
func (i Info) String() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if i.Modified {
		c += "+modified"
	}
	return fmt.Sprintf("%s (commit %s, %s)", i.Version, c, i.GoVersion)
}
