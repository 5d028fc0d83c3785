// Package cli holds what every stint command shares: usage errors (exit
// status 2), exit codes, and a main that runs a command with a context
// cancelled by Ctrl-C. Commands keep their flags and help in cmd/NAME and
// their work in the libraries; this package only wires them to the OS.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/pflag"
)

// Exit statuses shared by every command.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// UsageError is a command-line mistake: the command exits with ExitUsage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message (%w wraps).
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// ExitStatus is an error that carries the exit status a command wants,
// for commands that pass on a child's status (qos run). Its message may
// be empty: then nothing is printed.
type ExitStatus struct {
	Code int
	Msg  string
}

func (e *ExitStatus) Error() string { return e.Msg }

// ExitCode maps an error returned by a command's run to its exit status:
// 0 for nil, the code of an *ExitStatus, 2 for a *UsageError, else 1.
func ExitCode(err error) int {
	var ue *UsageError
	var es *ExitStatus
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &es):
		return es.Code
	case errors.As(err, &ue):
		return ExitUsage
	}
	return ExitError
}

// RunFunc is a command's entry point: everything but the process.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Main runs a command with os.Args, prints its error as "name: error"
// and exits with ExitCode. --version anywhere before "--" prints Version
// and exits 0. SIGINT and SIGTERM cancel the run's context; a run they
// stopped exits 128 + the signal's number (130 for Ctrl-C), as a shell
// reports a program the signal killed.
func Main(name string, run RunFunc) {
	args := os.Args[1:]
	if wantsVersion(args) {
		printVersion(os.Stdout, name)
		os.Exit(ExitOK)
	}
	if sh, ok := completionArg(args); ok {
		script, err := completionScript(name, sh)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(ExitCode(err))
		}
		io.WriteString(os.Stdout, script)
		os.Exit(ExitOK)
	}
	if len(args) > 0 && args[0] == "__complete" {
		words := args[1:]
		if len(words) == 0 {
			words = []string{""}
		}
		completer = &struct {
			word string
			w    io.Writer
		}{words[len(words)-1], os.Stdout}
		run(context.Background(), words, io.Discard, io.Discard)
		os.Exit(ExitOK) // the command never got to its parsing: nothing to offer
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value
	go func() {
		if s, ok := <-sigs; ok {
			got.Store(s)
			cancel()
		}
	}()
	err := run(ctx, args, os.Stdout, os.Stderr)
	signal.Stop(sigs)
	cancel()
	s, _ := got.Load().(os.Signal)
	if code := interruptedCode(s); code != 0 {
		fmt.Fprintf(os.Stderr, "%s: interrupted (%v)\n", name, s)
		os.Exit(code)
	}
	if err != nil && err.Error() != "" {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	os.Exit(ExitCode(err))
}

// interruptedCode is the exit status of a run that signal s stopped: 128
// + its number; 0 when no signal came.
func interruptedCode(s os.Signal) int {
	if ss, ok := s.(syscall.Signal); ok {
		return 128 + int(ss)
	}
	return 0
}

// ParseFlags parses args into fs quietly, turning pflag's errors into
// usage errors that point at the subcommand's help ("run 'prog NAME
// --help'", NAME being fs.Name()), or at the program's when fs is named
// prog (a command without subcommands). pflag.ErrHelp comes back as it
// is, for the caller to print its help.
func ParseFlags(fs *pflag.FlagSet, prog string, args []string) error {
	CompleteFlags(fs)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		if fs.Name() == prog {
			return Usagef("%v (run '%s --help')", err, prog)
		}
		return Usagef("%s: %v (run '%s %s --help')", fs.Name(), err, prog, fs.Name())
	}
	return nil
}
