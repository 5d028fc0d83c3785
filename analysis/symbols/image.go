package symbols

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/stint-project/stint/runtime"
)

// Image is a module's code as the original file had it: the bytes of its
// executable PT_LOAD segments by link vaddr. For a file rewritten by
// stint, the bytes its patches changed are put back from the patch table
// (struct stint_patch.orig), so decoders see the original instructions
// rather than the jumps to trampolines.
type Image struct {
	// LinkBase is the lowest PT_LOAD vaddr, rounded down to its
	// alignment (0 for a PIE or shared object): the address a drcov-style
	// "offset from the module start" is counted from.
	LinkBase uint64
	// Restored is the number of patched byte ranges put back (0 for a
	// file stint did not rewrite).
	Restored int
	segs     []imageSeg
}

type imageSeg struct {
	vaddr uint64
	data  []byte
}

// maxImage caps the bytes of executable segments an Image holds (a
// hostile header could claim terabytes).
const maxImage = 1 << 30

// LoadImage reads the executable segments of the ELF file at path.
func LoadImage(path string) (*Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := uint64(fi.Size()) // no segment holds more than the file
	im := &Image{LinkBase: ^uint64(0)}
	total := uint64(0)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		base := p.Vaddr
		if p.Align > 1 && p.Align&(p.Align-1) == 0 {
			base &^= p.Align - 1
		}
		im.LinkBase = min(im.LinkBase, base)
		if p.Flags&elf.PF_X == 0 || p.Filesz == 0 {
			continue
		}
		total += p.Filesz
		if p.Filesz > size || p.Off > size-p.Filesz {
			return nil, fmt.Errorf("%s: segment at %#x: %d bytes at offset %d, beyond the file's %d", path, p.Vaddr, p.Filesz, p.Off, size)
		}
		if total > maxImage {
			return nil, fmt.Errorf("%s: executable segments hold more than %d bytes", path, maxImage)
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s: read segment at %#x: %w", path, p.Vaddr, err)
		}
		im.segs = append(im.segs, imageSeg{vaddr: p.Vaddr, data: data})
	}
	if im.LinkBase == ^uint64(0) {
		return nil, fmt.Errorf("%s: no PT_LOAD segment", path)
	}
	sort.Slice(im.segs, func(i, j int) bool { return im.segs[i].vaddr < im.segs[j].vaddr })
	im.restore(f, size)
	return im, nil
}

// Bytes returns up to n bytes of code at link vaddr addr (fewer at the
// end of a segment), or nil if addr is in no executable segment. The
// slice aliases the image: do not modify it.
func (im *Image) Bytes(addr uint64, n int) []byte {
	if im == nil || n <= 0 {
		return nil
	}
	i := sort.Search(len(im.segs), func(i int) bool { return im.segs[i].vaddr > addr }) - 1
	if i < 0 {
		return nil
	}
	s := im.segs[i]
	off := addr - s.vaddr
	if off >= uint64(len(s.data)) {
		return nil
	}
	return s.data[off:min(uint64(len(s.data)), off+uint64(n))]
}

// restore finds a stint module descriptor in the writable segments and
// writes each patch's original bytes back. A file without one, or with
// a damaged one, is left as it is.
func (im *Image) restore(f *elf.File, size uint64) {
	magic := binary.LittleEndian.AppendUint64(nil, runtime.ModuleMagic)
	read := func(vaddr uint64, n uint64) []byte {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && n <= size && vaddr >= p.Vaddr && n <= p.Filesz && vaddr-p.Vaddr <= p.Filesz-n {
				b := make([]byte, n)
				if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err != nil && err != io.EOF {
					return nil
				}
				return b
			}
		}
		return nil
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W == 0 || p.Filesz == 0 || p.Filesz > maxImage || p.Filesz > size || p.Off > size-p.Filesz {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil && err != io.EOF {
			continue
		}
		i := bytes.Index(data, magic)
		if i < 0 || len(data)-i < runtime.ModuleStructSize {
			continue
		}
		var m runtime.Module
		if binary.Read(bytes.NewReader(data[i:]), binary.LittleEndian, &m) != nil {
			continue
		}
		n := uint64(m.NPatches)
		if n == 0 || n > maxImage/runtime.PatchStructSize {
			return
		}
		raw := read(m.PatchesVaddr, n*runtime.PatchStructSize)
		if raw == nil {
			return
		}
		patches := make([]runtime.Patch, n)
		if binary.Read(bytes.NewReader(raw), binary.LittleEndian, patches) != nil {
			return
		}
		for _, pt := range patches {
			l := min(int(pt.Len), len(pt.Orig))
			for k := 0; k < l; k++ {
				if b := im.Bytes(pt.Addr+uint64(k), 1); b != nil {
					b[0] = pt.Orig[k]
				}
			}
			im.Restored++
		}
		return
	}
}
