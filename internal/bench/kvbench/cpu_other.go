//go:build !unix

package kvbench

import "time"

// ProcessCPU is unknown on this platform: 0.
func ProcessCPU() time.Duration { return 0 }
