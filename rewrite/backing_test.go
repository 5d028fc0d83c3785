package rewrite

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestFillTempOffMapping: an image that left its mapping (an append past
// the room it was given moves it to the heap) is written whole, and what
// the mapping wrote does not show through the holes writeSparse leaves.
func TestFillTempOffMapping(t *testing.T) {
	tmp, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	fb := &fileBacking{f: tmp}
	mem, err := fb.Alloc(4 * 4096)
	if err != nil {
		t.Skipf("no fallocate or shared mapping here: %v", err)
	}
	for i := range mem {
		mem[i] = 0xee
	}
	out := make([]byte, 3*4096) // a zero page in the middle
	out[0], out[2*4096] = 1, 2
	if fb.holds(out) || !fb.holds(mem[:10]) {
		t.Fatal("holds: a heap slice held, or the mapping's own start not")
	}
	if err := fillTemp(tmp, fb, out, nil); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(tmp.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, out) {
		t.Fatalf("file holds %d bytes, not the image's %d (first %#x, middle page %#x)", len(got), len(out), got[0], got[4096])
	}
}

// TestRewriteFileLeavesNoTemp: a rewrite that fails (the input is not
// an ELF file) leaves neither output nor temporary file, and one that
// succeeds only its output.
func TestRewriteFileLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("not an ELF file at all"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RewriteFile(bad, filepath.Join(dir, "bad.out"), Options{}); err == nil {
		t.Fatal("a non-ELF input rewrote")
	}
	if _, err := RewriteFile(gzipPath, filepath.Join(dir, "gzip"), Options{}); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "bad" || names[1] != "gzip" {
		t.Fatalf("directory holds %q, want bad and gzip", names)
	}
}
