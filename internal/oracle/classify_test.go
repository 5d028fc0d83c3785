package oracle

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

func TestDecodeAt(t *testing.T) {
	const pc = 0x1000
	for _, tt := range []struct {
		name   string
		code   []byte
		cls    class
		len    uint64
		target uint64
	}{
		{"jnz rel8", []byte{0x75, 0xf8}, clsJcc, 2, pc + 2 - 8},
		{"je rel32", []byte{0x0f, 0x84, 0x10, 0, 0, 0}, clsJcc, 6, pc + 6 + 0x10},
		{"jrcxz", []byte{0xe3, 0x05}, clsJcc, 2, pc + 7},
		{"loop", []byte{0xe2, 0xfe}, clsJcc, 2, pc},
		{"jmp rel8", []byte{0xeb, 0x00}, clsJmp, 2, pc + 2},
		{"jmp rel32", []byte{0xe9, 0, 1, 0, 0}, clsJmp, 5, pc + 5 + 0x100},
		{"bnd jmp rel32", []byte{0xf2, 0xe9, 0, 0, 0, 0}, clsJmp, 6, pc + 6},
		{"call rel32", []byte{0xe8, 0xfb, 0xff, 0xff, 0xff}, clsCall, 5, pc},
		{"call *%rax", []byte{0xff, 0xd0}, clsIndCall, 2, 0},
		{"call *0x10(%rip)", []byte{0xff, 0x15, 0x10, 0, 0, 0}, clsIndCall, 6, 0},
		{"jmp *%rax", []byte{0xff, 0xe0}, clsIndJmp, 2, 0},
		{"notrack jmp *%rax", []byte{0x3e, 0xff, 0xe0}, clsIndJmp, 3, 0},
		{"jmp *(%rax,%rdx,8)", []byte{0xff, 0x24, 0xd0}, clsIndJmp, 3, 0},
		{"ret", []byte{0xc3}, clsRet, 1, 0},
		{"rep ret", []byte{0xf3, 0xc3}, clsRet, 2, 0},
		{"ret $8", []byte{0xc2, 0x08, 0x00}, clsRet, 3, 0},
		{"syscall", []byte{0x0f, 0x05}, clsSyscall, 2, 0},
		{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa}, clsOther, 4, 0},
		{"add", []byte{0x83, 0xc0, 0x01}, clsOther, 3, 0},
	} {
		d := decodeAt(tt.code, pc)
		if !d.ok || d.cls != tt.cls || d.len != tt.len || d.target != tt.target {
			t.Errorf("%s: have ok=%v cls=%d len=%d target=%#x, want cls=%d len=%d target=%#x",
				tt.name, d.ok, d.cls, d.len, d.target, tt.cls, tt.len, tt.target)
		}
	}
	if d := decodeAt(nil, pc); d.ok {
		t.Error("empty code decoded")
	}
	if d := decodeAt([]byte{0x0f}, pc); d.ok {
		t.Error("truncated code decoded")
	}
}

func TestJccTaken(t *testing.T) {
	for _, tt := range []struct {
		op    x86asm.Op
		flags uint64
		rcx   uint64
		taken bool
	}{
		{x86asm.JE, flagZF, 0, true},
		{x86asm.JE, 0, 0, false},
		{x86asm.JNE, 0, 0, true},
		{x86asm.JB, flagCF, 0, true},
		{x86asm.JA, flagCF, 0, false},
		{x86asm.JA, 0, 0, true},
		{x86asm.JL, flagSF, 0, true},
		{x86asm.JL, flagSF | flagOF, 0, false},
		{x86asm.JGE, flagSF | flagOF, 0, true},
		{x86asm.JLE, flagZF, 0, true},
		{x86asm.JG, flagZF, 0, false},
		{x86asm.JP, flagPF, 0, true},
		{x86asm.JNS, flagSF, 0, false},
		{x86asm.JO, flagOF, 0, true},
		{x86asm.JRCXZ, 0, 0, true},
		{x86asm.JRCXZ, 0, 1 << 40, false},
		{x86asm.JECXZ, 0, 1 << 40, true},
		{x86asm.LOOP, 0, 1, false},
		{x86asm.LOOP, 0, 2, true},
		{x86asm.LOOPE, 0, 2, false},
		{x86asm.LOOPE, flagZF, 2, true},
		{x86asm.LOOPNE, flagZF, 2, false},
	} {
		if have := jccTaken(tt.op, tt.flags, tt.rcx); have != tt.taken {
			t.Errorf("%v flags=%#x rcx=%#x: have %v, want %v", tt.op, tt.flags, tt.rcx, have, tt.taken)
		}
	}
}

// TestKindsMatchABI pins the Kind values to STINT_K_* in stint_abi.h.
func TestKindsMatchABI(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(file), "..", "..", "runtime", "include", "stint_abi.h"))
	if err != nil {
		t.Skipf("ABI header not found: %v", err)
	}
	defer f.Close()
	names := map[string]Kind{
		"JCC_TAKEN": JccTaken, "JCC_NOT_TAKEN": JccNotTaken, "JMP": Jmp, "CALL": Call,
		"RET": Ret, "IND_JMP": IndJmp, "IND_CALL": IndCall, "SYSCALL": Syscall, "BLOCK": Block,
	}
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[0] != "#define" || !strings.HasPrefix(fs[1], "STINT_K_") {
			continue
		}
		name := strings.TrimPrefix(fs[1], "STINT_K_")
		if strings.HasPrefix(name, "PERIOD") || strings.HasPrefix(name, "SAMPLE") || name == "RUN_END" || name == "CONTEXT" || name == "ENTRY" || name == "RESUME" || name == "BLOCK_COUNT" {
			continue // rows the runtime makes (records, calling contexts) and compact traces' probe kinds, not transfers
		}
		v, err := strconv.Atoi(fs[2])
		if err != nil {
			t.Fatalf("%s: %v", fs[1], err)
		}
		k, ok := names[name]
		if !ok {
			t.Errorf("header defines %s, which the oracle does not know", fs[1])
			continue
		}
		seen++
		if int(k) != v {
			t.Errorf("%s: header %d, oracle %d", fs[1], v, k)
		}
		if k.String() == "" || strings.HasPrefix(k.String(), "Kind(") {
			t.Errorf("%s: no name", fs[1])
		}
	}
	if seen != len(names) {
		t.Errorf("header defines %d kinds, oracle %d", seen, len(names))
	}
	if Kind(0).String() != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", Kind(0).String())
	}
}

func FuzzDecodeAt(f *testing.F) {
	f.Add([]byte{0x75, 0xf8}, uint64(0x1000))
	f.Add([]byte{0x3e, 0xff, 0x24, 0xc5, 0, 0, 0, 0}, uint64(0))
	f.Add([]byte{0xf3, 0x0f, 0x1e, 0xfa}, uint64(1<<63))
	f.Fuzz(func(t *testing.T, code []byte, pc uint64) {
		d := decodeAt(code, pc)
		if d.ok && (d.len == 0 || d.len > 15 || d.len > uint64(len(code))) {
			t.Fatalf("length %d for %d bytes", d.len, len(code))
		}
		if !d.ok && d.cls != clsOther {
			t.Fatal("undecoded instruction classified")
		}
	})
}
