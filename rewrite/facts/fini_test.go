package facts

import (
	"testing"

	"github.com/stint-project/stint/rewrite/place"
)

// TestFiniStraight: .fini's outcome is known before it runs only for
// code that goes straight to a last ret with the stack as it found it,
// at DT_FINI's address.
func TestFiniStraight(t *testing.T) {
	const at = 0x1000
	code := func(insts ...[]byte) (*Code, [2]uint64) {
		c := &Code{}
		a := uint64(at)
		for _, b := range insts {
			c.Insts = append(c.Insts, place.NewInst(a, b, 0))
			a += uint64(len(b))
		}
		return c, [2]uint64{at, a}
	}
	endbr, sub8, add8, ret := []byte{0xf3, 0x0f, 0x1e, 0xfa}, []byte{0x48, 0x83, 0xec, 0x08}, []byte{0x48, 0x83, 0xc4, 0x08}, []byte{0xc3}
	for _, tc := range []struct {
		name  string
		insts [][]byte
		dt    uint64
		want  bool
	}{
		{"crti-crtn", [][]byte{sub8, add8, ret}, at, true},
		{"endbr64", [][]byte{endbr, sub8, add8, ret}, at, true},
		{"no DT_FINI", [][]byte{sub8, add8, ret}, 0, false},
		{"DT_FINI elsewhere", [][]byte{sub8, add8, ret}, at + 0x40, false},
		{"stack not balanced", [][]byte{sub8, ret}, at, false},
		{"a call before the ret", [][]byte{sub8, {0xe8, 0, 0, 0, 0}, add8, ret}, at, false},
		{"a push", [][]byte{{0x55}, add8, ret}, at, false},
		{"no ret", [][]byte{sub8, add8}, at, false},
		{"code after the ret", [][]byte{sub8, add8, ret, {0x90}}, at, false},
	} {
		c, r := code(tc.insts...)
		if got := finiStraight(c, r, tc.dt); got != tc.want {
			t.Errorf("%s: finiStraight = %v, want %v", tc.name, got, tc.want)
		}
	}
}
