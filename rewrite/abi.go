package rewrite

import (
	"fmt"
	"unsafe"

	"github.com/stint-project/stint/runtime"
)

// Short names for the parts of the ABI (runtime/include/stint_abi.h,
// mirrored by package runtime) that the rewriter writes.
const (
	abiVersion  = runtime.ABIVersion
	blobMagic   = runtime.BlobMagic
	moduleMagic = runtime.ModuleMagic

	blobOffMagic      = runtime.BlobOffMagic
	blobOffVersion    = runtime.BlobOffVersion
	blobOffSize       = runtime.BlobOffSize
	blobOffEntryExec  = runtime.BlobOffEntryExec
	blobOffEntryInit  = runtime.BlobOffEntryInit
	blobOffEntryFini  = runtime.BlobOffEntryFini
	blobOffProbe      = runtime.BlobOffProbe
	blobOffModuleRel  = runtime.BlobOffModuleRel
	blobHeaderSize    = runtime.BlobHeaderSize
	moduleSize        = runtime.ModuleStructSize
	probeSize         = runtime.ProbeStructSize
	patchSize         = runtime.PatchStructSize
	chunkSize         = runtime.ChunkStructSize
	stubSize          = runtime.StubStructSize
	moduleOptionsSize = runtime.ModuleOptionsSize
	moduleOptionsOff  = 208 // offsetof(struct stint_module, options)
	moduleGateOff     = 360 // offsetof(struct stint_module, gate_vaddr)
	moduleTraceEndOff = 344 // offsetof(struct stint_module, trace_ends_vaddr)
	gateSize          = 4096

	mfEvery   = runtime.MFEvery
	mfShared  = runtime.MFShared
	mfExec    = runtime.MFExec
	mfStatic  = runtime.MFStatic
	mfContext = runtime.MFContext
	mfPark    = runtime.MFPark
	mfRets    = runtime.MFRets
	mfCold    = runtime.MFCold
	mfLogged  = runtime.MFLogged

	pfDeleg      = runtime.PFDeleg
	probeWatched = runtime.ProbeWatched

	patchRestorable = runtime.PatchRestorable
	patchAtStart    = runtime.PatchAtStart
	patchSwitch     = runtime.PatchSwitch
	patchSync       = runtime.PatchSync
	patchRead       = runtime.PatchRead
	patchReader     = runtime.PatchReader
	patchCold       = runtime.PatchCold
	readSize        = runtime.ReadStructSize
	moduleReadsOff  = 368 // offsetof(struct stint_module, reads_vaddr)
	moduleRetsOff   = 384 // offsetof(struct stint_module, rets_vaddr)
	moduleStubFile  = 400 // offsetof(struct stint_module, stub_file_off), then stub_file_tag
	stubFileMagic   = runtime.StubFileMagic
	gateWord1       = runtime.GateWord1
	chunkReserved   = runtime.ChunkReserved
	noPatch         = runtime.NoPatch
)

// moduleLogOff is offsetof(struct stint_module, log_sum), followed by
// log_count, nlogged and logged_vaddr (ABI 10).
const moduleLogOff = unsafe.Offsetof(runtime.Module{}.LogSum)

// blobInfo is a validated runtime blob.
type blobInfo struct {
	data                            []byte
	entryExec, entryInit, entryFini uint32
	probe                           uint32
}

func parseBlob(b []byte) (*blobInfo, error) {
	h, err := runtime.ParseHeader(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBlob, err)
	}
	return &blobInfo{data: b, entryExec: h.EntryExec, entryInit: h.EntryInit, entryFini: h.EntryFini, probe: h.Probe}, nil
}
