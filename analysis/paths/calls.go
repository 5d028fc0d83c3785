package paths

import "github.com/stint-project/stint/formats"

// A call chain (rewrite --tool call --every; the runtime's
// STINT_MF_CALLS) walks no code: each call and ret appends its own
// address (TIP; a ret to the call stack's top a RET_TIP), or its number
// among the branch map's direct calls and rets (SITE: its module is the
// one the last of those was in), an indirect call then its destination and any
// other ret then where it went. The decoder keeps the runtime's call
// stack (the same ring: push at each call but those the branch map
// says do not push, pop at a RET_TIP or a ret's SITE, unwind at another
// ret, emptied at a PSB or a LOST) to know where a ret to its top
// returned, and takes the rest from the branch map.

// callSite is a call chain's event waiting for its destination: an
// indirect call's or a ret's TIP, which may start the next chunk.
type callSite struct {
	kind formats.Kind // 0: none
	src  uint64
	next uint64 // an indirect call's return address
}

// runCalls decodes a call chain's packets until it has emitted at least
// max events (nil) or the thread's packets run out (errStarved).
func (t *thread) runCalls(max int) (err error) {
	for start := t.emitted; t.emitted-start < max; {
		var p formats.Packet
		if k, a, ok := t.nextTIP(); ok {
			p.Kind, p.Addr = k, a
		} else if i, ok := t.nextSite(); ok {
			if err := t.site(i); err != nil {
				return err
			}
			continue
		} else if p, err = t.next(); err != nil {
			return err
		}
		if w := t.waiting; w.kind != 0 {
			t.waiting = callSite{}
			if p.Kind != formats.PacketTIP {
				return t.errf("%v at %#x needs its destination, the packet is %v", w.kind, w.src, p.Kind)
			}
			if w.kind == formats.KindRet {
				t.unwind(p.Addr)
			} else {
				t.push(w.next)
			}
			t.out(w.kind, w.src, p.Addr)
			continue
		}
		if err := t.callPacket(p); err != nil {
			return err
		}
	}
	return nil
}

// nextTIP reads the next packet when it is a TIP or RET_TIP, most of a
// call chain's, the fast way (formats.PacketReader.NextTIP).
func (t *thread) nextTIP() (formats.PacketKind, uint64, bool) {
	if t.hasPending {
		return 0, 0, false
	}
	return t.pr.NextTIP()
}

// nextSite reads the next packet when it is a SITE and no event waits
// for a destination (next reads it then, and the wait says what is wrong).
func (t *thread) nextSite() (uint64, bool) {
	if t.hasPending || t.waiting.kind != 0 {
		return 0, false
	}
	return t.pr.NextSite()
}

// callPacket takes one packet of a call chain that starts an event (or
// none).
func (t *thread) callPacket(p formats.Packet) error {
	switch p.Kind {
	case formats.PacketPSB, formats.PacketLost:
		t.stack, t.top = [stackSize]uint64{}, 0
		t.sitemod = nil
		if p.Kind == formats.PacketPSB {
			t.sitemod = t.d.mods.at(p.Addr)
		}
		return nil
	case formats.PacketSync, formats.PacketSyncCall, formats.PacketAsync, formats.PacketAsyncEnd, formats.PacketAsyncTo:
		return nil // the runtime's walk packets: nothing to a call chain
	case formats.PacketSite:
		return t.site(p.Addr)
	case formats.PacketTIP, formats.PacketRetTIP:
	default:
		return t.errf("a call chain holds a %v packet", p.Kind)
	}
	m := t.d.mods.at(p.Addr)
	i := -1
	if m != nil && m.m != nil {
		i = t.index(m, p.Addr) // a call chain's TIPs name few places
	}
	if i < 0 || i >= len(m.m.Branches) || m.Base+m.m.Branches[i].Addr != p.Addr {
		return t.errf("%v at %#x: no call or ret there", p.Kind, p.Addr)
	}
	t.m, t.sitemod = m, m
	return t.callEvent(m, &m.m.Branches[i], p.Kind == formats.PacketRetTIP, p.Addr)
}

// site takes a SITE packet: the direct call or ret number i of the
// module the last probe's own address was in, a call (as a TIP of its
// address) or a ret to the top of the call stack (as a RET_TIP).
func (t *thread) site(i uint64) error {
	m := t.sitemod
	if m == nil || m.m == nil {
		return t.errf("SITE %d with no module named before it", i)
	}
	if i >= uint64(len(m.sites)) {
		return t.errf("SITE %d past the %d calls and rets of %s", i, len(m.sites), m.Path)
	}
	br := &m.m.Branches[m.sites[i]]
	t.m = m
	return t.callEvent(m, br, br.Kind == formats.BrRet, m.Base+br.Addr)
}

// callEvent takes the call chain's event at the branch br of m (at a),
// a ret to the call stack's top when top.
func (t *thread) callEvent(m *module, br *formats.Branch, top bool, a uint64) error {
	next := a + uint64(br.Len)
	switch {
	case top && br.Kind == formats.BrRet:
		dst := t.stack[t.top]
		t.pop(1)
		return t.out(formats.KindRet, a, dst)
	case top:
		return t.errf("RET_TIP at %#x, a %v", a, br.Kind)
	case br.Kind == formats.BrCall:
		if br.Flags&formats.BranchNoPush == 0 {
			t.push(next)
		}
		return t.out(formats.KindCall, a, m.Base+br.Target)
	case br.Kind == formats.BrIndCall:
		t.waiting = callSite{formats.KindIndCall, a, next}
	case br.Kind == formats.BrRet:
		t.waiting = callSite{formats.KindRet, a, 0}
	default:
		return t.errf("TIP at %#x, a %v", a, br.Kind)
	}
	return nil
}
