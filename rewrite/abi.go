package rewrite

// Local mirror of runtime/include/stint_abi.h (the parts the rewriter
// writes). TODO: switch to package runtime's Go mirror once it lands.

const (
	abiVersion  = 1
	blobMagic   = 0x315452544e495453 // "STINTRT1"
	moduleMagic = 0x444f4d544e495453 // "STINTMOD"

	blobOffMagic      = 0
	blobOffVersion    = 8
	blobOffSize       = 12
	blobOffEntryExec  = 16
	blobOffEntryInit  = 20
	blobOffEntryFini  = 24
	blobOffProbe      = 28
	blobOffModuleRel  = 32
	blobHeaderSize    = 40
	moduleSize        = 368
	probeSize         = 64
	patchSize         = 32
	chunkSize         = 32
	moduleOptionsSize = 192

	mfEvery  = 0x1
	mfShared = 0x2
	mfExec   = 0x4
	mfStatic = 0x8

	patchRestorable = 0x1
	chunkReserved   = 0x1
	noPatch         = 0xffffffff
)

// blobInfo is a validated runtime blob header.
type blobInfo struct {
	data                            []byte
	entryExec, entryInit, entryFini uint32
	probe                           uint32
}

func parseBlob(b []byte) (*blobInfo, error) {
	if len(b) < blobHeaderSize || le.Uint64(b[blobOffMagic:]) != blobMagic {
		return nil, errBlob("bad magic")
	}
	if v := le.Uint32(b[blobOffVersion:]); v != abiVersion {
		return nil, errBlob("ABI version " + itoa64(uint64(v)) + ", want " + itoa64(abiVersion))
	}
	size := le.Uint32(b[blobOffSize:])
	if uint64(size) > uint64(len(b)) || size < blobHeaderSize {
		return nil, errBlob("size field " + itoa64(uint64(size)) + " for " + itoa64(uint64(len(b))) + " bytes")
	}
	bi := &blobInfo{
		data:      b[:size],
		entryExec: le.Uint32(b[blobOffEntryExec:]),
		entryInit: le.Uint32(b[blobOffEntryInit:]),
		entryFini: le.Uint32(b[blobOffEntryFini:]),
		probe:     le.Uint32(b[blobOffProbe:]),
	}
	for _, o := range []uint32{bi.entryExec, bi.entryInit, bi.entryFini, bi.probe} {
		if o < blobHeaderSize || o >= size {
			return nil, errBlob("entry offset out of range")
		}
	}
	return bi, nil
}

type blobError string

func (e blobError) Error() string { return "runtime blob: " + string(e) }
func (e blobError) Unwrap() error { return ErrNoBlob }

func errBlob(s string) error { return blobError(s) }

func itoa64(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}
