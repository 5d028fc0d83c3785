package tramp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/runtime"
	"golang.org/x/arch/x86/x86asm"
)

// disasm decodes code at base into (addr, inst) pairs.
type dinst struct {
	addr uint64
	in   x86asm.Inst
}

func disasm(t *testing.T, code []byte, base uint64) []dinst {
	t.Helper()
	var out []dinst
	for off := 0; off < len(code); {
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			t.Fatalf("decode at +%#x: %v (% x)", off, err, code[off:])
		}
		out = append(out, dinst{base + uint64(off), in})
		off += in.Len
	}
	return out
}

// gnu prints d in GNU syntax without operand-size suffixes on branches.
func gnu(d dinst) string {
	s := x86asm.GNUSyntax(d.in, d.addr, nil)
	for _, r := range [][2]string{{"jmpq ", "jmp "}, {"callq ", "call "}, {"retq", "ret"}, {"pushq ", "push "}} {
		s = strings.Replace(s, r[0], r[1], 1)
	}
	for _, a := range d.in.Args {
		if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
			s += fmt.Sprintf(" ->%#x", d.addr+uint64(d.in.Len)+uint64(int64(int32(m.Disp))))
		}
	}
	return s
}

func siteFor(t *testing.T, addr uint64, b []byte) (place.Inst, facts.Kind, uint64) {
	t.Helper()
	in, ok := facts.DecodeOne(b)
	if !ok || in.Len != len(b) {
		t.Fatalf("test input % x does not decode as one instruction", b)
	}
	k, rel := facts.Classify(&in)
	var tgt uint64
	if k == facts.Jcc || k == facts.Jcxz || k == facts.Jmp || k == facts.Call {
		tgt = addr + uint64(len(b)) + uint64(rel)
	}
	return place.NewInst(addr, b, 0), k, tgt
}

// TestSiteTrampolines generates each trampoline shape, decodes it back
// and checks the instruction sequence (GNU syntax, addresses resolved).
func TestSiteTrampolines(t *testing.T) {
	const (
		site  = 0x401000
		tramp = 0x500000
		probe = 0x600040
		entry = 0x480100
	)
	tests := []struct {
		name  string
		tool  runtime.Tool
		bytes []byte
		pic   bool
		want  []string // substrings, one per decoded instruction, in order
		arms  []uint64 // arm_to per probe (0 = no arm)
	}{
		{"jcc rel8", runtime.ToolBranch, []byte{0x74, 0x10}, false, []string{
			"je 0x50000b", "jmp 0x50003f",
			"lea -0x80(%rsp),%rsp", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea 0x", "call 0x480100", "pop %rsi", "pop %rdi", "jmp", "pop %rcx", "lea 0x80(%rsp),%rsp", "jmp 0x401012",
			"lea -0x80(%rsp),%rsp", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea 0x", "call 0x480100", "pop %rsi", "pop %rdi", "jmp", "pop %rcx", "lea 0x80(%rsp),%rsp", "jmp 0x401002",
		}, []uint64{0x401012, 0x401002}},
		{"jcc rel32", runtime.ToolBranch, []byte{0x0f, 0x8c, 0x00, 0x01, 0x00, 0x00}, false, []string{
			"jl 0x50000b", "jmp 0x50003f"}, []uint64{0x401106, 0x401006}},
		{"jrcxz", runtime.ToolBranch, []byte{0xe3, 0x20}, false, []string{
			"jrcxz 0x500007", "jmp 0x500040", "jmp 0x50000c"}, []uint64{0x401022, 0x401002}},
		{"loop", runtime.ToolBranch, []byte{0xe2, 0xf0}, false, []string{
			"loop 0x500007", "jmp", "jmp"}, []uint64{0x400ff2, 0x401002}},
		{"jmp rel8", runtime.ToolBranch, []byte{0xeb, 0x05}, false, []string{
			"jmp 0x500005", "lea -0x80(%rsp),%rsp", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea", "call 0x480100", "pop %rsi", "pop %rdi", "jmp", "pop %rcx", "lea 0x80(%rsp),%rsp", "jmp 0x401007"},
			[]uint64{0x401007}},
		{"call rel32 fixed", runtime.ToolBranch, []byte{0xe8, 0x00, 0x10, 0x00, 0x00}, false, []string{
			"jmp 0x500005", "lea -0x80", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea", "call 0x480100", "pop %rsi", "pop %rdi", "jmp", "pop %rcx", "lea 0x80",
			"push $0x401005", "jmp 0x402005"}, []uint64{0x500034}},
		{"call rel32 pic", runtime.ToolBranch, []byte{0xe8, 0x00, 0x10, 0x00, 0x00}, true, []string{
			"jmp 0x500005", "lea -0x80", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea", "call 0x480100", "pop %rsi", "pop %rdi", "jmp", "pop %rcx", "lea 0x80",
			"lea -0x8(%rsp),%rsp", "push %rax", "->0x401005", "mov %rax,0x8(%rsp)", "pop %rax", "jmp 0x402005"}, []uint64{0x500034}},
		{"ret", runtime.ToolBranch, []byte{0xc3}, false, []string{
			"lea -0x80", "push %rax", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "mov 0x90(%rsp),%rax", "),%rcx ->0x600070", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz",
			"pop %rcx", "pop %rax", "lea 0x80",
			"lea -0x80", "push %rdi", "push %rsi", "mov 0x90(%rsp),%rsi", "lea", "call 0x480100", "pop %rsi", "pop %rdi", "lea 0x80", "ret",
			"pop %rcx", "pop %rax", "lea 0x80", "ret"}, []uint64{0}},
		{"ret imm16", runtime.ToolCall, []byte{0xc2, 0x10, 0x00}, false, []string{
			"lea -0x80", "push %rax", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "mov 0x90(%rsp),%rax", "->0x600070", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rax,%rcx),%rcx", "jrcxz",
			"pop %rcx", "pop %rax", "lea 0x80",
			"lea -0x80", "push %rdi", "push %rsi", "mov 0x90(%rsp),%rsi", "lea", "call", "pop", "pop", "lea 0x80", "ret $0x10",
			"pop %rcx", "pop %rax", "lea 0x80", "ret $0x10"}, []uint64{0}},
		{"call *%rax", runtime.ToolBranch, []byte{0xff, 0xd0}, false, []string{
			"lea -0x80", "push %rdi", "push %rsi", "mov %rax,%rsi", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "->0x600070", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "pop %rcx", "lea", "call", "pop", "pop", "lea 0x80",
			"push $0x401002", "jmp *%rax",
			"pop %rcx", "pop %rsi", "pop %rdi", "lea 0x80", "push $0x401002", "jmp *%rax"}, []uint64{0}},
		{"call *%r12 pic", runtime.ToolCall, []byte{0x41, 0xff, 0xd4}, true, []string{
			"lea -0x80", "push %rdi", "push %rsi", "mov %r12,%rsi", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "->0x600070", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "pop %rcx", "lea", "call", "pop", "pop", "lea 0x80",
			"lea -0x8(%rsp),%rsp", "push %rax", "lea", "mov %rax,0x8(%rsp)", "pop %rax", "jmp *%r12",
			"pop %rcx", "pop %rsi", "pop %rdi", "lea 0x80", "lea -0x8(%rsp),%rsp", "push %rax", "lea", "mov %rax,0x8(%rsp)", "pop %rax", "jmp *%r12"}, []uint64{0}},
		{"call *8(%rsp)", runtime.ToolBranch, []byte{0xff, 0x54, 0x24, 0x08}, false, []string{
			"lea -0x80", "push %rdi", "push %rsi", "mov 0x98(%rsp),%rsi", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "->0x600070", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "pop %rcx", "lea", "call", "pop", "pop", "lea 0x80",
			"push $0x401004", "jmp *0x10(%rsp)",
			"pop %rcx", "pop %rsi", "pop %rdi", "lea 0x80", "push $0x401004", "jmp *0x10(%rsp)"}, []uint64{0}},
		{"call *rip", runtime.ToolBranch, []byte{0xff, 0x15, 0xfa, 0x0f, 0x00, 0x00}, false, []string{
			"lea -0x80", "push %rdi", "push %rsi", "),%rsi ->0x402000", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "->0x600070", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "pop %rcx", "lea", "call", "pop", "pop", "lea 0x80",
			"push $0x401006", "->0x402000",
			"pop %rcx", "pop %rsi", "pop %rdi", "lea 0x80", "push $0x401006", "->0x402000"}, []uint64{0}},
		{"notrack jmp *(%rax,%rbx,8)", runtime.ToolBranch, []byte{0x3e, 0xff, 0x24, 0xd8}, false, []string{
			"lea -0x80", "push %rdi", "push %rsi", "mov (%rax,%rbx,8),%rsi", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "->0x600070", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "pop %rcx", "lea", "call", "pop", "pop", "lea 0x80",
			"jmp *(%rax,%rbx,8)",
			"pop %rcx", "pop %rsi", "pop %rdi", "lea 0x80", "jmp *(%rax,%rbx,8)"}, []uint64{0}},
		{"jmp *%fs:0x10(%r13)", runtime.ToolBranch, []byte{0x64, 0x41, 0xff, 0x65, 0x10}, false, []string{
			"lea -0x80", "push %rdi", "push %rsi", "mov %fs:0x10(%r13),%rsi", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "->0x600070", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600078", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600050", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "->0x600058", "not %rcx", "lea 0x1(%rsi,%rcx),%rcx", "jrcxz", "pop %rcx", "lea", "call", "pop", "pop", "lea 0x80",
			"jmp *%fs:0x10(%r13)",
			"pop %rcx", "pop %rsi", "pop %rdi", "lea 0x80", "jmp *%fs:0x10(%r13)"}, []uint64{0}},
		{"syscall", runtime.ToolSyscall, []byte{0x0f, 0x05}, false, []string{
			"lea -0x80", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "mov %rax,%rsi", "lea", "call", "pop", "pop", "jmp", "pop %rcx", "lea 0x80",
			"syscall", "jmp 0x401002"}, []uint64{0}},
		{"block rip-relative", runtime.ToolBlock, []byte{0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00}, false, []string{
			"jmp 0x500005", "lea -0x80", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea", "call", "pop", "pop", "jmp", "pop %rcx", "lea 0x80",
			",%rax ->0x401017", "jmp 0x401007"}, []uint64{0x500034}},
		{"block jcc rel8", runtime.ToolBlock, []byte{0x75, 0x03}, false, []string{
			"jmp", "lea -0x80", "push %rcx", "->0x600f00", "lea -0x1(%rcx),%rcx", "jrcxz", "pop %rcx", "push %rdi", "push %rsi", "lea", "call", "pop", "pop", "jmp", "pop %rcx", "lea 0x80",
			"jne 0x401005", "jmp 0x401002"}, []uint64{0x500034}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, k, tgt := siteFor(t, site, tc.bytes)
			n := policy.SiteProbes(tc.tool, k)
			probes := []uint64{probe, probe + 64}[:n]
			sz := &Asm{Sizing: true, Gate: 0x600f00}
			sz.Site(tc.tool, &in, k, tgt, nil, 0, tc.pic)
			a := &Asm{Base: tramp, Gate: 0x600f00}
			sp := a.Site(tc.tool, &in, k, tgt, probes, entry, tc.pic)
			if a.Err != nil {
				t.Fatal(a.Err)
			}
			if len(a.B) != len(sz.B) {
				t.Errorf("size: have %d, sized %d", len(a.B), len(sz.B))
			}
			d := disasm(t, a.B, tramp)
			var have []string
			for _, x := range d {
				have = append(have, gnu(x))
			}
			if len(d) < len(tc.want) {
				t.Fatalf("have %d instructions, want at least %d:\n%s", len(d), len(tc.want), strings.Join(have, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(have[i], w) {
					t.Errorf("inst %d: have %q, want %q\n%s", i, have[i], w, strings.Join(have, "\n"))
				}
			}
			if len(sp) != n {
				t.Fatalf("probes: have %d, want %d", len(sp), n)
			}
			for i, p := range sp {
				if p.ArmTo != tc.arms[i] {
					t.Errorf("probe %d arm_to: have %#x, want %#x", i, p.ArmTo, tc.arms[i])
				}
				if p.Arm >= 0 {
					// The arm's rel32 is a field of a jmp/jcc whose end
					// is 4 bytes later; it must lead to this probe's thunk.
					end := tramp + uint64(p.Arm) + 4
					to := end + uint64(int32(elfin.LE.Uint32(a.B[p.Arm:])))
					th := disasm(t, a.B[to-tramp:], to)
					if !strings.Contains(gnu(th[0]), "lea -0x80(%rsp),%rsp") {
						t.Errorf("probe %d arm leads to %#x: %s", i, to, gnu(th[0]))
					}
					// and the thunk loads this probe's address.
					found := false
					for _, x := range th[:min(12, len(th))] {
						if x.in.Op == x86asm.LEA && x.in.Args[0] == x86asm.RDI {
							m := x.in.Args[1].(x86asm.Mem)
							found = x.addr+uint64(x.in.Len)+uint64(int64(int32(m.Disp))) == probes[i]
						}
					}
					if !found {
						t.Errorf("probe %d: thunk does not load %#x into %%rdi", i, probes[i])
					}
				}
			}
		})
	}
}

// TestRelocate checks relocated (evicted) instructions.
func TestRelocate(t *testing.T) {
	const site, tramp = 0x401000, 0x500000
	tests := []struct {
		name  string
		bytes []byte
		want  []string
	}{
		{"add", []byte{0x48, 0x01, 0xd8}, []string{"add %rbx,%rax", "jmp 0x401003"}},
		{"lea rip", []byte{0x48, 0x8d, 0x3d, 0x00, 0x01, 0x00, 0x00}, []string{",%rdi ->0x401107", "jmp 0x401007"}},
		{"cmp rip imm", []byte{0x83, 0x3d, 0x00, 0x01, 0x00, 0x00, 0x05}, []string{"->0x401107", "jmp 0x401007"}},
		{"jmp rel8", []byte{0xeb, 0x10}, []string{"jmp 0x401012"}},
		{"jcc rel8", []byte{0x7f, 0xfe}, []string{"jg 0x401000", "jmp 0x401002"}},
		{"loopne", []byte{0xe0, 0x10}, []string{"loopne 0x500007", "jmp 0x401002", "jmp 0x401012"}},
		{"call", []byte{0xe8, 0x00, 0x00, 0x00, 0x00}, []string{"push $0x401005", "jmp 0x401005"}},
		{"ret", []byte{0xc3}, []string{"ret"}},
		{"jmp *rip", []byte{0xff, 0x25, 0x00, 0x10, 0x00, 0x00}, []string{"->0x402006"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, k, tgt := siteFor(t, site, tc.bytes)
			a := &Asm{Base: tramp, Gate: 0x600f00}
			a.Relocate(&in, k, tgt, false)
			if a.Err != nil {
				t.Fatal(a.Err)
			}
			d := disasm(t, a.B, tramp)
			if len(d) != len(tc.want) {
				var have []string
				for _, x := range d {
					have = append(have, gnu(x))
				}
				t.Fatalf("have %q, want %q", have, tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(gnu(d[i]), w) {
					t.Errorf("inst %d: have %q, want %q", i, gnu(d[i]), w)
				}
			}
		})
	}
}

func TestRelocateRefuses(t *testing.T) {
	tests := []struct {
		name  string
		bytes []byte
	}{
		{"call below rsp", []byte{0xff, 0x54, 0x24, 0xf8}},
		{"jmp *%rsp", []byte{0xff, 0xe4}},
		{"16-bit indirect", []byte{0x66, 0xff, 0xe0}},
		{"xbegin", []byte{0xc7, 0xf8, 0x00, 0x00, 0x00, 0x00}},
		{"far jmp", []byte{0xff, 0x28}},
	}
	for _, tc := range tests {
		in, k, _ := siteFor(t, 0x1000, tc.bytes)
		if err := facts.Relocatable(&in, k); err == nil {
			t.Errorf("%s: relocatable, want refusal", tc.name)
		}
	}
}

// TestInlineCacheCheck follows both paths of the inline cache check of
// ret and indirect trampolines: the hit path must reach the original
// instruction with %rsp and the scratch registers restored and without
// calling the probe, the miss path must call the probe with the
// destination in %rsi and then reach the same instruction, and nothing on
// either path may write the flags.
func TestInlineCacheCheck(t *testing.T) {
	const site, tramp, probe, entry, gate = 0x401000, 0x500000, 0x600040, 0x480100, 0x600f00
	tests := []struct {
		name  string
		bytes []byte
		rsi   string // how the miss path loads the destination
		rsp   int64  // %rsp at the original instruction, relative to the site's
	}{
		{"ret", []byte{0xc3}, "mov 0x90(%rsp),%rsi", 0},
		{"ret imm16", []byte{0xc2, 0x08, 0x00}, "mov 0x90(%rsp),%rsi", 0},
		{"rep ret", []byte{0xf3, 0xc3}, "mov 0x90(%rsp),%rsi", 0},
		{"jmp *%rax", []byte{0xff, 0xe0}, "mov %rax,%rsi", 0},
		{"jmp *%rcx", []byte{0xff, 0xe1}, "mov %rcx,%rsi", 0},
		{"call *%rsi", []byte{0xff, 0xd6}, "mov %rsi,%rsi", -8},
		{"call *8(%rsp)", []byte{0xff, 0x54, 0x24, 0x08}, "mov 0x98(%rsp),%rsi", -8},
		{"call *rip", []byte{0xff, 0x15, 0xfa, 0x0f, 0x00, 0x00}, "->0x402000", -8},
		{"jmp *(%rcx,%rdi,8)", []byte{0xff, 0x24, 0xf9}, "mov (%rcx,%rdi,8),%rsi", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, k, tgt := siteFor(t, site, tc.bytes)
			sz := &Asm{Sizing: true, Gate: 0x600f00}
			sz.Site(runtime.ToolBranch, &in, k, tgt, nil, 0, false)
			a := &Asm{Base: tramp, Gate: 0x600f00}
			a.Site(runtime.ToolBranch, &in, k, tgt, []uint64{probe}, entry, false)
			if a.Err != nil {
				t.Fatal(a.Err)
			}
			if len(a.B) != len(sz.B) {
				t.Errorf("size: have %d, sized %d", len(a.B), len(sz.B))
			}
			d := disasm(t, a.B, tramp)
			byAddr := map[uint64]int{}
			for i, x := range d {
				byAddr[x.addr] = i
			}
			for _, x := range d {
				switch x.in.Op {
				case x86asm.LEA, x86asm.PUSH, x86asm.POP, x86asm.MOV, x86asm.NOT, x86asm.JRCXZ, x86asm.CALL, x86asm.RET, x86asm.JMP:
				default:
					t.Errorf("%#x: %s may change the flags", x.addr, gnu(x))
				}
			}
			loaded := map[uint64]bool{}
			for _, x := range d {
				if x.in.Op == x86asm.MOV && x.in.Args[0] == x86asm.RCX {
					if m, ok := x.in.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RIP {
						loaded[x.addr+uint64(x.in.Len)+uint64(int64(int32(m.Disp)))] = true
					}
				}
			}
			for _, c := range []uint64{probe + 48, probe + 56, probe + 16, probe + 24, gate} {
				if !loaded[c] {
					t.Errorf("no load of %#x (cache, cache2, gate)", c)
				}
			}
			// walk runs from the start with the gate open or closed,
			// taking the cache check's jrcxz iff take (the gate's jrcxz
			// is taken iff the gate is open), following direct jmps
			// inside the trampoline and tracking %rsp and pushed
			// registers, up to the first ret or indirect jmp; it
			// returns the instructions run.
			walk := func(gateOpen, take bool) []dinst {
				var run []dinst
				rsp := int64(0)
				pushed := map[x86asm.Reg]int{}
				lastLoad := uint64(0)
				for i := 0; i < len(d); {
					x := d[i]
					run = append(run, x)
					switch x.in.Op {
					case x86asm.MOV:
						if m, ok := x.in.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RIP && x.in.Args[0] == x86asm.RCX {
							lastLoad = x.addr + uint64(x.in.Len) + uint64(int64(int32(m.Disp)))
						}
					case x86asm.JRCXZ:
						jump := take
						if lastLoad == gate {
							// mov gate,%rcx ; lea -1(%rcx),%rcx ;
							// jrcxz closed (stint_abi.h)
							jump = !gateOpen
						}
						if jump {
							to := uint64(int64(x.addr) + int64(x.in.Len) + int64(x.in.Args[0].(x86asm.Rel)))
							j, ok := byAddr[to]
							if !ok {
								t.Fatalf("jrcxz to %#x: not an instruction start", to)
							}
							i = j
							continue
						}
					case x86asm.PUSH:
						rsp -= 8
						if r, ok := x.in.Args[0].(x86asm.Reg); ok {
							pushed[r]++
						}
					case x86asm.POP:
						rsp += 8
						r := x.in.Args[0].(x86asm.Reg)
						if pushed[r]--; pushed[r] == 0 {
							delete(pushed, r)
						}
					case x86asm.LEA:
						if x.in.Args[0] == x86asm.RSP {
							rsp += x.in.Args[1].(x86asm.Mem).Disp
						}
					case x86asm.RET, x86asm.JMP:
						if rel, ok := x.in.Args[0].(x86asm.Rel); x.in.Op == x86asm.JMP && ok {
							to := uint64(int64(x.addr) + int64(x.in.Len) + int64(rel))
							j, in := byAddr[to]
							if !in {
								t.Fatalf("gate=%v take=%v: direct jmp out of the trampoline %s", gateOpen, take, gnu(x))
							}
							i = j
							continue
						}
						if rsp != tc.rsp || len(pushed) != 0 {
							t.Errorf("take=%v: %s with %%rsp %+d (want %+d), still pushed %v", take, gnu(x), rsp, tc.rsp, pushed)
						}
						if x.in.Op == x86asm.RET && string(a.B[x.addr-tramp:x.addr-tramp+uint64(x.in.Len)]) != string(tc.bytes) {
							t.Errorf("take=%v: ends in %s, want the original % x", take, gnu(x), tc.bytes)
						}
						return run
					}
					i++
				}
				t.Fatalf("gate=%v take=%v: no ret or indirect jmp reached", gateOpen, take)
				return nil
			}
			calls := func(run []dinst) int {
				n := 0
				for _, x := range run {
					if x.in.Op == x86asm.CALL && uint64(int64(x.addr)+int64(x.in.Len)+int64(x.in.Args[0].(x86asm.Rel))) == entry {
						n++
					}
				}
				return n
			}
			hit, miss, closed := walk(true, true), walk(true, false), walk(false, false)
			if n := calls(hit); n != 0 {
				t.Errorf("hit path calls the probe %d times", n)
			}
			if n := calls(closed); n != 0 {
				t.Errorf("closed gate calls the probe %d times", n)
			}
			if cl := closed[len(closed)-1]; cl.in.Op != hit[len(hit)-1].in.Op {
				t.Errorf("closed gate ends in %s", gnu(cl))
			}
			if n := calls(miss); n != 1 {
				t.Errorf("miss path calls the probe %d times, want 1", n)
			}
			hl, ml := hit[len(hit)-1], miss[len(miss)-1]
			if hs, ms := strings.SplitN(gnu(hl), " ->", 2)[0], strings.SplitN(gnu(ml), " ->", 2)[0]; hl.in.Op != ml.in.Op || (hl.in.Op == x86asm.RET && hs != ms) {
				t.Errorf("paths end differently: hit %s, miss %s", gnu(hl), gnu(ml))
			}
			loads := false
			for _, x := range miss {
				if strings.Contains(gnu(x), tc.rsi) && strings.HasSuffix(strings.SplitN(gnu(x), " ->", 2)[0], ",%rsi") {
					loads = true
				}
			}
			if !loads {
				t.Errorf("miss path does not load the destination into %%rsi with %q", tc.rsi)
			}
		})
	}
}

// TestJccArmsFlagsDead: a compact trace's jcc arm whose destination has
// the flags dead tests its key and its full word with cmp and jne; the
// other arm keeps the flag-free tests; both keep the four instructions
// the runtime completes after a signal (paths_complete_arm); sizing
// gives the emitted length.
func TestJccArmsFlagsDead(t *testing.T) {
	const site, tramp, probe, entry = 0x401000, 0x500000, 0x600040, 0x480100
	in, k, tgt := siteFor(t, site, []byte{0x74, 0x10}) // je +0x10
	dead := func(a uint64) bool { return a == tgt }
	sz := &Asm{Sizing: true, Inline: true, Paths: true, FlagsDead: dead}
	sz.Cold = sz.ColdAt(0)
	sz.Site(runtime.ToolBranch, &in, k, tgt, nil, 0, false)
	a := &Asm{Base: tramp, Inline: true, Paths: true, FlagsDead: dead}
	a.Cold = a.ColdAt(0x700000)
	a.Site(runtime.ToolBranch, &in, k, tgt, []uint64{probe, probe + 64}, entry, false)
	if a.Err != nil || sz.Err != nil {
		t.Fatal(a.Err, sz.Err)
	}
	if len(a.B) != len(sz.B) {
		t.Errorf("size: have %d, sized %d", len(a.B), len(sz.B))
	}
	le32 := func(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	count := func(pat ...[]byte) int {
		var p []byte
		for _, x := range pat {
			p = append(p, x...)
		}
		return strings.Count(string(a.B), string(p))
	}
	if n := count([]byte{0x65, 0x48, 0x3b, 0x0c, 0x25}, le32(runtime.PathsKeyOff)); n != 1 {
		t.Errorf("cmp %%gs:KEY,%%rcx %d times, want 1 (the taken arm)", n)
	}
	if n := count([]byte{0x65, 0x48, 0x8b, 0x14, 0x25}, le32(runtime.PathsKeyOff)); n != 1 {
		t.Errorf("mov %%gs:KEY,%%rdx %d times, want 1 (the not-taken arm)", n)
	}
	if n := count([]byte{0x80, 0x7a, byte(runtime.PathsTNTFull / 8), 0}); n != 1 {
		t.Errorf("cmpb $0,FULL(%%rdx) %d times, want 1", n)
	}
	if n := count([]byte{0x65, 0x48, 0x8b, 0x14, 0x25}, le32(runtime.PathsTNTOff), []byte{0x48, 0x8b, 0x0a}); n != 2 {
		t.Errorf("the pending word's load %d times, want 2 (one per arm)", n)
	}
}
