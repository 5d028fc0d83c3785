package e2e

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// TestHugeBacking: at load the runtime replaces the whole 2 MiB pages of
// a module's tables and trampolines with anonymous memory holding the
// same bytes (runtime/src/chunks.c, tables_huge), unless STINT_HUGE=0.
// libsqlite3 (about 7 MiB of tables and 5.5 MiB of trampolines) runs
// where it cannot create its trace directory (untracedOut): the runtime
// maps and copies everything, then finds it cannot trace and gives the
// code its original bytes back, leaving the tables and trampolines as
// the file has them (STINT_DISABLE=1 would skip the copies); sqlite3
// then waits for input while /proc/PID/maps and /proc/PID/mem are read. The
// test fails if the ranges are not replaced, if STINT_HUGE=0 does not
// stop it, or if one byte of them differs from the file.
//
// The rewriter lays both out on 2 MiB boundaries (the tables from one,
// the trampolines from one, the runtime's code and the module header in
// the pages below): the test checks that in the file, and, where the
// kernel put the library on a 2 MiB boundary (it does for mappings that
// large), that every byte of both ranges is anonymous.
func TestHugeBacking(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	dir := t.TempDir()
	out, _ := rewritten(t, lib, dir, rewrite.Options{Budget: "10%", Period: "100ms"})
	m, _, _ := probesAndPatches(t, out)
	file, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	fileBytes := func(lo, hi uint64) []byte {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && p.Vaddr <= lo && hi <= p.Vaddr+p.Filesz {
				return file[p.Off+lo-p.Vaddr : p.Off+hi-p.Vaddr]
			}
		}
		t.Fatalf("%#x-%#x is not in one load segment of the file", lo, hi)
		return nil
	}
	const probeSize, patchSize, hugePage = 64, 32, 2 << 20
	blobPages := (uint64(len(runtime.Blob())) + 4095) &^ 4095
	ranges := []struct {
		name   string
		lo, hi uint64 // module-relative
	}{
		{"probe and patch tables", m.ProbesVaddr, m.PatchesVaddr + uint64(m.NPatches)*patchSize},
		{"trampolines", m.TrampLo + blobPages, m.TrampHi},
	}
	for _, r := range ranges {
		if r.lo%hugePage != 0 || r.hi-r.lo <= hugePage {
			t.Errorf("%s at %#x-%#x: want a 2 MiB boundary at the start and more than 2 MiB", r.name, r.lo, r.hi)
		}
	}
	if m.ProbesVaddr+uint64(m.NProbes)*probeSize > m.PatchesVaddr {
		t.Fatalf("the patch table (%#x) does not follow the probe table (%#x, %d probes)", m.PatchesVaddr, m.ProbesVaddr, m.NProbes)
	}
	for _, huge := range []bool{true, false} {
		t.Run(fmt.Sprintf("huge=%v", huge), func(t *testing.T) {
			env := append(traceEnv(untracedOut(t)), "LD_LIBRARY_PATH="+dir)
			if !huge {
				env = append(env, "STINT_HUGE=0")
			}
			cmd, stdin, stderr := startSqlite3(t, env, ".print ready\n", "ready\n")
			base, mem := openMem(t, cmd.Process.Pid, out)
			maps, err := readMaps(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range ranges {
				lo, hi := base+r.lo, base+r.hi
				anon := anonBytes(t, maps, lo, hi, out, r.name)
				// the whole 2 MiB pages inside, less at most one for the
				// parts left out (the runtime's code, the dynamic section)
				inner := (hi&^(2<<20-1) - (lo+2<<20-1)&^(2<<20-1))
				switch {
				case huge && base%hugePage == 0 && anon != hi-lo:
					t.Errorf("%s (%#x-%#x, base on a 2 MiB boundary): %d bytes anonymous, want all %d", r.name, lo, hi, anon, hi-lo)
				case huge && base%hugePage != 0 && (anon == 0 || anon%(2<<20) != 0 || anon+2<<20 < inner):
					t.Errorf("%s (%#x-%#x): %d bytes anonymous, want whole 2 MiB pages covering about %d", r.name, lo, hi, anon, inner)
				case !huge && anon != 0:
					t.Errorf("%s: %d bytes anonymous with STINT_HUGE=0", r.name, anon)
				}
				got := make([]byte, hi-lo)
				if _, err := mem.ReadAt(got, int64(lo)); err != nil {
					t.Fatal(err)
				}
				want := fileBytes(r.lo, r.hi)
				if !bytes.Equal(got, want) {
					i := 0
					for i < len(got) && got[i] == want[i] {
						i++
					}
					t.Errorf("%s: memory differs from the file from %#x on (% x, want % x)", r.name, r.lo+uint64(i), got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
				}
				t.Logf("%s: %d of %d bytes anonymous (base %#x)", r.name, anon, hi-lo, base)
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("sqlite3: %v, stderr %q", err, stderr.String())
			}
		})
	}
}

// TestHugeNotForEvery: a --every or --counts module's tables and
// trampolines stay in the file's pages (nothing writes them; the copy
// cost start-up and bought nothing in its runs).
func TestHugeNotForEvery(t *testing.T) {
	lib := filepath.Join(libdir, "libsqlite3.so.0")
	need(t, lib, "/usr/bin/sqlite3")
	for name, opts := range map[string]rewrite.Options{"--tool call --every": {Tool: rewrite.ToolCall, Every: true}, "--counts": {Tool: rewrite.ToolBlock, Counts: true}} {
		dir := t.TempDir()
		out, _ := rewritten(t, lib, dir, opts)
		m, _, _ := probesAndPatches(t, out)
		blobPages := (uint64(len(runtime.Blob())) + 4095) &^ 4095
		env := append(traceEnv(untracedOut(t)), "LD_LIBRARY_PATH="+dir)
		cmd, stdin, stderr := startSqlite3(t, env, ".print ready\n", "ready\n")
		base, _ := openMem(t, cmd.Process.Pid, out)
		maps, err := readMaps(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := base+m.TrampLo+blobPages, base+m.TrampHi
		if hi-lo <= 2<<20 {
			t.Fatalf("trampolines %#x-%#x: want more than 2 MiB, so that huge pages would cover some", lo, hi)
		}
		if anon := anonBytes(t, maps, lo, hi, out, "trampolines"); anon != 0 {
			t.Errorf("%s: trampolines: %d bytes anonymous, want none", name, anon)
		}
		lo = base + m.ProbesVaddr
		hi = lo + uint64(m.NProbes)*runtime.ProbeStructSize
		if opts.Counts && hi-lo <= 2<<20 {
			t.Fatalf("probe table %#x-%#x: want more than 2 MiB, so that huge pages would cover some", lo, hi)
		}
		if anon := anonBytes(t, maps, lo, hi, out, "probe table"); anon != 0 {
			t.Errorf("%s: probe table: %d bytes anonymous, want none", name, anon)
		}
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("sqlite3: %v, stderr %q", err, stderr.String())
		}
	}
}

// anonBytes returns how many bytes of [lo, hi) are anonymous memory in
// maps; a part mapped from a file other than out is an error.
func anonBytes(t *testing.T, maps []mapping, lo, hi uint64, out, name string) uint64 {
	t.Helper()
	var anon uint64
	for _, mp := range maps {
		if mp.hi <= lo || mp.lo >= hi {
			continue
		}
		switch {
		case mp.path == out:
		case mp.path == "" && mp.inode == 0:
			anon += min(mp.hi, hi) - max(mp.lo, lo)
		default:
			t.Errorf("%s: %#x-%#x is mapped from %q", name, mp.lo, mp.hi, mp.path)
		}
	}
	return anon
}

type mapping struct {
	lo, hi uint64
	inode  uint64
	path   string
}

// readMaps reads /proc/PID/maps.
func readMaps(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		a, b, _ := strings.Cut(fs[0], "-")
		lo, err1 := strconv.ParseUint(a, 16, 64)
		hi, err2 := strconv.ParseUint(b, 16, 64)
		ino, err3 := strconv.ParseUint(fs[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("maps line %q", sc.Text())
		}
		mp := mapping{lo: lo, hi: hi, inode: ino}
		if len(fs) >= 6 {
			mp.path = fs[5]
		}
		out = append(out, mp)
	}
	return out, sc.Err()
}

// untracedOut is a trace directory the runtime cannot create (below a
// regular file): a run then maps its modules as a traced one does, says
// it runs untraced and gives the code its original bytes back. Under
// STINT_DISABLE=1 it maps nothing (TestDisabledMapsNothing).
func untracedOut(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(f, "traces")
}
