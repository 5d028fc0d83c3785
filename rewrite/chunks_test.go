package rewrite

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/runtime"
)

// image reads link vaddrs of a rewritten file through its PT_LOADs.
type image struct {
	f    *elf.File
	data []byte
}

func (im *image) at(t *testing.T, vaddr, n uint64) []byte {
	t.Helper()
	for _, p := range im.f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+n <= p.Vaddr+p.Filesz {
			return im.data[p.Off+(vaddr-p.Vaddr) : p.Off+(vaddr-p.Vaddr)+n]
		}
	}
	t.Fatalf("%#x+%d is in no PT_LOAD", vaddr, n)
	return nil
}

// TestChunkTables checks the ABI 2 tables of a rewritten gzip: the stub
// list, the chunks over the stub area and the chunks' dependencies.
func TestChunkTables(t *testing.T) {
	orig := readInput(t, gzipPath)
	out, st, err := RewriteBytes(orig, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Stubs == 0 || st.Chunks == 0 {
		t.Fatalf("no stubs (%d) or chunks (%d): the test needs punned sites", st.Stubs, st.Chunks)
	}
	f, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	im := &image{f, out}
	le := binary.LittleEndian
	sd := f.Section(".stint.data")
	m := im.at(t, sd.Addr, runtime.ModuleStructSize)
	var mod runtime.Module
	if err := binary.Read(bytes.NewReader(m), le, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.ABIVersion != runtime.ABIVersion || int(mod.NStubs) != st.Stubs || int(mod.NChunks) != st.Chunks ||
		int(mod.NDeps) != st.Deps || mod.StubAreaSize != st.ChunkBytes {
		t.Fatalf("module: version %d stubs %d chunks %d deps %d area %#x; stats %d %d %d %#x",
			mod.ABIVersion, mod.NStubs, mod.NChunks, mod.NDeps, mod.StubAreaSize, st.Stubs, st.Chunks, st.Deps, st.ChunkBytes)
	}
	if opts := string(bytes.TrimRight(mod.Options[:], "\x00")); opts != "tool=branch every=0" {
		t.Errorf("options %q", opts)
	}
	if mod.StubAreaSize == 0 || mod.StubAreaSize%elfout.PageSize != 0 {
		t.Errorf("stub area size %#x", mod.StubAreaSize)
	}
	// Before the stub file, the file carries 16 bytes per stub, not the
	// chunks' bytes.
	if mod.StubFileOff == 0 || mod.StubFileOff > uint64(len(out)) {
		t.Fatalf("stub file at %#x of %#x bytes", mod.StubFileOff, len(out))
	}
	if mod.StubFileOff > uint64(12*len(orig)) {
		t.Errorf("rewritten file is %d bytes before its stub area, %d times the input", mod.StubFileOff, mod.StubFileOff/uint64(len(orig)))
	}

	chunks := make([]runtime.Chunk, mod.NChunks)
	if err := binary.Read(bytes.NewReader(im.at(t, mod.ChunksVaddr, uint64(len(chunks))*runtime.ChunkStructSize)), binary.LittleEndian, chunks); err != nil {
		t.Fatal(err)
	}
	stubs := make([]runtime.Stub, mod.NStubs)
	if err := binary.Read(bytes.NewReader(im.at(t, mod.StubsVaddr, uint64(len(stubs))*runtime.StubStructSize)), binary.LittleEndian, stubs); err != nil {
		t.Fatal(err)
	}
	deps := make([]uint32, mod.NDeps)
	if len(deps) > 0 {
		if err := binary.Read(bytes.NewReader(im.at(t, mod.DepsVaddr, uint64(len(deps))*4)), le, deps); err != nil {
			t.Fatal(err)
		}
	}

	ndeps := uint64(0)
	for k, c := range chunks {
		if c.Vaddr%elfout.PageSize != 0 || c.Size == 0 || c.Size%elfout.PageSize != 0 || c.SrcOff%elfout.PageSize != 0 || c.SrcOff+c.Size > mod.StubAreaSize {
			t.Errorf("chunk %d: %+v (area %#x)", k, c, mod.StubAreaSize)
		}
		if k > 0 && int64(c.Vaddr) < int64(chunks[k-1].Vaddr+chunks[k-1].Size) {
			t.Errorf("chunk %d at %#x overlaps or precedes chunk %d", k, c.Vaddr, k-1)
		}
		if uint64(c.DepsOff) != ndeps {
			t.Errorf("chunk %d: deps_off %d, want %d", k, c.DepsOff, ndeps)
		}
		ndeps += uint64(c.NDeps)
		for _, d := range deps[c.DepsOff : uint64(c.DepsOff)+uint64(c.NDeps)] {
			if d >= mod.NPatches {
				t.Fatalf("chunk %d depends on patch %d of %d", k, d, mod.NPatches)
			}
		}
	}
	if ndeps != uint64(mod.NDeps) {
		t.Errorf("chunks list %d deps, module %d", ndeps, mod.NDeps)
	}

	// Every stub lies in a chunk's part of the area and jumps into the
	// trampolines from where that chunk maps it.
	for k, s := range stubs {
		if k > 0 && s.Off < stubs[k-1].Off+5 {
			t.Fatalf("stub %d at %#x overlaps the one at %#x", k, s.Off, stubs[k-1].Off)
		}
		if s.Code[0] != 0xe9 || s.Code[5] != 0 || s.Code[6] != 0 || s.Code[7] != 0 {
			t.Fatalf("stub %d code % x", k, s.Code)
		}
		mapped := false
		for _, c := range chunks {
			if s.Off < c.SrcOff || s.Off+5 > c.SrcOff+c.Size {
				continue
			}
			// Other chunks overlapping in the area may show this stub at
			// an address nothing jumps to; the one it was placed for
			// must reach the trampolines.
			vaddr := c.Vaddr + (s.Off - c.SrcOff)
			to := vaddr + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(s.Code[1:5]))))
			if to >= mod.TrampLo && to < mod.TrampHi {
				mapped = true
			}
		}
		if !mapped {
			t.Fatalf("stub %d at area offset %#x: no chunk maps it where it reaches the trampolines", k, s.Off)
		}
	}

	// The stub file: a header page, then the area as the runtime builds
	// it from the stub list (stubs_fill): pages holding a stub are int3
	// with the stubs' jmps, every other page is zero (a hole on disk).
	var hdr runtime.StubFile
	if err := binary.Read(bytes.NewReader(out[mod.StubFileOff:]), le, &hdr); err != nil {
		t.Fatal(err)
	}
	if mod.StubFileOff%elfout.PageSize != 0 || hdr.Magic != runtime.StubFileMagic || hdr.Tag != mod.StubFileTag || hdr.Tag == 0 ||
		hdr.AreaSize != mod.StubAreaSize || hdr.NStubs != uint64(mod.NStubs) {
		t.Fatalf("stub file at %#x: header %+v, module tag %#x area %#x stubs %d", mod.StubFileOff, hdr, mod.StubFileTag, mod.StubAreaSize, mod.NStubs)
	}
	area := out[mod.StubFileOff+elfout.PageSize:]
	if uint64(len(area)) != mod.StubAreaSize {
		t.Fatalf("stub area is %#x bytes to the end of the file, module says %#x", len(area), mod.StubAreaSize)
	}
	want := make([]byte, len(area))
	for _, s := range stubs {
		for pg := s.Off / elfout.PageSize; pg <= (s.Off+4)/elfout.PageSize; pg++ {
			if want[pg*elfout.PageSize] == 0 {
				copy(want[pg*elfout.PageSize:(pg+1)*elfout.PageSize], bytes.Repeat([]byte{0xcc}, elfout.PageSize))
			}
		}
	}
	for _, s := range stubs {
		copy(want[s.Off:], s.Code[:5])
	}
	if !bytes.Equal(area, want) {
		for pg := 0; pg < len(area); pg += elfout.PageSize {
			if !bytes.Equal(area[pg:pg+elfout.PageSize], want[pg:pg+elfout.PageSize]) {
				t.Fatalf("stub area page at %#x differs from the stub list's", pg)
			}
		}
	}
	pages := 0
	for pg := 0; pg < len(area); pg += elfout.PageSize {
		if area[pg] != 0 {
			pages++
		}
	}
	if pages != st.StubPages {
		t.Errorf("%d pages of the stub area hold stubs, stats say %d", pages, st.StubPages)
	}
}

// TestRunStubFile runs a rewritten cat on its own /proc/self/maps: its
// chunks are mapped from its file's stub area (no memfd); with the test
// hook, with the stub area cut off the file, or with a stub area that is
// not the module's (a wrong tag), they come from a memfd, and cat still
// behaves as the original.
func TestRunStubFile(t *testing.T) {
	cat := needTool(t, "cat")
	dir := t.TempDir()
	rw := filepath.Join(dir, "cat")
	if _, err := RewriteFile(cat, rw, Options{}); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(rw)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	var mod runtime.Module
	if err := binary.Read(bytes.NewReader((&image{f, out}).at(t, f.Section(".stint.data").Addr, runtime.ModuleStructSize)), binary.LittleEndian, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.NChunks == 0 || mod.StubFileOff == 0 {
		t.Fatalf("cat rewritten with %d chunks, stub file at %#x: nothing to test", mod.NChunks, mod.StubFileOff)
	}
	// Variants of the file: cut before its stub area, and with the
	// area's header tag changed.
	cut := filepath.Join(dir, "cut", "cat")
	bad := filepath.Join(dir, "bad", "cat")
	for path, data := range map[string][]byte{cut: out[:mod.StubFileOff], bad: slices.Concat(out[:mod.StubFileOff+8], []byte{^out[mod.StubFileOff+8]}, out[mod.StubFileOff+9:])} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, path, env string
		memfd           bool
	}{
		{"stub file", rw, "STINT_QUIET_RUN=1", false},
		{"hook", rw, runtime.TestNoStubFileEnv + "=1", true},
		{"cut", cut, "STINT_QUIET_RUN=1", true},
		{"wrong tag", bad, "STINT_QUIET_RUN=1", true},
	} {
		have := runProg(t, []string{c.env, "STINT_OUT=" + t.TempDir()}, nil, c.path, "/proc/self/maps", "/etc/hostname")
		if have.code != 0 || len(have.stderr) != 0 {
			t.Errorf("%s: exit %d, stderr %q", c.name, have.code, have.stderr)
			continue
		}
		maps := string(have.stdout)
		memfd := strings.Contains(maps, "memfd:stint-stubs")
		fromFile := strings.Count(maps, " "+c.path+"\n")
		if memfd != c.memfd {
			t.Errorf("%s: chunks mapped from a memfd: %v, want %v", c.name, memfd, c.memfd)
		}
		// The loader's segments, plus at least one chunk when the
		// stub file is used.
		loads := 0
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				loads++
			}
		}
		if !c.memfd && fromFile <= loads {
			t.Errorf("%s: %d mappings of %s, want more than its %d segments", c.name, fromFile, c.path, loads)
		}
		host, _ := os.ReadFile("/etc/hostname")
		if !strings.HasSuffix(maps, string(host)) {
			t.Errorf("%s: output does not end with /etc/hostname", c.name)
		}
	}
}

// TestDepsClosure checks the closure of a chunk's dependencies over
// Planner.Reads on a hand-made planner result.
func TestDepsClosure(t *testing.T) {
	// Patches 0..3 (instructions 10..13); stub of instruction 10 in chunk
	// 0, of 12 in chunk 1. 11 reads 10's bytes, 13 reads 11's: restoring
	// 10 forces 11 and then 13.
	patchIdx := make([]int32, 14)
	for i := range patchIdx {
		patchIdx[i] = -1
	}
	for k := range 4 {
		patchIdx[10+k] = int32(k)
	}
	reads := [][2]int{{11, 10}, {13, 11}}
	have := closure([][]int{{0}, {2}}, readersOf(reads, patchIdx))
	want := [][]uint32{{0, 1, 3}, {2}}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Errorf("deps %v, want %v", have, want)
	}
}

// TestRunChunkFailure forces chunk mapping failures with the runtime's
// test hook: the program must behave like the original, say once what
// was lost, and still trace.
func TestRunChunkFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gzip; skipped with -short")
	}
	input := readInput(t, gzipPath)
	rw := filepath.Join(t.TempDir(), "gzip")
	st, err := RewriteFile(gzipPath, rw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	msg := regexp.MustCompile(fmt.Sprintf(`^stint: 1 of %d trampoline chunks could not be mapped \(EEXIST\); \d+ sites left unprobed\n$`, st.Chunks))
	want := runProg(t, nil, input, gzipPath, "-c", "-9")
	for _, n := range []int{0, st.Chunks - 1} {
		t.Run(fmt.Sprint("chunk", n), func(t *testing.T) {
			traces := t.TempDir()
			have := runProg(t, []string{fmt.Sprintf("%s=%d", runtime.TestFailChunkEnv, n), "STINT_OUT=" + traces}, input, rw, "-c", "-9")
			if have.code != want.code || !bytes.Equal(have.stdout, want.stdout) {
				t.Errorf("exit %d, %d bytes out; original: exit %d, %d bytes", have.code, len(have.stdout), want.code, len(want.stdout))
			}
			if !msg.Match(have.stderr) {
				t.Errorf("stderr %q, want a match for %s", have.stderr, msg)
			}
			if files, _ := filepath.Glob(filepath.Join(traces, "*.arrow")); len(files) != 1 {
				t.Errorf("trace files %v, want 1", files)
			}
		})
	}
	// Without the failure hook nothing is said, with the memfd or with
	// anonymous copies of the chunks.
	for _, env := range []string{"STINT_QUIET_RUN=1", runtime.TestNoMemfdEnv + "=1"} {
		traces := t.TempDir()
		have := runProg(t, []string{env, "STINT_OUT=" + traces}, input, rw, "-c", "-9")
		if len(have.stderr) != 0 || !bytes.Equal(have.stdout, want.stdout) {
			t.Errorf("%s: stderr %q, stdout equal %v", env, have.stderr, bytes.Equal(have.stdout, want.stdout))
		}
		if files, _ := filepath.Glob(filepath.Join(traces, "*.arrow")); len(files) != 1 {
			t.Errorf("%s: trace files %v, want 1", env, files)
		}
	}
}

// TestRunSharedChunkFailure does the same for a shared object, whose
// stubs may lie below its image.
func TestRunSharedChunkFailure(t *testing.T) {
	dir, shell, st := rewrittenSqlite(t)
	sql := []byte("create table t(a); insert into t values (1),(2),(3); select sum(a), group_concat(a) from t;")
	want := runProg(t, nil, sql, shell, ":memory:")
	msg := regexp.MustCompile(fmt.Sprintf(`^stint: 1 of %d trampoline chunks could not be mapped \(EEXIST\); \d+ sites left unprobed\n$`, st.Chunks))
	for _, n := range []int{0, st.Chunks / 2} {
		have := runProg(t, []string{"LD_LIBRARY_PATH=" + dir, fmt.Sprintf("%s=%d", runtime.TestFailChunkEnv, n), "STINT_OUT=" + t.TempDir()}, sql, shell, ":memory:")
		if have.code != want.code || !bytes.Equal(have.stdout, want.stdout) || !msg.Match(have.stderr) {
			t.Errorf("chunk %d: exit %d stdout %q stderr %q; original exit %d stdout %q", n, have.code, have.stdout, have.stderr, want.code, want.stdout)
		}
	}
}

// TestRunSharedStubFile: a rewritten shared object finds its own file
// through /proc/self/maps (the file mapped at its load base) and maps its
// chunks from it; with the test hook they come from a memfd. sqlite3's
// .shell runs a child whose parent is the shell, so /proc/$PPID/maps is
// the traced process's.
func TestRunSharedStubFile(t *testing.T) {
	dir, shell, _ := rewrittenSqlite(t)
	rw := filepath.Join(dir, "libsqlite3.so.0")
	script := []byte("select 40+2;\n.shell grep -c memfd:stint-stubs /proc/$PPID/maps; grep -c " + rw + " /proc/$PPID/maps\n")
	for _, c := range []struct {
		env   string
		memfd bool
	}{{"STINT_QUIET_RUN=1", false}, {runtime.TestNoStubFileEnv + "=1", true}} {
		have := runProg(t, []string{"LD_LIBRARY_PATH=" + dir, c.env, "STINT_OUT=" + t.TempDir()}, script, shell, ":memory:")
		lines := strings.Fields(string(have.stdout))
		if len(lines) != 3 || lines[0] != "42" {
			t.Fatalf("%s: stdout %q, stderr %q", c.env, have.stdout, have.stderr)
		}
		memfd, file := lines[1] != "0", lines[2]
		if memfd != c.memfd {
			t.Errorf("%s: %s mappings of the memfd, want some: %v", c.env, lines[1], c.memfd)
		}
		// The loader's four or five segments, plus the chunks when they
		// come from the file.
		if n, _ := strconv.Atoi(file); !c.memfd && n < 10 {
			t.Errorf("%s: %d mappings of %s: the chunks are not mapped from it", c.env, n, rw)
		}
	}
}

// TestRewriteFileSameAsBytes: RewriteFile writes the stub area page by
// page (elfout.StubArea.Pages), RewriteBytes appends it whole; the files
// must be the same.
func TestRewriteFileSameAsBytes(t *testing.T) {
	orig := readInput(t, gzipPath)
	want, st, err := RewriteBytes(orig, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Stubs == 0 {
		t.Fatal("no stubs: the test needs punned sites")
	}
	out := filepath.Join(t.TempDir(), "gzip")
	if _, err := RewriteFile(gzipPath, out, Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("RewriteFile wrote %d bytes, RewriteBytes made %d, not the same", len(got), len(want))
	}
}
