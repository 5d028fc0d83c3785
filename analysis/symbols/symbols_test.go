package symbols

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	}{{"symtab", nil, false}, {"dwarf", []string{"-g"}, false}, {"stripped", []string{"-s"}, true}} {
		t.Run(tt.name, func(t *testing.T) {
			p := build(t, tt.args...)
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
