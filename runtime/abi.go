package runtime

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"unsafe"
)

// This file mirrors include/stint_abi.h. abi_test.go pins every size and
// offset here and compares them with what gcc computes from the header, so
// the two cannot drift apart silently.

// ABIVersion is STINT_ABI_VERSION.
const ABIVersion = 25

// Magic numbers (little-endian ASCII).
const (
	BlobMagic   uint64 = 0x315452544e495453 // "STINTRT1"
	ModuleMagic uint64 = 0x444f4d544e495453 // "STINTMOD"
)

// A compact trace's thread block (STINT_PATHS_*): the words the
// trampolines' inline appends read through %gs, when the pending word is
// full, and a jcc probe call's "flush only" value.
const (
	PathsKeyOff   = 0
	PathsTNTOff   = 8
	PathsTopOff   = 16
	PathsStackOff = 24
	PathsTailOff  = 2072
	PathsKeyTIP   = 3
	PathsCurOff   = 2080
	PathsEndOff   = 2088
	PathsPSBAtOff = 2096
	PathsLastOff  = 2104
	PathsPSBOff   = 2112
	PathsOutLoOff = 2128
	PathsOutSzOff = 2136
	PathsRoomOff  = 2144
	PathsCurMod   = 2152
	PathsOutside  = 2176
	PathsRoomUnit = 4
	PathsRoomTIP  = 8
	PathsKeyOut   = 8
	PathsPSBEvery = 16384
	PathsTNTFull  = 56
	PathsFlush    = 1
)

// Kind is an event kind: the value of the trace's kind column (STINT_K_*).
type Kind uint8

const (
	KJccTaken    Kind = 1
	KJccNotTaken Kind = 2
	KJmp         Kind = 3
	KCall        Kind = 4
	KRet         Kind = 5
	KIndJmp      Kind = 6
	KIndCall     Kind = 7
	KSyscall     Kind = 8
	KBlock       Kind = 9
	KContext     Kind = 10

	// Probe kinds of a compact complete trace (MFPaths) that are no
	// event: a function entry (%rsi = the return address at entry) and
	// where a call that may leave the instrumented code returns.
	KEntry  Kind = 11
	KResume Kind = 12

	// Rows the runtime writes itself (not probe events).
	KPeriod       Kind = 32 // src = period index, dst = granted ns, value = used ns
	KPeriodStats  Kind = 33 // src = events recorded, dst = suppressed, value = enabled ns
	KPeriodQoS    Kind = 34 // src = metric, dst = threshold (double bits), value = computed ns
	KRunEnd       Kind = 35 // src = exit status or RunEndUnknown, value = run ns
	KPeriodSwitch Kind = 36 // src = sites switched on, dst = switched off, value = switching ns
	KPeriodClose  Kind = 37 // src = how (Close*), dst = reserve ns kept, value = used ns then

	// Rows of a sampled run (rewrite --sample).
	KSampleRun    Kind = 38 // src = method (Sample*), dst = parameter (ppm or N), value = interval ns
	KSampleSet    Kind = 39 // src = stratum, dst = its events in the interval, value = samples written
	KSampleReader Kind = 40 // src = reader busy ns, dst = reader lifetime ns, value = samples dropped
	KBlockCount   Kind = 41 // ABI 14 (MFCounts): src = block, dst = executions since its previous row, value = since the start
)

// SampledBase is STINT_SAMPLED_BASE: a sampled event's kind is
// SampledBase plus the event's kind.
const SampledBase = 96

// Sampling methods (STINT_SAMPLE_*: the sample-run row's src).
const (
	SampleRate      = 1 // each event with probability ppm/1e6
	SampleEvery     = 2 // every Nth event
	SampleReservoir = 3 // a reservoir per function and interval
	SampleResSite   = 4 // a reservoir per probe site and interval
)

// SampleMin is STINT_SAMPLE_MIN: the smallest reservoir.
const SampleMin = 8

// SampleSites is STINT_SAMPLE_SITES: a sample-run row's src flag saying
// that every method's strata are sites (call sites counting down).
const SampleSites = 0x10

// Stripes of threads for entry probes' countdowns (STINT_STRIPES,
// STINT_STRIPE_SHIFT, STINT_STRIPE_SLOT): a thread's stripe is its
// thread pointer shifted right by StripeShift, modulo Stripes; each
// stripe has a slot of StripeSlot bytes per probe.
const (
	Stripes     = 16
	StripeShift = 12
	StripeSlot  = 32
)

// ModOffCDBase is the offset of cd_base in struct stint_module.
const ModOffCDBase = uint64(unsafe.Offsetof(Module{}.CDBase))

// SampleEntries is STINT_SAMPLE_ENTRIES: a sample-run row's src flag
// saying that every method's strata are the called functions (entry
// probes counting down).
const SampleEntries = 0x20

// RefusedBase is STINT_REFUSED_BASE: a refusal row's kind is RefusedBase
// plus the refused event's kind.
const RefusedBase = 64

// RunEndUnknown is STINT_RUN_END_UNKNOWN: the run-end row's src when the
// exit status was not seen.
const RunEndUnknown = 0xffffffff

// How a period's gate closed (STINT_CLOSE_*: the period-close row's src).
const (
	CloseUnknown = 0 // a charge closed it but had not noted how when the period rolled
	CloseCharge  = 1 // a probe's charge spent the budget
	CloseStart   = 2 // at the period's start
	CloseRoll    = 3 // at the period's end
)

// Tool is struct stint_module.tool (STINT_TOOL_*): which instructions
// are probed.
type Tool uint32

const (
	ToolBranch  Tool = 1 // every jmp, jcc, call and ret
	ToolCall    Tool = 2 // every call and ret
	ToolSyscall Tool = 3 // every syscall instruction
	ToolBlock   Tool = 4 // the first instruction of every basic block
)

// String returns the tool's name, as the module's option string and the
// command line spell it.
func (t Tool) String() string {
	switch t {
	case ToolBranch:
		return "branch"
	case ToolCall:
		return "call"
	case ToolSyscall:
		return "syscall"
	case ToolBlock:
		return "block"
	}
	return "tool(" + strconv.Itoa(int(t)) + ")"
}

// ParseTool parses a tool name.
func ParseTool(s string) (Tool, bool) {
	for _, t := range []Tool{ToolBranch, ToolCall, ToolSyscall, ToolBlock} {
		if t.String() == s {
			return t, true
		}
	}
	return 0, false
}

// Module flags (STINT_MF_*).
const (
	MFEvery   uint32 = 0x1
	MFShared  uint32 = 0x2
	MFExec    uint32 = 0x4
	MFStatic  uint32 = 0x8
	MFContext uint32 = 0x10
	MFPark    uint32 = 0x20
	MFRets    uint32 = 0x40
	MFCold    uint32 = 0x80
	MFLogged  uint32 = 0x100  // ABI 10: LogSum, LogCount and the logged list describe the --skip-covered log
	MFPaths   uint32 = 0x200  // ABI 13: with MFEvery, a compact complete trace (formats/packets.go)
	MFCalls   uint32 = 0x1000 // ABI 15: with MFPaths, a call chain: calls and rets append their own addresses
	MFCounts  uint32 = 0x800  // ABI 14: tool block's trampolines count into CountsVaddr; the runtime writes KBlockCount rows
	// MFCountdown: a sampled call tool; each call probe's trampoline
	// counts its probe's Cache2 down and calls the runtime only at 0.
	MFCountdown uint32 = 0x400
	// MFEntries (ABI 20): with MFCountdown, calls are probed at the
	// functions they enter (PFEntry probes), not at their call sites.
	MFEntries uint32 = 0x2000
	// MFStripes (ABI 20): with MFEntries, an entry probe counts down in
	// its slot of the calling thread's stripe (Module.CDBase).
	MFStripes uint32 = 0x4000
	// MFRetired: rewritten with --retire-since and some site retired; the
	// runtime makes no private copies of the tables, code and trampolines
	// at start.
	MFRetired uint32 = 0x8000
)

// Probe flags (STINT_PF_*).
const (
	PFDirect uint8 = 0x1
	PFValue  uint8 = 0x2
	PFSlot   uint8 = 0x4
	PFDeleg  uint8 = 0x8
	// PFPredict (compact traces): an indirect jmp whose destination is
	// most likely Dst appends a bit when it goes there (STINT_PF_PREDICT).
	PFPredict uint8 = 0x10
	// PFNoPush (call chains): a call that pushes nothing on the call
	// stack (STINT_PF_NOPUSH).
	PFNoPush uint8 = 0x20
	// PFEntry (ABI 20): a probe at the start of function Dst whose event
	// is the call that entered it (%rsi: the return address).
	PFEntry uint8 = 0x40
	// PFFinal (ABI 25): with PFSlot, only a hook changes the slot once
	// bound (PT_GNU_RELRO, or a lazily bound PLT slot whose Rets is 1 +
	// its value in the file), so a bound value, once recorded, retires
	// the site (STINT_PF_FINAL).
	PFFinal uint8 = 0x80
)

// ProbeWatched is STINT_PROBE_WATCHED: the initial state of a
// STINT_PF_DELEG probe.
const ProbeWatched uint8 = 2

// PatchRestorable is STINT_PATCH_RESTORABLE.
const PatchRestorable uint8 = 0x1

// PatchAtStart is STINT_PATCH_AT_START.
const PatchAtStart uint8 = 0x2

// PatchSwitch is STINT_PATCH_SWITCH: the off-switch may undo and redo the
// patch at any time; its trampoline reads gate word 1.
const PatchSwitch uint8 = 0x4

// PatchSync is STINT_PATCH_SYNC: with PatchSwitch, the patch straddles a
// word and is switched with the jmp-to-self + membarrier sequence.
const PatchSync uint8 = 0x8

// PatchRead is STINT_PATCH_READ: with PatchSwitch, other patches' puns
// read the patch's bytes (Module.ReadsVaddr lists them); it is switched
// off after its readers and on before them.
const PatchRead uint8 = 0x10

// PatchReader is STINT_PATCH_READER: the patch's pun reads bytes of
// PatchRead patches.
const PatchReader uint8 = 0x20

// PatchCold is STINT_PATCH_COLD: with PatchSwitch, every probe of the
// patch is an open-ended one of a site the --skip-covered log saw; the
// runtime starts it switched off and switches it on only for new code.
const PatchCold uint8 = 0x40

// PatchHalved is STINT_PATCH_HALVED, set by the runtime: the site runs
// its original bytes but for its jcc's rel32, which goes to the taken
// probe's thunk until that outcome too is recorded.
const PatchHalved uint8 = 0x80

// ReadStructSize is sizeof(struct stint_read).
const ReadStructSize = 8

// Gate words (the gate page): word 0 at offset 0, word 1 at GateWord1.
const (
	GateOpen   = 0
	GateClosed = 1
	GateSwitch = 2
	GateWord1  = 8
)

// ChunkReserved is STINT_CHUNK_RESERVED.
const ChunkReserved uint32 = 0x1

// TestFailChunkEnv is STINT_TEST_FAIL_CHUNK_ENV: a test hook. With
// STINT_TEST_FAIL_CHUNK=N in its environment the runtime treats chunk N
// of every module as unmappable and restores the chunk's dependent
// patches, as it does when a real mapping fails.
const TestFailChunkEnv = "STINT_TEST_FAIL_CHUNK"

// TestMaxMapCountEnv is STINT_TEST_MAX_MAP_COUNT_ENV: a test hook. With
// STINT_TEST_MAX_MAP_COUNT=N the runtime takes N for vm.max_map_count
// when it decides how many trampoline chunks it may map.
const TestMaxMapCountEnv = "STINT_TEST_MAX_MAP_COUNT"

// TestNoMemfdEnv is STINT_TEST_NO_MEMFD_ENV: a test hook. With
// STINT_TEST_NO_MEMFD=1 the runtime maps chunks as anonymous copies, as it
// does where memfd_create is unavailable and the file has no stub area.
const TestNoMemfdEnv = "STINT_TEST_NO_MEMFD"

// TestNoStubFileEnv is STINT_TEST_NO_STUB_FILE_ENV: a test hook. With
// STINT_TEST_NO_STUB_FILE=1 the runtime builds the stub area in a memfd
// instead of mapping it from the module's file (ABI 7).
const TestNoStubFileEnv = "STINT_TEST_NO_STUB_FILE"

// TestNoProcmapEnv is STINT_TEST_NO_PROCMAP_ENV: a test hook. With
// STINT_TEST_NO_PROCMAP=1 the runtime finds the module of a destination
// outside every known one by reading /proc/self/maps, as on kernels
// without PROCMAP_QUERY; with =2 by the query alone.
const TestNoProcmapEnv = "STINT_TEST_NO_PROCMAP"

// TestLogLoadEnv is STINT_TEST_LOG_LOAD_ENV: a test hook. With
// STINT_TEST_LOG_LOAD=1 the runtime says on stderr, for each module it
// applies the redundancy log to, whether it took the rewriter's list of
// logged probes (MFLogged) or looked up every probe; with =2 it looks up
// every probe whatever the log holds (and says so).
const TestLogLoadEnv = "STINT_TEST_LOG_LOAD"

// TestSampleSeedEnv is STINT_TEST_SAMPLE_SEED_ENV: a test hook. With
// STINT_TEST_SAMPLE_SEED=S the sampler's draws are seeded from S.
const TestSampleSeedEnv = "STINT_TEST_SAMPLE_SEED"

// TestSampleSlotsEnv is STINT_TEST_SAMPLE_SLOTS_ENV: a test hook. With
// STINT_TEST_SAMPLE_SLOTS=N each half of the sampler's arena holds N
// samples (1024 at least), so that a short run fills one.
const TestSampleSlotsEnv = "STINT_TEST_SAMPLE_SLOTS"

// TestSaveHoldEnv is STINT_TEST_SAVE_HOLD_ENV: a test hook. With
// STINT_TEST_SAVE_HOLD=PATH the runtime's thread creates PATH each time it
// saves the redundancy log and holds the log's lock for 300 ms before it
// writes.
const TestSaveHoldEnv = "STINT_TEST_SAVE_HOLD"

// TestChargeStallEnv is STINT_TEST_CHARGE_STALL_ENV: a test hook. With
// STINT_TEST_CHARGE_STALL=DURATION the first probe call whose charge
// spends a period's budget sleeps that long before it closes the gate;
// with "note:DURATION" the first one to close a gate after period 0
// sleeps between closing it and noting how it closed.
const TestChargeStallEnv = "STINT_TEST_CHARGE_STALL"

// TestReadeeStallEnv is STINT_TEST_READEE_STALL_ENV: a test hook. With
// STINT_TEST_READEE_STALL=DURATION the runtime's thread waits that long,
// in each pass that switches readees off, between finding a readee's
// readers off and taking the readee.
const TestReadeeStallEnv = "STINT_TEST_READEE_STALL"

// TestSwitchStallEnv is STINT_TEST_SWITCH_STALL_ENV: a test hook. With
// STINT_TEST_SWITCH_STALL=DURATION the runtime's thread waits that long
// after each site it switches on at a period's start.
const TestSwitchStallEnv = "STINT_TEST_SWITCH_STALL"

// TestBatchStallEnv is STINT_TEST_BATCH_STALL_ENV: a test hook. With
// STINT_TEST_BATCH_STALL=DURATION the first batch of fewer than 16 sites
// from the fourth period on spins that long of its thread's CPU time,
// once.
const TestBatchStallEnv = "STINT_TEST_BATCH_STALL"

// TestRollKillEnv is STINT_TEST_ROLL_KILL_ENV: a test hook. With
// STINT_TEST_ROLL_KILL=K (1-4) the first thread to fill a compact trace's
// chunk kills its process at step K of copying the chunk out.
const TestRollKillEnv = "STINT_TEST_ROLL_KILL"

// NoPatch is STINT_NO_PATCH.
const NoPatch uint32 = 0xffffffff

// DstModuleNone is the dst_module the runtime records for a destination in
// anonymous memory (dst is then absolute) and for syscall events.
const DstModuleNone = 0xffff

// Byte offsets of the blob header fields (STINT_BLOB_OFF_*).
const (
	BlobOffMagic       = 0
	BlobOffVersion     = 8
	BlobOffSize        = 12
	BlobOffEntryExec   = 16
	BlobOffEntryInit   = 20
	BlobOffEntryFini   = 24
	BlobOffProbe       = 28
	BlobOffModuleRel   = 32
	BlobHeaderSize     = 40
	ModuleStructSize   = 528
	ProbeStructSize    = 64
	PatchStructSize    = 32
	ChunkStructSize    = 40
	StubStructSize     = 16
	StubFileStructSize = 32
	ModuleOptionsSize  = 136 // STINT_OPTIONS_SIZE
)

// BlobHeader is struct stint_blob_header.
type BlobHeader struct {
	Magic      uint64
	ABIVersion uint32
	Size       uint32
	EntryExec  uint32 // offsets from the start of the blob
	EntryInit  uint32
	EntryFini  uint32
	Probe      uint32
	ModuleRel  int64 // written by the rewriter into its copy
}

// Module is struct stint_module.
type Module struct {
	Magic          uint64
	ABIVersion     uint32
	Flags          uint32
	Tool           uint32
	NProbes        uint32
	SelfVaddr      uint64
	ImageEnd       uint64
	ProbesVaddr    uint64
	PatchesVaddr   uint64
	ChunksVaddr    uint64
	NPatches       uint32
	NChunks        uint32
	TextLo         uint64
	TextHi         uint64
	TrampLo        uint64
	TrampHi        uint64
	OrigEntry      uint64
	OrigFini       uint64
	BuildID        [32]byte
	BuildIDLen     uint32
	ModuleID       uint32 // runtime
	Base           uint64 // runtime
	RuntimeState   uint64 // runtime
	StubsVaddr     uint64 // Stub[NStubs], sorted by Off
	DepsVaddr      uint64 // uint32[NDeps]: patch indices, sliced by the chunks
	StubAreaSize   uint64 // bytes of the stub area (a multiple of 4096)
	NStubs         uint32
	NDeps          uint32
	Options        [ModuleOptionsSize]byte
	TraceEndsVaddr uint64 // uint32[NTraceEnds]: ends of unconditional transfers minus TextLo, sorted
	NTraceEnds     uint32
	Hit            uint32 // runtime: the hit table answers its probes' calls (0 in the file)
	GateVaddr      uint64 // the gate page: 4096 bytes; the first 8 are the gate word (0 = probes call the runtime)
	ReadsVaddr     uint64 // [2*NReads]Read: (reader, read) pairs sorted by reader, then by read (ABI 6)
	NReads         uint32
	PadRd          uint32
	RetsVaddr      uint64 // uint32[NRets] (MFRets): lists of ret probes, each a count and that many probe indices
	NRets          uint32
	PadRt          uint32
	StubFileOff    uint64 // ABI 7: file offset of the StubFile header and the stub area after it; 0 = none
	StubFileTag    uint64 // ABI 7: = StubFile.Tag
	LogSum         uint64 // ABI 10 (MFLogged): sum of the hashes of the module's distinct entries in the rewriter's log
	LogCount       uint32 // how many distinct entries of the module that log has
	NLogged        uint32
	LoggedVaddr    uint64 // uint32[NLogged]: the direct probes (not PFDeleg) whose outcome is in that log
	CountsVaddr    uint64 // ABI 14 (MFCounts): uint64[NProbes], zero in the file: each block probe's executions
	CDBase         uint64 // ABI 20 (MFStripes): runtime: the entry probes' countdowns per stripe of threads
	TrapsVaddr     uint64 // ABI 21: [NTraps]Trap sorted by Site: the int3 sites (place.TacticTrap)
	NTraps         uint32
	FiniProbe      uint32   // ABI 22: 1 + the probe of .fini's one site, which the finaliser records itself; 0 = none
	LogEnd         uint64   // ABI 23 (MFLogged): the length of the log the rewrite read whole; 0 = none
	LogLast        uint64   // the offset of its last block
	LogLastHead    [16]byte // that block's first 16 bytes
	SeenVaddr      uint64   // [2 * NSeen]uint64: the log's keys of the module's open-ended outcomes, sorted
	NSeen          uint32
	NCold          uint32 // ABI 24
	ColdVaddr      uint64 // [NCold]uint32: the open-ended probes of PatchCold patches
}

// Trap is struct stint_trap (ABI 21): an int3 site and its trampoline,
// module-relative. The runtime's SIGTRAP handler resumes a thread that
// trapped at Site at Tramp.
type Trap struct {
	Site  uint64
	Tramp uint64
	Patch uint32 // the site's patch index
	Hits  uint32 // runtime: traps taken (zero in the file)
}

// TrapStructSize is sizeof(struct stint_trap).
const TrapStructSize = 24

// StubFile is struct stint_stub_file (ABI 7): the header page of the
// stub area the rewriter stores in the module's own file, so the runtime
// maps the chunks from it instead of writing the area at every start.
type StubFile struct {
	Magic    uint64
	Tag      uint64
	AreaSize uint64
	NStubs   uint64
}

// StubFileMagic is STINT_STUB_FILE_MAGIC.
const StubFileMagic uint64 = 0x425453544e495453

// Read is struct stint_read: patch Reader's pun reads bytes patch Read
// modified.
type Read struct {
	Reader uint32
	Read   uint32
}

// Probe is struct stint_probe.
type Probe struct {
	Src        uint64
	Dst        uint64
	Arm        uint64
	ArmTo      uint64
	ModuleBack uint32
	Patch      uint32
	Kind       uint8
	Flags      uint8
	State      uint8   // runtime
	Pad0       [1]byte // runtime
	Rets       uint32  // direct calls (MFRets): 1 + word offset of the callee's ret list (bits 0-27), call length (28-31)
	Cache      uint64  // runtime; a direct probe of a switchable patch: its thunk (module-relative, the rewriter's, ABI 8)
	Cache2     uint64  // runtime
}

// Patch is struct stint_patch.
type Patch struct {
	Addr      uint64
	Len       uint8
	Flags     uint8
	NProbes   uint16
	Remaining uint32 // runtime (the rewriter writes NProbes)
	Orig      [16]byte
}

// Chunk is struct stint_chunk: a range of stub space mapped from the
// stub area at SrcOff. If it cannot be mapped, the runtime restores the
// patches Deps[DepsOff : DepsOff+NDeps].
type Chunk struct {
	Vaddr   uint64
	Size    uint64
	SrcOff  uint64
	Flags   uint32
	NDeps   uint32
	DepsOff uint32
	Pad     uint32
}

// Stub is struct stint_stub: a jmp rel32 (Code[:5]) at offset Off of the
// stub area.
type Stub struct {
	Off  uint64
	Code [8]byte
}

// HeaderError reports a malformed blob header.
type HeaderError struct {
	Off int64 // byte offset in the blob of the offending field
	Msg string
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("runtime blob header at offset %d: %s", e.Off, e.Msg)
}

// ParseHeader decodes and checks the header at the start of a runtime
// blob: magic, ABI version, size and that every entry offset lies inside.
func ParseHeader(b []byte) (BlobHeader, error) {
	var h BlobHeader
	if len(b) < BlobHeaderSize {
		return h, &HeaderError{Off: int64(len(b)), Msg: fmt.Sprintf("blob is %d bytes, shorter than the header", len(b))}
	}
	le := binary.LittleEndian
	h = BlobHeader{
		Magic:      le.Uint64(b[BlobOffMagic:]),
		ABIVersion: le.Uint32(b[BlobOffVersion:]),
		Size:       le.Uint32(b[BlobOffSize:]),
		EntryExec:  le.Uint32(b[BlobOffEntryExec:]),
		EntryInit:  le.Uint32(b[BlobOffEntryInit:]),
		EntryFini:  le.Uint32(b[BlobOffEntryFini:]),
		Probe:      le.Uint32(b[BlobOffProbe:]),
		ModuleRel:  int64(le.Uint64(b[BlobOffModuleRel:])),
	}
	if h.Magic != BlobMagic {
		return h, &HeaderError{Off: BlobOffMagic, Msg: fmt.Sprintf("bad magic %#x", h.Magic)}
	}
	if h.ABIVersion != ABIVersion {
		return h, &HeaderError{Off: BlobOffVersion, Msg: fmt.Sprintf("ABI version %d, want %d", h.ABIVersion, ABIVersion)}
	}
	if int64(h.Size) != int64(len(b)) {
		return h, &HeaderError{Off: BlobOffSize, Msg: fmt.Sprintf("size field %d, blob is %d bytes", h.Size, len(b))}
	}
	for _, f := range []struct {
		off int64
		v   uint32
	}{{BlobOffEntryExec, h.EntryExec}, {BlobOffEntryInit, h.EntryInit}, {BlobOffEntryFini, h.EntryFini}, {BlobOffProbe, h.Probe}} {
		if f.v < BlobHeaderSize || f.v >= h.Size {
			return h, &HeaderError{Off: f.off, Msg: fmt.Sprintf("entry offset %#x outside the blob code [%#x, %#x)", f.v, BlobHeaderSize, h.Size)}
		}
	}
	return h, nil
}

// SetModuleRel writes module_rel into a copy of the blob, as the rewriter
// must: the link vaddr of struct stint_module minus the blob's link vaddr.
func SetModuleRel(blob []byte, rel int64) error {
	if len(blob) < BlobHeaderSize {
		return &HeaderError{Off: int64(len(blob)), Msg: "blob shorter than the header"}
	}
	binary.LittleEndian.PutUint64(blob[BlobOffModuleRel:], uint64(rel))
	return nil
}

// The QoS page (struct stint_qos_page, STINT_QOS_*): a metric analyzer
// (package qos) creates a QoSPageSize-byte file and passes its path to
// the traced program in QoSEnv; the runtime maps it read-only and
// computes each period's budget from the latest fresh sample (QDIME's
// Equation 1). Samples are published as a seqlock on Seq. stint_abi.h
// has the full contract.
const (
	QoSMagic    uint64 = 0x534f51544e495453 // "STINTQOS"
	QoSVersion  uint32 = 1
	QoSPageSize        = 4096
	QoSEnv             = "STINT_QOS"

	QoSLowerIsBetter uint32 = 0x1 // flags: the threshold is a ceiling (latency)

	QoSTuneSum   uint32 = 0 // tuning: (v-T)/(v+T)*P, the paper's
	QoSTuneSpan  uint32 = 1 // tuning: (v-T)/(M-T)*P
	QoSTuneValue uint32 = 2 // tuning: (v-T)/v*P; lower is better: (T-v)/T*P

	QoSStarting uint32 = 0 // state: no sample yet
	QoSRunning  uint32 = 1 // state: Value is the latest sample
	QoSFailing  uint32 = 2 // state: the source stopped answering
	QoSStopped  uint32 = 3 // state: the analyzer exited

	QoSPageStructSize = 216
)

// QoSPage is struct stint_qos_page. Doubles are stored as their IEEE-754
// bits (math.Float64bits).
type QoSPage struct {
	Magic        uint64
	Version      uint32
	Flags        uint32
	Tuning       uint32
	State        uint32
	Seq          uint64
	Threshold    uint64
	Max          uint64
	Value        uint64
	SampleMonoNS uint64
	IntervalNS   uint64
	Samples      uint64
	AnalyzerPID  uint32
	Pad          uint32
	Source       [128]byte
}
