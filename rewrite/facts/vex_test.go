package facts

import "testing"

func TestVexDecode(t *testing.T) {
	for _, c := range []struct {
		name    string
		b       []byte
		isVex   bool
		ok      bool
		n       int
		ripDisp int // offset of a RIP-relative disp32, or -1
	}{
		{"vzeroupper", []byte{0xc5, 0xf8, 0x77, 0x39, 0xc2}, true, true, 3, -1},
		{"vpcmpeqb ymm,(rdi)", []byte{0xc5, 0xfd, 0x74, 0x0f, 0x90}, true, true, 4, -1},
		{"vpbroadcastb", []byte{0xc4, 0xe2, 0x7d, 0x78, 0xc0}, true, true, 5, -1},
		{"vmovdqa rip", []byte{0xc5, 0xfd, 0x6f, 0x05, 1, 2, 3, 4, 0x90}, true, true, 8, 4},
		{"vpshufd imm8", []byte{0xc5, 0xf9, 0x70, 0xc1, 0x1b}, true, true, 5, -1},
		{"vpalignr 0f3a disp8 imm8", []byte{0xc4, 0xe3, 0x7d, 0x0f, 0x47, 0x10, 0x04}, true, true, 7, -1},
		{"vpcmpeqb evex disp8", []byte{0x62, 0xf1, 0x7d, 0x48, 0x74, 0x4f, 0x01}, true, true, 7, -1},
		{"evex sib disp32", []byte{0x62, 0xf1, 0x7d, 0x48, 0x6f, 0x84, 0x24, 1, 2, 3, 4}, true, true, 11, -1},
		{"vmovdqu fs: prefix", []byte{0x64, 0xc5, 0xfe, 0x6f, 0x00}, true, true, 5, -1},
		{"rex before vex", []byte{0x48, 0xc5, 0xf8, 0x77}, true, false, 0, -1},
		{"truncated", []byte{0xc5, 0xfd, 0x6f, 0x05, 1}, true, false, 0, -1},
		{"pop r/m is not xop", []byte{0x8f, 0xc0}, false, false, 0, -1},
		{"plain mov", []byte{0x48, 0x89, 0xc7}, false, false, 0, -1},
	} {
		in, isVex, ok := vexDecode(c.b)
		if isVex != c.isVex || ok != c.ok {
			t.Errorf("%s: isVex=%v ok=%v, want %v %v", c.name, isVex, ok, c.isVex, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if in.Len != c.n {
			t.Errorf("%s: length %d, want %d", c.name, in.Len, c.n)
		}
		if c.ripDisp >= 0 && (in.PCRel != 4 || in.PCRelOff != c.ripDisp) {
			t.Errorf("%s: rip-relative disp at %d (PCRel %d), want %d", c.name, in.PCRelOff, in.PCRel, c.ripDisp)
		}
		if c.ripDisp < 0 && in.PCRel != 0 {
			t.Errorf("%s: unexpected pc-relative operand", c.name)
		}
		if k, _ := Classify(&in); k != Other {
			t.Errorf("%s: classified %v, want Other", c.name, k)
		}
	}
}
