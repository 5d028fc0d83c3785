package redlog

import (
	"bytes"
	"reflect"
	"testing"
)

func FuzzRead(f *testing.F) {
	full, offs, _ := threeBlocks(f)
	f.Add(full)
	f.Add(full[:offs[2]+20])
	flip := bytes.Clone(full)
	flip[offs[1]+50] ^= 1
	f.Add(flip)
	f.Add(EncodeHeader(Merger))
	f.Add([]byte("STINTLOG"))
	for _, p := range []Policy{Hash, BST, Merger} {
		b := EncodeHeader(p)
		b, _ = AppendBlocks(b, []byte{1, 2, 3}, []Entry{{A: 100, B: 50}, {A: 150, B: 50}})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, probs, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if l != nil || probs != nil {
				t.Fatalf("error %v with a log or problems", err)
			}
			return
		}
		size := int64(len(b))
		if l.End < HeaderSize || l.End > (size+7)&^7 || l.End%8 != 0 && l.End != size {
			t.Fatalf("End %d of %d bytes", l.End, size)
		}
		prev := int64(HeaderSize)
		for _, p := range probs {
			if p.Offset < prev || p.Offset+p.Len > size || p.Msg == "" {
				t.Fatalf("problem %v out of order or out of bounds (size %d)", p, size)
			}
			prev = p.Offset + p.Len
		}
		for id, es := range l.Modules {
			if _, err := ParseBuildID(id); err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				if msg := e.check(l.Policy); msg != "" {
					t.Fatalf("read an invalid entry: %s", msg)
				}
				if i > 0 && es[i-1].Compare(e) >= 0 {
					t.Fatalf("entries not sorted and distinct")
				}
			}
		}
		// What was read writes back, and reads back the same.
		out := EncodeHeader(l.Policy)
		for _, id := range l.BuildIDs() {
			raw, _ := ParseBuildID(id)
			if out, err = AppendBlocks(out, raw, l.Modules[id]); err != nil {
				t.Fatal(err)
			}
		}
		l2, probs2, err := Read(bytes.NewReader(out), int64(len(out)))
		if err != nil || len(probs2) != 0 || !reflect.DeepEqual(l2.Modules, l.Modules) {
			t.Fatalf("rewrite: %v %v", err, probs2)
		}
		// Every logged region is skipped by the log built from it.
		if l.Policy.Region() {
			for id, es := range l.Modules {
				r, err := l.RegionLog(id)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range es {
					if !r.Skip(e.A, e.B) {
						t.Fatalf("%v log does not skip its own entry %v", l.Policy, e)
					}
				}
			}
		}
	})
}
