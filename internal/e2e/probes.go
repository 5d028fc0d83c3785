// Package e2e holds stint's end-to-end tests: fixtures and real programs
// of this machine are rewritten, run beside the original, and their traces
// checked against the probed sites and against a ptrace oracle.
package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/stint-project/stint/runtime"
)

// Probed reads the probe table the rewriter left in a rewritten file.
func Probed(path string) (*runtime.Module, []runtime.Probe, error) {
	var probes []runtime.Probe
	m, err := moduleTable(path, func(m *runtime.Module) (uint64, int, any) {
		probes = make([]runtime.Probe, m.NProbes)
		return m.ProbesVaddr, int(m.NProbes) * int(unsafe.Sizeof(runtime.Probe{})), probes
	})
	return m, probes, err
}

// Patched reads the patch table the rewriter left in a rewritten file.
func Patched(path string) (*runtime.Module, []runtime.Patch, error) {
	var patches []runtime.Patch
	m, err := moduleTable(path, func(m *runtime.Module) (uint64, int, any) {
		patches = make([]runtime.Patch, m.NPatches)
		return m.PatchesVaddr, int(m.NPatches) * int(unsafe.Sizeof(runtime.Patch{})), patches
	})
	return m, patches, err
}

// moduleTable finds the module descriptor of a rewritten file and decodes
// the table that table(m) names (link vaddr, bytes, destination slice).
func moduleTable(path string, table func(m *runtime.Module) (uint64, int, any)) (*runtime.Module, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	read := func(vaddr uint64, n int) ([]byte, error) {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+uint64(n) <= p.Vaddr+p.Filesz {
				b := make([]byte, n)
				_, err := p.ReadAt(b, int64(vaddr-p.Vaddr))
				return b, err
			}
		}
		return nil, fmt.Errorf("%s: %#x+%d is not in a loaded segment", path, vaddr, n)
	}
	magic := binary.LittleEndian.AppendUint64(nil, 0x444f4d544e495453) // STINTMOD
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return nil, err
		}
		i := bytes.Index(data, magic)
		if i < 0 {
			continue
		}
		var m runtime.Module
		if err := binary.Read(bytes.NewReader(data[i:]), binary.LittleEndian, &m); err != nil {
			return nil, err
		}
		vaddr, n, dst := table(&m)
		raw, err := read(vaddr, n)
		if err != nil {
			return nil, err
		}
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, dst); err != nil {
			return nil, err
		}
		return &m, nil
	}
	return nil, fmt.Errorf("%s: no stint module descriptor", path)
}
