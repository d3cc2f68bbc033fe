//go:build !unix

package kvbench

import "time"

// processCPU is unknown on this platform: 0.
func processCPU() time.Duration { return 0 }
