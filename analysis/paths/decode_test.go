package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stint-project/stint/formats"
)

// A hand-made module at base 0x400000 (link vaddrs below):
//
//	0x1000 jcc  -> 0x1010     0x1002 ret
//	0x1010 call -> 0x1100     0x1015 jmp -> 0x1000
//	0x1100 jcc  -> 0x1000 (a loop back into the caller, for the test)
//	0x1102 ind jmp            0x1104 ret
//	0x1200 ind call           0x1202 ret (for call chains)
const testBase = 0x400000

func testMap() *formats.PathMap {
	return &formats.PathMap{TextLo: 0x1000, TextHi: 0x2000, Branches: []formats.Branch{
		{Addr: 0x1000, Target: 0x1010, Len: 2, Kind: formats.BrJcc, Flags: formats.BranchProbed},
		{Addr: 0x1002, Len: 1, Kind: formats.BrRet, Flags: formats.BranchProbed},
		{Addr: 0x1010, Target: 0x1100, Len: 5, Kind: formats.BrCall, Flags: formats.BranchProbed},
		{Addr: 0x1015, Target: 0x1000, Len: 2, Kind: formats.BrJmp},
		{Addr: 0x1100, Target: 0x1000, Len: 2, Kind: formats.BrJcc, Flags: formats.BranchProbed},
		{Addr: 0x1102, Len: 2, Kind: formats.BrIndJmp, Flags: formats.BranchProbed},
		{Addr: 0x1104, Len: 1, Kind: formats.BrRet, Flags: formats.BranchProbed},
		{Addr: 0x1200, Len: 2, Kind: formats.BrIndCall, Flags: formats.BranchProbed},
		{Addr: 0x1202, Len: 1, Kind: formats.BrRet, Flags: formats.BranchProbed},
	}}
}

// branchRun and callsRun are the runs of a compact branch trace and of a
// call chain.
var (
	branchRun = formats.Run{Binary: "/m", Tool: "branch", Options: "tool=branch every=1 paths=1"}
	callsRun  = formats.Run{Binary: "/m", Tool: "call", Options: "tool=call every=1 paths=1 calls=1"}
)

// writeCompact writes a trace (module table only) and its paths file
// with the given chunks into dir, and returns the trace's name.
func writeCompact(t testing.TB, dir string, chunks []formats.Chunk) string {
	return writeCompactRun(t, dir, branchRun, chunks)
}

// writeCompactRun is writeCompact with the trace's run.
func writeCompactRun(t testing.TB, dir string, run formats.Run, chunks []formats.Chunk) string {
	t.Helper()
	name := filepath.Join(dir, "m.1.2.arrow")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := formats.NewWriter(f, run,
		[]formats.Module{{ID: 0, Path: "/m", Base: testBase, Size: 0x3000, Rewritten: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pf, err := os.Create(name + formats.PathsSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	pw, err := formats.NewPathsWriter(pf, filepath.Base(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := pw.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	return name
}

func decodeAll(t testing.TB, name string) ([]string, Stats, error) {
	return decodeFile(t, name, testMap())
}

// decodeFile decodes trace name with branch map m for its module, one
// "kind src>dst" line per event.
func decodeFile(t testing.TB, name string, m *formats.PathMap) ([]string, Stats, error) {
	d, err := Open(name, Options{Maps: map[string]*formats.PathMap{"/m": m}})
	if err != nil {
		return nil, Stats{}, err
	}
	var out []string
	st, err := d.Events(func(e formats.Event) error {
		out = append(out, fmt.Sprintf("%v %x>%x", e.Kind, e.Src, e.Dst))
		return nil
	})
	return out, st, err
}

func TestDecodeWalk(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Bit(true)  // jcc 0x1000 taken -> 0x1010; call 0x1100 (pushed)
	w.Bit(false) // jcc 0x1100 not taken -> 0x1102
	w.TIP(testBase + 0x1104)
	w.Bit(true) // ret 0x1104 compressed -> 0x1015; jmp 0x1000
	w.Bit(false)
	w.Flush()
	// the thread's state runs on into its second chunk, which is empty
	name := writeCompact(t, t.TempDir(), []formats.Chunk{
		{TID: 5, Seq: 0, FirstNS: 10, LastNS: 20, Data: w.Data},
		{TID: 5, Seq: 1, FirstNS: 20, LastNS: 30, Pending: 1},
	})
	got, st, err := decodeAll(t, name)
	if err != nil {
		t.Fatalf("%v (%+v)", err, st)
	}
	want := []string{
		"jcc-taken 1000>1010", "call 1010>1100", "jcc-not-taken 1100>1102", "ind-jmp 1102>1104",
		"ret 1104>1015", "jmp 1015>1000", "jcc-not-taken 1000>1002",
	}
	// then the ret at 0x1002, with an empty stack, needs a TIP: the
	// thread's packets end before it
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
	if st.Threads != 1 || st.Chunks != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestDecodeTail(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Flush()
	// one pending bit (jcc taken), then the call at 0x1010 ran (its probe
	// was the last): a thread killed inside the callee
	name := writeCompact(t, t.TempDir(), []formats.Chunk{{TID: 5, Data: w.Data, Pending: 0b11, Tail: testBase + 0x1010, TailBits: 0b11}})
	got, _, err := decodeAll(t, name)
	if err != nil {
		t.Fatal(err)
	}
	if want := "jcc-taken 1000>1010; call 1010>1100"; strings.Join(got, "; ") != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// bits appended after the tail was set make it stale: no call
	name = writeCompact(t, t.TempDir(), []formats.Chunk{{TID: 5, Data: w.Data, Pending: 0b11, Tail: testBase + 0x1010, TailBits: 0b1}})
	if got, _, _ = decodeAll(t, name); strings.Join(got, "; ") != "jcc-taken 1000>1010" {
		t.Errorf("stale tail: got %q", got)
	}
}

// TestDecodeTorn: a thread killed between a TIP's payload and its
// opcode leaves PAD, the payload and PAD in its chunk; the chunk decodes
// to its last whole packet, and Stats.Torn counts it.
func TestDecodeTorn(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Flush()
	data := append(append(append([]byte(nil), w.Data...), 0, 0x34, 0x12), make([]byte, 32)...)
	name := writeCompact(t, t.TempDir(), []formats.Chunk{{TID: 5, Data: data, Pending: 0b11}})
	got, st, err := decodeAll(t, name)
	if err != nil {
		t.Fatalf("%v (%+v)", err, st)
	}
	if want := "jcc-taken 1000>1010"; strings.Join(got, "; ") != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if st.Torn != 1 {
		t.Errorf("Torn %d, want 1 (%+v)", st.Torn, st)
	}
}

func TestDecodeErrors(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.TIP(testBase + 0x1234) // the jcc needs a bit
	w.Flush()
	for _, c := range []struct {
		name   string
		chunks []formats.Chunk
		want   string
	}{
		{"wrong packet", []formats.Chunk{{TID: 1, Data: w.Data}}, "needs an outcome bit"},
		{"bad packet", []formats.Chunk{{TID: 1, Data: []byte{0x12}}}, "chunk 0: packet at 0: unknown packet byte"},
		{"missing chunk", []formats.Chunk{{TID: 1, Seq: 1}}, "chunk 1 where chunk 0 should be"},
		{"no place", []formats.Chunk{{TID: 1, Data: []byte{0x05}}}, "where the thread's place is unknown"},
	} {
		name := writeCompact(t, t.TempDir(), c.chunks)
		_, _, err := decodeAll(t, name)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Bit(true)
	w.Bit(false)
	w.TIP(testBase + 0x1104)
	w.Bit(true)
	w.Flush()
	f.Add(w.Data, uint64(0b101), uint64(testBase+0x1010))
	f.Add([]byte{formats.PktSyncCall, 0, 0x10, 0x40, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x07}, uint64(0), uint64(0))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, pending, tail uint64) {
		name := writeCompact(t, dir, []formats.Chunk{{TID: 3, Data: data, Pending: pending, Tail: tail}})
		decodeAll(t, name) // an error is fine; a panic or a hang is not
	})
}

// A signal handler that interrupted the thread in a trampoline, before
// the jcc's probe appended its bit: ASYNC (at 0) comes where the walk
// wants the bit; the handler's path decodes, and at its ASYNC_END the
// walk comes back to the jcc.
func TestDecodeAsyncMidWalk(t *testing.T) {
	var w formats.PacketWriter
	w.Sync(testBase + 0x1000)
	w.Async(0, testBase+0x1100)
	w.Bit(false) // handler: jcc 0x1100 not taken
	w.TIP(testBase + 0x1104)
	w.AsyncEnd(0x7fff0000) // its ret, to the restorer
	w.Bit(true)            // back: jcc 0x1000 taken
	w.Flush()
	name := writeCompact(t, t.TempDir(), []formats.Chunk{{TID: 5, Data: w.Data}})
	got, st, err := decodeAll(t, name)
	if err != nil {
		t.Fatalf("%v (%+v)", err, st)
	}
	// the call after it is implied, but no packet or tail says the
	// thread got there
	want := "jcc-not-taken 1100>1102; ind-jmp 1102>1104; ret 1104>7fff0000; jcc-taken 1000>1010"
	if strings.Join(got, "; ") != want {
		t.Errorf("got  %q\nwant %q", strings.Join(got, "; "), want)
	}
}

// TestDecodeCalls: a call chain's packets name each call and ret; the
// call stack says where a RET_TIP went, a TIP after a ret or an
// indirect call where it went (which may start the next chunk).
func TestDecodeCalls(t *testing.T) {
	var w formats.PacketWriter
	w.PSB(testBase + 0x1010)
	w.TIP(testBase + 0x1010)    // call 0x1100, pushes 0x1015
	w.TIP(testBase + 0x1200)    // ind call, pushes 0x1202
	w.TIP(0x7f0000001000)       // to there
	w.RetTIP(testBase + 0x1202) // its callee's ret, to 0x1202
	w.RetTIP(testBase + 0x1104) // 0x1100's ret, to 0x1015
	w.TIP(testBase + 0x1104)    // a ret elsewhere:
	first := len(w.Data)
	w.TIP(0x7fff0000) // in the next chunk
	w.Flush()
	chunks := []formats.Chunk{{TID: 2, Data: w.Data[:first]}, {TID: 2, Seq: 1, Data: w.Data[first:]}}
	name := writeCompactRun(t, t.TempDir(), callsRun, chunks)
	got, st, err := decodeAll(t, name)
	if err != nil {
		t.Fatalf("%v (%+v)", err, st)
	}
	want := "call 1010>1100; ind-call 1200>7f0000001000; ret 1202>1202; ret 1104>1015; ret 1104>7fff0000"
	if strings.Join(got, "; ") != want {
		t.Errorf("got  %q\nwant %q", strings.Join(got, "; "), want)
	}
	for _, c := range []struct {
		name string
		pkt  func(w *formats.PacketWriter)
		want string
	}{
		{"RET_TIP at a call", func(w *formats.PacketWriter) { w.RetTIP(testBase + 0x1010) }, "RET_TIP at 0x401010, a call"},
		{"TIP at no branch", func(w *formats.PacketWriter) { w.TIP(testBase + 0x1011) }, "no call or ret there"},
		{"TIP at a jcc", func(w *formats.PacketWriter) { w.TIP(testBase + 0x1000) }, "TIP at 0x401000, a jcc"},
		{"bits", func(w *formats.PacketWriter) { w.Bit(true) }, "a call chain holds a TNT packet"},
		{"ret without destination", func(w *formats.PacketWriter) { w.TIP(testBase + 0x1104); w.Sync(testBase) }, "needs its destination"},
	} {
		var w formats.PacketWriter
		c.pkt(&w)
		w.Flush()
		name := writeCompactRun(t, t.TempDir(), callsRun, []formats.Chunk{{TID: 1, Data: w.Data}})
		if _, _, err := decodeAll(t, name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func FuzzDecodeCalls(f *testing.F) {
	var w formats.PacketWriter
	w.TIP(testBase + 0x1010)
	w.TIP(testBase + 0x1200)
	w.TIP(0x7f0000001000)
	w.RetTIP(testBase + 0x1202)
	w.Flush()
	f.Add(w.Data)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		name := writeCompactRun(t, dir, callsRun, []formats.Chunk{{TID: 3, Data: data}})
		decodeAll(t, name) // an error is fine; a panic or a hang is not
	})
}
