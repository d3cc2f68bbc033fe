// Package testbin builds the canopy binary that the multi-process tests
// (test/process, test/nemesis, test/docker) run, so that each test package
// builds it the same way: statically (CGO_ENABLED=0, as shipped in the
// container image), so that a cold build cache compiles it once for all.
package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ModuleRoot walks up from the working directory (a package's directory
// under go test) to the directory holding Canopy's go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/canopy-db/canopy\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/canopy-db/canopy above the working directory")
		}
		dir = parent
	}
}

// Build builds ./cmd/canopy into a new temporary directory named after
// prefix. It returns the binary's path and a cleanup that removes the
// directory; or skipWhy when the tests cannot build it here (no go
// command), or err when the build failed.
func Build(prefix string) (bin string, cleanup func(), skipWhy string, err error) {
	cleanup = func() {}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", cleanup, "no go command on PATH to build canopy", nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", cleanup, "", err
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", cleanup, "", err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "canopy")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/canopy")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", cleanup, "", fmt.Errorf("go build ./cmd/canopy: %v\n%s", err, out)
	}
	return bin, cleanup, "", nil
}
