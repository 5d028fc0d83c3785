package runtime

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"unsafe"
)

// ReadProbes reads the module descriptor and the probe table the
// rewriter left in a rewritten file.
func ReadProbes(path string) (*Module, []Probe, error) {
	return ReadTable[Probe](path, func(m *Module) (uint64, uint32) { return m.ProbesVaddr, m.NProbes })
}

// ReadVaddr reads n bytes at link vaddr from the file's loaded segments.
func ReadVaddr(f *elf.File, vaddr uint64, n int) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			_, err := p.ReadAt(b, int64(vaddr-p.Vaddr))
			return b, err
		}
	}
	return nil, fmt.Errorf("%#x+%d is not in a loaded segment", vaddr, n)
}

// ReadTable finds the module descriptor of a rewritten file and decodes
// the table of Ts that at(m) locates (link vaddr, entries): the probes,
// the patches, the rets lists.
func ReadTable[T any](path string, at func(m *Module) (uint64, uint32)) (*Module, []T, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	magic := binary.LittleEndian.AppendUint64(nil, ModuleMagic)
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
		var m Module
		if err := binary.Read(bytes.NewReader(data[i:]), binary.LittleEndian, &m); err != nil {
			return nil, nil, err
		}
		vaddr, count := at(&m)
		table := make([]T, count)
		var zero T
		raw, err := ReadVaddr(f, vaddr, int(count)*int(unsafe.Sizeof(zero)))
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
