//go:build !unix

package web_test

import "time"

// processCPU is 0 where the process's CPU time is not read: the bulk-read
// benchmark then reports times alone.
func processCPU() time.Duration { return 0 }
