// Command rewrite instruments an x86-64 ELF executable or shared object
// so that, when it runs, it writes an Apache Arrow trace of its branches,
// calls, syscalls or basic blocks. Run `rewrite --help` for the details.
package main

import (
	"os"
	"runtime/debug"

	"github.com/stint-project/stint/internal/cli"
)

func main() {
	// A rewrite is one short burst of allocation that lives until the
	// output is written; collecting as often as the default does spends a
	// fifth of the time scanning it. GOGC, when set, still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	cli.Main("rewrite", run)
}
