package facts

import (
	"golang.org/x/arch/x86/x86asm"

	"github.com/stint-project/stint/rewrite/place"
)

// switchScan bounds the instructions SwitchesStack looks back.
const switchScan = 16

// SwitchesStack reports whether indirect jmp or call i comes, in the
// same straight run, after a mov that loads %rsp from memory or from a
// register other than %rbp: a switch to another stack (Go's gogo, mcall
// and systemstack, longjmp, setcontext), after which the frames the
// code walked before are not the ones its rets return to. (mov
// %rbp,%rsp is an epilogue, not a switch.)
func SwitchesStack(c *Code, i int) bool {
	if k := c.Kinds[i]; k != IndJmp && k != IndCall {
		return false
	}
	for q := i - 1; q >= 0 && q >= i-switchScan; q-- {
		in, next := &c.Insts[q], &c.Insts[q+1]
		if in.Addr+uint64(in.Len()) != next.Addr || c.Kinds[q] != Other {
			return false
		}
		if d, ok := DecodeOne(in.Bytes()); ok && loadsRSP(&d) {
			return true
		}
		if in.Flags&place.InstTarget != 0 {
			return false // the run starts here
		}
	}
	return false
}

// loadsRSP reports whether d is a mov into %rsp from memory or from a
// register other than %rbp.
func loadsRSP(d *x86asm.Inst) bool {
	if d.Op != x86asm.MOV || d.Args[0] != x86asm.RSP {
		return false
	}
	switch src := d.Args[1].(type) {
	case x86asm.Mem:
		return true
	case x86asm.Reg:
		return src != x86asm.RBP
	}
	return false
}
