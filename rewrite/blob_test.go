package rewrite

import (
	"encoding/binary"
	"unsafe"

	"github.com/stint-project/stint/runtime"
)

// testBlob is a stand-in for the runtime blob (until package runtime
// provides one): its entry stubs jump straight to the original entry
// points found through struct stint_module, and its probe entry returns
// at once. It exercises the container and the trampolines without any
// recording.
func testBlob() []byte {
	var m runtime.Module
	self := byte(unsafe.Offsetof(m.SelfVaddr))
	b := make([]byte, runtime.BlobHeaderSize)
	binary.LittleEndian.PutUint64(b[runtime.BlobOffMagic:], runtime.BlobMagic)
	binary.LittleEndian.PutUint32(b[runtime.BlobOffVersion:], runtime.ABIVersion)
	// tail emits: r11 = &module; r10 = base + module.<field>; jmp *%r10
	// (or ret if the field is 0 and mayBeZero).
	tail := func(field byte, mayBeZero bool) uint32 {
		at := uint32(len(b))
		rel := -int32(at + 7)
		b = append(b, 0x4c, 0x8d, 0x1d) // lea blob(%rip),%r11
		b = binary.LittleEndian.AppendUint32(b, uint32(rel))
		b = append(b, 0x4d, 0x03, 0x5b, runtime.BlobOffModuleRel) // add module_rel(%r11),%r11
		b = append(b, 0x4d, 0x8b, 0x53, field)                    // mov field(%r11),%r10
		if mayBeZero {
			b = append(b, 0x4d, 0x85, 0xd2) // test %r10,%r10
			b = append(b, 0x74, 10)         // jz ret (skips 3+4+3 bytes)
		}
		b = append(b, 0x4d, 0x01, 0xda)       // add %r11,%r10
		b = append(b, 0x4d, 0x2b, 0x53, self) // sub self_vaddr(%r11),%r10
		b = append(b, 0x41, 0xff, 0xe2)       // jmp *%r10
		if mayBeZero {
			b = append(b, 0xc3)
		}
		return at
	}
	exec := tail(byte(unsafe.Offsetof(m.OrigEntry)), false)
	init := tail(byte(unsafe.Offsetof(m.OrigEntry)), true)
	fini := tail(byte(unsafe.Offsetof(m.OrigFini)), true)
	probe := uint32(len(b))
	b = append(b, 0xc3)
	binary.LittleEndian.PutUint32(b[runtime.BlobOffEntryExec:], exec)
	binary.LittleEndian.PutUint32(b[runtime.BlobOffEntryInit:], init)
	binary.LittleEndian.PutUint32(b[runtime.BlobOffEntryFini:], fini)
	binary.LittleEndian.PutUint32(b[runtime.BlobOffProbe:], probe)
	binary.LittleEndian.PutUint32(b[runtime.BlobOffSize:], uint32(len(b)))
	return b
}
