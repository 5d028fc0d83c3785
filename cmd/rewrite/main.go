// Command rewrite instruments an x86-64 ELF executable or shared object
// so that, when it runs, it writes an Apache Arrow trace of its branches,
// calls, syscalls or basic blocks. Run `rewrite --help` for the details.
package main

import (
	"context"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
	stop()
	os.Exit(code)
}
