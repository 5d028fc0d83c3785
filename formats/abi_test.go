package formats

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestABIMirror checks that Kind, Tool and the Close* values mirror
// STINT_K_*, STINT_TOOL_* and STINT_CLOSE_* in
// runtime/include/stint_abi.h.
func TestABIMirror(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "runtime", "include", "stint_abi.h"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^#define\s+STINT_(K|TOOL|CLOSE)_(\w+)\s+(\d+)`)
	closes := map[string]int{"UNKNOWN": CloseUnknown, "CHARGE": CloseByCharge, "START": CloseAtStart, "ROLL": CloseAtRoll}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[3])
		if m[1] == "K" && (m[2] == "ENTRY" || m[2] == "RESUME") {
			continue // probe kinds of a compact trace: never a row of a trace
		}
		name := strings.ReplaceAll(strings.ToLower(m[2]), "_", "-")
		seen[m[1]]++
		switch m[1] {
		case "K":
			if have := Kind(v).String(); have != name {
				t.Errorf("STINT_K_%s = %d, but Kind(%d) is %q", m[2], v, v, have)
			}
		case "TOOL":
			if have := Tool(v).String(); have != name {
				t.Errorf("STINT_TOOL_%s = %d, but Tool(%d) is %q", m[2], v, v, have)
			}
		case "CLOSE":
			if want, ok := closes[m[2]]; !ok || want != v {
				t.Errorf("STINT_CLOSE_%s = %d, but formats has %d (known %v)", m[2], v, want, ok)
			}
		}
	}
	if seen["CLOSE"] != len(closes) {
		t.Errorf("found %d STINT_CLOSE_* values in stint_abi.h, want %d", seen["CLOSE"], len(closes))
	}
	if seen["K"] != int(MaxKind)+int(KindBlockCount-KindPeriod+1) || seen["TOOL"] != int(ToolBlock) {
		t.Errorf("found %d kinds and %d tools in stint_abi.h, want %d and %d", seen["K"], seen["TOOL"], MaxKind, ToolBlock)
	}
}

// TestDeps keeps formats independent of ELF and of the rewriter: it
// reads traces, nothing else.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list: skipped under -short")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "debug/elf" || strings.HasPrefix(p, "github.com/stint-project/stint/") && p != "github.com/stint-project/stint/formats" {
			t.Errorf("formats depends on %s", p)
		}
	}
}

// TestPacketOpcodes checks that the runtime's PK_* packet opcodes in
// runtime/src/stint.h are formats' Pkt* values.
func TestPacketOpcodes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "runtime", "src", "stint.h"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"SYNC": PktSync, "ASYNC": PktAsync, "ASYNC_END": PktAsyncEnd, "LOST": PktLost,
		"SYNC_CALL": PktSyncCall, "PSB": PktPSB, "ASYNC_TO": PktAsyncTo, "TIP": PktTIP, "TNT": PktTNT, "RET_TIP": PktRetTIP}
	re := regexp.MustCompile(`(?m)^#define\s+PK_(\w+)\s+(0x[0-9a-f]+)`)
	seen := 0
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		v, _ := strconv.ParseInt(m[2], 0, 32)
		w, ok := want[m[1]]
		if !ok || int(v) != w {
			t.Errorf("PK_%s = %s, formats has %#x (known %v)", m[1], m[2], w, ok)
		}
		seen++
	}
	if seen != len(want) {
		t.Errorf("found %d PK_* opcodes in stint.h, want %d", seen, len(want))
	}
}
