//go:build unix

package web_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used:
// the bulk-read benchmark's client and server both, and on SQLite its
// database too.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
