package e2e

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// switchSite is a patch the off-switch may undo: where it is and its two
// forms.
type switchSite struct {
	addr          uint64
	orig, patched []byte
	sync          bool // switched with threads parked on "jmp ." (STINT_PATCH_SYNC)
}

// switchSites lists the STINT_PATCH_SWITCH patches of a rewritten file,
// with the patched bytes as the file holds them.
func switchSites(t *testing.T, path string) []switchSite {
	t.Helper()
	_, patches, err := Patched(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sites []switchSite
	for _, p := range patches {
		if p.Flags&runtime.PatchSwitch == 0 {
			continue
		}
		if p.Flags&runtime.PatchRestorable == 0 || p.NProbes == 0 || p.Len == 0 || p.Len > 16 {
			t.Errorf("patch %#x: flags %#x, %d probes, %d bytes: not a switchable patch", p.Addr, p.Flags, p.NProbes, p.Len)
			continue
		}
		oneStore := p.Addr+uint64(p.Len) <= p.Addr&^7+8 || p.Addr+uint64(p.Len) <= p.Addr&^15+16
		if sync := p.Flags&runtime.PatchSync != 0; sync == oneStore || sync && (p.Len < 3 || p.Addr&15 == 15 || p.Flags&runtime.PatchAtStart == 0) {
			t.Errorf("patch %#x+%d (flags %#x): the flags do not fit how it can be written", p.Addr, p.Len, p.Flags)
		}
		b, err := readVaddr(f, p.Addr, int(p.Len))
		if err != nil || bytes.Equal(b, p.Orig[:p.Len]) {
			t.Fatalf("patch %#x: patched bytes not in the file (%v)", p.Addr, err)
		}
		sites = append(sites, switchSite{p.Addr, append([]byte(nil), p.Orig[:p.Len]...), b, p.Flags&runtime.PatchSync != 0})
	}
	return sites
}

// startTraced starts a rewritten program with env in the background and
// returns it, its output buffers and a channel that gets cmd.Wait's
// result; read the buffers only after that.
func startTraced(t *testing.T, bin string, args, env []string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, &stdout, &stderr, done
}

// loadBase returns where path is mapped in process pid (its mapping at
// file offset 0).
func loadBase(pid int, path string) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 6 && fs[5] == path && fs[2] == "00000000" {
			lo, _, _ := strings.Cut(fs[0], "-")
			return strconv.ParseUint(lo, 16, 64)
		}
	}
	return 0, fmt.Errorf("%s not mapped in %d", path, pid)
}

// TestOffSwitch: the spin fixture, rewritten with the default (branch)
// tool and a 10% budget, runs while the test reads its code through
// /proc/PID/mem. The off-switch must be seen at work on the running
// program: sites the rewriter patched are found with their original
// bytes while the window is over, and patched again in a later window
// (a window of half the period, so both states last long enough to be
// seen whatever the machine's load). The program's output must equal
// the native run's, and the trace's own rows must account for the
// switching: a period-switch row per period, switching time part of the
// period's used time. With STINT_SWITCH=0 nothing is switched.
func TestOffSwitch(t *testing.T) {
	args := []string{"5000"}
	bin, nOut := spinNative(t, args)
	dir := t.TempDir()
	out, st := rewritten(t, bin, dir, rewrite.Options{Budget: "10%", Period: "20ms"})
	if st.Switchable == 0 {
		t.Fatalf("no switchable site among %d patches", st.Patches)
	}
	sites := switchSites(t, out)
	if len(sites) != st.Switchable {
		t.Fatalf("%d patches flagged switchable, stats say %d", len(sites), st.Switchable)
	}
	for _, s := range sites {
		if s.sync {
			t.Fatalf("site %#x flagged STINT_PATCH_SYNC without --switch-sync", s.addr)
		}
	}

	t.Run("switching", func(t *testing.T) {
		traces := filepath.Join(dir, "traces")
		cmd, stdout, stderr, done := startTraced(t, out, args, append(traceEnv(traces), "STINT_WINDOW=50%"))
		// A site whose probes have all recorded is restored for good
		// (patch_done), so "seen original" alone proves nothing: a
		// switched site is seen original and later patched again.
		seenOrig := make([]bool, len(sites))
		reapplied := make([]bool, len(sites))
		samples := 0
		var mem *os.File
		var base uint64
	sample:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%v, stderr %q", err, stderr.String())
				}
				break sample
			case <-time.After(3 * time.Millisecond):
			}
			if mem == nil {
				b, err := loadBase(cmd.Process.Pid, out)
				if err != nil {
					continue // not mapped yet
				}
				if mem, err = os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid)); err != nil {
					t.Fatal(err)
				}
				defer mem.Close()
				base = b
			}
			buf := make([]byte, 16)
			for i, s := range sites {
				n, err := mem.ReadAt(buf[:len(s.orig)], int64(base+s.addr))
				if err != nil || n != len(s.orig) {
					continue // the process is leaving
				}
				switch {
				case bytes.Equal(buf[:n], s.orig):
					seenOrig[i] = true
				case bytes.Equal(buf[:n], s.patched):
					reapplied[i] = reapplied[i] || seenOrig[i]
				case s.sync && buf[0] == 0xeb && buf[1] == 0xfe:
					// mid-switch: threads wait on "jmp ." while the
					// rest of the instruction is written
				default:
					t.Errorf("site %#x: bytes % x are neither the original % x nor the patch % x", s.addr, buf[:n], s.orig, s.patched)
				}
			}
			samples++
		}
		if !bytes.Equal(stdout.Bytes(), nOut) {
			t.Fatalf("stdout differs from native: %q vs %q", stdout.String(), nOut)
		}
		toggled := 0
		for i := range sites {
			if reapplied[i] {
				toggled++
			}
		}
		t.Logf("%d samples; %d of %d switchable sites seen switched off, then patched again", samples, toggled, len(sites))
		if toggled == 0 {
			t.Errorf("no site was seen switched off and then patched again in %d samples", samples)
		}

		trs := readTraces(t, traces)
		if len(trs) != 1 {
			t.Fatalf("%d traces, want 1", len(trs))
		}
		ps := formats.Periods(trs[0].Events)
		var ons, offs uint64
		for _, p := range ps {
			if !p.HasSwitch || !p.HasBudget {
				t.Errorf("period %d: budget row %v, switch row %v", p.Index, p.HasBudget, p.HasSwitch)
				continue
			}
			if p.Used < p.SwitchNS {
				t.Errorf("period %d: used %d ns, less than its switching time %d ns", p.Index, p.Used, p.SwitchNS)
			}
			ons += p.SwitchedOn
			offs += p.SwitchedOff
		}
		if ons == 0 || offs == 0 {
			t.Errorf("over %d periods: %d sites switched on, %d off; want both", len(ps), ons, offs)
		}
	})

	// Four threads run the code the off-switch rewrites, every 2 ms,
	// including sites it can only switch with threads parked on
	// "jmp ." (STINT_PATCH_SYNC): every run must print what native does.
	t.Run("threads", func(t *testing.T) {
		targs := []string{"800", "threads"}
		want, _, _, err := fixtures.Run(bin, targs, nil)
		if err != nil {
			t.Fatal(err)
		}
		mtDir := t.TempDir()
		mt, _ := rewritten(t, bin, mtDir, rewrite.Options{Budget: "20%", Period: "2ms", Window: "50%", SwitchSync: true})
		nSync := 0
		for _, s := range switchSites(t, mt) {
			if s.sync {
				nSync++
			}
		}
		if nSync == 0 {
			t.Fatal("the fixture has no STINT_PATCH_SYNC site: this test would not exercise them")
		}
		var ons uint64
		for i := 0; i < 8; i++ {
			traces := filepath.Join(mtDir, fmt.Sprint("traces", i))
			rOut, rErr, code, err := fixtures.Run(mt, targs, traceEnv(traces))
			if err != nil || code != 0 || !bytes.Equal(rOut, want) {
				t.Fatalf("run %d: exit %d, %v, stderr %q, stdout %q, want %q", i, code, err, rErr, rOut, want)
			}
			for _, tr := range readTraces(t, traces) {
				for _, p := range formats.Periods(tr.Events) {
					ons += p.SwitchedOn
				}
			}
		}
		if ons == 0 {
			t.Errorf("no site was switched on in 8 runs: the threads ran no switching")
		}
	})

	t.Run("STINT_SWITCH=0", func(t *testing.T) {
		traces := filepath.Join(dir, "traces0")
		rOut, rErr, code, err := fixtures.Run(out, args, append(traceEnv(traces), "STINT_SWITCH=0"))
		if err != nil || code != 0 || !bytes.Equal(rOut, nOut) {
			t.Fatalf("exit %d, %v, stderr %q; stdout equal native: %v", code, err, rErr, bytes.Equal(rOut, nOut))
		}
		trs := readTraces(t, traces)
		for _, e := range trs[0].Events {
			if e.Kind == formats.KindPeriodSwitch {
				t.Fatalf("a period-switch row with the switch off: %+v", e)
			}
		}
	})
}
