package redlog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type blk struct {
	id string // hex
	es []Entry
}

// build returns the bytes of a log of policy p with the given blocks,
// and the offset of each block.
func build(t testing.TB, p Policy, blocks ...blk) ([]byte, []int64) {
	t.Helper()
	b := EncodeHeader(p)
	var offs []int64
	for _, bl := range blocks {
		id, err := ParseBuildID(bl.id)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, int64(len(b)))
		if b, err = AppendBlocks(b, id, bl.es); err != nil {
			t.Fatal(err)
		}
	}
	return b, offs
}

func readBytes(t *testing.T, b []byte) (*Log, []Problem) {
	t.Helper()
	l, probs, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return l, probs
}

func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.log")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ex(src, dst uint64, kind uint32) Entry { return Entry{A: src, B: dst, DstMod: 7, Kind: kind} }

const (
	idA = "aabbccdd"
	idB = "0102030405060708090a0b0c0d0e0f1011121314"
	idC = "ff"
)

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		have string
		want Policy
		err  bool
	}{
		{"exact", Exact, false}, {"hash", Hash, false}, {"BST", BST, false}, {" merger ", Merger, false},
		{"", 0, true}, {"tree", 0, true},
	} {
		p, err := ParsePolicy(tc.have)
		if p != tc.want || (err != nil) != tc.err {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v, error %v", tc.have, p, err, tc.want, tc.err)
		}
		if err == nil && p.String() != strings.ToLower(strings.TrimSpace(tc.have)) {
			t.Errorf("%v.String() = %q", p, p.String())
		}
	}
	if s := Policy(9).String(); s != "policy(9)" {
		t.Errorf("Policy(9).String() = %q", s)
	}
	if Exact.Region() || !Merger.Region() {
		t.Errorf("Region: exact %v, merger %v", Exact.Region(), Merger.Region())
	}
}

func TestBuildIDHash(t *testing.T) {
	for _, s := range []string{"", "a", "\x9e\x1c\x00\xff", strings.Repeat("x", 20)} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if have, want := BuildIDHash([]byte(s)), h.Sum64(); have != want {
			t.Errorf("BuildIDHash(%q) = %#x, want %#x", s, have, want)
		}
	}
	if have := BuildIDHash(nil); have != 0xcbf29ce484222325 {
		t.Errorf("BuildIDHash(nil) = %#x", have)
	}
}

func TestParseBuildID(t *testing.T) {
	for _, tc := range []struct {
		have string
		want []byte
	}{
		{"00", []byte{0}}, {"aBcD", []byte{0xab, 0xcd}}, {strings.Repeat("11", 32), bytes.Repeat([]byte{0x11}, 32)},
		{"", nil}, {"abc", nil}, {"zz", nil}, {strings.Repeat("11", 33), nil},
	} {
		b, err := ParseBuildID(tc.have)
		if !bytes.Equal(b, tc.want) || (err != nil) != (tc.want == nil) {
			t.Errorf("ParseBuildID(%q) = %x, %v; want %x", tc.have, b, err, tc.want)
		}
	}
}

// TestLayout pins the bytes of a block to the package documentation.
func TestLayout(t *testing.T) {
	b, _ := build(t, Exact, blk{idC, []Entry{{A: 0x1122, B: 0x3344, DstMod: 0x55, Kind: 4}}})
	want := "STINTLOG\x01\x00\x00\x00\x01\x00\x00\x00" + strings.Repeat("\x00", 16) +
		"SBLK\x01\x00\x00\x00" + "CRC." + "\x01\x00\x00\x00" + "\xff" + strings.Repeat("\x00", 31) +
		"\x22\x11\x00\x00\x00\x00\x00\x00" + "\x44\x33\x00\x00\x00\x00\x00\x00" + "\x55\x00\x00\x00\x00\x00\x00\x00" +
		"\x04\x00\x00\x00" + "\x00\x00\x00\x00"
	have := slices.Clone(b)
	copy(have[40:44], "CRC.")
	if string(have) != want {
		t.Fatalf("layout:\nhave %q\nwant %q", have, want)
	}
	if len(b) != HeaderSize+BlockHead+EntrySize {
		t.Fatalf("len %d", len(b))
	}
}

func TestRoundTrip(t *testing.T) {
	for _, p := range []Policy{Exact, Hash, BST, Merger} {
		t.Run(p.String(), func(t *testing.T) {
			var a, b []Entry
			for i := range uint64(5) {
				if p == Exact {
					a = append(a, ex(0x1000+i, 0x2000+i, uint32(1+i%9)))
					b = append(b, Entry{A: 0x400 + i, Kind: 8})
				} else {
					a = append(a, Entry{A: 0x1000 + 0x40*i, B: 0x20})
					b = append(b, Entry{A: 0x400 + i, B: 1 + i})
				}
			}
			path := filepath.Join(t.TempDir(), "run.log")
			// Unsorted, with repeats: stored sorted and distinct.
			in := map[string][]Entry{idA: append(slices.Clone(a), a[3], a[0]), idB: reversed(b)}
			st, err := Append(path, p, in)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Created || st.Added != 10 || st.Blocks != 2 || len(st.Problems) != 0 {
				t.Errorf("first Append: %+v", st)
			}
			l, probs, err := ReadFile(path)
			if err != nil || len(probs) != 0 {
				t.Fatalf("ReadFile: %v %v", err, probs)
			}
			want := map[string][]Entry{idA: a, idB: b}
			if l.Policy != p || !reflect.DeepEqual(l.Modules, want) || l.Blocks != 2 || l.Entries != 10 {
				t.Errorf("read %v %d blocks %d entries %v, want %v", l.Policy, l.Blocks, l.Entries, l.Modules, want)
			}
			if !slices.Equal(l.BuildIDs(), []string{idB, idA}) || l.Distinct() != 10 || !l.Has(idA, a[2]) || l.Has(idB, a[2]) {
				t.Errorf("BuildIDs %v Distinct %d", l.BuildIDs(), l.Distinct())
			}
			// Again, with one new entry: only that one is appended.
			extra := Entry{A: 0x9000, B: 3}
			if p == Exact {
				extra.Kind = 1
			}
			st, err = Append(path, p, map[string][]Entry{idA: append(slices.Clone(a), extra), idB: b})
			if err != nil || st.Created || st.Added != 1 || st.Blocks != 1 {
				t.Errorf("second Append: %+v, %v", st, err)
			}
			fi, _ := os.Stat(path)
			if want := int64(HeaderSize + 3*BlockHead + 11*EntrySize); fi.Size() != want {
				t.Errorf("size %d, want %d", fi.Size(), want)
			}
			// Nothing new: nothing written.
			if st, err = Append(path, p, want); err != nil || st.Added != 0 {
				t.Errorf("third Append: %+v, %v", st, err)
			}
			if fi2, _ := os.Stat(path); fi2.Size() != fi.Size() {
				t.Errorf("size changed %d -> %d", fi.Size(), fi2.Size())
			}
		})
	}
}

func TestReadDedups(t *testing.T) {
	e1, e2, e3 := ex(1, 2, 1), ex(3, 4, 2), ex(5, 6, 3)
	b, _ := build(t, Exact, blk{idA, []Entry{e2, e1, e2}}, blk{idC, []Entry{e3}}, blk{idA, []Entry{e1, e3}})
	l, probs := readBytes(t, b)
	if len(probs) != 0 {
		t.Fatal(probs)
	}
	want := map[string][]Entry{idA: {e1, e2, e3}, idC: {e3}}
	if !reflect.DeepEqual(l.Modules, want) || l.Entries != 6 || l.Blocks != 3 {
		t.Errorf("have %v (%d entries, %d blocks), want %v", l.Modules, l.Entries, l.Blocks, want)
	}
	if l.End != int64(len(b)) {
		t.Errorf("End %d, want %d", l.End, len(b))
	}
}

func TestNotLog(t *testing.T) {
	good := EncodeHeader(Hash)
	mod := func(off int, v byte) []byte { b := slices.Clone(good); b[off] = v; return b }
	for _, tc := range []struct {
		name string
		have []byte
		want error
		off  int64
	}{
		{"empty", nil, ErrNotLog, 0},
		{"short", good[:20], ErrNotLog, 0},
		{"text", []byte("this is not a log, it is a text file\n"), ErrNotLog, 0},
		{"magic", mod(0, 's'), ErrNotLog, 0},
		{"version", mod(8, 2), ErrVersion, 8},
		{"policy0", mod(12, 0), ErrPolicy, 12},
		{"policy5", mod(12, 5), ErrPolicy, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Read(bytes.NewReader(tc.have), int64(len(tc.have)))
			var fe *FormatError
			if !errors.Is(err, tc.want) || !errors.As(err, &fe) || fe.Offset != tc.off {
				t.Fatalf("Read: %v; want %v at offset %d", err, tc.want, tc.off)
			}
			if tc.name == "empty" || tc.name == "short" {
				return // Append (re)writes those: see TestAppendCreates
			}
			path := writeFile(t, tc.have)
			_, err = Append(path, Hash, map[string][]Entry{idA: {{A: 1, B: 1}}})
			if !errors.Is(err, tc.want) {
				t.Errorf("Append: %v, want %v", err, tc.want)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, tc.have) {
				t.Errorf("Append changed the file")
			}
		})
	}
}

func TestAppendCreates(t *testing.T) {
	for _, n := range []int{0, 1, 13, 31} {
		path := writeFile(t, EncodeHeader(BST)[:n])
		st, err := Append(path, BST, nil)
		if err != nil || !st.Created {
			t.Fatalf("%d bytes: %+v, %v", n, st, err)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, EncodeHeader(BST)) {
			t.Errorf("%d bytes: file %q", n, b)
		}
	}
	// A header prefix of another policy is not ours to overwrite.
	path := writeFile(t, EncodeHeader(Hash)[:13])
	if _, err := Append(path, BST, nil); !errors.Is(err, ErrNotLog) {
		t.Errorf("prefix of a hash header, appending bst: %v", err)
	}
}

func TestAppendErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	if _, err := Append(path, Exact, map[string][]Entry{idA: {ex(1, 2, 3)}}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name   string
		policy Policy
		blocks map[string][]Entry
		want   error  // sentinel, or nil: any error containing text
		text   string // substring of the error
	}{
		{"policy", Merger, map[string][]Entry{idA: {{A: 1, B: 1}}}, ErrMismatch, "policy is exact"},
		{"no-policy", 0, nil, ErrPolicy, ""},
		{"bad-id", Exact, map[string][]Entry{"xyz": {ex(1, 2, 3)}}, nil, "not hex"},
		{"long-id", Exact, map[string][]Entry{strings.Repeat("ab", 33): {ex(1, 2, 3)}}, nil, "33 bytes"},
		{"kind", Exact, map[string][]Entry{idA: {ex(1, 2, 0)}}, nil, "kind 0"},
		{"record-kind", Exact, map[string][]Entry{idA: {ex(1, 2, 32)}}, nil, "kind 32"},
		{"region-kind", Hash, map[string][]Entry{idA: {{A: 1, B: 2, Kind: 1}}}, nil, "want 0, 0"},
		{"region-len", BST, map[string][]Entry{idA: {{A: 1}}}, nil, "length 0"},
	} {
		_, err := Append(path, tc.policy, tc.blocks)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v; want %v %q", tc.name, err, tc.want, tc.text)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("failed Appends changed the file")
	}
}

// threeBlocks is a log of three blocks, of modules A, B and C.
func threeBlocks(t testing.TB) ([]byte, []int64, map[string][]Entry) {
	m := map[string][]Entry{
		idA: {ex(1, 2, 1), ex(3, 4, 2)},
		idB: {ex(5, 6, 3), ex(7, 8, 4), ex(9, 10, 5)},
		idC: {ex(11, 12, 6)},
	}
	b, offs := build(t, Exact, blk{idA, m[idA]}, blk{idB, m[idB]}, blk{idC, m[idC]})
	return b, offs, m
}

func TestTornTail(t *testing.T) {
	full, offs, m := threeBlocks(t)
	last := offs[2]
	for _, cut := range []int64{1, 3, 4, 7, 12, 47, 48, 60, BlockHead + EntrySize - 1} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			b := full[:last+cut]
			l, probs := readBytes(t, b)
			if len(probs) != 1 || !probs[0].Torn || probs[0].Offset != last || probs[0].Len != cut {
				t.Fatalf("problems %v; want one torn append at %d, %d bytes", probs, last, cut)
			}
			want := map[string][]Entry{idA: m[idA], idB: m[idB]}
			if !reflect.DeepEqual(l.Modules, want) || l.End != last {
				t.Fatalf("modules %v End %d; want %v, %d", l.Modules, l.End, want, last)
			}
			// The next Append overwrites the torn bytes.
			path := writeFile(t, b)
			add := ex(100, 200, 9)
			st, err := Append(path, Exact, map[string][]Entry{idA: {add}})
			if err != nil || st.Added != 1 || len(st.Problems) != 1 || !st.Problems[0].Torn {
				t.Fatalf("Append: %+v, %v", st, err)
			}
			l2, probs2, err := ReadFile(path)
			if err != nil || len(probs2) != 0 {
				t.Fatalf("after Append: %v %v", err, probs2)
			}
			want[idA] = SortEntries(append(slices.Clone(m[idA]), add))
			if !reflect.DeepEqual(l2.Modules, want) {
				t.Errorf("after Append: %v, want %v", l2.Modules, want)
			}
			if l2.Size != last+BlockHead+EntrySize {
				t.Errorf("size %d, want %d", l2.Size, last+BlockHead+EntrySize)
			}
		})
	}
	// Zeros after the last block (a writer that extended the file and
	// died) are torn too.
	l, probs := readBytes(t, append(slices.Clone(full), make([]byte, 100)...))
	if len(probs) != 1 || !probs[0].Torn || probs[0].Offset != int64(len(full)) || l.End != int64(len(full)) {
		t.Errorf("zero tail: %v, End %d", probs, l.End)
	}
}

func TestDamage(t *testing.T) {
	full, offs, m := threeBlocks(t)
	mid := offs[1]
	for _, tc := range []struct {
		name string
		at   int64 // offset in the middle block
		torn bool
	}{
		{"magic", 0, false}, {"count", 4, false}, {"count-high", 7, false}, {"crc", 9, false},
		{"bidlen", 12, false}, {"build-id", 20, false}, {"padding", 40, false},
		{"entry", BlockHead + 5, false}, {"last-entry", BlockHead + 3*EntrySize - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := slices.Clone(full)
			b[mid+tc.at] ^= 0x40
			l, probs := readBytes(t, b)
			if len(probs) != 1 || probs[0].Torn || probs[0].Offset != mid || probs[0].Len != offs[2]-mid {
				t.Fatalf("problems %v; want damage at %d, %d bytes", probs, mid, offs[2]-mid)
			}
			want := map[string][]Entry{idA: m[idA], idC: m[idC]}
			if !reflect.DeepEqual(l.Modules, want) {
				t.Fatalf("modules %v, want %v", l.Modules, want)
			}
			// Append leaves the damaged bytes and appends after the end.
			path := writeFile(t, b)
			if _, err := Append(path, Exact, map[string][]Entry{idB: m[idB]}); err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after[:len(b)], b) || len(after) != len(b)+BlockHead+3*EntrySize {
				t.Errorf("Append rewrote the file or appended %d bytes", len(after)-len(b))
			}
			l2, probs2, _ := ReadFile(path)
			if len(probs2) != 1 || probs2[0].Offset != mid || !reflect.DeepEqual(l2.Modules, m) {
				t.Errorf("after Append: %v %v", probs2, l2.Modules)
			}
		})
	}
}

func TestDamagedLastBlock(t *testing.T) {
	full, offs, _ := threeBlocks(t)
	b := slices.Clone(full)
	b[len(b)-10] ^= 1 // a complete last block with a bad CRC: damage, not torn
	l, probs := readBytes(t, b)
	if len(probs) != 1 || probs[0].Torn || probs[0].Offset != offs[2] || l.End != int64(len(b)) {
		t.Fatalf("problems %v End %d", probs, l.End)
	}
	// Junk of an odd length after it: Append pads to 8 and keeps it.
	b = append(b, "junk!"...)
	path := writeFile(t, b)
	if _, err := Append(path, Exact, map[string][]Entry{idC: {ex(1, 1, 1)}}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after[:len(b)], b) || len(after) != len(b)+3+BlockHead+EntrySize {
		t.Fatalf("len %d", len(after))
	}
	l, probs, _ = ReadFile(path)
	if len(probs) != 1 || probs[0].Offset != offs[2] || !l.Has(idC, ex(1, 1, 1)) {
		t.Errorf("problems %v", probs)
	}
}

func TestBadEntries(t *testing.T) {
	// A block whose CRC holds but whose entries do not fit the policy:
	// the bad entries are reported and left out, the rest kept.
	b, offs := build(t, Exact, blk{idA, []Entry{ex(1, 2, 3), ex(4, 5, 0), ex(6, 7, 99)}}, blk{idC, []Entry{ex(1, 2, 3)}})
	l, probs := readBytes(t, b)
	if len(probs) != 1 || probs[0].Offset != offs[0] || !strings.Contains(probs[0].Msg, "2 bad entries") {
		t.Fatalf("problems %v", probs)
	}
	if !reflect.DeepEqual(l.Modules, map[string][]Entry{idA: {ex(1, 2, 3)}, idC: {ex(1, 2, 3)}}) {
		t.Errorf("modules %v", l.Modules)
	}
}

func reversed(es []Entry) []Entry {
	r := slices.Clone(es)
	slices.Reverse(r)
	return r
}

// TestDamageThenTorn: a writer appended after damaged bytes and died.
func TestDamageThenTorn(t *testing.T) {
	full, offs, m := threeBlocks(t)
	b := slices.Clone(full)
	b[offs[1]+BlockHead] ^= 1 // complete middle block, bad CRC
	b = b[:len(b)-7]          // last block torn
	l, probs := readBytes(t, b)
	if len(probs) != 2 || probs[0].Torn || probs[0].Offset != offs[1] || probs[0].Len != offs[2]-offs[1] ||
		!probs[1].Torn || probs[1].Offset != offs[2] || l.End != offs[2] {
		t.Fatalf("problems %v End %d", probs, l.End)
	}
	if !reflect.DeepEqual(l.Modules, map[string][]Entry{idA: m[idA]}) {
		t.Errorf("modules %v", l.Modules)
	}
	path := writeFile(t, b)
	if _, err := Append(path, Exact, map[string][]Entry{idC: m[idC]}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after[:offs[2]], b[:offs[2]]) || len(after) != len(full) {
		t.Errorf("Append: %d bytes, want %d, damaged bytes kept", len(after), len(full))
	}
	l, probs, _ = ReadFile(path)
	if len(probs) != 1 || probs[0].Offset != offs[1] || probs[0].Torn || !reflect.DeepEqual(l.Modules, map[string][]Entry{idA: m[idA], idC: m[idC]}) {
		t.Errorf("after Append: %v %v", probs, l.Modules)
	}
	// A damaged last block of region entries ends in zeros: they are
	// not a torn append.
	r, roffs := build(t, Hash, blk{idA, []Entry{{A: 1, B: 2}}}, blk{idC, []Entry{{A: 3, B: 4}, {A: 5, B: 6}}})
	r[roffs[1]+BlockHead] ^= 1
	_, probs = readBytes(t, r)
	if len(probs) != 1 || probs[0].Torn || probs[0].Offset != roffs[1] {
		t.Errorf("zeros at the end of a damaged block: %v", probs)
	}
}

func TestBigAppendSplitsBlocks(t *testing.T) {
	es := make([]Entry, MaxPerBlock+10)
	for i := range es {
		es[i] = ex(uint64(i), uint64(i)+1, 3)
	}
	path := filepath.Join(t.TempDir(), "big.log")
	st, err := Append(path, Exact, map[string][]Entry{idA: es})
	if err != nil || st.Added != len(es) || st.Blocks != 2 {
		t.Fatalf("Append: %+v %v", st, err)
	}
	l, probs, err := ReadFile(path)
	if err != nil || len(probs) != 0 || l.Blocks != 2 || !reflect.DeepEqual(l.Modules[idA], es) {
		t.Fatalf("ReadFile: %v %v, %d blocks", err, probs, l.Blocks)
	}
}

func BenchmarkRead(b *testing.B) {
	es := make([]Entry, 100000)
	for i := range es {
		es[i] = ex(uint64(i), uint64(i)+1, 3)
	}
	buf, _ := build(b, Exact, blk{idA, es[:50000]}, blk{idB, es[50000:]})
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, _, err := Read(bytes.NewReader(buf), int64(len(buf))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRegionLogAdd(b *testing.B) {
	for _, p := range []Policy{Hash, BST, Merger} {
		b.Run(p.String(), func(b *testing.B) {
			for b.Loop() {
				l, _ := NewRegionLog(p)
				for i := range uint64(10000) {
					a := (i * 2654435761) % 1000000
					if !l.Skip(a, 40) {
						l.Add(a, 40)
					}
				}
			}
		})
	}
}

// TestPrefix: a log read whole and undamaged names its last block, whose
// offset and first 16 bytes a reader of the same file grown by appends
// still finds there; a torn or damaged log has no prefix to name.
func TestPrefix(t *testing.T) {
	full, offs, _ := threeBlocks(t)
	l, probs := readBytes(t, full)
	if !l.Prefix(probs) || l.Last.Off != offs[2] || !bytes.Equal(l.Last.Head[:], full[offs[2]:offs[2]+16]) {
		t.Fatalf("Prefix %v, last %+v; want the block at %d", l.Prefix(probs), l.Last, offs[2])
	}
	grown, err := AppendBlocks(slices.Clone(full), []byte{0xaa}, []Entry{ex(1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(grown[l.Last.Off:l.Last.Off+16], l.Last.Head[:]) {
		t.Error("an append moved the last block's head")
	}
	l2, probs2 := readBytes(t, grown)
	if !l2.Prefix(probs2) || l2.Last.Off != int64(len(full)) {
		t.Errorf("grown: Prefix %v, last at %d; want %d", l2.Prefix(probs2), l2.Last.Off, len(full))
	}
	if l3, p3 := readBytes(t, full[:len(full)-5]); l3.Prefix(p3) {
		t.Error("a torn log has a prefix")
	}
	bad := slices.Clone(full)
	bad[offs[1]+BlockHead] ^= 1
	if l4, p4 := readBytes(t, bad); l4.Prefix(p4) {
		t.Error("a damaged log has a prefix")
	}
	if l5, p5 := readBytes(t, EncodeHeader(Exact)); l5.Prefix(p5) {
		t.Error("a log without blocks has a prefix")
	}
}
