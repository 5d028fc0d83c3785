// Command rewrite instruments an x86-64 ELF executable or shared object
// so that, when it runs, it writes an Apache Arrow trace of its branches,
// calls, syscalls or basic blocks. Run `rewrite --help` for the details.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
)

func main() {
	// A rewrite is one short burst of allocation that lives until the
	// output is written; collecting as often as the default does spends a
	// fifth of the time scanning it. GOGC, when set, still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}
