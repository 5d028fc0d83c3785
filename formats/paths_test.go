package formats

import (
	"bytes"
	"errors"
	"math/rand"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
)

// packetOp is one packet a test writes and expects back.
type packetOp struct {
	kind PacketKind
	bit  bool
	a, b uint64
}

func writeOps(ops []packetOp) []byte {
	var w PacketWriter
	for _, o := range ops {
		switch o.kind {
		case PacketTNT:
			w.Bit(o.bit)
		case PacketTIP:
			w.TIP(o.a)
		case PacketRetTIP:
			w.RetTIP(o.a)
		case PacketSync:
			w.Sync(o.a)
		case PacketAsync:
			w.Async(o.a, o.b)
		case PacketAsyncEnd:
			w.AsyncEnd(o.a)
		case PacketLost:
			w.Lost(o.a)
		case PacketSyncCall:
			w.SyncCall(o.a, o.b)
		case PacketSite:
			w.Site(uint32(o.a))
		}
	}
	w.Flush()
	return w.Data
}

// readOps decodes data back into one op per bit or packet.
func readOps(t *testing.T, data []byte) []packetOp {
	t.Helper()
	var r PacketReader
	r.Reset(data)
	var out []packetOp
	for {
		p, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		switch p.Kind {
		case PacketTNT:
			for i := p.N - 1; i >= 0; i-- {
				out = append(out, packetOp{kind: PacketTNT, bit: p.Bits>>i&1 == 1})
			}
		case PacketAsync:
			out = append(out, packetOp{kind: p.Kind, a: p.At, b: p.Addr})
		case PacketSyncCall:
			out = append(out, packetOp{kind: p.Kind, a: p.Addr, b: p.At})
		default:
			out = append(out, packetOp{kind: p.Kind, a: p.Addr})
		}
	}
}

func TestPacketsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var ops []packetOp
	for i := 0; i < 20000; i++ {
		switch n := rng.Intn(100); {
		case n < 80:
			ops = append(ops, packetOp{kind: PacketTNT, bit: rng.Intn(3) == 0})
		case n < 92:
			ops = append(ops, packetOp{kind: PacketTIP, a: 0x555555554000 + uint64(rng.Intn(1<<20))})
		case n < 94:
			ops = append(ops, packetOp{kind: PacketRetTIP, a: 0x555555554000 + uint64(rng.Intn(1<<20))})
		case n < 95:
			// both SITE sizes, and their edges
			site := []uint64{0, 255, 256, siteShort - 1, siteShort, MaxSite - 1, uint64(rng.Intn(MaxSite))}
			ops = append(ops, packetOp{kind: PacketSite, a: site[rng.Intn(len(site))]})
		case n < 97:
			ops = append(ops, packetOp{kind: PacketSync, a: rng.Uint64()})
		case n < 98:
			ops = append(ops, packetOp{kind: PacketAsync, a: rng.Uint64(), b: rng.Uint64()})
		case n < 99:
			ops = append(ops, packetOp{kind: PacketAsyncEnd, a: rng.Uint64()})
			ops = append(ops, packetOp{kind: PacketSyncCall, a: rng.Uint64(), b: rng.Uint64()})
		default:
			ops = append(ops, packetOp{kind: PacketLost, a: uint64(rng.Intn(100))})
		}
	}
	data := writeOps(ops)
	got := readOps(t, data)
	if len(got) != len(ops) {
		t.Fatalf("%d ops back, wrote %d", len(got), len(ops))
	}
	for i := range ops {
		if got[i] != ops[i] {
			t.Fatalf("op %d: got %+v, wrote %+v", i, got[i], ops[i])
		}
	}
	// Runs of outcome bits cost about a bit each: 16,000 bits here.
	if bitsOnly := writeOps(ops[:0:0]); len(bitsOnly) != 0 {
		t.Fatalf("no ops wrote %d bytes", len(bitsOnly))
	}
	var w PacketWriter
	for i := 0; i < 6300; i++ {
		w.Bit(i%3 == 0)
	}
	w.Flush()
	if len(w.Data) != 100*9 {
		t.Errorf("6,300 bits took %d bytes, want 900 (63 per long TNT)", len(w.Data))
	}
	// A dozen bits, as before most TIPs, take 3 bytes: 2 and a header.
	w = PacketWriter{}
	for i := 0; i < 12; i++ {
		w.Bit(i%5 == 0)
	}
	w.Flush()
	if len(w.Data) != 3 || w.Data[0] != PktTNT+4 {
		t.Errorf("12 bits took % x, want a TNT of 2 bytes", w.Data)
	}
}

func TestPacketsMalformed(t *testing.T) {
	for _, c := range []struct {
		data []byte
		want string
	}{
		{[]byte{0x01}, "short TNT"},
		{[]byte{PktLongTNT, 1, 0, 0}, "cut short"},
		{[]byte{PktLongTNT, 1, 0, 0, 0, 0, 0, 0, 0}, "without bits"},
		{[]byte{PktTIP + 6, 1}, "cut short"},
		{[]byte{PktSync, 1}, "cut short"},
		{[]byte{PktAsync, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "cut short"},
		{[]byte{PktTNT + 4, 1}, "TNT of 2 bytes cut short"},
		{[]byte{PktTNT + 2, 1}, "without bits"},
		{[]byte{PktTNT}, "unknown packet"},
		{[]byte{PktTNT + 18}, "unknown packet"},
		{[]byte{PktRetTIP + 4, 1}, "RET_TIP of 2 bytes cut short"},
		{[]byte{PktRetTIP + 18}, "unknown packet"},
		{[]byte{0x12}, "unknown packet"},
		{[]byte{PktTIP + 18}, "unknown packet"},
	} {
		var r PacketReader
		r.Reset(c.data)
		_, _, err := r.Next()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("% x: %v, want an error with %q", c.data, err, c.want)
		}
	}
}

// TestPacketsTorn: a chunk whose last append a kill cut short (its
// payload stored, its opcode not: PAD where the packet starts, then up
// to 8 bytes, then PAD to the end) ends before it, marked torn; PAD
// followed by a packet further on is no torn append, and what follows
// it decodes (or fails) as before.
func TestPacketsTorn(t *testing.T) {
	var w PacketWriter
	w.TIP(0x555555554000)
	whole := append([]byte(nil), w.Data...)
	torn := append(append(append([]byte(nil), whole...), 0, 0x40, 0x12, 0, 0x07), make([]byte, 64)...)
	var r PacketReader
	r.Reset(torn)
	if p, ok, err := r.Next(); !ok || err != nil || p.Kind != PacketTIP {
		t.Fatalf("first packet: %+v %v %v, want the TIP", p, ok, err)
	}
	if p, ok, err := r.Next(); ok || err != nil {
		t.Fatalf("after the TIP: %+v %v %v, want the end of the data", p, ok, err)
	}
	if !r.Torn() {
		t.Error("a payload without its opcode: Torn() false")
	}
	r.Reset(torn)
	if _, _, ok := r.NextTIP(); !ok {
		t.Fatal("NextTIP: no TIP")
	}
	if r.More() || !r.Torn() {
		t.Error("More after a torn append: want false, and Torn")
	}
	// the same bytes, then a packet past the payload's reach: not torn
	far := append(append(append([]byte(nil), whole...), 0, 0x40, 0x12, 0, 0x07, 0, 0, 0, 0, 0, 0), 0x12)
	r.Reset(far)
	r.Next()
	if _, _, err := r.Next(); err == nil || r.Torn() {
		t.Errorf("PAD, then bytes past %d: err %v, torn %v; want an error, not torn", tornSpan, err, r.Torn())
	}
	// PAD to the end is the chunk's tail, not a torn append
	r.Reset(append(append([]byte(nil), whole...), make([]byte, 32)...))
	r.Next()
	if _, ok, err := r.Next(); ok || err != nil || r.Torn() {
		t.Errorf("PAD to the end: ok %v, err %v, torn %v", ok, err, r.Torn())
	}
}

func FuzzPackets(f *testing.F) {
	f.Add(writeOps([]packetOp{{kind: PacketTNT, bit: true}, {kind: PacketTIP, a: 0x1234}, {kind: PacketSync, a: 9}}))
	f.Add([]byte{PktAsync, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r PacketReader
		r.Reset(data)
		for i := 0; i <= len(data); i++ {
			p, ok, err := r.Next()
			if err != nil || !ok {
				return
			}
			if p.Kind == PacketTNT && (p.N < 1 || p.N > 63) {
				t.Fatalf("TNT of %d bits", p.N)
			}
		}
		t.Fatalf("more packets than bytes")
	})
}

func testChunks() []Chunk {
	return []Chunk{
		{TID: 7, Seq: 0, FirstNS: 100, LastNS: 200, Data: writeOps([]packetOp{{kind: PacketSync, a: 0x401000}, {kind: PacketTNT, bit: true}})},
		{TID: 8, Seq: 0, FirstNS: 150, LastNS: 250, Data: []byte{0x05}},
		{TID: 7, Seq: 1, FirstNS: 200, LastNS: 300, Data: nil},
		{TID: 7, Seq: 2, FirstNS: 300, LastNS: 400, Data: bytes.Repeat([]byte{0x03}, 4099)},
	}
}

func writePaths(t testing.TB, chunks []Chunk, end bool) []byte {
	var buf bytes.Buffer
	w, err := NewPathsWriter(&buf, "gzip.1.2.arrow")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		if err := w.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	if end {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestPathsRoundTrip(t *testing.T) {
	chunks := testChunks()
	b := writePaths(t, chunks, true)
	r, err := NewPathsReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r.Trace != "gzip.1.2.arrow" {
		t.Errorf("trace name %q", r.Trace)
	}
	i := 0
	for r.Next() {
		c, w := r.Chunk(), chunks[i]
		if c.TID != w.TID || c.Seq != w.Seq || c.FirstNS != w.FirstNS || c.LastNS != w.LastNS || !bytes.Equal(c.Data, w.Data) {
			t.Errorf("chunk %d: got %+v, wrote %+v", i, c, w)
		}
		i++
	}
	if r.Err() != nil || i != len(chunks) || r.End() != EndMarker {
		t.Fatalf("read %d of %d chunks, err %v, end %v", i, len(chunks), r.Err(), r.End())
	}
	// An Arrow library reads the same file: one row per chunk.
	ir, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer ir.Release()
	n := 0
	for ir.Next() {
		rec := ir.Record()
		d := rec.Column(PathsColData).(*array.Binary)
		if !bytes.Equal(d.Value(0), chunks[n].Data) {
			t.Errorf("arrow-go chunk %d: data differs", n)
		}
		n++
	}
	if ir.Err() != nil || n != len(chunks) {
		t.Fatalf("arrow-go read %d chunks: %v", n, ir.Err())
	}
}

// TestPathsSkipsClaims: a chunk of tid 0 is space a thread claimed for
// a copy that never landed (a killed process): readers pass over it to
// the chunks behind it.
func TestPathsSkipsClaims(t *testing.T) {
	chunks := testChunks()
	claim := Chunk{Data: make([]byte, 4096)}
	with := []Chunk{chunks[0], claim, claim}
	with = append(with, chunks[1:]...)
	r, err := NewPathsReader(bytes.NewReader(writePaths(t, with, true)))
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for r.Next() {
		got = append(got, r.Chunk().TID)
	}
	if r.Err() != nil || len(got) != len(chunks) {
		t.Fatalf("read tids %v of %d chunks, err %v", got, len(chunks), r.Err())
	}
	for i, c := range chunks {
		if got[i] != c.TID {
			t.Errorf("chunk %d: tid %d, want %d", i, got[i], c.TID)
		}
	}
}

func TestPathsCut(t *testing.T) {
	b := writePaths(t, testChunks(), false)
	for _, cut := range []int{len(b) - 1, len(b) - 5000, len(b) / 2} {
		r, err := NewPathsReader(bytes.NewReader(b[:cut]))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.Next() {
			n++
		}
		if !errors.Is(r.Err(), ErrTruncated) || n >= len(testChunks()) {
			t.Errorf("cut at %d: %d chunks, err %v; want the complete ones and a truncation", cut, n, r.Err())
		}
	}
	if _, err := NewPathsReader(bytes.NewReader(writeTrace(t, nil, 0, true))); err == nil || !strings.Contains(err.Error(), "paths") {
		t.Errorf("a trace file read as a paths file: %v", err)
	}
}

func FuzzPathsReader(f *testing.F) {
	f.Add(writePaths(f, testChunks(), true))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewPathsReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for r.Next() {
			c := r.Chunk()
			_ = c.Data
		}
	})
}

func TestPathMapRoundTrip(t *testing.T) {
	m := &PathMap{TextLo: 0x1000, TextHi: 0x2000, Branches: []Branch{
		{Addr: 0x1000, Target: 0x1040, Len: 2, Kind: BrJcc, Flags: BranchProbed},
		{Addr: 0x1002, Target: 0x2000, Len: 5, Kind: BrCall, Flags: BranchProbed},
		{Addr: 0x1010, Len: 1, Kind: BrRet, Flags: BranchProbed},
		{Addr: 0x1011, Len: 2, Kind: BrIndJmp},
		{Addr: 0x1020, Target: 0x1800, Len: 6, Kind: BrIndJmp, Flags: BranchProbed | BranchPredicted},
	}}
	b := m.Encode()
	got, err := DecodePathMap(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Branches {
		if got.Branches[i] != m.Branches[i] {
			t.Errorf("branch %d: %+v, want %+v", i, got.Branches[i], m.Branches[i])
		}
	}
	if i := got.At(0x1003); i != 2 {
		t.Errorf("At(0x1003) = %d, want 2", i)
	}
	bad := append([]byte(nil), b...)
	bad[pathMapHeader+pathMapEntry+0] = 0 // second branch now before the first
	if _, err := DecodePathMap(bad); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("unsorted map: %v", err)
	}
	if _, err := DecodePathMap(b[:len(b)-1]); err == nil {
		t.Errorf("a cut map decodes")
	}
	// a predicted branch must be a probed indirect jmp into the text
	for _, br := range []Branch{
		{Addr: 0x1020, Target: 0x1800, Len: 6, Kind: BrIndCall, Flags: BranchProbed | BranchPredicted},
		{Addr: 0x1020, Target: 0x1800, Len: 6, Kind: BrIndJmp, Flags: BranchPredicted},
		{Addr: 0x1020, Target: 0x3000, Len: 6, Kind: BrIndJmp, Flags: BranchProbed | BranchPredicted},
	} {
		bad := &PathMap{TextLo: 0x1000, TextHi: 0x2000, Branches: []Branch{br}}
		if _, err := DecodePathMap(bad.Encode()); err == nil || !strings.Contains(err.Error(), "predicted") {
			t.Errorf("%+v: %v", br, err)
		}
	}
}

func FuzzPathMap(f *testing.F) {
	f.Add((&PathMap{TextLo: 1, TextHi: 9, Branches: []Branch{{Addr: 1, Len: 2, Kind: BrJcc}}}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodePathMap(b)
		if err != nil {
			return
		}
		if got, err := DecodePathMap(m.Encode()); err != nil || len(got.Branches) != len(m.Branches) {
			t.Fatalf("a decoded map does not round-trip: %v", err)
		}
	})
}

// TestNextTIP: reading TIPs and RET_TIPs with NextTIP and everything
// else with Next gives what Next alone gives.
func TestNextTIP(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var w PacketWriter
	for i := 0; i < 5000; i++ {
		a := 0x555555554000 + uint64(rng.Intn(1<<24))
		switch rng.Intn(5) {
		case 0:
			w.TIP(a)
		case 1:
			w.RetTIP(a)
		case 2:
			w.Bit(rng.Intn(2) == 0)
		case 3:
			w.PSB(a)
		default:
			w.TIP(a ^ uint64(rng.Intn(256)))
		}
	}
	w.Flush()
	var all, mixed PacketReader
	all.Reset(w.Data)
	mixed.Reset(w.Data)
	for n := 0; ; n++ {
		want, ok, err := all.Next()
		if err != nil {
			t.Fatal(err)
		}
		var have Packet
		if k, a, tip := mixed.NextTIP(); tip {
			have = Packet{Kind: k, Addr: a}
		} else if have, _, err = mixed.Next(); err != nil {
			t.Fatal(err)
		}
		if !ok {
			if have.Kind != 0 || mixed.More() {
				t.Errorf("mixed reading goes on past the end: %+v", have)
			}
			return
		}
		if have != want {
			t.Fatalf("packet %d: %+v, want %+v", n, have, want)
		}
	}
}
