//go:build unix

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// reloadOnHangup calls reload on every SIGHUP until ctx ends or the
// returned stop is called.
func reloadOnHangup(ctx context.Context, reload func()) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ch:
				reload()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
}
