package e2e

import (
	"bytes"
	"debug/elf"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/fixtures"
	"github.com/stint-project/stint/rewrite"
	"github.com/stint-project/stint/runtime"
)

// TestSlotSitesRetire: in default mode, a site that branches through a
// slot in PT_GNU_RELRO (STINT_PF_FINAL: libsqlite3 is linked BIND_NOW,
// so its PLT stubs' GOT entries are there) gets its original bytes once
// the slot's value is recorded (slot_retire). libsqlite3 runs the
// workload and waits; its probe and patch tables and code are read from
// /proc/PID/mem. Fails if the rewriter flags no such probe, if fewer
// than 10 recorded, or if one that recorded is still patched.
func TestSlotSitesRetire(t *testing.T) {
	r := sqliteAtRest(t)
	m, probes, patches, base, mem := r.m, r.probes, r.patches, r.base, r.mem
	size := int(unsafe.Sizeof(runtime.Probe{}))
	state := int(unsafe.Offsetof(runtime.Probe{}.State))
	table := make([]byte, len(probes)*size)
	if _, err := mem.ReadAt(table, int64(base+m.ProbesVaddr)); err != nil {
		t.Fatal(err)
	}
	var final, recorded, still int
	for i, p := range probes {
		if p.Flags&runtime.PFFinal == 0 {
			continue
		}
		final++
		if p.Flags&runtime.PFSlot == 0 {
			t.Errorf("probe %#x flagged final (%#x) but not a slot probe", p.Src, p.Flags)
		}
		if table[i*size+state] == 0 || int(p.Patch) >= len(patches) {
			continue
		}
		recorded++
		pt := patches[p.Patch]
		got := make([]byte, pt.Len)
		if _, err := mem.ReadAt(got, int64(base+pt.Addr)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pt.Orig[:pt.Len]) {
			if still++; still <= 5 {
				t.Errorf("slot site %#x recorded, but its patch at %#x holds % x, want % x", p.Src, pt.Addr, got, pt.Orig[:pt.Len])
			}
		}
	}
	t.Logf("%d final slot probes, %d recorded, %d of those still patched", final, recorded, still)
	if recorded < 10 {
		t.Errorf("%d final slot probes recorded (of %d): want at least 10", recorded, final)
	}
}

// TestSlotChangedRearms: a retired slot site whose slot changes after
// all (the slot fixture's "change", as a hooking library's mprotect and
// store) is patched again by the runtime's check (slots_poll), which
// runs when mydiv, new code, first enters the runtime, so the new
// destination records at the next call. The fixture sleeps 0.2 s after
// the change, longer than the interval between checks: the trace must
// hold the call to mydiv as well as the one to libc's div (without the
// check the call to mydiv goes unrecorded), and stdout must equal the
// original's.
func TestSlotChangedRearms(t *testing.T) {
	bin := fixtures.Build(t, "slot", fixtures.Variant{Opt: fixtures.O2, PIE: true, CET: true})
	args := []string{"50", "change", "wait"}
	want, _, _, err := fixtures.Run(bin, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{})
	_, probes, _ := probesAndPatches(t, out)
	site, ef := slotProbes(t, bin, probes)
	div, ok := site["div"]
	if !ok {
		t.Fatal("no probe on the call through div's GOT entry")
	}
	if div.Flags&runtime.PFFinal == 0 {
		t.Errorf("the call through div's GOT entry (in RELRO) is not flagged final: %#x", div.Flags)
	}
	divSite := div.Src
	mydiv := symbolValue(t, ef, "mydiv")
	traces := filepath.Join(dir, "traces")
	got, _, _, err := fixtures.Run(out, args, traceEnv(traces))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("stdout %q, want %q", got, want)
	}
	tr := oneTrace(t, traces)
	self := rewrittenID(tr)
	toLibc, toMydiv := false, false
	for _, e := range tr.Events {
		if e.SrcModule != self || e.Kind != formats.KindIndCall || e.Src != divSite {
			continue
		}
		toMydiv = toMydiv || e.DstModule == self && e.Dst == mydiv
		toLibc = toLibc || e.DstModule != self && e.DstModule != formats.NoModule
	}
	if !toLibc || !toMydiv {
		t.Errorf("the call through div's GOT entry recorded to libc: %v, to mydiv after the change: %v", toLibc, toMydiv)
	}
}

// TestLazySlotRetires: a PLT slot that lazy binding writes (the slot
// fixture's ldiv, in a PIE linked without BIND_NOW) is final once bound:
// its probe is flagged STINT_PF_FINAL with stint_probe.rets 1 + the
// slot's value in the file. Its first call goes through the resolver
// (the slot still holds that value), which must not retire the site;
// the next records the bound function and does. The fixture pauses
// after its rounds: ldiv's PLT site and div's GOT call site then hold
// their original bytes in the running process, and the trace holds
// ldiv's call into libc (fails if the resolver's value had retired it).
func TestLazySlotRetires(t *testing.T) {
	bin := fixtures.Build(t, "slot", fixtures.Variant{Opt: fixtures.O2, PIE: true, CET: true})
	dir := t.TempDir()
	out, _ := rewritten(t, bin, dir, rewrite.Options{})
	_, probes, patches := probesAndPatches(t, out)
	site, _ := slotProbes(t, bin, probes)
	if ld := site["ldiv"]; ld.Flags&runtime.PFFinal == 0 || ld.Rets == 0 {
		t.Fatalf("ldiv's PLT probe: flags %#x, rets %#x; want STINT_PF_FINAL and the slot's value in the file", ld.Flags, ld.Rets)
	}
	args := []string{"50", "pause"}
	want, _, _, err := fixtures.Run(bin, args, nil) // "ready", then no line to read
	if err != nil {
		t.Fatal(err)
	}
	traces := filepath.Join(dir, "traces")
	cmd := exec.Command(out, args...)
	cmd.Env = traceEnv(traces)
	stdin, stdout, _ := startWaiting(t, cmd, "", string(want))
	base, mem := openMem(t, cmd.Process.Pid, out)
	for _, name := range []string{"ldiv", "div"} {
		p := site[name]
		pt := patches[p.Patch]
		got := make([]byte, pt.Len)
		if _, err := mem.ReadAt(got, int64(base+pt.Addr)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pt.Orig[:pt.Len]) {
			t.Errorf("%s's site %#x: patch at %#x holds % x after the rounds, want its original % x", name, p.Src, pt.Addr, got, pt.Orig[:pt.Len])
		}
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	tr := oneTrace(t, traces)
	self := rewrittenID(tr)
	bound := false
	for _, e := range tr.Events {
		bound = bound || e.SrcModule == self && e.Src == site["ldiv"].Src && e.DstModule != self && e.DstModule != formats.NoModule
	}
	if !bound {
		t.Errorf("no event of ldiv's PLT stub into libc: the resolver's value retired the site")
	}
}

// slotProbes returns, by the name of the GOT slot's symbol, the
// indirect jmp and call probes of the slot fixture bin that branch
// through a rip-relative GOT slot, and bin opened (closed at the test's
// end).
func slotProbes(t *testing.T, bin string, probes []runtime.Probe) (map[string]runtime.Probe, *elf.File) {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ef.Close() })
	slots := gotSlots(t, ef)
	site := map[string]runtime.Probe{}
	for _, p := range probes {
		if k := runtime.Kind(p.Kind); k != runtime.KIndJmp && k != runtime.KIndCall {
			continue
		}
		code, err := readVaddr(ef, p.Src, 16)
		if err != nil {
			t.Fatal(err)
		}
		if slot, rip := ripSlot(code, p.Src); rip && slots[slot] != "" {
			site[slots[slot]] = p
		}
	}
	return site, ef
}

// rewrittenID returns the ID of tr's rewritten module (formats.NoModule
// if none).
func rewrittenID(tr *formats.Trace) uint16 {
	var self uint16 = formats.NoModule
	for _, m := range tr.Modules {
		if m.Rewritten {
			self = m.ID
		}
	}
	return self
}

// symbolValue returns the value of symbol name in f; fails without it.
func symbolValue(t *testing.T, f *elf.File, name string) uint64 {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s", name)
	return 0
}
