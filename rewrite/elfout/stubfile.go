package elfout

import (
	"hash/fnv"
	"unsafe"

	"github.com/stint-project/stint/rewrite/elfin"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// appendStubFile appends the stub area, as the runtime would build it
// from the stub list, behind a header page (struct stint_stub_file) at a
// page-aligned offset past everything else, and points the module struct
// (at file offset modOff) at it. The runtime then maps the chunks from the
// file: no stub area to write at every start, and its pages are shared
// through the page cache by every run. Pages without stubs stay zero
// (holes on disk, see writeSparse). A file whose stub file is gone
// (stripped) or does not match the module's tag still runs: the runtime
// builds the area from the stub list as before.
func appendStubFile(out []byte, modOff, area uint64, stubs []runtime.Stub) []byte {
	if len(stubs) == 0 || area == 0 {
		return out
	}
	h := fnv.New64a()
	var w [16]byte
	elfin.LE.PutUint64(w[:], area)
	h.Write(w[:8])
	for _, so := range stubs {
		elfin.LE.PutUint64(w[:], so.Off)
		copy(w[8:], so.Code[:place.StubLen])
		h.Write(w[:8+place.StubLen])
	}
	tag := h.Sum64() | 1 // never 0
	at := AlignUp(uint64(len(out)), PageSize)
	if end := at + PageSize + area; end <= uint64(cap(out)) {
		out = out[:end] // zero: capacity Write reserved and left unwritten
	} else {
		out = append(out, make([]byte, end-uint64(len(out)))...)
	}
	hdr := runtime.StubFile{Magic: runtime.StubFileMagic, Tag: tag, AreaSize: area, NStubs: uint64(len(stubs))}
	hdr.Put(out[at:])
	a := out[at+PageSize:]
	filled := map[uint64]bool{}
	for _, so := range stubs {
		for pg := so.Off / PageSize; pg <= (so.Off+place.StubLen-1)/PageSize; pg++ {
			if !filled[pg] {
				filled[pg] = true
				FillInt3(a[pg*PageSize : (pg+1)*PageSize])
			}
		}
		copy(a[so.Off:], so.Code[:place.StubLen])
	}
	var m runtime.Module
	elfin.LE.PutUint64(out[modOff+uint64(unsafe.Offsetof(m.StubFileOff)):], at)
	elfin.LE.PutUint64(out[modOff+uint64(unsafe.Offsetof(m.StubFileTag)):], tag)
	return out
}
