package e2e

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
)

// TestDisableAcrossSegmentGap: an executable whose two code segments
// have unmapped pages between them (as node's do) has its patches all
// undone under STINT_DISABLE=1, so it reads its own code as the
// original does (gap.S exits with a sum of its bytes). mprotect over
// the whole code range fails there with ENOMEM; the runtime once took
// that for "cannot patch" and left every patch in place. The traced run
// must end normally too (its sum may differ: sites may still be
// patched then).
func TestDisableAcrossSegmentGap(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc")
	}
	dir, err := fixtures.Dir()
	if err != nil {
		t.Fatal(err)
	}
	for _, link := range [][]string{{"-static", "-no-pie"}, {"-static-pie"}} {
		t.Run(link[0], func(t *testing.T) {
			tmp := t.TempDir()
			bin := filepath.Join(tmp, "gap")
			args := append([]string{"-nostdlib", "-Wl,--section-start=.far=0x4800000", "-o", bin, filepath.Join(dir, "gap.S")}, link...)
			if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
				t.Fatalf("gcc: %v\n%s", err, out)
			}
			_, _, nCode, err := fixtures.Run(bin, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := rewritten(t, bin, tmp, rewrite.Options{})
			_, _, dCode, err := fixtures.Run(out, nil, append(traceEnv(filepath.Join(tmp, "traces")), "STINT_DISABLE=1"))
			if err != nil {
				t.Fatal(err)
			}
			if dCode != nCode {
				t.Errorf("STINT_DISABLE=1: exit %d, the original %d (its code not restored)", dCode, nCode)
			}
			_, stderr, tCode, err := fixtures.Run(out, nil, traceEnv(filepath.Join(tmp, "traces")))
			if err != nil {
				t.Fatal(err)
			}
			if tCode < 0 || tCode >= 128 || len(stderr) != 0 {
				t.Errorf("traced run: exit %d, stderr %q", tCode, stderr)
			}
		})
	}
}

// TestDisabledMapsNothing: under STINT_DISABLE=1 a rewritten libsqlite3
// gets its original code back before anything else, and maps none of
// its stub chunks (hundreds of mappings, and the huge copies of its
// tables, that no trampoline would use); traced, the same library maps
// them. Every patch holds its original bytes in the disabled process.
func TestDisabledMapsNothing(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	dir := t.TempDir()
	out, _ := rewritten(t, lib, dir, rewrite.Options{})
	_, _, patches := probesAndPatches(t, out)
	mappings := func(extra ...string) (int, *exec.Cmd) {
		env := append(append(traceEnv(filepath.Join(dir, "traces")), "LD_LIBRARY_PATH="+dir), extra...)
		cmd, stdin, _ := startSqlite3(t, env, ".print ready\n", "ready\n")
		t.Cleanup(func() { stdin.Close() })
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(maps), out+"\n"), cmd
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	loads := 0
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loads++
		}
	}
	f.Close()
	traced, _ := mappings()
	disabled, cmd := mappings("STINT_DISABLE=1")
	// the loader's mappings: a segment each, split around RELRO and
	// the reserved gaps
	if traced < 100 || disabled > 2*loads {
		t.Errorf("mappings of the rewritten file: %d traced (want its chunks: 100 or more), %d disabled (want %d segments' alone)", traced, disabled, loads)
	}
	base, mem := openMem(t, cmd.Process.Pid, out)
	for _, p := range patches {
		got := make([]byte, p.Len)
		if _, err := mem.ReadAt(got, int64(base+p.Addr)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p.Orig[:p.Len]) {
			t.Fatalf("patch at %#x: % x in the disabled process, original % x", p.Addr, got, p.Orig[:p.Len])
		}
	}
}
