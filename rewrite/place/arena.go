package place

// arena holds the current bytes and byte states of the instructions the
// planner changed, in fixed chunks that never move, so that a slice into
// it (Write.Bytes) stays the instruction's live bytes. A per-instruction
// slice pair cost 48 bytes for each of cc1plus's 5 million instructions
// (246 MB), most never changed; an offset costs 4.
type arena struct {
	cur  [][]byte
	st   [][]uint8
	used int // bytes used in the last chunk
}

const arenaChunk = 1 << 16

// alloc copies orig (at most 15 bytes) into the arena with every state
// bOrig and returns where.
func (a *arena) alloc(orig []byte) int32 {
	if len(a.cur) == 0 || a.used+len(orig) > arenaChunk {
		a.cur = append(a.cur, make([]byte, arenaChunk))
		a.st = append(a.st, make([]uint8, arenaChunk))
		a.used = 0
	}
	k := len(a.cur) - 1
	copy(a.cur[k][a.used:], orig)
	at := int32(k*arenaChunk + a.used)
	a.used += len(orig)
	return at
}

// at returns the n bytes and states at where.
func (a *arena) at(where int32, n int) ([]byte, []uint8) {
	k, off := int(where)/arenaChunk, int(where)%arenaChunk
	return a.cur[k][off : off+n : off+n], a.st[k][off : off+n : off+n]
}
