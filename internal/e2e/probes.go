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
	return moduleTable[runtime.Probe](path, func(m *runtime.Module) (uint64, uint32) { return m.ProbesVaddr, m.NProbes })
}

// RetsTable reads the ret lists of a rewritten file's direct calls
// (STINT_MF_RETS): at a probe's Rets offset, a count and that many probe
// indices.
func RetsTable(path string) ([]uint32, error) {
	_, t, err := moduleTable[uint32](path, func(m *runtime.Module) (uint64, uint32) { return m.RetsVaddr, m.NRets })
	return t, err
}

// ReadsTable reads the (reader, read) pairs of a rewritten file's
// switchable readees: sorted by reader, then the same pairs by read.
func ReadsTable(path string) ([]runtime.Read, error) {
	_, t, err := moduleTable[runtime.Read](path, func(m *runtime.Module) (uint64, uint32) { return m.ReadsVaddr, 2 * m.NReads })
	return t, err
}

// Patched reads the patch table the rewriter left in a rewritten file.
func Patched(path string) (*runtime.Module, []runtime.Patch, error) {
	return moduleTable[runtime.Patch](path, func(m *runtime.Module) (uint64, uint32) { return m.PatchesVaddr, m.NPatches })
}

// readVaddr reads n bytes at link vaddr from the file's loaded segments.
func readVaddr(f *elf.File, vaddr uint64, n int) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			_, err := p.ReadAt(b, int64(vaddr-p.Vaddr))
			return b, err
		}
	}
	return nil, fmt.Errorf("%#x+%d is not in a loaded segment", vaddr, n)
}

// moduleTable finds the module descriptor of a rewritten file and decodes
// the table of Ts that at(m) locates (link vaddr, entries).
func moduleTable[T any](path string, at func(m *runtime.Module) (uint64, uint32)) (*runtime.Module, []T, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	magic := binary.LittleEndian.AppendUint64(nil, 0x444f4d544e495453) // STINTMOD
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return nil, nil, err
		}
		i := bytes.Index(data, magic)
		if i < 0 {
			continue
		}
		var m runtime.Module
		if err := binary.Read(bytes.NewReader(data[i:]), binary.LittleEndian, &m); err != nil {
			return nil, nil, err
		}
		vaddr, count := at(&m)
		table := make([]T, count)
		var zero T
		raw, err := readVaddr(f, vaddr, int(count)*int(unsafe.Sizeof(zero)))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, table); err != nil {
			return nil, nil, err
		}
		return &m, table, nil
	}
	return nil, nil, fmt.Errorf("%s: no stint module descriptor", path)
}
