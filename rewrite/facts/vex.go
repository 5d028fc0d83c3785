package facts

import "golang.org/x/arch/x86/x86asm"

// x86asm decodes VEX- and EVEX-encoded instructions only in part and
// sometimes with the wrong length (c5 f8 77, vzeroupper, comes back as 4
// bytes long). A wrong length desynchronises the sweep: the bytes after
// it decode as different instructions, and the planner then patches the
// middle of real ones (glibc's __memchr_avx2 was hit this way). None of
// these instructions transfers control, so for them we only need their
// exact length and where a RIP-relative displacement sits; vexDecode
// computes both from the encoding rules (Intel SDM vol. 2, 2.3 and 2.7).

// vexDecode decodes b if it starts with a VEX (c4, c5), EVEX (62) or
// XOP (8f with map >= 8) encoded instruction, possibly after segment or
// address-size prefixes. isVex reports whether it does; ok whether the
// encoding is one we can measure. A VEX instruction we cannot measure is
// undecodable (the sweep then leaves its bytes alone).
func vexDecode(b []byte) (in x86asm.Inst, isVex, ok bool) {
	p := 0
	legacyBad := false // 66/f2/f3/f0/REX before VEX: #UD
	for p < len(b) && p < 14 {
		c := b[p]
		switch {
		case c == 0x26 || c == 0x2e || c == 0x36 || c == 0x3e || c == 0x64 || c == 0x65 || c == 0x67:
		case c == 0x66 || c == 0xf2 || c == 0xf3 || c == 0xf0 || c&0xf0 == 0x40:
			legacyBad = true
		default:
			goto prefixesDone
		}
		p++
	}
prefixesDone:
	if p+1 >= len(b) {
		return in, false, false
	}
	var mapSel, pfxLen int
	switch b[p] {
	case 0xc5:
		mapSel, pfxLen = 1, 2
	case 0xc4:
		mapSel, pfxLen = int(b[p+1]&0x1f), 3
	case 0x62:
		mapSel, pfxLen = int(b[p+1]&0x07), 4
	case 0x8f:
		if b[p+1]&0x1f < 8 { // pop r/m64
			return in, false, false
		}
		mapSel, pfxLen = int(b[p+1]&0x1f), 3
	default:
		return in, false, false
	}
	if legacyBad {
		return in, true, false
	}
	q := p + pfxLen // opcode
	if q >= len(b) {
		return in, true, false
	}
	op := b[q]
	q++
	imm := 0
	switch {
	case b[p] == 0x8f: // AMD XOP
		switch mapSel {
		case 8:
			imm = 1
		case 9:
		case 0xa:
			imm = 4
		default:
			return in, true, false
		}
	case mapSel == 1:
		if op == 0x77 && b[p] != 0x62 { // vzeroupper, vzeroall: no ModRM
			in.Len = q
			in.Op = x86asm.VZEROUPPER
			return in, true, true
		}
		switch op {
		case 0x70, 0x71, 0x72, 0x73, 0xc2, 0xc4, 0xc5, 0xc6:
			imm = 1
		}
	case mapSel == 2:
	case mapSel == 3:
		imm = 1
	case b[p] == 0x62 && (mapSel == 5 || mapSel == 6): // AVX512-FP16
	default:
		return in, true, false
	}
	// ModRM, SIB, displacement (32/64-bit addressing: same lengths).
	if q >= len(b) {
		return in, true, false
	}
	modrm := b[q]
	q++
	mod, rm := modrm>>6, modrm&7
	dispOff := -1
	if mod != 3 {
		if rm == 4 {
			if q >= len(b) {
				return in, true, false
			}
			sib := b[q]
			q++
			if mod == 0 && sib&7 == 5 {
				q += 4
			}
		} else if mod == 0 && rm == 5 {
			dispOff = q // RIP-relative
			q += 4
		}
		switch mod {
		case 1:
			q++
		case 2:
			q += 4
		}
	}
	q += imm
	if q > len(b) || q > 15 {
		return in, true, false
	}
	in.Len = q
	in.Op = x86asm.VMOVDQU // any op that is neither a transfer nor a nop
	if dispOff >= 0 {
		in.PCRel = 4
		in.PCRelOff = dispOff
	}
	return in, true, true
}
