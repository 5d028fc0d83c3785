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

// limitMemory sets a soft memory limit for rewriting the file at path,
// unless GOMEMLIMIT is set: 64 times its size, 512 MiB at least. With
// GOGC at 400 alone a big input's heap grows to five times what is live
// (cc1plus, 35 MB: 3.96 GB peak, 2.11 GB with this limit, in the same
// time); a limit below what is live would only make the collector run
// more, never fail.
func limitMemory(path string) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if fi, err := os.Stat(path); err == nil {
		debug.SetMemoryLimit(max(512<<20, 64*fi.Size()))
	}
}
