package main

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"github.com/stint-project/stint/internal/cli"
)

const mainHelp = `cct builds and compares call-context trees of stint traces.

A call-context tree has one node per calling context (the path of
functions from the root) and one edge per call made in a context from a
call site. Traces of 'rewrite --tool call' (or --tool branch) hold the
call, ind-call and ret events it is built from; --every traces give
call counts, default-mode traces say which contexts were seen.

Usage:
  cct build [-o FILE] [--json] [--per-thread] [--top N] [--depth N] TRACE...
  cct compare [--json] [--missing N] A B
  cct help [COMMAND]

Exit status: 0 ok, 1 bad data, 2 usage error.
`

type command struct {
	name, help string
	run        func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"build", buildHelp, runBuild},
		{"compare", compareHelp, runCompare},
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		io.WriteString(stderr, mainHelp)
		return cli.Usagef("no command given")
	}
	cli.Subcommands(args, "build", "compare", "help")
	switch args[0] {
	case "-h", "--help":
		_, err := io.WriteString(stdout, mainHelp)
		return err
	case "help":
		if len(args) > 1 {
			for _, c := range commands() {
				if c.name == args[1] {
					_, err := io.WriteString(stdout, c.help)
					return err
				}
			}
			return cli.Usagef("help: unknown command %q (commands: build, compare)", args[1])
		}
		_, err := io.WriteString(stdout, mainHelp)
		return err
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout)
			if errors.Is(err, pflag.ErrHelp) {
				_, err = io.WriteString(stdout, c.help)
			}
			return err
		}
	}
	return cli.Usagef("unknown command %q (run 'cct --help')", args[0])
}

func parseFlags(fs *pflag.FlagSet, args []string) error { return cli.ParseFlags(fs, "cct", args) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func joinPath(p []string) string { return strings.Join(p, " > ") }
