// Command rewrite instruments an x86-64 ELF executable or shared object
// so that, when it runs, it writes an Apache Arrow trace of its branches,
// calls, syscalls or basic blocks. Run `rewrite --help` for the details.
package main

import (
	"debug/elf"
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
// unless GOMEMLIMIT is set: 43 bytes per byte of its code (what a rewrite
// keeps live grows with the instructions, not with the file's data), 512
// MiB at least. With GOGC at 400 alone a big input's heap grows to five
// times what is live. The live peak is about 34 bytes per byte of code
// now that the output image is a mapping of the output file, not heap
// (cc1plus 758 MB for 22.2 MB, node 958 MB for 27.8 MB, gctrace with
// GOGC=10); 43 leaves the collector a quarter more, as 60 did before:
// cc1plus peaks at 944,300 KiB with the CPU it took then. 38 kept it
// under 1 GB too, with 28% more CPU. A limit below what is live only
// makes the collector run more (cc1plus at 1,100 MiB when the image
// was heap: 150 collections, twice the CPU), never fails.
func limitMemory(path string) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if n := codeBytes(path); n > 0 {
		debug.SetMemoryLimit(max(512<<20, 43*n))
	}
}

// codeBytes returns the bytes of the executable sections of the ELF file
// at path (or of its executable segments, without section headers), 0
// if it cannot tell.
func codeBytes(path string) int64 {
	f, err := elf.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type == elf.SHT_PROGBITS {
			n += int64(s.Size)
		}
	}
	if n == 0 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
				n += int64(p.Filesz)
			}
		}
	}
	return n
}
