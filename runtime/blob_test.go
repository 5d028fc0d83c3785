package runtime

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestEmbeddedBlob(t *testing.T) {
	b := Blob()
	if _, err := ParseHeader(b); err != nil {
		t.Fatalf("embedded blob: %v", err)
	}
	if Header.Size != uint32(len(b)) || Header.Magic != BlobMagic {
		t.Errorf("Header = %+v, blob is %d bytes", Header, len(b))
	}
	if Header.ModuleRel != 0 {
		t.Errorf("committed blob has module_rel %d, want 0", Header.ModuleRel)
	}
	sum := sha256.Sum256(b)
	if have := hex.EncodeToString(sum[:]); have != BlobSHA256 {
		t.Errorf("blob/stint.bin has SHA-256 %s, blob.go says %s: run go generate", have, BlobSHA256)
	}
	// Blob returns a copy: the rewriter's patching must not leak.
	b[0] ^= 0xff
	if Blob()[0] == b[0] {
		t.Error("Blob() returned shared memory")
	}
	c := Blob()
	if err := SetModuleRel(c, -0x1234); err != nil {
		t.Fatal(err)
	}
	if h, err := ParseHeader(c); err != nil || h.ModuleRel != -0x1234 {
		t.Errorf("after SetModuleRel: %+v, %v", h, err)
	}
}

// buildBlob runs build.sh into a temporary directory.
func buildBlob(t *testing.T, keepELF bool) (bin []byte, elfPath string) {
	t.Helper()
	needGCC(t)
	needArrowHeader(t)
	for _, tool := range []string{"ld", "objcopy", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "build.sh", dir)
	if keepELF {
		cmd.Env = append(os.Environ(), "STINT_KEEP_ELF=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "stint.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return bin, filepath.Join(dir, "stint.elf")
}

// TestReproducibleBlob builds the blob twice and compares both builds with
// each other and with the committed copy.
func TestReproducibleBlob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the runtime with gcc; skipped under -short")
	}
	a, _ := buildBlob(t, false)
	b, _ := buildBlob(t, false)
	if !bytes.Equal(a, b) {
		t.Fatalf("two builds differ (%d and %d bytes)", len(a), len(b))
	}
	if !bytes.Equal(a, blob) {
		t.Errorf("a fresh build (%d bytes) differs from blob/stint.bin (%d bytes): run go generate ./runtime", len(a), len(blob))
	}
}

// TestBlobNoRelocations checks the linked ELF the blob is cut from: a
// position-independent link (-pie) turns every absolute address into a
// dynamic relocation, so none may exist, nor any GOT, nor writable data.
func TestBlobNoRelocations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the runtime with gcc; skipped under -short")
	}
	bin, elfPath := buildBlob(t, true)
	f, err := elf.Open(elfPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		switch {
		case s.Type == elf.SHT_RELA || s.Type == elf.SHT_REL:
			t.Errorf("section %s (%v) of %d bytes: the blob would need relocating", s.Name, s.Type, s.Size)
		case s.Name == ".got" || s.Name == ".got.plt" || s.Name == ".plt":
			t.Errorf("section %s present: the blob must not use a GOT or PLT", s.Name)
		case s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_WRITE != 0 && s.Name != ".dynamic" && s.Size != 0:
			t.Errorf("writable section %s of %d bytes: the blob is mapped read-only", s.Name, s.Size)
		}
	}
	if ds, err := f.DynamicSymbols(); err == nil {
		for _, s := range ds {
			if s.Section == elf.SHN_UNDEF && s.Name != "" {
				t.Errorf("undefined dynamic symbol %s", s.Name)
			}
		}
	}
	text := f.Section(".text")
	if text == nil {
		t.Fatal("no .text")
	}
	if text.Addr != 0 || text.Size != uint64(len(bin)) {
		t.Errorf(".text at %#x size %d; blob %d bytes", text.Addr, text.Size, len(bin))
	}
	h, err := ParseHeader(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{
		"stint_entry_exec": h.EntryExec, "stint_entry_init": h.EntryInit,
		"stint_entry_fini": h.EntryFini, "stint_probe_entry": h.Probe,
	}
	for _, s := range syms {
		if off, ok := want[s.Name]; ok {
			if uint64(off) != s.Value {
				t.Errorf("%s at %#x, header says %#x", s.Name, s.Value, off)
			}
			delete(want, s.Name)
		}
	}
	for name := range want {
		t.Errorf("symbol %s not found", name)
	}
}

// needArrowHeader skips when include/stint_arrow.h (generated from the
// trace schema in formats/) is not there yet.
func needArrowHeader(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("include", "stint_arrow.h")); err != nil {
		t.Skip("include/stint_arrow.h is missing (generated from the trace schema): ", err)
	}
}
