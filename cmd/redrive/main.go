// Command redrive runs pipelines, inspects runs and items, works the
// dead-letter queue, previews retry policies and serves metrics and the
// JSON API.
//
// Every command that needs a database takes --db (sqlite:PATH, a *.db file
// or postgres://...; default from REDRIVE_DATABASE_URL, else
// sqlite:redrive.db) and --pg-schema. Read commands print tables, or JSON
// with --json. Exit codes are listed in exitcodes.go and docs/cli.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "redrive:", scrub(errorMessage(err), rootSecrets(root)...))
		stop()
		os.Exit(exitCode(err))
	}
}

// rootSecrets returns the secrets that may appear on root's command line or
// environment (database password, API token), to keep them out of messages.
func rootSecrets(root *cobra.Command) []string {
	var out []string
	if f := root.PersistentFlags().Lookup("db"); f != nil {
		out = append(out, secretsOf(f.Value.String())...)
	}
	out = append(out, secretsOf(os.Getenv(envDatabaseURL))...)
	if v := os.Getenv(envAPIToken); v != "" {
		out = append(out, v)
	}
	return append(out, envTokenSecrets()...)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "redrive",
		Short: "Process work items reliably when what they depend on fails",
		Long: `redrive processes work items reliably when what they depend on fails.

This command inspects runs and items, works the dead-letter queue (list,
export, redrive, purge), migrates the database, serves metrics and the JSON
API, previews retry policies and runs YAML pipelines.

The database is chosen with --db: sqlite:PATH (default sqlite:redrive.db),
a *.db file, or postgres://USER:PASSWORD@HOST/DB; the REDRIVE_DATABASE_URL
environment variable is used when --db is not given. Passwords are never
printed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageErrorf("%w (see --help)", err)
	})
	root.SetHelpTemplate(root.HelpTemplate() + "\n" + exitCodesHelp + "\n")
	addDBFlags(root)
	addLogFlags(root)

	root.AddCommand(
		newMigrateCmd(),
		newRunsCmd(),
		newItemsCmd(),
		newStatsCmd(),
		newDLQCmd(),
		newServeCmd(),
		policyGroup(newPolicyCmd()),
		newRunCmd(),
		newEnqueueCmd(),
		newBenchCmd(),
		newWorkersCmd(),
		newStagesCmd(),
		newOutboxCmd(),
	)
	return root
}

// policyGroup returns the `policy` command: p itself when it is one, else a
// group holding p.
func policyGroup(p *cobra.Command) *cobra.Command {
	if p.Name() == "policy" {
		return p
	}
	g := newGroupCmd("policy", "Work with retry policies")
	g.AddCommand(p)
	return g
}

// newGroupCmd returns a command that only holds subcommands: without
// arguments it prints its help; an unknown subcommand is a usage error.
func newGroupCmd(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// noArgs rejects positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageErrorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// oneID accepts exactly one argument, a positive integer ID.
func oneID(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageErrorf("%s needs exactly one %s ID, e.g. %s 42", cmd.CommandPath(), what, cmd.CommandPath())
		}
		if _, err := parseID(args[0]); err != nil {
			return usageErrorf("%s: %s ID %q is not a positive integer", cmd.CommandPath(), what, args[0])
		}
		return nil
	}
}
