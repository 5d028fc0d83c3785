package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// abiStructs maps every struct of stint_abi.h to its Go mirror, field by
// field (C name, Go name).
var abiStructs = []struct {
	c      string
	goType reflect.Type
	size   uintptr
	fields [][2]string
}{
	{"stint_blob_header", reflect.TypeOf(BlobHeader{}), BlobHeaderSize, [][2]string{
		{"magic", "Magic"}, {"abi_version", "ABIVersion"}, {"size", "Size"}, {"entry_exec", "EntryExec"},
		{"entry_init", "EntryInit"}, {"entry_fini", "EntryFini"}, {"probe", "Probe"}, {"module_rel", "ModuleRel"},
	}},
	{"stint_module", reflect.TypeOf(Module{}), ModuleStructSize, [][2]string{
		{"magic", "Magic"}, {"abi_version", "ABIVersion"}, {"flags", "Flags"}, {"tool", "Tool"},
		{"nprobes", "NProbes"}, {"self_vaddr", "SelfVaddr"}, {"image_end", "ImageEnd"},
		{"probes_vaddr", "ProbesVaddr"}, {"patches_vaddr", "PatchesVaddr"}, {"chunks_vaddr", "ChunksVaddr"},
		{"npatches", "NPatches"}, {"nchunks", "NChunks"}, {"text_lo", "TextLo"}, {"text_hi", "TextHi"},
		{"tramp_lo", "TrampLo"}, {"tramp_hi", "TrampHi"}, {"orig_entry", "OrigEntry"}, {"orig_fini", "OrigFini"},
		{"build_id", "BuildID"}, {"build_id_len", "BuildIDLen"}, {"module_id", "ModuleID"}, {"base", "Base"},
		{"runtime_state", "RuntimeState"}, {"stubs_vaddr", "StubsVaddr"}, {"deps_vaddr", "DepsVaddr"},
		{"stub_area_size", "StubAreaSize"}, {"nstubs", "NStubs"}, {"ndeps", "NDeps"}, {"options", "Options"}, {"trace_ends_vaddr", "TraceEndsVaddr"}, {"ntrace_ends", "NTraceEnds"}, {"hit", "Hit"}, {"gate_vaddr", "GateVaddr"}, {"reads_vaddr", "ReadsVaddr"}, {"nreads", "NReads"}, {"pad_rd", "PadRd"}, {"rets_vaddr", "RetsVaddr"}, {"nrets", "NRets"}, {"pad_rt", "PadRt"},
		{"stub_file_off", "StubFileOff"}, {"stub_file_tag", "StubFileTag"},
		{"log_sum", "LogSum"}, {"log_count", "LogCount"}, {"nlogged", "NLogged"}, {"logged_vaddr", "LoggedVaddr"}, {"counts_vaddr", "CountsVaddr"},
		{"cd_base", "CDBase"}, {"traps_vaddr", "TrapsVaddr"}, {"ntraps", "NTraps"}, {"fini_probe", "FiniProbe"}, {"log_end", "LogEnd"}, {"log_last", "LogLast"}, {"log_last_head", "LogLastHead"}, {"seen_vaddr", "SeenVaddr"}, {"nseen", "NSeen"}, {"ncold", "NCold"}, {"cold_vaddr", "ColdVaddr"},
	}},
	{"stint_trap", reflect.TypeOf(Trap{}), TrapStructSize, [][2]string{{"site", "Site"}, {"tramp", "Tramp"}, {"patch", "Patch"}, {"hits", "Hits"}}},
	{"stint_stub_file", reflect.TypeOf(StubFile{}), StubFileStructSize, [][2]string{
		{"magic", "Magic"}, {"tag", "Tag"}, {"area_size", "AreaSize"}, {"nstubs", "NStubs"},
	}},
	{"stint_read", reflect.TypeOf(Read{}), ReadStructSize, [][2]string{{"reader", "Reader"}, {"read", "Read"}}},
	{"stint_probe", reflect.TypeOf(Probe{}), ProbeStructSize, [][2]string{
		{"src", "Src"}, {"dst", "Dst"}, {"arm", "Arm"}, {"arm_to", "ArmTo"}, {"module_back", "ModuleBack"},
		{"patch", "Patch"}, {"kind", "Kind"}, {"flags", "Flags"}, {"state", "State"}, {"pad0", "Pad0"}, {"rets", "Rets"},
		{"cache", "Cache"}, {"cache2", "Cache2"},
	}},
	{"stint_patch", reflect.TypeOf(Patch{}), PatchStructSize, [][2]string{
		{"addr", "Addr"}, {"len", "Len"}, {"flags", "Flags"}, {"nprobes", "NProbes"},
		{"remaining", "Remaining"}, {"orig", "Orig"},
	}},
	{"stint_chunk", reflect.TypeOf(Chunk{}), ChunkStructSize, [][2]string{
		{"vaddr", "Vaddr"}, {"size", "Size"}, {"src_off", "SrcOff"}, {"flags", "Flags"}, {"ndeps", "NDeps"},
		{"deps_off", "DepsOff"}, {"pad", "Pad"},
	}},
	{"stint_stub", reflect.TypeOf(Stub{}), StubStructSize, [][2]string{
		{"off", "Off"}, {"code", "Code"},
	}},
	{"stint_qos_page", reflect.TypeOf(QoSPage{}), QoSPageStructSize, [][2]string{
		{"magic", "Magic"}, {"version", "Version"}, {"flags", "Flags"}, {"tuning", "Tuning"},
		{"state", "State"}, {"seq", "Seq"}, {"threshold", "Threshold"}, {"max", "Max"},
		{"value", "Value"}, {"sample_mono_ns", "SampleMonoNS"}, {"interval_ns", "IntervalNS"},
		{"samples", "Samples"}, {"analyzer_pid", "AnalyzerPID"}, {"pad", "Pad"}, {"source", "Source"},
	}},
}

// abiConsts are the #defines of stint_abi.h with their Go values.
var abiConsts = map[string]uint64{
	"STINT_ABI_VERSION": ABIVersion, "STINT_BLOB_MAGIC": BlobMagic, "STINT_MODULE_MAGIC": ModuleMagic,
	"STINT_STUB_FILE_MAGIC": StubFileMagic,
	"STINT_K_JCC_TAKEN":     uint64(KJccTaken), "STINT_K_JCC_NOT_TAKEN": uint64(KJccNotTaken),
	"STINT_K_JMP": uint64(KJmp), "STINT_K_CALL": uint64(KCall), "STINT_K_RET": uint64(KRet),
	"STINT_K_IND_JMP": uint64(KIndJmp), "STINT_K_IND_CALL": uint64(KIndCall),
	"STINT_K_SYSCALL": uint64(KSyscall), "STINT_K_BLOCK": uint64(KBlock), "STINT_K_CONTEXT": uint64(KContext),
	"STINT_K_ENTRY": uint64(KEntry), "STINT_K_RESUME": uint64(KResume), "STINT_MF_PATHS": uint64(MFPaths),
	"STINT_PATHS_KEY_OFF": PathsKeyOff, "STINT_PATHS_TNT_OFF": PathsTNTOff, "STINT_PATHS_TOP_OFF": PathsTopOff, "STINT_PATHS_STACK_OFF": PathsStackOff, "STINT_PATHS_TAIL_OFF": PathsTailOff, "STINT_PATHS_KEY_TIP": PathsKeyTIP, "STINT_PATHS_CUR_OFF": PathsCurOff, "STINT_PATHS_END_OFF": PathsEndOff, "STINT_PATHS_PSB_AT_OFF": PathsPSBAtOff, "STINT_PATHS_LAST_OFF": PathsLastOff, "STINT_PATHS_PSB_OFF": PathsPSBOff, "STINT_PATHS_OUT_LO_OFF": PathsOutLoOff, "STINT_PATHS_OUT_SIZE_OFF": PathsOutSzOff, "STINT_PATHS_OUTSIDE_OFF": PathsOutside, "STINT_PATHS_ROOM_OFF": PathsRoomOff, "STINT_PATHS_CURMOD_OFF": PathsCurMod, "STINT_PATHS_ROOM_UNIT": PathsRoomUnit, "STINT_PATHS_ROOM_TIP": PathsRoomTIP, "STINT_PATHS_KEY_OUT": PathsKeyOut, "STINT_PATHS_PSB_EVERY": PathsPSBEvery, "STINT_PATHS_TNT_FULL": PathsTNTFull, "STINT_PATHS_FLUSH": PathsFlush,
	"STINT_TOOL_BRANCH": uint64(ToolBranch), "STINT_TOOL_CALL": uint64(ToolCall),
	"STINT_TOOL_SYSCALL": uint64(ToolSyscall), "STINT_TOOL_BLOCK": uint64(ToolBlock),
	"STINT_MF_EVERY": uint64(MFEvery), "STINT_MF_SHARED": uint64(MFShared), "STINT_MF_EXEC": uint64(MFExec),
	"STINT_MF_STATIC": uint64(MFStatic), "STINT_MF_CONTEXT": uint64(MFContext), "STINT_MF_PARK": uint64(MFPark), "STINT_MF_RETS": uint64(MFRets), "STINT_MF_COLD": uint64(MFCold), "STINT_MF_LOGGED": uint64(MFLogged), "STINT_PF_DIRECT": uint64(PFDirect), "STINT_PF_VALUE": uint64(PFValue), "STINT_PF_SLOT": uint64(PFSlot),
	"STINT_PATCH_RESTORABLE": uint64(PatchRestorable), "STINT_PATCH_AT_START": uint64(PatchAtStart),
	"STINT_PATCH_SWITCH": uint64(PatchSwitch), "STINT_PATCH_SYNC": uint64(PatchSync), "STINT_PATCH_READ": uint64(PatchRead), "STINT_PATCH_READER": uint64(PatchReader), "STINT_PATCH_COLD": uint64(PatchCold), "STINT_PATCH_HALVED": uint64(PatchHalved), "STINT_GATE_OPEN": GateOpen, "STINT_GATE_CLOSED": GateClosed,
	"STINT_GATE_SWITCH": GateSwitch, "STINT_GATE_WORD1": GateWord1, "STINT_CHUNK_RESERVED": uint64(ChunkReserved),
	"STINT_NO_PATCH":       uint64(NoPatch),
	"STINT_BLOB_OFF_MAGIC": BlobOffMagic, "STINT_BLOB_OFF_VERSION": BlobOffVersion,
	"STINT_BLOB_OFF_SIZE": BlobOffSize, "STINT_BLOB_OFF_ENTRY_EXEC": BlobOffEntryExec,
	"STINT_BLOB_OFF_ENTRY_INIT": BlobOffEntryInit, "STINT_BLOB_OFF_ENTRY_FINI": BlobOffEntryFini,
	"STINT_BLOB_OFF_PROBE": BlobOffProbe, "STINT_BLOB_OFF_MODULE_REL": BlobOffModuleRel,
	"STINT_BLOB_HEADER_SIZE": BlobHeaderSize, "STINT_OPTIONS_SIZE": ModuleOptionsSize,
	"STINT_QOS_MAGIC": QoSMagic, "STINT_QOS_VERSION": uint64(QoSVersion), "STINT_QOS_PAGE_SIZE": QoSPageSize,
	"STINT_QOS_LOWER_IS_BETTER": uint64(QoSLowerIsBetter), "STINT_QOS_TUNE_SUM": uint64(QoSTuneSum),
	"STINT_QOS_TUNE_SPAN": uint64(QoSTuneSpan), "STINT_QOS_TUNE_VALUE": uint64(QoSTuneValue),
	"STINT_QOS_STARTING": uint64(QoSStarting), "STINT_QOS_RUNNING": uint64(QoSRunning),
	"STINT_QOS_FAILING": uint64(QoSFailing), "STINT_QOS_STOPPED": uint64(QoSStopped),
	"STINT_K_PERIOD": uint64(KPeriod), "STINT_K_PERIOD_STATS": uint64(KPeriodStats),
	"STINT_K_PERIOD_QOS": uint64(KPeriodQoS), "STINT_K_RUN_END": uint64(KRunEnd),
	"STINT_K_PERIOD_SWITCH": uint64(KPeriodSwitch), "STINT_K_PERIOD_CLOSE": uint64(KPeriodClose),
	"STINT_REFUSED_BASE": RefusedBase, "STINT_RUN_END_UNKNOWN": RunEndUnknown,
	"STINT_K_SAMPLE_RUN": uint64(KSampleRun), "STINT_K_SAMPLE_SET": uint64(KSampleSet),
	"STINT_K_SAMPLE_READER": uint64(KSampleReader), "STINT_K_BLOCK_COUNT": uint64(KBlockCount), "STINT_MF_COUNTS": uint64(MFCounts), "STINT_MF_CALLS": uint64(MFCalls), "STINT_SAMPLED_BASE": SampledBase,
	"STINT_SAMPLE_RATE": SampleRate, "STINT_SAMPLE_EVERY": SampleEvery, "STINT_SAMPLE_RESERVOIR": SampleReservoir,
	"STINT_SAMPLE_RES_SITE": SampleResSite, "STINT_SAMPLE_MIN": SampleMin, "STINT_MF_COUNTDOWN": uint64(MFCountdown),
	"STINT_SAMPLE_SITES": SampleSites, "STINT_SAMPLE_ENTRIES": SampleEntries, "STINT_MF_ENTRIES": uint64(MFEntries), "STINT_MF_STRIPES": uint64(MFStripes), "STINT_MF_RETIRED": uint64(MFRetired),
	"STINT_STRIPES": Stripes, "STINT_STRIPE_SHIFT": StripeShift, "STINT_STRIPE_SLOT": StripeSlot, "STINT_PF_ENTRY": uint64(PFEntry), "STINT_PF_FINAL": uint64(PFFinal),
	"STINT_CLOSE_UNKNOWN": CloseUnknown, "STINT_CLOSE_CHARGE": CloseCharge,
	"STINT_CLOSE_START": CloseStart, "STINT_CLOSE_ROLL": CloseRoll,
	"STINT_PF_DELEG": uint64(PFDeleg), "STINT_PF_PREDICT": uint64(PFPredict), "STINT_PF_NOPUSH": uint64(PFNoPush), "STINT_PROBE_WATCHED": uint64(ProbeWatched),
}

// abiStrings are the string #defines of stint_abi.h with their Go values.
var abiStrings = map[string]string{
	"STINT_QOS_ENV": QoSEnv, "STINT_TEST_FAIL_CHUNK_ENV": TestFailChunkEnv, "STINT_TEST_MAX_MAP_COUNT_ENV": TestMaxMapCountEnv,
	"STINT_TEST_NO_MEMFD_ENV": TestNoMemfdEnv, "STINT_TEST_NO_STUB_FILE_ENV": TestNoStubFileEnv,
	"STINT_TEST_NO_PROCMAP_ENV": TestNoProcmapEnv,
	"STINT_TEST_LOG_LOAD_ENV":   TestLogLoadEnv, "STINT_TEST_SAVE_HOLD_ENV": TestSaveHoldEnv,
	"STINT_TEST_SAMPLE_SEED_ENV":  TestSampleSeedEnv,
	"STINT_TEST_SAMPLE_SLOTS_ENV": TestSampleSlotsEnv,
	"STINT_TEST_CHARGE_STALL_ENV": TestChargeStallEnv, "STINT_TEST_READEE_STALL_ENV": TestReadeeStallEnv,
	"STINT_TEST_SWITCH_STALL_ENV": TestSwitchStallEnv, "STINT_TEST_BATCH_STALL_ENV": TestBatchStallEnv,
	"STINT_TEST_ROLL_KILL_ENV": TestRollKillEnv,
}

// notMirrored are the #defines of stint_abi.h that are no values: the
// include guard and the 64-bit literal macro.
var notMirrored = map[string]bool{"STINT_ABI_H": true, "STINT_U64": true}

// TestABIEveryDefine fails on any #define STINT_* of stint_abi.h that has
// no Go mirror in abiConsts or abiStrings (TestABIMatchesC compares their
// values with gcc's).
func TestABIEveryDefine(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("include", "stint_abi.h"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^#define\s+(STINT_\w+)`).FindAllStringSubmatch(string(b), -1) {
		name := m[1]
		n++
		_, isConst := abiConsts[name]
		_, isString := abiStrings[name]
		if !isConst && !isString && !notMirrored[name] {
			t.Errorf("%s is not mirrored in package runtime", name)
		}
	}
	if n < len(abiConsts)+len(abiStrings) {
		t.Errorf("found %d #defines, fewer than the %d mirrored", n, len(abiConsts)+len(abiStrings))
	}
}

// TestABIPinned pins the Go layout: a change of abi.go that moves a field
// fails here even without gcc.
func TestABIPinned(t *testing.T) {
	tests := []struct {
		name       string
		have, want uintptr
	}{
		{"sizeof BlobHeader", unsafe.Sizeof(BlobHeader{}), 40},
		{"BlobHeader.EntryExec", unsafe.Offsetof(BlobHeader{}.EntryExec), BlobOffEntryExec},
		{"BlobHeader.Probe", unsafe.Offsetof(BlobHeader{}.Probe), BlobOffProbe},
		{"BlobHeader.ModuleRel", unsafe.Offsetof(BlobHeader{}.ModuleRel), BlobOffModuleRel},
		{"sizeof Module", unsafe.Sizeof(Module{}), 528},
		{"Module.TrapsVaddr", unsafe.Offsetof(Module{}.TrapsVaddr), 456},
		{"sizeof Trap", unsafe.Sizeof(Trap{}), 24},
		{"Trap.Hits", unsafe.Offsetof(Trap{}.Hits), 20},
		{"Module.LogSum", unsafe.Offsetof(Module{}.LogSum), 416},
		{"Module.LoggedVaddr", unsafe.Offsetof(Module{}.LoggedVaddr), 432},
		{"Module.CountsVaddr", unsafe.Offsetof(Module{}.CountsVaddr), 440},
		{"Module.NProbes", unsafe.Offsetof(Module{}.NProbes), 20},
		{"Module.SelfVaddr", unsafe.Offsetof(Module{}.SelfVaddr), 24},
		{"Module.NPatches", unsafe.Offsetof(Module{}.NPatches), 64},
		{"Module.TextLo", unsafe.Offsetof(Module{}.TextLo), 72},
		{"Module.OrigEntry", unsafe.Offsetof(Module{}.OrigEntry), 104},
		{"Module.OrigFini", unsafe.Offsetof(Module{}.OrigFini), 112},
		{"Module.BuildID", unsafe.Offsetof(Module{}.BuildID), 120},
		{"Module.BuildIDLen", unsafe.Offsetof(Module{}.BuildIDLen), 152},
		{"Module.ModuleID", unsafe.Offsetof(Module{}.ModuleID), 156},
		{"Module.Base", unsafe.Offsetof(Module{}.Base), 160},
		{"Module.RuntimeState", unsafe.Offsetof(Module{}.RuntimeState), 168},
		{"Module.StubsVaddr", unsafe.Offsetof(Module{}.StubsVaddr), 176},
		{"Module.DepsVaddr", unsafe.Offsetof(Module{}.DepsVaddr), 184},
		{"Module.StubAreaSize", unsafe.Offsetof(Module{}.StubAreaSize), 192},
		{"Module.NStubs", unsafe.Offsetof(Module{}.NStubs), 200},
		{"Module.NDeps", unsafe.Offsetof(Module{}.NDeps), 204},
		{"Module.Options", unsafe.Offsetof(Module{}.Options), 208},
		{"Module.TraceEndsVaddr", unsafe.Offsetof(Module{}.TraceEndsVaddr), 344},
		{"Module.NTraceEnds", unsafe.Offsetof(Module{}.NTraceEnds), 352},
		{"Module.GateVaddr", unsafe.Offsetof(Module{}.GateVaddr), 360},
		{"Module.ReadsVaddr", unsafe.Offsetof(Module{}.ReadsVaddr), 368},
		{"Module.RetsVaddr", unsafe.Offsetof(Module{}.RetsVaddr), 384},
		{"Module.NRets", unsafe.Offsetof(Module{}.NRets), 392},
		{"sizeof Probe", unsafe.Sizeof(Probe{}), 64},
		{"Probe.ModuleBack", unsafe.Offsetof(Probe{}.ModuleBack), 32},
		{"Probe.Patch", unsafe.Offsetof(Probe{}.Patch), 36},
		{"Probe.Kind", unsafe.Offsetof(Probe{}.Kind), 40},
		{"Probe.Flags", unsafe.Offsetof(Probe{}.Flags), 41},
		{"Probe.State", unsafe.Offsetof(Probe{}.State), 42},
		{"Probe.Rets", unsafe.Offsetof(Probe{}.Rets), 44},
		{"Probe.Cache", unsafe.Offsetof(Probe{}.Cache), 48},
		{"sizeof Patch", unsafe.Sizeof(Patch{}), 32},
		{"Patch.Len", unsafe.Offsetof(Patch{}.Len), 8},
		{"Patch.NProbes", unsafe.Offsetof(Patch{}.NProbes), 10},
		{"Patch.Remaining", unsafe.Offsetof(Patch{}.Remaining), 12},
		{"Patch.Orig", unsafe.Offsetof(Patch{}.Orig), 16},
		{"sizeof Chunk", unsafe.Sizeof(Chunk{}), 40},
		{"Chunk.SrcOff", unsafe.Offsetof(Chunk{}.SrcOff), 16},
		{"Chunk.Flags", unsafe.Offsetof(Chunk{}.Flags), 24},
		{"Chunk.NDeps", unsafe.Offsetof(Chunk{}.NDeps), 28},
		{"Chunk.DepsOff", unsafe.Offsetof(Chunk{}.DepsOff), 32},
		{"sizeof Stub", unsafe.Sizeof(Stub{}), 16},
		{"Stub.Code", unsafe.Offsetof(Stub{}.Code), 8},
	}
	for _, tt := range tests {
		if tt.have != tt.want {
			t.Errorf("%s: have %d, want %d", tt.name, tt.have, tt.want)
		}
	}
	for _, s := range abiStructs {
		if s.goType.Size() != s.size {
			t.Errorf("%s: Go size %d, constant %d", s.goType.Name(), s.goType.Size(), s.size)
		}
		if s.goType.NumField() != len(s.fields) {
			t.Errorf("%s: %d Go fields, table lists %d", s.goType.Name(), s.goType.NumField(), len(s.fields))
		}
	}
}

// TestABIMatchesC compiles a program that prints sizeof/offsetof of every
// struct field and every #define of stint_abi.h, and compares.
func TestABIMatchesC(t *testing.T) {
	gcc := needGCC(t)
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"stint_abi.h\"\nint main(void) {\n")
	for _, s := range abiStructs {
		fmt.Fprintf(&src, "printf(\"sizeof %s %%zu\\n\", sizeof(struct %s));\n", s.c, s.c)
		for _, f := range s.fields {
			fmt.Fprintf(&src, "printf(\"%s.%s %%zu %%zu\\n\", offsetof(struct %s, %s), sizeof(((struct %s *)0)->%s));\n",
				s.c, f[0], s.c, f[0], s.c, f[0])
		}
	}
	for name := range abiConsts {
		fmt.Fprintf(&src, "printf(\"%s %%llu\\n\", (unsigned long long)(%s));\n", name, name)
	}
	for name := range abiStrings {
		fmt.Fprintf(&src, "printf(\"%s %%s\\n\", %s);\n", name, name)
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "abi.c"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "abi")
	if out, err := exec.Command(gcc, "-Wall", "-Werror", "-Iinclude", "-o", bin, filepath.Join(dir, "abi.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	strs := map[string]string{}
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if _, ok := abiStrings[w[0]]; ok && len(w) == 2 {
			strs[w[0]] = w[1]
			continue
		}
		key := w[0]
		if w[0] == "sizeof" {
			key = "sizeof " + w[1]
			w = w[1:]
		}
		for _, s := range w[1:] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			got[key] = append(got[key], v)
		}
	}
	for _, s := range abiStructs {
		if have, want := uint64(s.goType.Size()), got["sizeof "+s.c]; len(want) != 1 || have != want[0] {
			t.Errorf("sizeof %s: Go %d, C %v", s.c, have, want)
		}
		for i, f := range s.fields {
			gf := s.goType.Field(i)
			if gf.Name != f[1] {
				t.Errorf("%s field %d: Go name %s, table says %s", s.goType.Name(), i, gf.Name, f[1])
				continue
			}
			want := got[s.c+"."+f[0]]
			if len(want) != 2 || uint64(gf.Offset) != want[0] || uint64(gf.Type.Size()) != want[1] {
				t.Errorf("%s.%s: Go offset %d size %d, C offset/size %v", s.c, f[0], gf.Offset, gf.Type.Size(), want)
			}
		}
	}
	for name, v := range abiConsts {
		if want := got[name]; len(want) != 1 || want[0] != v {
			t.Errorf("%s: Go %#x, C %v", name, v, want)
		}
	}
	for name, v := range abiStrings {
		if want := strs[name]; want != v {
			t.Errorf("%s: Go %q, C %q", name, v, want)
		}
	}
}

func TestParseHeaderErrors(t *testing.T) {
	good := Blob()
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	tests := []struct {
		name    string
		in      []byte
		wantOff int64
	}{
		{"short", good[:10], 10},
		{"magic", mut(func(b []byte) { b[0] ^= 1 }), BlobOffMagic},
		{"version", mut(func(b []byte) { b[BlobOffVersion] = 99 }), BlobOffVersion},
		{"size", good[:len(good)-1], BlobOffSize},
		{"probe outside", mut(func(b []byte) { b[BlobOffProbe+3] = 0x7f }), BlobOffProbe},
		{"exec inside header", mut(func(b []byte) { copy(b[BlobOffEntryExec:], []byte{4, 0, 0, 0}) }), BlobOffEntryExec},
	}
	for _, tt := range tests {
		_, err := ParseHeader(tt.in)
		var he *HeaderError
		if !errors.As(err, &he) {
			t.Errorf("%s: have error %v, want a *HeaderError", tt.name, err)
			continue
		}
		if he.Off != tt.wantOff {
			t.Errorf("%s: have offset %d, want %d (%v)", tt.name, he.Off, tt.wantOff, err)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(Blob()[:BlobHeaderSize])
	f.Add(Blob())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err == nil && (h.Magic != BlobMagic || int(h.Size) != len(b)) {
			t.Fatalf("accepted a bad header: %+v", h)
		}
	})
}

func needGCC(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: ", err)
	}
	return gcc
}
