package oracle

import (
	"debug/elf"
	"errors"
	"os"
	"reflect"
	"testing"
)

const sampleMaps = `55d0c8a00000-55d0c8a01000 r--p 00000000 fe:01 1312                       /tmp/a b/prog
55d0c8a01000-55d0c8a02000 r-xp 00001000 fe:01 1312                       /tmp/a b/prog
55d0c9f4e000-55d0c9f6f000 rw-p 00000000 00:00 0                          [heap]
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7ffd5a1f0000-7ffd5a1f2000 r-xp 00000000 00:00 0                          [vdso]
`

func TestParseMaps(t *testing.T) {
	ms, err := ParseMaps([]byte(sampleMaps))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x55d0c8a00000, End: 0x55d0c8a01000, Perm: "r--p", Offset: 0, Inode: 1312, Path: "/tmp/a b/prog"},
		{Start: 0x55d0c8a01000, End: 0x55d0c8a02000, Perm: "r-xp", Offset: 0x1000, Inode: 1312, Path: "/tmp/a b/prog"},
		{Start: 0x55d0c9f4e000, End: 0x55d0c9f6f000, Perm: "rw-p", Path: "[heap]"},
		{Start: 0x7f1e2c000000, End: 0x7f1e2c021000, Perm: "rw-p", Path: ""},
		{Start: 0x7ffd5a1f0000, End: 0x7ffd5a1f2000, Perm: "r-xp", Path: "[vdso]"},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Errorf("have %+v\nwant %+v", ms, want)
	}
	for i, w := range []struct{ exec, file bool }{{false, true}, {true, true}, {false, false}, {false, false}, {true, true}} {
		if ms[i].Exec() != w.exec || ms[i].File() != w.file {
			t.Errorf("mapping %d: Exec %v File %v, want %v %v", i, ms[i].Exec(), ms[i].File(), w.exec, w.file)
		}
	}
}

func TestParseMapsErrors(t *testing.T) {
	for _, tt := range []struct {
		in   string
		line int
	}{
		{"zz-10 r-xp 0 00:00 0\n", 1},
		{"10-20 r-xp 0 00:00 0\n10 r-xp 0 00:00 0\n", 2},
		{"20-10 r-xp 0 00:00 0\n", 1},
		{"10-20 rx 0 00:00 0\n", 1},
		{"10-20 r-xp 0 00:00\n", 1},
		{"10-20 r-xp q 00:00 0\n", 1},
		{"10-20 r-xp 0 00:00 x\n", 1},
	} {
		_, err := ParseMaps([]byte(tt.in))
		var me *MapsError
		if !errors.As(err, &me) {
			t.Errorf("%q: have %v, want a *MapsError", tt.in, err)
			continue
		}
		if me.Line != tt.line {
			t.Errorf("%q: line: have %d, want %d", tt.in, me.Line, tt.line)
		}
	}
}

func TestLinkBase(t *testing.T) {
	pie := []elf.ProgHeader{
		{Type: elf.PT_LOAD, Off: 0, Vaddr: 0, Filesz: 0x800},
		{Type: elf.PT_LOAD, Off: 0x1000, Vaddr: 0x1000, Filesz: 0x2345},
		{Type: elf.PT_LOAD, Off: 0x3db8, Vaddr: 0x4db8, Filesz: 0x2000},
	}
	exe := []elf.ProgHeader{
		{Type: elf.PT_LOAD, Off: 0, Vaddr: 0x400000, Filesz: 0x500},
		{Type: elf.PT_LOAD, Off: 0x1000, Vaddr: 0x401000, Filesz: 0x9000},
	}
	for _, tt := range []struct {
		name  string
		m     Mapping
		progs []elf.ProgHeader
		want  uint64
	}{
		{"pie text", Mapping{Start: 0x7f0000001000, Offset: 0x1000, Path: "/p"}, pie, 0x7f0000000000},
		{"pie data, vaddr != offset", Mapping{Start: 0x7f0000004000, Offset: 0x3000, Path: "/p"}, pie, 0x7f0000000000},
		{"pie relro split", Mapping{Start: 0x7f0000005000, Offset: 0x4000, Path: "/p"}, pie, 0x7f0000000000},
		{"fixed exe", Mapping{Start: 0x401000, Offset: 0x1000, Path: "/e"}, exe, 0},
		{"unknown file", Mapping{Start: 0x7f0000003000, Offset: 0x2000, Path: "/x"}, nil, 0x7f0000001000},
		{"vdso", Mapping{Start: 0x7ffd5a1f0000, Path: "[vdso]"}, nil, 0x7ffd5a1f0000},
	} {
		if have := linkBase(&tt.m, tt.progs); have != tt.want {
			t.Errorf("%s: have %#x, want %#x", tt.name, have, tt.want)
		}
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte(sampleMaps))
	if data, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("0-0 ---p 0 0:0 0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := ParseMaps(data)
		if err != nil {
			return
		}
		for i, m := range ms {
			if m.End < m.Start || len(m.Perm) != 4 {
				t.Fatalf("mapping %d invalid: %+v", i, m)
			}
			if i > 0 && ms[i-1].Start > m.Start {
				t.Fatal("not sorted")
			}
		}
	})
}
