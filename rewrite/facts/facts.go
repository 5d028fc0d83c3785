package facts

import (
	"debug/elf"
	"encoding/binary"

	"github.com/stint-project/stint/internal/ehframe"
	"github.com/stint-project/stint/rewrite/elfin"
)

// Module says what kind of module the input is and where it lies.
type Module struct {
	Exec   bool // an executable (fixed-address or PIE, dynamic or static)
	Shared bool // a shared object
	Static bool // an executable without an interpreter
	PIC    bool // ET_DYN: loaded at a base chosen at run time
	// Go: linked by Go's toolchain. Its runtime looks up any PC a signal
	// interrupts in its own tables, and dies on one in a function's int3
	// padding, so no padding may hold code of ours (facts: noPadding).
	Go bool
	// Libc: the module holds the C library (it defines
	// __libc_start_main; a static executable always does), whose code
	// runs with every signal blocked around clone, fork and raise.
	Libc bool
	// V8Builtins: the bytes of V8's embedded builtins, left unprobed
	// (v8Builtins); 0 without them.
	V8Builtins uint64

	ImageLo, ImageHi uint64 // the lowest PT_LOAD and the end of the highest
	TextLo, TextHi   uint64 // the first executable region's start, the last one's end
}

// Name is the module kind as Stats reports it: "executable", "pie",
// "static", "static-pie" or "shared".
func (m Module) Name() string {
	switch {
	case m.Shared:
		return "shared"
	case m.Static && m.PIC:
		return "static-pie"
	case m.Static:
		return "static"
	case m.PIC:
		return "pie"
	}
	return "executable"
}

// Facts is what the rewriter knows of its input before it decides
// anything: computed once by Compute, read by every later stage. The
// worked-out tables (IndirectTargets, PLTCallees) are computed on first
// use.
type Facts struct {
	File   *elfin.File
	Module Module
	Code   *Code
	// FDEs are the .eh_frame ranges, sorted by start, without overlaps.
	FDEs []ehframe.FDE
	// Early: a shared object's instructions that run before its
	// initializer (reserved.go); nil for other modules.
	Early map[int]bool
	// Fini: a static executable's .fini, reserved for the exit hook;
	// nil when there is none to hook.
	Fini         *Fini
	fini         [2]uint64 // .fini's address range (AfterEnd)
	finiStraight bool      // FiniStraight

	relro    [2]uint64 // PT_GNU_RELRO (FinalSlot, StableSlot)
	pltgot   [2]uint64 // the PLT's GOT (LazySlot, StableSlot)
	indirect *AddrSet
	plt      map[uint64]uint64
	pltDone  bool
	bound    map[uint64]bool // GOT slots the dynamic linker binds (IsPLTSlotJmp)
}

// Compute decodes f and works out its facts. It fails only when f has no
// executable code.
func Compute(f *elfin.File) (*Facts, error) {
	fx := &Facts{File: f}
	fx.Classify()
	fx.Module.ImageLo, fx.Module.ImageHi = f.ImageRange()
	var keep [][2]uint64
	if lo, hi := v8Builtins(f); hi > lo {
		keep = append(keep, [2]uint64{lo, hi})
		fx.Module.V8Builtins = hi - lo
	}
	c := decode(f, functionStarts(f), fx.Module.Go, keep)
	fx.Code = c
	markRestorers(c)
	if len(c.Regions) == 0 {
		return nil, elfin.Errorf(int64(f.Hdr.Phoff), nil, "no executable code")
	}
	fx.Module.TextLo, fx.Module.TextHi = c.Regions[0].Lo, c.Regions[len(c.Regions)-1].Hi
	fx.FDEs = fdeRanges(f)
	if fx.Module.Exec && f.Prog(elf.PT_DYNAMIC) == nil {
		fx.Fini = markFini(f, c)
	}
	if s := f.Section(".fini"); s != nil {
		fx.fini = [2]uint64{s.Addr, s.Addr + s.Size}
		finiAt, _ := elfin.DynVal(f.Dynamic(), elf.DT_FINI)
		fx.finiStraight = fx.Fini == nil && finiStraight(c, fx.fini, finiAt)
	}
	if fx.Module.Shared {
		fx.Early = markEarly(f, c)
	}
	return fx, nil
}

// FS0IsThreadPointer reports whether %fs:0 holds the thread pointer
// whenever the module's code runs (the x86-64 TLS ABI): not in a static
// executable, whose code runs before libc sets it, nor in Go's, whose
// runtime points %fs at its own TLS.
func (m Module) FS0IsThreadPointer() bool { return !m.Static && !m.Go }

// classify sets the module kind and the slot ranges (StableSlot).
func (fx *Facts) Classify() {
	f, m := fx.File, &fx.Module
	dyn := f.Dynamic()
	interp := f.Prog(elf.PT_INTERP) != nil
	flags1, _ := elfin.DynVal(dyn, elf.DT_FLAGS_1)
	_, soname := elfin.DynVal(dyn, elf.DT_SONAME)
	pieFlag := flags1&uint64(elf.DF_1_PIE) != 0
	m.PIC = f.Hdr.Type == elf.ET_DYN
	m.Go = f.GoBuilt()
	m.Libc = definesLibcStart(f)
	if p := f.Prog(elf.PT_GNU_RELRO); p != nil {
		fx.relro = [2]uint64{p.Vaddr, p.Vaddr + p.Memsz}
	}
	if got, ok := elfin.DynVal(dyn, elf.DT_PLTGOT); ok {
		n, _ := elfin.DynVal(dyn, elf.DT_PLTRELSZ)
		fx.pltgot = [2]uint64{got, got + 8*(3+n/24)}
	}
	switch {
	case f.Hdr.Type == elf.ET_EXEC:
		m.Exec = true
		m.Static = !interp
	case pieFlag || (interp && !soname):
		m.Exec = true
		m.Static = !interp
	default:
		m.Shared = true
	}
}

// StableSlot reports whether the 8 bytes at link vaddr a lie where only
// the dynamic linker writes: the PT_GNU_RELRO range (read-only once
// relocated: .got, .data.rel.ro) or the PLT's GOT (DT_PLTGOT, its three
// reserved words and one per PLT relocation), which lazy binding writes
// once per entry. An indirect branch through such a slot has the slot's
// value as its only destination, so the runtime need not switch it on
// again once that value is recorded (STINT_PF_SLOT).
func (fx *Facts) StableSlot(a uint64) bool {
	return fx.FinalSlot(a) || inSlotRange(fx.pltgot, a)
}

// FinalSlot reports whether the 8 bytes at link vaddr a lie in
// PT_GNU_RELRO, which the dynamic linker makes read-only once it has
// relocated the module (a BIND_NOW module's PLT slots among them): the
// slot's value is then fixed before any of the module's code runs, and
// an indirect branch through it has that one destination for the rest
// of the process (STINT_PF_FINAL). The lazily bound PLT slots outside
// it change once, at their first call.
func (fx *Facts) FinalSlot(a uint64) bool { return inSlotRange(fx.relro, a) }

// inSlotRange reports whether the 8 bytes at a lie in r (empty: none).
func inSlotRange(r [2]uint64, a uint64) bool { return a >= r[0] && a+8 <= r[1] }

// LazySlot reports whether the 8 bytes at link vaddr a are a PLT slot
// that lazy binding writes (in the PLT's GOT, outside PT_GNU_RELRO), and
// the value the file gives it: until the entry's first call the slot
// holds that plus the load base (the PLT entry's way to the resolver),
// then the resolved function, which only a hook changes again.
func (fx *Facts) LazySlot(a uint64) (initial uint64, ok bool) {
	if !inSlotRange(fx.pltgot, a) || fx.FinalSlot(a) {
		return 0, false
	}
	off, ok := fx.File.OffsetOf(a, 8)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint64(fx.File.Data[off:]), true
}

// TraceEnds returns the ends of the unconditional transfers (jmp, call,
// ret, indirect, far) minus TextLo, sorted: where a Pin-style trace
// entered above them stops (stint_abi.h, the DIME* region policies).
func (fx *Facts) TraceEnds() []uint32 {
	c, lo := fx.Code, fx.Module.TextLo
	var out []uint32
	for i, k := range c.Kinds {
		if k != Jmp && k != Call && k != Ret && k != IndJmp && k != IndCall && k != Far {
			continue
		}
		in := &c.Insts[i]
		end := in.Addr + uint64(in.Len())
		if end < lo || end-lo > 0xffffffff {
			continue
		}
		out = append(out, uint32(end-lo))
	}
	return out
}
