package formats

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Packets of a compact complete trace (a paths file's chunk data). The
// runtime appends only what the path needs and the decoder walks the
// rewritten code for the rest, as Intel PT does (its TNT, TIP, PSB and
// FUP packets are the model):
//
//	byte            packet
//	0x00            PAD: nothing (the zero tail of a buffer)
//	b & 1 == 1      short TNT: 1-6 outcome bits in b>>1 under a leading 1
//	0x02 + u64      long TNT: 1-63 outcome bits under a leading 1
//	0x60+2k + k B   RET_TIP (k = 0..8): a call chain's (STINT_MF_CALLS)
//	                return at this address (as TIP) to the address on
//	                top of the call stack, which it pops
//	0x40+2k + k B   sized TNT (k = 1..8): 7-63 outcome bits under a
//	                leading 1 in k little-endian bytes (the runtime's
//	                form for more than 6 bits: most flushes, before a
//	                TIP, hold a dozen)
//	0x20+2k + k B   TIP: a destination, the low k bytes (k = 0..8) of its
//	                XOR with the last address (little-endian)
//	0x04 + u64      SYNC: execution (re-)enters instrumented code at this
//	                address, from outside (a callback, a longjmp, a landing
//	                pad, a new thread)
//	0x06 + 2 u64    ASYNC: a signal handler at the second address
//	                interrupted the thread at the first (0: right after
//	                the last event)
//	0x08 + u64      ASYNC_END: the handler returned (to this address, the
//	                signal restorer); the interrupted path resumes
//	0x0a + u64      LOST: the path is broken here: this many packets
//	                were dropped (--lossy), or 0: probes did not run (a
//	                budget's closed gate); the call stack starts empty and
//	                a SYNC follows before the next event
//	0x0c + 2 u64    SYNC_CALL: a SYNC at the first address, a function
//	                entered from code without probes that will return to
//	                the second (a callback: its return address)
//	0x10 + 3 u64    ASYNC_TO: the handler returned (to the first address,
//	                the restorer), but not to where it interrupted the
//	                thread: it goes on at the second, with the third
//	                pushed as if called from there (0: nothing pushed):
//	                Go's preemption and sigpanic
//	0x80+2h + 1 B   SITE (h = 0..59): a call chain's call or ret number
//	                h<<8 | B (counting the direct calls and rets of the
//	                branch map in address order) of the module the last
//	                probe's own address (TIP, RET_TIP, PSB or SITE) was
//	                in: as that address's TIP (a call), or RET_TIP (a ret
//	                to the call stack's top)
//	0xf8+2h + u16   SITE (h = 0..3) of number 15,360 + (h<<16 | u16)
//	0x0e + u64      PSB: at each chunk's start and every 16 KiB of
//	                packets, right before a probe's own
//	                packet or bit, the probe's address; the call stack is
//	                emptied. A decoder that knows the thread's place
//	                empties its stack and goes on; one that lost it (at a
//	                branch without a probe) resumes here
//
// Outcome bits are oldest first (the highest below the leading 1). A jcc
// takes one bit (1 = taken); a return takes bit 1 when it goes where the
// call stack says (a compressed return) and a TIP otherwise. Every packet
// but TNT comes after the bits before it, so a decoder that reaches a
// return with no bit left and a TIP next knows the return is not
// compressed. SYNC, ASYNC and ASYNC_END set the last address too.
const (
	PktPad      = 0x00
	PktLongTNT  = 0x02
	PktSync     = 0x04
	PktAsync    = 0x06
	PktAsyncEnd = 0x08
	PktLost     = 0x0a
	PktSyncCall = 0x0c
	PktPSB      = 0x0e
	PktAsyncTo  = 0x10
	PktTIP      = 0x20 // + 2k, k = 0..8
	PktTNT      = 0x40 // + 2k, k = 1..8
	PktRetTIP   = 0x60 // + 2k, k = 0..8
	PktSite     = 0x80 // + 2h, h = 0..59, then a byte
	PktSiteLong = 0xf8 // + 2h, h = 0..3, then a u16
	// siteShort is the count of SITE numbers 2 bytes hold; MaxSite
	// bounds them all.
	siteShort = (PktSiteLong - PktSite) / 2 << 8
	MaxSite   = siteShort + 4<<16
)

// PacketKind is what a decoded packet is.
type PacketKind uint8

const (
	PacketTNT PacketKind = iota + 1
	PacketTIP
	PacketSync
	PacketAsync
	PacketAsyncEnd
	PacketLost
	PacketSyncCall
	PacketPSB
	PacketAsyncTo
	PacketRetTIP
	PacketSite
)

func (k PacketKind) String() string {
	switch k {
	case PacketTNT:
		return "TNT"
	case PacketTIP:
		return "TIP"
	case PacketSync:
		return "SYNC"
	case PacketAsync:
		return "ASYNC"
	case PacketAsyncEnd:
		return "ASYNC_END"
	case PacketLost:
		return "LOST"
	case PacketSyncCall:
		return "SYNC_CALL"
	case PacketPSB:
		return "PSB"
	case PacketAsyncTo:
		return "ASYNC_TO"
	case PacketRetTIP:
		return "RET_TIP"
	case PacketSite:
		return "SITE"
	}
	return fmt.Sprintf("PacketKind(%d)", uint8(k))
}

// Packet is one decoded packet.
type Packet struct {
	Kind PacketKind
	// TNT: N outcome bits, oldest in bit N-1 of Bits.
	Bits uint64
	N    int
	// TIP, SYNC, ASYNC_END, PSB, ASYNC_TO: the address (ASYNC_TO: the
	// restorer, At where the thread goes on, Ret what was pushed); ASYNC: the handler's address,
	// and At the interrupted one (0: after the last event); SYNC_CALL:
	// the function's address, and At its return address. LOST: the
	// count in Addr. SITE: the branch's index in Addr.
	Addr, At uint64
	Ret      uint64
}

// PacketReader decodes a thread's packets, chunk after chunk (the last
// address runs on across chunks, as the runtime's does).
type PacketReader struct {
	data   []byte
	pos    int
	lastIP uint64
	torn   bool
}

// Reset starts on a new chunk's data, keeping the last address.
func (r *PacketReader) Reset(data []byte) { r.data, r.pos, r.torn = data, 0, false }

// Torn reports whether the chunk ended in a torn append (skipPad).
func (r *PacketReader) Torn() bool { return r.torn }

// tornSpan is how far past a packet's first byte its writers store
// before that byte: a TIP's or a long TNT's 8 payload bytes.
const tornSpan = 9

// skipPad moves past PAD. Where a packet should start, PAD followed by
// bytes that all lie within tornSpan of it, and nothing but PAD to the
// chunk's end, is an append a kill cut short: the trampolines' inline
// writers store a TIP's or a long TNT's 8 payload bytes before its
// opcode, and nothing else leaves PAD between packets. The chunk's data
// then end there.
func (r *PacketReader) skipPad() {
	start := r.pos
	for r.pos < len(r.data) && r.data[r.pos] == PktPad {
		r.pos++
	}
	if r.pos == start || r.pos == len(r.data) {
		return // no PAD here, or PAD to the end
	}
	for _, b := range r.data[min(start+tornSpan, len(r.data)):] {
		if b != PktPad {
			return // a packet after PAD: the decoder says what it is
		}
	}
	r.pos, r.torn = len(r.data), true
}

// More reports whether a packet follows (padding aside).
func (r *PacketReader) More() bool {
	r.skipPad()
	return r.pos < len(r.data)
}

// Pos is the offset in the chunk of the next packet.
func (r *PacketReader) Pos() int { return r.pos }

// NextTNT decodes the next packet when it is a whole, well-formed TNT
// (padding skipped) and returns its n outcome bits, oldest in bit n-1;
// ok is false, and nothing is read, for anything else (Next reads it,
// and names what is wrong). The decoder's fast walk refills with it.
func (r *PacketReader) NextTNT() (v uint64, n int, ok bool) {
	r.skipPad()
	if r.pos >= len(r.data) {
		return 0, 0, false
	}
	b, size := r.data[r.pos], 1
	switch {
	case b&1 == 1:
		v = uint64(b >> 1)
	case b == PktLongTNT && len(r.data)-r.pos >= 9:
		v, size = binary.LittleEndian.Uint64(r.data[r.pos+1:]), 9
	case b > PktTNT && b <= PktTNT+16 && b%2 == 0 && len(r.data)-r.pos > int(b-PktTNT)/2:
		k := int(b-PktTNT) / 2
		v, size = r.le(k), 1+k
	default:
		return 0, 0, false
	}
	if n = bits.Len64(v) - 1; n < 1 {
		return 0, 0, false
	}
	r.pos += size
	return v &^ (1 << n), n, true
}

// badTNT says what is wrong with the TNT at the reader's position
// (opening byte b, at offset at), which NextTNT would not read: cut
// short, or without bits.
func (r *PacketReader) badTNT(at int, b byte) error {
	left := len(r.data) - r.pos
	switch {
	case b&1 == 1:
		return fmt.Errorf("packet at %d: short TNT %#02x without bits", at, b)
	case b == PktLongTNT && left < 9:
		return fmt.Errorf("packet at %d: long TNT cut short", at)
	case b == PktLongTNT:
		return fmt.Errorf("packet at %d: long TNT %#x without bits", at, binary.LittleEndian.Uint64(r.data[r.pos+1:]))
	}
	k := int(b-PktTNT) / 2
	if left < 1+k {
		return fmt.Errorf("packet at %d: TNT of %d bytes cut short", at, k)
	}
	return fmt.Errorf("packet at %d: TNT %#x without bits", at, r.le(k))
}

// NextPlainTIP decodes the next packet when it is a whole TIP (not a
// RET_TIP) and returns its address; ok is false, and nothing is read,
// for anything else.
func (r *PacketReader) NextPlainTIP() (addr uint64, ok bool) {
	_, addr, ok = r.nextTIP(true)
	return addr, ok
}

// NextSite decodes the next packet when it is a whole SITE (padding
// skipped) and returns its number; ok is false, and nothing is read, for
// anything else. A call chain is mostly SITEs and TIPs.
func (r *PacketReader) NextSite() (idx uint64, ok bool) {
	r.skipPad()
	if r.pos >= len(r.data) {
		return 0, false
	}
	b, left := r.data[r.pos], len(r.data)-r.pos
	switch {
	case b < PktSite || b%2 != 0:
		return 0, false
	case b < PktSiteLong:
		if left < 2 {
			return 0, false
		}
		idx = uint64(b-PktSite)/2<<8 | uint64(r.data[r.pos+1])
		r.pos += 2
	default:
		if left < 3 {
			return 0, false
		}
		idx = siteShort + (uint64(b-PktSiteLong)/2<<16 | uint64(r.data[r.pos+2])<<8 | uint64(r.data[r.pos+1]))
		r.pos += 3
	}
	return idx, true
}

// NextTIP decodes the next packet when it is a whole TIP or RET_TIP
// (padding skipped) and returns its kind and address; ok is false, and
// nothing is read, for anything else (Next reads it). A call chain's
// decoder takes most of its packets this way, without a Packet.
func (r *PacketReader) NextTIP() (kind PacketKind, addr uint64, ok bool) { return r.nextTIP(false) }

// nextTIP is NextTIP, or NextPlainTIP when plain.
func (r *PacketReader) nextTIP(plain bool) (kind PacketKind, addr uint64, ok bool) {
	r.skipPad()
	if r.pos >= len(r.data) {
		return 0, 0, false
	}
	kind, k, ok := tipOp(r.data[r.pos])
	if !ok || plain && kind != PacketTIP || len(r.data)-r.pos < 1+k {
		return 0, 0, false
	}
	r.lastIP ^= r.le(k)
	r.pos += 1 + k
	return kind, r.lastIP, true
}

func isTIP(b byte) bool { _, _, ok := tipOp(b); return ok }

// tipOp says whether opcode b opens a TIP or a RET_TIP, which, and how
// many address bytes follow.
func tipOp(b byte) (kind PacketKind, k int, ok bool) {
	switch {
	case b >= PktTIP && b <= PktTIP+16 && b%2 == 0:
		return PacketTIP, int(b-PktTIP) / 2, true
	case b >= PktRetTIP && b <= PktRetTIP+16 && b%2 == 0:
		return PacketRetTIP, int(b-PktRetTIP) / 2, true
	}
	return 0, 0, false
}

// le returns the k bytes after the opcode at the reader's position as a
// little-endian number (the caller checked they are there).
func (r *PacketReader) le(k int) uint64 {
	var x uint64
	for i := k; i > 0; i-- {
		x = x<<8 | uint64(r.data[r.pos+i])
	}
	return x
}

// Next decodes the next packet. ok is false at the end of the chunk's
// data; err names a malformed packet's offset.
func (r *PacketReader) Next() (p Packet, ok bool, err error) {
	r.skipPad()
	if r.pos >= len(r.data) {
		return p, false, nil
	}
	at, b := r.pos, r.data[r.pos]
	need := func(n int) bool { return len(r.data)-r.pos >= n }
	u64 := func(off int) uint64 { return binary.LittleEndian.Uint64(r.data[r.pos+off:]) }
	switch {
	case b&1 == 1 || b == PktLongTNT || b > PktTNT && b <= PktTNT+16 && b%2 == 0:
		if v, n, ok := r.NextTNT(); ok {
			return Packet{Kind: PacketTNT, Bits: v, N: n}, true, nil
		}
		return p, false, r.badTNT(at, b)
	case isTIP(b):
		if kind, a, ok := r.NextTIP(); ok {
			return Packet{Kind: kind, Addr: a}, true, nil
		}
		kind, k, _ := tipOp(b)
		return p, false, fmt.Errorf("packet at %d: %s of %d bytes cut short", at, kind, k)
	case b >= PktSite && b%2 == 0:
		idx, ok := r.NextSite()
		if !ok {
			return p, false, fmt.Errorf("packet at %d: SITE cut short", at)
		}
		return Packet{Kind: PacketSite, Addr: idx}, true, nil
	case b == PktSync || b == PktAsyncEnd || b == PktLost || b == PktPSB:
		if !need(9) {
			return p, false, fmt.Errorf("packet at %d: %#02x cut short", at, b)
		}
		v := u64(1)
		r.pos += 9
		switch b {
		case PktSync:
			r.lastIP = v
			return Packet{Kind: PacketSync, Addr: v}, true, nil
		case PktAsyncEnd:
			r.lastIP = v
			return Packet{Kind: PacketAsyncEnd, Addr: v}, true, nil
		case PktPSB:
			r.lastIP = v
			return Packet{Kind: PacketPSB, Addr: v}, true, nil
		}
		return Packet{Kind: PacketLost, Addr: v}, true, nil
	case b == PktAsyncTo:
		if !need(25) {
			return p, false, fmt.Errorf("packet at %d: %#02x cut short", at, b)
		}
		a, to, ret := u64(1), u64(9), u64(17)
		r.pos += 25
		r.lastIP = to
		return Packet{Kind: PacketAsyncTo, Addr: a, At: to, Ret: ret}, true, nil
	case b == PktAsync || b == PktSyncCall:
		if !need(17) {
			return p, false, fmt.Errorf("packet at %d: %#02x cut short", at, b)
		}
		x, h := u64(1), u64(9)
		r.pos += 17
		if b == PktSyncCall {
			r.lastIP = x
			return Packet{Kind: PacketSyncCall, Addr: x, At: h}, true, nil
		}
		r.lastIP = h
		return Packet{Kind: PacketAsync, At: x, Addr: h}, true, nil
	}
	return p, false, fmt.Errorf("packet at %d: unknown packet byte %#02x", at, b)
}

// PacketWriter encodes packets as the runtime does (for tests and for
// hand-made traces): outcome bits gather until another packet or Flush.
type PacketWriter struct {
	Data   []byte
	tnt    uint64 // outcome bits under a leading 1; 1 = none
	lastIP uint64
}

// Bit appends one outcome bit.
func (w *PacketWriter) Bit(taken bool) {
	if w.tnt == 0 {
		w.tnt = 1
	}
	w.tnt <<= 1
	if taken {
		w.tnt |= 1
	}
	if w.tnt>>63 == 1 {
		w.flushTNT()
	}
}

func (w *PacketWriter) flushTNT() {
	if w.tnt <= 1 {
		w.tnt = 1
		return
	}
	if w.tnt < 1<<7 {
		w.Data = append(w.Data, byte(w.tnt<<1|1))
	} else {
		k := (bits.Len64(w.tnt) + 7) / 8
		w.Data = append(w.Data, byte(PktTNT+2*k))
		w.Data = binary.LittleEndian.AppendUint64(w.Data, w.tnt)[:len(w.Data)+k]
	}
	w.tnt = 1
}

// TIP appends a destination.
func (w *PacketWriter) TIP(addr uint64) { w.tip(PktTIP, addr) }

// RetTIP appends a call chain's return at addr to the call stack's top.
func (w *PacketWriter) RetTIP(addr uint64) { w.tip(PktRetTIP, addr) }

func (w *PacketWriter) tip(op byte, addr uint64) {
	w.flushTNT()
	x := addr ^ w.lastIP
	k := (bits.Len64(x) + 7) / 8
	w.Data = append(w.Data, op+byte(2*k))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], x)
	w.Data = append(w.Data, b[:k]...)
	w.lastIP = addr
}

func (w *PacketWriter) op(b byte, vs ...uint64) {
	w.flushTNT()
	w.Data = append(w.Data, b)
	for _, v := range vs {
		w.Data = binary.LittleEndian.AppendUint64(w.Data, v)
	}
}

// Site appends a call chain's SITE of call or ret number i (< MaxSite).
func (w *PacketWriter) Site(i uint32) {
	w.flushTNT()
	w.Data = append(w.Data, SiteBytes(i)...)
}

// SiteBytes is the SITE packet of call or ret number i (< MaxSite): 2
// bytes below 15,360, else 3.
func SiteBytes(i uint32) []byte {
	if i < siteShort {
		return []byte{byte(PktSite + 2*(i>>8)), byte(i)}
	}
	i -= siteShort
	return []byte{byte(PktSiteLong + 2*(i>>16)), byte(i), byte(i >> 8)}
}

// Sync appends a SYNC.
func (w *PacketWriter) Sync(addr uint64) { w.op(PktSync, addr); w.lastIP = addr }

// Async appends an ASYNC: handler interrupted the thread at at.
func (w *PacketWriter) Async(at, handler uint64) { w.op(PktAsync, at, handler); w.lastIP = handler }

// PSB appends a PSB.
func (w *PacketWriter) PSB(addr uint64) { w.op(PktPSB, addr); w.lastIP = addr }

// SyncCall appends a SYNC_CALL: fn entered from outside, returning to ret.
func (w *PacketWriter) SyncCall(fn, ret uint64) { w.op(PktSyncCall, fn, ret); w.lastIP = fn }

// AsyncTo appends an ASYNC_TO: the handler returned to restorer, the
// thread goes on at to with ret pushed.
func (w *PacketWriter) AsyncTo(restorer, to, ret uint64) {
	w.op(PktAsyncTo, restorer, to, ret)
	w.lastIP = to
}

// AsyncEnd appends an ASYNC_END.
func (w *PacketWriter) AsyncEnd(addr uint64) { w.op(PktAsyncEnd, addr); w.lastIP = addr }

// Lost appends a LOST.
func (w *PacketWriter) Lost(n uint64) { w.op(PktLost, n) }

// Flush writes the pending outcome bits.
func (w *PacketWriter) Flush() { w.flushTNT() }
