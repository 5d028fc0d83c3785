package formats

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// cwriterEvents mirrors the values cwriter.c writes.
func cwriterEvents(n int) []Event {
	rows := []int{3, 1, 7, 5, 2}
	var ev []Event
	g := uint64(0)
	for b, r := range rows {
		for i := 0; i < r && len(ev) < n; i++ {
			kind := Kind(1 + g%9)
			e := Event{Kind: kind, TID: 100 + uint32(b), Time: 1000000 + 3*g,
				SrcModule: uint16(g % 2), Src: 0x401000 + 16*g, DstModule: uint16(g % 2), Dst: 0x402000 + 8*g}
			if g%5 == 0 {
				e.DstModule = NoModule
			}
			if kind == KindSyscall {
				e.Dst, e.Value = 0, 60+g
			}
			ev = append(ev, e)
			g++
		}
	}
	return ev
}

// buildCWriter compiles testdata/cwriter/cwriter.c against the committed
// header.
func buildCWriter(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles C: skipped under -short")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	exe := filepath.Join(t.TempDir(), "cwriter")
	cmd := exec.Command(gcc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join("..", "runtime", "include"), "-o", exe, filepath.Join("testdata", "cwriter", "cwriter.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	return exe
}

func TestCWriter(t *testing.T) {
	exe := buildCWriter(t)
	wantRun := Run{Binary: "/usr/bin/cwriter", BuildID: "c0ffee", Tool: "branch", Options: "tool=branch every=1",
		PID: 77, PPID: 7, StartNS: 1795000000123456789, MonoStartNS: 999000}
	wantMods := []Module{
		{ID: 0, Path: "/usr/bin/cwriter", BuildID: "c0ffee", Base: 93824992231424, Size: 8192, Rewritten: true},
		{ID: 1, Path: "/lib/x86_64-linux-gnu/libc.so.6", Base: 140737351516160, Size: 1921024},
	}
	for _, tc := range []struct {
		mode string
		end  End
	}{{"", EndMarker}, {"zeros", EndZeros}} {
		t.Run("end="+tc.end.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "c.arrow")
			args := []string{out}
			if tc.mode != "" {
				args = append(args, tc.mode)
			}
			if b, err := exec.Command(exe, args...).CombinedOutput(); err != nil {
				t.Fatalf("cwriter: %v\n%s", err, b)
			}
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			tr, err := ReadFile(out, WithAllocator(mem))
			if err != nil {
				t.Fatal(err)
			}
			want := cwriterEvents(16)
			if !reflect.DeepEqual(tr.Events, want) {
				t.Errorf("events differ:\nhave %v\nwant %v", tr.Events, want)
			}
			if tr.Batches != 4 || tr.End != tc.end {
				t.Errorf("have %d batches, end %v; want 4, %v", tr.Batches, tr.End, tc.end)
			}
			if tr.Run != wantRun || !reflect.DeepEqual(tr.Modules, wantMods) {
				t.Errorf("metadata: have %+v\n%+v", tr.Run, tr.Modules)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			// arrow-go also takes the zero tail as the end of the stream.
			checkWithArrow(t, b, want, mem)
		})
	}
}

// TestHeaderFreestanding compiles the header alone the way the runtime
// is compiled: no libc headers, every warning an error (an unused static
// array must not warn).
func TestHeaderFreestanding(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles C: skipped under -short")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	src := filepath.Join(t.TempDir(), "h.c")
	if err := os.WriteFile(src, []byte("#include \"stint_arrow.h\"\nint stint_unused_check;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gcc, "-std=c11", "-ffreestanding", "-nostdinc", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
		"-I", filepath.Join("..", "runtime", "include"), src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
}
