package main

import (
	"context"

	"github.com/redrive/redrive"
	"github.com/spf13/cobra"
)

// withStore opens the store chosen on cmd's command line, calls fn with it
// and closes it when fn returns. The read and DLQ commands all open, use and
// close their store the same way; doing it here keeps each command about what
// it reads or changes, and no command can forget the close.
func withStore(cmd *cobra.Command, fn func(ctx context.Context, s redrive.Store) error) error {
	s, closeFn, err := storeFor(cmd)
	if err != nil {
		return err
	}
	defer closeFn()
	return fn(cmd.Context(), s)
}
