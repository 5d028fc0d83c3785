package redlog

import (
	"testing"

	"github.com/stint-project/stint/formats"
)

func TestTraceModulesEntry(t *testing.T) {
	mods := NewTraceModules([]formats.Module{
		{ID: 0, BuildID: "beef", Base: 0x5555000},
		{ID: 1, BuildID: "c0ffee", Base: 0x7fff000},
		{ID: 2, Base: 0x7000000},               // no build-id
		{ID: 3, BuildID: "xyz", Base: 0x80000}, // not hex: as if none
	})
	beef, coffee := BuildIDHash([]byte{0xbe, 0xef}), BuildIDHash([]byte{0xc0, 0xff, 0xee})
	for _, tc := range []struct {
		name string
		have formats.Event
		id   string
		want Entry
		ok   bool
	}{
		{"call", formats.Event{Kind: formats.KindCall, SrcModule: 0, Src: 0x10, DstModule: 1, Dst: 0x20}, "beef", Entry{0x10, 0x20, coffee, 4}, true},
		{"self", formats.Event{Kind: formats.KindJccTaken, SrcModule: 1, Src: 0x10, DstModule: 1, Dst: 0x12}, "c0ffee", Entry{0x10, 0x12, coffee, 1}, true},
		{"block", formats.Event{Kind: formats.KindBlock, SrcModule: 0, Src: 0x30, DstModule: 0, Dst: 0x30}, "beef", Entry{0x30, 0x30, beef, 9}, true},
		{"absolute", formats.Event{Kind: formats.KindIndJmp, SrcModule: 0, Src: 0x10, DstModule: formats.NoModule, Dst: 0x7fff0000}, "beef", Entry{0x10, 0x7fff0000, 0, 6}, true},
		{"dst-no-bid", formats.Event{Kind: formats.KindRet, SrcModule: 0, Src: 0x10, DstModule: 2, Dst: 0x44}, "beef", Entry{0x10, 0x44, 0, 5}, true},
		{"syscall", formats.Event{Kind: formats.KindSyscall, SrcModule: 1, Src: 0x50, DstModule: formats.NoModule, Value: 231}, "c0ffee", Entry{0x50, 231, 0, 8}, true},
		{"src-no-bid", formats.Event{Kind: formats.KindCall, SrcModule: 2, Src: 0x10, DstModule: 0, Dst: 0x20}, "", Entry{}, false},
		{"src-bad-bid", formats.Event{Kind: formats.KindCall, SrcModule: 3, Src: 0x10, DstModule: 0, Dst: 0x20}, "", Entry{}, false},
		{"src-unknown", formats.Event{Kind: formats.KindCall, SrcModule: 9, Src: 0x10}, "", Entry{}, false},
		{"record", formats.Event{Kind: formats.KindPeriod, SrcModule: 0}, "", Entry{}, false},
	} {
		id, e, ok := mods.Entry(tc.have)
		if id != tc.id || e != tc.want || ok != tc.ok {
			t.Errorf("%s: have %q %+v %v, want %q %+v %v", tc.name, id, e, ok, tc.id, tc.want, tc.ok)
		}
		if ok && e.check(Exact) != "" {
			t.Errorf("%s: invalid entry: %s", tc.name, e.check(Exact))
		}
	}
}
