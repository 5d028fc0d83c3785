package rewrite

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
	f, err := parseELF(data)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.section(".symtab"); s != nil {
		t.Skip("gzip is not stripped here; the test is about .eh_frame starts")
	}
	// Function starts come from .eh_frame; the .eh_frame_hdr table must
	// agree with them.
	eh := f.section(".eh_frame")
	starts := ehFrameStarts(f.sectData(eh), eh.Addr)
	p := f.prog(elf.PT_GNU_EH_FRAME)
	hdr := ehFrameHdrStarts(f.data[p.Off:p.Off+p.Filesz], p.Vaddr)
	if len(starts) < 50 || len(starts) != len(hdr) {
		t.Fatalf(".eh_frame gives %d starts, .eh_frame_hdr %d", len(starts), len(hdr))
	}
	in := map[uint64]bool{}
	for _, s := range starts {
		in[s] = true
	}
	for _, s := range hdr {
		if !in[s] {
			t.Errorf(".eh_frame_hdr start %#x not among .eh_frame starts", s)
		}
	}

	c := decode(f)
	if c.undecodable != 0 {
		t.Errorf("undecodable bytes: %d", c.undecodable)
	}
	for _, s := range starts {
		i := c.index(s)
		if i < 0 || c.insts[i].Addr != s || c.insts[i].Flags&place.InstTarget == 0 {
			t.Errorf("function start %#x is not a target instruction", s)
		}
	}
	// Instructions are sorted, contiguous within a region, and cover it.
	for i := 1; i < len(c.insts); i++ {
		if c.insts[i].Addr <= c.insts[i-1].Addr {
			t.Fatalf("instructions out of order at %d", i)
		}
	}
	count := map[kind]int{}
	var flags [8]int
	for i, k := range c.kinds {
		count[k]++
		for b := 0; b < 4; b++ {
			if c.insts[i].Flags&(1<<b) != 0 {
				flags[b]++
			}
		}
	}
	t.Logf("%d instructions; kinds %v; target %d untouchable %d padding %d relocatable %d",
		len(c.insts), count, flags[0], flags[1], flags[2], flags[3])
	// gzip 1.12 (FACTS.md): ~811 direct calls, ~1450 jcc, 129 ret.
	if count[kCall] < 500 || count[kJcc] < 1000 || count[kRet] < 80 {
		t.Errorf("too few branches decoded: %v", count)
	}
	if flags[2] == 0 {
		t.Error("no padding found")
	}
	sites := map[Tool]int{}
	for _, tool := range []Tool{ToolBranch, ToolCall, ToolSyscall, ToolBlock} {
		sites[tool] = len(c.sites(tool))
	}
	if sites[ToolBranch] != count[kJcc]+count[kJcxz]+count[kJmp]+count[kCall]+count[kRet]+count[kIndJmp]+count[kIndCall] {
		t.Errorf("branch sites %d do not match the decoded branches %v", sites[ToolBranch], count)
	}
	if sites[ToolCall] != count[kCall]+count[kIndCall]+count[kRet] {
		t.Errorf("call sites %d", sites[ToolCall])
	}
	if sites[ToolSyscall] != count[kSyscall] {
		t.Errorf("syscall sites %d, syscalls %d", sites[ToolSyscall], count[kSyscall])
	}
	if sites[ToolBlock] < len(starts) || sites[ToolBlock] > len(c.insts)/2 {
		t.Errorf("block sites %d for %d functions", sites[ToolBlock], len(starts))
	}
	t.Logf("sites per tool: %v", sites)

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
			f, err := parseELF(readInput(t, path))
			if err != nil {
				t.Fatal(err)
			}
			objdumpAgrees(t, path, f, decode(f))
		})
	}
}

func objdumpAgrees(t *testing.T, path string, f *elfFile, c *code) {
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
	text := f.section(".text")
	mismatch, total, bad := 0, 0, 0
	for i, in := range c.insts {
		if in.Addr < text.Addr || in.Addr >= text.Addr+text.Size {
			continue
		}
		if c.kinds[i] == kBad {
			bad++
			continue
		}
		total++
		if !theirs[in.Addr] {
			mismatch++
			if mismatch < 5 {
				t.Errorf("instruction at %#x (% x) is not an objdump instruction boundary", in.Addr, in.Bytes)
			}
		}
	}
	t.Logf("%d instructions, %d undecodable bytes", total, bad)
	if total < 10000 || mismatch > 0 {
		t.Errorf("%d of %d instructions disagree with objdump", mismatch, total)
	}

}

func TestParseToolNames(t *testing.T) {
	for _, tool := range []Tool{ToolBranch, ToolCall, ToolSyscall, ToolBlock} {
		have, ok := ParseTool(tool.String())
		if !ok || have != tool {
			t.Errorf("ParseTool(%q) = %v, %v", tool.String(), have, ok)
		}
	}
	if _, ok := ParseTool("nope"); ok {
		t.Error("ParseTool accepted nope")
	}
}
