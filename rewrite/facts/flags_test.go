package facts

import (
	"testing"

	"github.com/stint-project/stint/rewrite/place"
)

// TestFlagsDead checks the straight-line flag liveness on hand-made
// instruction runs.
func TestFlagsDead(t *testing.T) {
	mov := []byte{0x48, 0x89, 0xc3}        // mov %rax, %rbx
	cmp := []byte{0x48, 0x39, 0xd8}        // cmp %rbx, %rax
	inc := []byte{0x48, 0xff, 0xc0}        // inc %rax
	adc := []byte{0x48, 0x11, 0xd8}        // adc %rbx, %rax
	cmov := []byte{0x48, 0x0f, 0x44, 0xc3} // cmove %rbx, %rax
	jz := []byte{0x74, 0x00}
	for _, c := range []struct {
		name string
		run  [][]byte
		want bool
	}{
		{"cmp first", [][]byte{cmp, jz}, true},
		{"mov then cmp", [][]byte{mov, mov, cmp, jz}, true},
		{"jcc first", [][]byte{jz}, false},
		{"cmov reads", [][]byte{mov, cmov, cmp}, false},
		{"inc leaves CF, adc reads it", [][]byte{inc, adc}, false},
		{"inc then cmp", [][]byte{inc, cmp}, true},
		{"end of code", [][]byte{mov, mov}, false},
	} {
		code := &Code{}
		addr := uint64(0x1000)
		for _, b := range c.run {
			k := Other
			if b[0] == 0x74 {
				k = Jcc
			}
			code.Insts = append(code.Insts, place.NewInst(addr, b, 0))
			code.Kinds = append(code.Kinds, k)
			addr += uint64(len(b))
		}
		if got := code.FlagsDead(0); got != c.want {
			t.Errorf("%s: FlagsDead = %v, want %v", c.name, got, c.want)
		}
	}
}
