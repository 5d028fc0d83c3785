package symbols

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/fixtures"
)

// build compiles a two-function C program with gcc (skipped without it).
func build(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	os.WriteFile(src, []byte("int alpha(int x){return x*3+1;}\nint main(int c,char**v){return alpha(c);}\n"), 0o644)
	out := filepath.Join(dir, "p")
	cmd := exec.Command("gcc", append(append([]string{"-O1", "-Wl,--build-id", "-o", out}, args...), src)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	return out
}

func TestLoad(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"symtab", nil, false},
		{"dwarf", []string{"-g"}, false},
		{"stripped, no .eh_frame", []string{"-s"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := build(t, tt.args...)
			if tt.wantErr {
				// nothing left to name a function by
				if b, err := exec.Command("objcopy", "-R", ".eh_frame", "-R", ".eh_frame_hdr", p).CombinedOutput(); err != nil {
					t.Skipf("objcopy: %v %s", err, b)
				}
			}
			tab, err := Load(p)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Load of a stripped file: %d funcs, want ErrNoSymbols", len(tab.Funcs))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var alpha *Func
			for i := range tab.Funcs {
				if tab.Funcs[i].Name == "alpha" {
					alpha = &tab.Funcs[i]
				}
			}
			if alpha == nil {
				t.Fatalf("no alpha in %+v", tab.Funcs)
			}
			if have := tab.Lookup(alpha.Start + 1); have == nil || have.Name != "alpha" {
				t.Errorf("Lookup(alpha+1) = %+v, want alpha", have)
			}
			if have := tab.Lookup(0); have != nil {
				t.Errorf("Lookup(0) = %+v, want nil", have)
			}
		})
	}
}

// TestLoadStripped: a stripped binary's functions are named from its
// .eh_frame FDEs, sub_<hex start>, with the bounds the symbols had.
func TestLoadStripped(t *testing.T) {
	full, err := Load(build(t))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Load(build(t, "-s"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.Source, "eh_frame") {
		t.Errorf("Source = %q, want eh_frame in it", tab.Source)
	}
	for _, name := range []string{"alpha", "main"} {
		var want *Func
		for i := range full.Funcs {
			if full.Funcs[i].Name == name {
				want = &full.Funcs[i]
			}
		}
		if want == nil {
			t.Fatalf("no %s in the unstripped build", name)
		}
		have := tab.Lookup(want.Start)
		if have == nil || have.Name != fmt.Sprintf("sub_%x", want.Start) || have.Start != want.Start || have.End < want.End {
			t.Errorf("%s at %#x-%#x: stripped lookup gives %+v", name, want.Start, want.End, have)
		}
	}
}

func TestResolver(t *testing.T) {
	p := build(t)
	id, err := BuildID(p)
	if err != nil || len(id) < 8 {
		t.Fatalf("BuildID = %q, %v", id, err)
	}
	r := NewResolver()
	if _, err := r.Table(id, p); err != nil {
		t.Errorf("Table(own build-id): %v", err)
	}
	if _, err := r.Table("00112233", p); err == nil {
		t.Error("Table with another build-id: no error")
	}
	if _, err := r.Table(id, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Table of a missing file: no error")
	}
	// A separate debug file found by build-id.
	dbg := t.TempDir()
	os.MkdirAll(filepath.Join(dbg, id[:2]), 0o755)
	b, _ := os.ReadFile(p)
	os.WriteFile(filepath.Join(dbg, id[:2], id[2:]+".debug"), b, 0o644)
	r = NewResolver()
	r.DebugDir = dbg
	if tab, err := r.Table(id, ""); err != nil || len(tab.Funcs) == 0 {
		t.Errorf("Table by build-id only: %v", err)
	}
}

func TestLines(t *testing.T) {
	for _, tt := range []struct {
		name      string
		args      []string
		wantLines bool
	}{{"dwarf", []string{"-g"}, true}, {"symtab only", nil, false}} {
		t.Run(tt.name, func(t *testing.T) {
			p := build(t, tt.args...)
			tab, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			var alpha *Func
			for i := range tab.Funcs {
				if tab.Funcs[i].Name == "alpha" {
					alpha = &tab.Funcs[i]
				}
			}
			if alpha == nil {
				t.Fatal("no alpha")
			}
			file, line, ok := tab.LineAt(alpha.Start)
			if ok != tt.wantLines {
				t.Fatalf("LineAt(alpha) ok = %v, want %v (%s:%d)", ok, tt.wantLines, file, line)
			}
			if !ok {
				return
			}
			if have, want := filepath.Base(file), "p.c"; have != want || line != 1 {
				t.Errorf("LineAt(alpha) = %s:%d, want %s:1", file, line, want)
			}
			if !filepath.IsAbs(file) {
				t.Errorf("LineAt(alpha) file %q is not absolute", file)
			}
			ls, err := tab.Lines()
			if err != nil {
				t.Fatal(err)
			}
			seen := map[uint32]bool{}
			for i, r := range ls.Ranges {
				if r.End <= r.Start || i > 0 && ls.Ranges[i-1].End > r.Start {
					t.Fatalf("range %d %+v: empty or overlaps the one before", i, r)
				}
				if filepath.Base(ls.Files[r.File]) == "p.c" {
					seen[r.Line] = true
				}
			}
			if !seen[1] || !seen[2] {
				t.Errorf("lines of p.c: %v, want 1 and 2", seen)
			}
			n := 0
			ls.Overlapping(alpha.Start, alpha.End, func(r LineRange) {
				n++
				if r.Line != 1 {
					t.Errorf("alpha's code has line %d, want 1", r.Line)
				}
			})
			if n == 0 {
				t.Error("Overlapping(alpha) found no range")
			}
		})
	}
}

func TestImage(t *testing.T) {
	p := build(t)
	im, err := LoadImage(p)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	f := tab.Funcs[0]
	for _, fn := range tab.Funcs {
		if fn.Name == "alpha" {
			f = fn
		}
	}
	b := im.Bytes(f.Start, int(f.End-f.Start))
	if len(b) != int(f.End-f.Start) {
		t.Fatalf("Bytes(alpha) = %d bytes, want %d", len(b), f.End-f.Start)
	}
	if im.Bytes(0, 4) != nil && im.LinkBase == 0 {
		// A PIE's first page holds the ELF header, which is not code.
		t.Errorf("Bytes(0) of a PIE returned code")
	}
	if im.Restored != 0 {
		t.Errorf("Restored = %d for a file stint did not rewrite", im.Restored)
	}
	if _, err := LoadImage(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("LoadImage of a missing file: no error")
	}
	r := NewResolver()
	if _, err := r.Image("00112233", p); err == nil {
		t.Error("Image with another build-id: no error")
	}
	if im2, err := r.Image("", p); err != nil || im2.Bytes(f.Start, 1) == nil {
		t.Errorf("Image by path: %v", err)
	}
}

func TestResolverDebugFileLines(t *testing.T) {
	// The module file has symbols but no DWARF; its separate debug
	// file (found by build-id) has both: the line table comes from it.
	p := build(t, "-g")
	id, err := BuildID(p)
	if err != nil || id == "" {
		t.Fatalf("BuildID = %q, %v", id, err)
	}
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not found")
	}
	dbg := t.TempDir()
	os.MkdirAll(filepath.Join(dbg, id[:2]), 0o755)
	if b, err := exec.Command("objcopy", "--only-keep-debug", p, filepath.Join(dbg, id[:2], id[2:]+".debug")).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, b)
	}
	if b, err := exec.Command("objcopy", "--strip-debug", p).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, b)
	}
	if tab, err := Load(p); err != nil || tab.lines != nil {
		t.Fatalf("stripped-debug file: %v, lines %v", err, tab.lines != nil)
	}
	r := NewResolver()
	r.DebugDir = dbg
	tab, err := r.Table(id, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tab.Funcs {
		if f.Name == "alpha" {
			if _, line, ok := tab.LineAt(f.Start); !ok || line != 1 {
				t.Errorf("LineAt(alpha) = %d, %v; want 1 from the debug file", line, ok)
			}
			return
		}
	}
	t.Error("no alpha")
}

func TestLinesAtNil(t *testing.T) {
	var l *Lines
	if _, _, ok := l.At(5); ok {
		t.Error("nil Lines: At found a line")
	}
	var tab *Table
	if ls, err := tab.Lines(); ls != nil || err != nil {
		t.Errorf("nil Table: Lines = %v, %v", ls, err)
	}
}

// FuzzLoad feeds mutated ELF files to Load, LoadImage and the line
// table reader: errors are fine, panics are not.
func FuzzLoad(f *testing.F) {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
			break
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if tab, err := Load(p); err == nil {
			tab.LineAt(0x1000)
		}
		if im, err := LoadImage(p); err == nil {
			im.Bytes(0x1000, 16)
		}
	})
}

// TestLoadGoStripped: a Go executable stripped of its symbols and DWARF
// (-ldflags=-s -w) is named from its .gopclntab: the same functions at
// the same starts as the unstripped build's symbols.
func TestLoadGoStripped(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not found")
	}
	dir, err := fixtures.Dir()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, b := range []struct{ name, flags string }{{"full", ""}, {"stripped", "-s -w"}} {
		cmd := exec.Command(goCmd, "build", "-trimpath", "-ldflags="+b.flags, "-o", filepath.Join(out, b.name), ".")
		cmd.Dir = filepath.Join(dir, "go", "goroutines")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, o)
		}
	}
	full, err := Load(filepath.Join(out, "full"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Load(filepath.Join(out, "stripped"))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Source != filepath.Join(out, "stripped")+": gopclntab" {
		t.Errorf("Source = %q", tab.Source)
	}
	checked := 0
	for _, fn := range full.Funcs {
		if fn.Name != "main.build" && fn.Name != "main.(*node).sum" && fn.Name != "runtime.goexit" {
			continue
		}
		checked++
		if have := tab.Lookup(fn.Start + 1); have == nil || have.Name != fn.Name || have.Start != fn.Start {
			t.Errorf("%s at %#x: stripped lookup gives %+v", fn.Name, fn.Start, have)
		}
	}
	if checked != 3 {
		t.Errorf("found %d of the 3 functions in the unstripped build", checked)
	}
}

// TestLoadDemangles: C++ functions are named as people write them.
func TestLoadDemangles(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.cc")
	os.WriteFile(src, []byte("namespace ns { __attribute__((noinline)) int twice(int x) { return 2 * x; } }\nint main(int c, char **) { return ns::twice(c); }\n"), 0o644)
	out := filepath.Join(dir, "p")
	if b, err := exec.Command(gxx, "-O1", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, b)
	}
	tab, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tab.Funcs {
		if f.Name == "ns::twice(int)" {
			return
		}
	}
	t.Errorf("no ns::twice(int) among %d functions", len(tab.Funcs))
}
