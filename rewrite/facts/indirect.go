package facts

import (
	"debug/elf"

	"github.com/stint-project/stint/rewrite/elfin"
)

// maxTable bounds a scanned jump table.
const maxTable = 1 << 16

// IndirectTargets returns the instruction starts that code may reach
// without a direct branch naming them, beyond function starts: jump
// tables and computed gotos (int32 offsets from a table that a
// rip-relative lea addresses, or absolute entries a disp32(,%reg,scale)
// operand indexes) and code pointers in data (relocation addends; for a
// fixed-address module, any word of data, and any immediate). It errs on
// the side of more. It is worked out once; callers must not modify the
// map.
func (fx *Facts) IndirectTargets() *AddrSet {
	if fx.indirect == nil {
		fx.indirect = indirectTargets(fx.File, fx.Code, fx.Module.PIC)
	}
	return fx.indirect
}

func indirectTargets(f *elfin.File, c *Code, pic bool) *AddrSet {
	out := newAddrSet(c.Regions)
	isStart := func(a uint64) bool {
		i := c.Index(a)
		return i >= 0 && c.Insts[i].Addr == a && c.Kinds[i] != Bad
	}
	inCode := func(a uint64) bool {
		for _, r := range c.Regions {
			if a >= r.Lo && a < r.Hi {
				return true
			}
		}
		return false
	}
	// The loaded sections of data (allocated, not code, in the file).
	var dataSects []*elfin.Sect64
	for k := range f.Sects {
		if s := &f.Sects[k]; s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR == 0 && s.Type == elf.SHT_PROGBITS {
			dataSects = append(dataSects, s)
		}
	}
	// data returns the bytes of the data section holding a, from a on.
	data := func(a uint64) []byte {
		for _, s := range dataSects {
			if a >= s.Addr && a < s.Addr+s.Size {
				return f.SectData(s)[a-s.Addr:]
			}
		}
		return nil
	}
	scanned := map[[2]uint64]bool{}
	// table marks the entries of a table at base: width-byte entries,
	// relative to base (rel) or absolute, up to the first that is no
	// instruction start.
	table := func(base uint64, width int, rel bool) {
		if scanned[[2]uint64{base, uint64(width)}] {
			return
		}
		scanned[[2]uint64{base, uint64(width)}] = true
		b := data(base)
		for k := 0; k < maxTable && (k+1)*width <= len(b); k++ {
			var v uint64
			switch {
			case width == 8:
				v = elfin.LE.Uint64(b[k*8:])
			case rel:
				v = base + uint64(int64(int32(elfin.LE.Uint32(b[k*4:]))))
			default:
				v = uint64(elfin.LE.Uint32(b[k*4:]))
			}
			if !inCode(v) || !isStart(v) {
				return
			}
			out.add(v)
		}
	}
	for i := range c.Insts {
		in := &c.Insts[i]
		b := in.Bytes()
		if c.Kinds[i] == Bad || len(b) < 6 {
			continue
		}
		// lea disp32(%rip),%reg into data: a table of int32 offsets
		// from its address, or of absolute words.
		o := 0
		for o < len(b)-1 && (b[o] == 0x66 || b[o] == 0x3e || b[o] == 0x2e) {
			o++
		}
		if b[o]&0xf0 == 0x40 {
			o++
		}
		if o+6 <= len(b) && b[o] == 0x8d && b[o+1]&0xc7 == 0x05 {
			t := in.Addr + uint64(len(b)) + uint64(int64(int32(elfin.LE.Uint32(b[o+2:]))))
			if !inCode(t) {
				table(t, 4, true)
				table(t, 8, false)
			}
		}
		// Any operand disp32(,%index,scale) with no base: an absolute
		// table (a fixed-address module's jump table).
		for p := 0; p+6 <= len(b); p++ {
			if sc := b[p+1] >> 6; b[p]&0xc7 == 0x04 && b[p+1]&0x07 == 0x05 && sc >= 2 {
				t := uint64(int64(int32(elfin.LE.Uint32(b[p+2:]))))
				if !inCode(t) && data(t) != nil {
					table(t, 1<<sc, false)
				}
			}
		}
	}
	// Code pointers in data: relocation addends, and for a fixed-address
	// module every aligned word of data and every immediate.
	f.Relas(func(_ uint64, t elf.R_X86_64, _ uint32, addend uint64) {
		if inCode(addend) {
			out.add(addend)
		}
	})
	if !pic {
		for _, s := range dataSects {
			d := f.SectData(s)
			for o := 0; o+8 <= len(d); o += 4 {
				out.add(elfin.LE.Uint64(d[o:]))
				out.add(uint64(elfin.LE.Uint32(d[o:])))
			}
		}
		for i := range c.Insts {
			b := c.Insts[i].Bytes()
			for o := 1; o+4 <= len(b); o++ {
				out.add(uint64(elfin.LE.Uint32(b[o:])))
			}
		}
	}
	return out
}
