//go:build unix

package loadbench

import "syscall"

// quitSignal asks nginx to finish gracefully.
const quitSignal = syscall.SIGQUIT
