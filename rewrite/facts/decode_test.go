package facts

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stint-project/stint/internal/ehframe"
	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
)

const gzipPath = "/usr/bin/gzip"

func readInput(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("need %s: %v", path, err)
	}
	return b
}

func TestDecodeGzip(t *testing.T) {
	data := readInput(t, gzipPath)
	f, err := elfin.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Section(".symtab"); s != nil {
		t.Skip("gzip is not stripped here; the test is about .eh_frame starts")
	}
	// Function starts come from .eh_frame (package ehframe checks that
	// .eh_frame_hdr agrees with them).
	eh := f.Section(".eh_frame")
	starts := ehframe.Starts(f.SectData(eh), eh.Addr)
	if len(starts) < 50 {
		t.Fatalf(".eh_frame gives %d starts", len(starts))
	}
	c := decode(f, functionStarts(f), false, nil)
	if c.Undecodable != 0 {
		t.Errorf("undecodable bytes: %d", c.Undecodable)
	}
	for _, s := range starts {
		i := c.Index(s)
		if i < 0 || c.Insts[i].Addr != s || c.Insts[i].Flags&place.InstTarget == 0 {
			t.Errorf("function start %#x is not a target instruction", s)
		}
	}
	// Instructions are sorted, contiguous within a region, and cover it.
	for i := 1; i < len(c.Insts); i++ {
		if c.Insts[i].Addr <= c.Insts[i-1].Addr {
			t.Fatalf("instructions out of order at %d", i)
		}
	}
	count := map[Kind]int{}
	var flags [8]int
	for i, k := range c.Kinds {
		count[k]++
		for b := 0; b < 4; b++ {
			if c.Insts[i].Flags&(1<<b) != 0 {
				flags[b]++
			}
		}
	}
	t.Logf("%d instructions; kinds %v; target %d untouchable %d padding %d relocatable %d",
		len(c.Insts), count, flags[0], flags[1], flags[2], flags[3])
	// gzip 1.12 (FACTS.md): ~811 direct calls, ~1450 jcc, 129 ret.
	if count[Call] < 500 || count[Jcc] < 1000 || count[Ret] < 80 {
		t.Errorf("too few branches decoded: %v", count)
	}
	if flags[2] == 0 {
		t.Error("no padding found")
	}
	if !testing.Short() {
		objdumpAgrees(t, gzipPath, f, c)
	}
}

// TestDecodeAgreesWithObjdump: every instruction boundary the sweep finds
// is one of objdump's, in code that uses AVX2 and AVX-512 (glibc's string
// functions, libsqlite3). x86asm gets some VEX lengths wrong; a wrong
// length shifts the sweep into the middle of real instructions.
func TestDecodeAgreesWithObjdump(t *testing.T) {
	if testing.Short() {
		t.Skip("objdump comparison is slow")
	}
	for _, path := range []string{
		"/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/libsqlite3.so.0",
		"/usr/lib/x86_64-linux-gnu/liblzma.so.5",
	} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := elfin.Parse(readInput(t, path))
			if err != nil {
				t.Fatal(err)
			}
			objdumpAgrees(t, path, f, decode(f, functionStarts(f), false, nil))
		})
	}
}

func objdumpAgrees(t *testing.T, path string, f *elfin.File, c *Code) {
	t.Helper()
	od, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("objdump not installed")
	}
	out, err := exec.Command(od, "-d", "-j", ".text", "--no-show-raw-insn", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	theirs := map[uint64]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		colon := strings.IndexByte(line, ':')
		if !strings.HasPrefix(line, "  ") || colon < 0 || strings.Contains(line, "(bad)") {
			continue
		}
		if a, err := strconv.ParseUint(strings.TrimSpace(line[:colon]), 16, 64); err == nil {
			theirs[a] = true
		}
	}
	text := f.Section(".text")
	mismatch, total, bad := 0, 0, 0
	for i, in := range c.Insts {
		if in.Addr < text.Addr || in.Addr >= text.Addr+text.Size {
			continue
		}
		if c.Kinds[i] == Bad {
			bad++
			continue
		}
		total++
		if !theirs[in.Addr] {
			mismatch++
			if mismatch < 5 {
				t.Errorf("instruction at %#x (% x) is not an objdump instruction boundary", in.Addr, in.Bytes())
			}
		}
	}
	t.Logf("%d instructions, %d undecodable bytes", total, bad)
	if total < 10000 || mismatch > 0 {
		t.Errorf("%d of %d instructions disagree with objdump", mismatch, total)
	}

}

// TestIndexTable: the block table answers as the binary search does, at
// every byte of gzip's code and just outside it, and a Code whose
// sections lie far apart keeps the search.
func TestIndexTable(t *testing.T) {
	f, err := elfin.Parse(readInput(t, gzipPath))
	if err != nil {
		t.Fatal(err)
	}
	c := decode(f, functionStarts(f), false, nil)
	if c.block == nil {
		t.Fatal("no block table for gzip")
	}
	search := &Code{Insts: c.Insts}
	lo, last := c.Insts[0].Addr, c.Insts[len(c.Insts)-1]
	hi := last.Addr + uint64(last.Len())
	for a := lo - 2; a < hi+40; a++ {
		if got, want := c.Index(a), search.Index(a); got != want {
			t.Fatalf("Index(%#x) = %d, the search says %d", a, got, want)
		}
	}
	if c.Index(0) != -1 || c.Index(^uint64(0)) != -1 {
		t.Error("addresses far outside found an instruction")
	}
	sparse := &Code{Insts: []place.Inst{
		place.NewInst(0x1000, []byte{0x90}, 0),
		place.NewInst(0x7000_0000, []byte{0xc3}, 0),
	}}
	sparse.buildIndex()
	if sparse.block != nil {
		t.Errorf("a table of %d blocks for two instructions", len(sparse.block))
	}
	if sparse.Index(0x7000_0000) != 1 || sparse.Index(0x1001) != -1 {
		t.Error("the search fallback answers wrong")
	}
}

// TestSweepSplit: a region swept in two halves at once gives what one
// sweep gives, where the first half ends at the split and where an
// instruction straddling the split start makes it run past.
func TestSweepSplit(t *testing.T) {
	const size = 2 * splitMin
	data := bytes.Repeat([]byte{0x90}, size)
	r := Region{Name: ".text", Lo: 0x400000, Hi: 0x400000 + size, Data: data}
	mid := r.Lo + size/2
	for _, tc := range []struct {
		name     string
		straddle bool
	}{{"clean seam", false}, {"a jcc across the seam", true}} {
		t.Run(tc.name, func(t *testing.T) {
			copy(data[size/2-1:], []byte{0x90, 0x90})
			if tc.straddle {
				copy(data[size/2-1:], []byte{0x74, 0x00}) // je .+2, over the start
			}
			starts := []uint64{r.Lo, r.Lo + 0x100, mid, mid + 0x40}
			parts := sweepSplit(r, starts)
			whole := sweep(r, r.Lo, r.Hi, starts)
			var got []place.Inst
			n := 0
			for _, pt := range parts {
				got = append(got, pt.insts...)
				n += pt.undecodable
			}
			if len(parts) != 2 || !slices.Equal(got, whole.insts) || n != whole.undecodable {
				t.Fatalf("%d parts, %d instructions (%d undecodable bytes); one sweep: %d (%d)",
					len(parts), len(got), n, len(whole.insts), whole.undecodable)
			}
			if tc.straddle != (parts[0].end != mid) {
				t.Errorf("first half ended at %#x, the split is %#x", parts[0].end, mid)
			}
		})
	}
}
