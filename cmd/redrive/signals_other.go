//go:build !unix

package main

import "context"

// reloadOnHangup does nothing where there is no SIGHUP.
func reloadOnHangup(context.Context, func()) (stop func()) { return func() {} }
