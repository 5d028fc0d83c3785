package paths

import (
	"strings"
	"testing"

	"github.com/stint-project/stint/formats"
)

// A module whose jcc at 0x2000 has no probe; marks on its two sides say
// where it went (rewrite/policy/marks.go):
//
//	0x2000 jcc -> 0x2010 (marked: the taken side's mark appends 1)
//	0x2002 mark (0)      0x2005 ret
//	0x2010 mark (1)      0x2014 jmp -> 0x2000
func marksMap() *formats.PathMap {
	return &formats.PathMap{TextLo: 0x2000, TextHi: 0x3000, Branches: []formats.Branch{
		{Addr: 0x2000, Target: 0x2010, Len: 2, Kind: formats.BrJcc, Flags: formats.BranchMarked | formats.BranchBit},
		{Addr: 0x2002, Len: 3, Kind: formats.BrMark, Flags: formats.BranchProbed},
		{Addr: 0x2005, Len: 1, Kind: formats.BrRet, Flags: formats.BranchProbed},
		{Addr: 0x2010, Len: 4, Kind: formats.BrMark, Flags: formats.BranchProbed | formats.BranchBit},
		{Addr: 0x2014, Target: 0x2000, Len: 2, Kind: formats.BrJmp},
	}}
}

func decodeMarks(t *testing.T, w *formats.PacketWriter) ([]string, Stats, error) {
	t.Helper()
	// the map survives the round trip through its section encoding
	m, err := formats.DecodePathMap(marksMap().Encode())
	if err != nil {
		t.Fatal(err)
	}
	return decodeWith(t, m, w)
}

func TestDecodeMarkedJcc(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x2000)
	w.Bit(true)  // the taken side's mark: jcc taken, then jmp back
	w.Bit(false) // the other side's: not taken, then the ret
	w.TIP(testBase + 0x3800)
	got, st, err := decodeMarks(t, &w)
	wantEvents(t, got, st, err, "jcc-taken 2000>2010; jmp 2014>2000; jcc-not-taken 2000>2002; ret 2005>403800")
	if st.Unprobed != 0 {
		t.Errorf("%d unprobed, want 0", st.Unprobed)
	}
}

// A signal that lands on one side's run before its mark ran says the
// side: the mark's bit comes after the handler.
func TestDecodeMarkedJccSignal(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x2000)
	w.Async(testBase+0x2002, testBase+0x2005) // at the not-taken side's mark
	w.AsyncEnd(testBase + 0x3900)             // the handler (the ret) returns
	w.Bit(false)
	w.TIP(testBase + 0x3800)
	got, st, err := decodeMarks(t, &w)
	wantEvents(t, got, st, err, "jcc-not-taken 2000>2002; ret 2005>403900; ret 2005>403800")
}

// A mark whose bit is not the one it appends is a broken trace: a clear
// error, not a wrong path.
func TestDecodeMarkMismatch(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x2010) // at the mark that appends 1
	w.Bit(false)
	_, _, err := decodeMarks(t, &w)
	if err == nil || !strings.Contains(err.Error(), "the mark at 0x402010 appends true, the bit is false") {
		t.Errorf("error %v, want the mark's mismatch", err)
	}
}

// decodeWith decodes w's packets (one chunk of thread 3) with branch
// map m.
func decodeWith(t *testing.T, m *formats.PathMap, w *formats.PacketWriter) ([]string, Stats, error) {
	t.Helper()
	w.Flush()
	name := writeCompact(t, t.TempDir(), []formats.Chunk{{TID: 3, Data: w.Data}})
	return decodeFile(t, name, m)
}

// A walk that meets a jcc without a probe skips packets until the next
// PSB and goes on from there.
func TestDecodePSBResync(t *testing.T) {
	m := testMap()
	m.Branches[0].Flags = 0 // the jcc at 0x1000 has no probe
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Bit(true) // unknown to the decoder: skipped
	w.PSB(testBase + 0x1100)
	w.Bit(false)
	w.TIP(testBase + 0x1104)
	w.TIP(testBase + 0x5000) // the ret, to outside
	got, st, err := decodeWith(t, m, &w)
	wantEvents(t, got, st, err, "jcc-not-taken 1100>1102; ind-jmp 1102>1104; ret 1104>405000")
	if st.Unprobed != 1 || st.Resynced != 1 || st.Skipped != 1 {
		t.Errorf("stats %+v, want 1 unprobed, 1 resynced, 1 skipped", st)
	}
}

// A walk in step reads a PSB where the runtime wrote it and empties its
// call stack as the runtime did: a ret after it takes a TIP, and a bit
// there (a stack the decoder kept) is an error.
func TestDecodePSBInStep(t *testing.T) {
	for _, c := range []struct {
		ret  func(w *formats.PacketWriter)
		want string
	}{
		{func(w *formats.PacketWriter) { w.TIP(testBase + 0x1015) }, ""},
		{func(w *formats.PacketWriter) { w.Bit(true) }, "on top of the stack"},
	} {
		var w formats.PacketWriter
		w.Sync(testBase + 0x1000)
		w.Bit(true) // jcc taken; the call at 0x1010 pushes 0x1015
		w.PSB(testBase + 0x1100)
		w.Bit(false)
		w.TIP(testBase + 0x1104)
		c.ret(&w)
		got, st, err := decodeWith(t, testMap(), &w)
		if c.want == "" && err != nil {
			t.Fatalf("%v (%+v)", err, st)
		}
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
			continue
		}
		if n := len(got); n < 5 || got[4] != "ret 1104>1015" {
			t.Errorf("events %q, want the ret to 0x1015 fifth", got)
		}
	}
}

// A signal handler that sends the thread elsewhere when it returns (Go's
// asynchronous preemption: a call pushed at the interrupted place): the
// walk goes on there, and the pushed return address is where a ret
// later goes.
func TestDecodeAsyncTo(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Bit(true) // jcc taken; call 0x1010 -> 0x1100
	w.Async(testBase+0x1100, testBase+0x1104)
	w.AsyncTo(testBase+0x3900, testBase+0x1015, testBase+0x1100)
	w.Bit(false)             // the jcc at 0x1000 again
	w.TIP(testBase + 0x1100) // the ret at 0x1002, to what was pushed
	got, st, err := decodeWith(t, testMap(), &w)
	wantEvents(t, got, st, err, "jcc-taken 1000>1010; call 1010>1100; ret 1104>403900; jmp 1015>1000; jcc-not-taken 1000>1002; ret 1002>1100")
}

// After an indirect jmp flagged as a stack switch, the calls walked
// before say nothing of where a ret without a probe goes: the walk
// loses its place there instead of going to the wrong frame.
func TestDecodeStackSwitch(t *testing.T) {
	for _, c := range []struct {
		flags    uint8
		unprobed int
	}{{0, 0}, {formats.BranchSwitch, 1}} {
		m := testMap()
		m.Branches[5].Flags |= c.flags // the indirect jmp at 0x1102
		m.Branches[6].Flags = 0        // the ret at 0x1104 has no probe
		var w formats.PacketWriter
		w.Sync(testBase + 0x1000)
		w.Bit(true)  // jcc taken; call 0x1010 -> 0x1100 (0x1015 walked)
		w.Bit(false) // jcc 0x1100 not taken
		w.TIP(testBase + 0x1104)
		w.Bit(false) // after the ret: the jcc at 0x1000 (or skipped)
		_, st, err := decodeWith(t, m, &w)
		if err != nil {
			t.Fatalf("flags %#x: %v (%+v)", c.flags, err, st)
		}
		if st.Unprobed != c.unprobed || st.Inferred != 1-c.unprobed {
			t.Errorf("flags %#x: %d unprobed, %d inferred; want %d, %d", c.flags, st.Unprobed, st.Inferred, c.unprobed, 1-c.unprobed)
		}
	}
}

// A signal the walk had passed, whose handler resumes the thread
// elsewhere (ASYNC_TO): the thread comes back to where the signal landed
// and runs that code again, so the call the walk had pushed past it must
// be pushed once, not twice: a ret with an empty stack there takes a
// TIP, and a bit is an error.
func TestDecodeAsyncToPassed(t *testing.T) {
	for _, c := range []struct {
		last func(w *formats.PacketWriter)
		err  string
	}{
		{func(w *formats.PacketWriter) { w.TIP(testBase + 0x5000) }, ""},
		{func(w *formats.PacketWriter) { w.Bit(true) }, "on top of the stack"},
	} {
		var w formats.PacketWriter
		w.Sync(testBase + 0x1010)                 // the walk takes the call (pushes 0x1015)
		w.Async(testBase+0x1010, testBase+0x1002) // a signal before it; handler: the ret
		w.AsyncTo(testBase+0x3900, testBase+0x1102, testBase+0x1010)
		w.TIP(testBase + 0x1104) // the indirect jmp
		w.TIP(testBase + 0x1010) // its ret: back where the signal landed
		w.Bit(false)             // the call again, then the jcc at 0x1100
		w.TIP(testBase + 0x1104) // the indirect jmp
		w.Bit(true)              // the ret, to 0x1015 (the call's); jmp 0x1000
		w.Bit(false)             // the jcc at 0x1000: on to the ret at 0x1002
		c.last(&w)               // that ret, with nothing on the stack
		_, st, err := decodeWith(t, testMap(), &w)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v (%+v)", err, st)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("error %v, want %q", err, c.err)
		}
	}
}

// wantEvents requires a decode without an error whose events, joined by
// "; ", are want.
func wantEvents(t *testing.T, got []string, st Stats, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v (%+v)", err, st)
	}
	if strings.Join(got, "; ") != want {
		t.Errorf("events\n got %q\nwant %q", strings.Join(got, "; "), want)
	}
}
