package rewrite

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/runtime"
)

// checkLayout reloads a rewritten file with debug/elf and checks the
// container invariants against the original.
func checkLayout(t *testing.T, orig, out []byte, st *Stats) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("debug/elf rejects the output: %v", err)
	}
	of, err := elf.NewFile(bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	// Program headers: PT_PHDR first, PT_LOADs sorted and page-congruent,
	// the table inside a PT_LOAD.
	var lastVaddr uint64
	var phdr *elf.Prog
	for i, p := range f.Progs {
		if p.Type == elf.PT_PHDR {
			if i != 0 {
				t.Errorf("PT_PHDR is header %d", i)
			}
			phdr = p
		}
		if p.Type == elf.PT_LOAD {
			if p.Vaddr < lastVaddr {
				t.Errorf("PT_LOAD at %#x after %#x", p.Vaddr, lastVaddr)
			}
			lastVaddr = p.Vaddr
			if p.Vaddr%elfout.PageSize != p.Off%elfout.PageSize {
				t.Errorf("PT_LOAD vaddr %#x / offset %#x not congruent", p.Vaddr, p.Off)
			}
		}
	}
	phoff := binary.LittleEndian.Uint64(out[32:])
	inLoad := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && phoff >= p.Off && phoff+uint64(len(f.Progs))*elfin.PhdrSize <= p.Off+p.Filesz {
			inLoad = true
			if phdr != nil && phdr.Vaddr != p.Vaddr+(phoff-p.Off) {
				t.Errorf("PT_PHDR vaddr %#x, table mapped at %#x", phdr.Vaddr, p.Vaddr+(phoff-p.Off))
			}
		}
	}
	if !inLoad {
		t.Error("program header table is not inside a PT_LOAD")
	}
	if (phdr == nil) != (of.Progs[0].Type != elf.PT_PHDR) {
		t.Error("PT_PHDR presence changed")
	}
	if f.Section(".stint") == nil {
		t.Error("no .stint section")
	}

	// The module and its tables.
	sd := f.Section(".stint.data")
	if sd == nil {
		t.Fatal("no .stint.data")
	}
	m, _ := sd.Data()
	var mod runtime.Module
	if err := binary.Read(bytes.NewReader(m), binary.LittleEndian, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Magic != runtime.ModuleMagic || mod.SelfVaddr != sd.Addr {
		t.Fatalf("module magic/self_vaddr wrong")
	}
	if int(mod.NProbes) != st.Probes || int(mod.NPatches) != st.Patches || int(mod.NChunks) != st.Chunks {
		t.Errorf("module counts: probes %d patches %d chunks %d, stats %d %d %d",
			mod.NProbes, mod.NPatches, mod.NChunks, st.Probes, st.Patches, st.Chunks)
	}
	at := func(v uint64) []byte { return m[v-sd.Addr:] }
	probes := make([]runtime.Probe, st.Probes)
	if err := binary.Read(bytes.NewReader(at(mod.ProbesVaddr)), binary.LittleEndian, probes); err != nil {
		t.Fatal(err)
	}
	for i, p := range probes {
		if uint64(p.ModuleBack) != mod.ProbesVaddr+uint64(i)*runtime.ProbeStructSize-sd.Addr {
			t.Fatalf("probe %d module_back %d", i, p.ModuleBack)
		}
		if p.Arm != 0 && (p.Arm < mod.TrampLo || p.Arm+4 > mod.TrampHi) {
			t.Fatalf("probe %d arm %#x outside the trampolines", i, p.Arm)
		}
		if p.Kind < 1 || p.Kind > 9 {
			t.Fatalf("probe %d kind %d", i, p.Kind)
		}
	}
	// Every changed byte of the original file is in the ELF header, the
	// .dynamic segment or a patch record whose orig bytes are the input's.
	type span struct{ lo, hi uint64 }
	var allowed []span
	allowed = append(allowed, span{0, 64})
	for _, p := range of.Progs {
		if p.Type == elf.PT_DYNAMIC {
			allowed = append(allowed, span{p.Off, p.Off + p.Filesz})
		}
	}
	patches := make([]runtime.Patch, st.Patches)
	if err := binary.Read(bytes.NewReader(at(mod.PatchesVaddr)), binary.LittleEndian, patches); err != nil {
		t.Fatal(err)
	}
	for i, p := range patches {
		addr, n := p.Addr, uint64(p.Len)
		var off uint64
		found := false
		for _, q := range of.Progs {
			if q.Type == elf.PT_LOAD && addr >= q.Vaddr && addr+n <= q.Vaddr+q.Filesz {
				off, found = q.Off+addr-q.Vaddr, true
			}
		}
		if !found || n == 0 || n > 16 {
			t.Fatalf("patch %d at %#x len %d", i, addr, n)
		}
		if !bytes.Equal(p.Orig[:n], orig[off:off+n]) {
			t.Errorf("patch %d at %#x: orig % x, file has % x", i, addr, p.Orig[:n], orig[off:off+n])
		}
		if bytes.Equal(out[off:off+n], orig[off:off+n]) {
			t.Errorf("patch %d at %#x changes nothing", i, addr)
		}
		allowed = append(allowed, span{off, off + n})
	}
	bad := 0
	for off := range orig {
		if orig[off] == out[off] {
			continue
		}
		ok := false
		for _, s := range allowed {
			if uint64(off) >= s.lo && uint64(off) < s.hi {
				ok = true
				break
			}
		}
		if !ok {
			bad++
			if bad < 5 {
				t.Errorf("byte at offset %#x changed outside any patch", off)
			}
		}
	}
}

func TestLayoutGzip(t *testing.T) {
	orig := readInput(t, gzipPath)
	for _, tool := range []Tool{ToolBranch, ToolBlock} {
		t.Run(tool.String(), func(t *testing.T) {
			out, st, err := RewriteBytes(orig, Options{Tool: tool})
			if err != nil {
				t.Fatal(err)
			}
			if st.Sites == 0 || st.PatchedTotal()+st.Failed+st.Fallback != st.Sites {
				t.Errorf("sites %d != patched %d + failed %d + fallback %d", st.Sites, st.PatchedTotal(), st.Failed, st.Fallback)
			}
			if 100*st.PatchedTotal() < 95*st.Sites {
				t.Errorf("only %d of %d sites patched", st.PatchedTotal(), st.Sites)
			}
			checkLayout(t, orig, out, st)
			// A dynamic executable starts the runtime from
			// DT_PREINIT_ARRAY (before library constructors), keeps
			// its e_entry, and has its .dynamic moved to our segment.
			if e := binary.LittleEndian.Uint64(out[24:]); e != binary.LittleEndian.Uint64(orig[24:]) {
				t.Error("e_entry changed")
			}
			f, _ := elf.NewFile(bytes.NewReader(out))
			if v, _ := f.DynValue(elf.DT_PREINIT_ARRAYSZ); len(v) != 1 || v[0] != 8 {
				t.Errorf("DT_PREINIT_ARRAYSZ %v", v)
			}
			pre, _ := f.DynValue(elf.DT_PREINIT_ARRAY)
			rela, _ := f.DynValue(elf.DT_RELA)
			relasz, _ := f.DynValue(elf.DT_RELASZ)
			if len(pre) != 1 || len(rela) != 1 || len(relasz) != 1 {
				t.Fatalf("preinit %v rela %v relasz %v", pre, rela, relasz)
			}
			// The last DT_RELA entry relocates the preinit slot.
			var r [24]byte
			for _, p := range f.Progs {
				if p.Type == elf.PT_LOAD && rela[0] >= p.Vaddr && rela[0]+relasz[0] <= p.Vaddr+p.Filesz {
					p.ReadAt(r[:], int64(rela[0]+relasz[0]-24-p.Vaddr))
				}
			}
			if binary.LittleEndian.Uint64(r[:]) != pre[0] || binary.LittleEndian.Uint64(r[8:]) != uint64(elf.R_X86_64_RELATIVE) {
				t.Errorf("last relocation % x does not relocate the preinit slot %#x", r, pre[0])
			}
			sd := f.Section(".stint.data")
			for _, p := range f.Progs {
				if p.Type == elf.PT_DYNAMIC && (p.Vaddr < sd.Addr || p.Vaddr >= sd.Addr+sd.Size) {
					t.Errorf("PT_DYNAMIC at %#x, not in .stint.data", p.Vaddr)
				}
			}
			// Stats JSON has the documented keys.
			var j map[string]any
			if err := json.Unmarshal(st.JSON(), &j); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"sites", "patched", "fallback", "failed", "reasons"} {
				if _, ok := j[k]; !ok {
					t.Errorf("stats JSON lacks %q", k)
				}
			}
			// Rewriting the output again is refused.
			if _, _, err := RewriteBytes(out, Options{}); !errors.Is(err, ErrAlreadyRewritten) {
				t.Errorf("second rewrite: %v, want ErrAlreadyRewritten", err)
			}
			// Same input, same output.
			out2, _, err := RewriteBytes(orig, Options{Tool: tool})
			if err != nil || !bytes.Equal(out, out2) {
				t.Errorf("rewrite is not deterministic (err %v)", err)
			}
		})
	}
}
