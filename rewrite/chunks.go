package rewrite

import (
	"fmt"
	"slices"
	"sort"

	"github.com/stint-project/stint/rewrite/elfout"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/tramp"
	"github.com/stint-project/stint/runtime"
)

type chunkOut struct {
	r     place.Range
	src   uint64 // offset in the stub area
	flags uint32
	deps  []uint32 // patches to restore if the chunk cannot be mapped
}

// chunkTables builds the chunk table (with each chunk's dependent
// patches), the stub list sorted by offset in the stub area, and the
// total number of dependency entries.
//
// A chunk's dependencies are the patches whose stubs it holds and,
// transitively, every patch whose pun reads bytes that a dependency
// modified (Planner.Reads): once those bytes are restored the reader's
// jump would land elsewhere, so it must be restored too.
func chunkTables(p *place.Planner, layout *place.Layout, fr *elfout.Frame, shared bool, near func(int) uint64, patchIdx []int32) ([]chunkOut, []runtime.Stub, int, error) {
	chunks := make([]chunkOut, len(layout.Chunks))
	for k, c := range layout.Chunks {
		chunks[k] = chunkOut{r: c.Range, src: c.Src}
		if shared && fr.HasReserve && int64(c.Lo) >= int64(fr.StubLo) && c.Hi <= fr.Reserve {
			chunks[k].flags |= runtime.ChunkReserved
		}
		if c.Src%elfout.PageSize != 0 || c.Src+(c.Hi-c.Lo) > layout.SrcSize {
			return nil, nil, 0, fmt.Errorf("chunk %#x-%#x: source %#x outside the stub area (%#x bytes)", c.Lo, c.Hi, c.Src, layout.SrcSize)
		}
	}
	chunkOf := func(a uint64) int {
		k := sort.Search(len(chunks), func(k int) bool { return int64(chunks[k].r.Hi) > int64(a) })
		if k < len(chunks) && int64(chunks[k].r.Lo) <= int64(a) {
			return k
		}
		return -1
	}
	readers := readersOf(p.Reads, patchIdx)
	direct := make([][]int, len(chunks))
	stubs := make([]runtime.Stub, 0, len(p.Stubs))
	for _, s := range p.Stubs {
		k := chunkOf(s.Addr)
		if k < 0 || chunkOf(s.Addr+place.StubLen-1) != k {
			return nil, nil, 0, fmt.Errorf("stub at %#x lies in no chunk", s.Addr)
		}
		a := &tramp.Asm{Base: s.Addr}
		a.Jmp(near(s.Inst))
		if a.Err != nil {
			return nil, nil, 0, fmt.Errorf("stub at %#x: %w", s.Addr, a.Err)
		}
		if len(a.B) != place.StubLen {
			return nil, nil, 0, fmt.Errorf("stub at %#x: %d bytes of code", s.Addr, len(a.B))
		}
		st := runtime.Stub{Off: chunks[k].src + (s.Addr - chunks[k].r.Lo)}
		copy(st.Code[:], a.B)
		stubs = append(stubs, st)
		if pi := patchIdx[s.Inst]; pi >= 0 {
			direct[k] = append(direct[k], int(pi))
		}
	}
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].Off < stubs[j].Off })
	for k := 1; k < len(stubs); k++ {
		if stubs[k].Off < stubs[k-1].Off+place.StubLen {
			return nil, nil, 0, fmt.Errorf("stubs collide in the stub area at offset %#x", stubs[k].Off)
		}
	}
	ndeps := 0
	for k, d := range closure(direct, readers) {
		chunks[k].deps = d
		ndeps += len(d)
	}
	return chunks, stubs, ndeps, nil
}

// readersOf maps each patch index to the patches whose puns read bytes it
// modified (Planner.Reads, translated from instructions to patches).
func readersOf(reads [][2]int, patchIdx []int32) map[int][]int {
	readers := map[int][]int{}
	for _, r := range reads {
		rd, wr := int(patchIdx[r[0]]), int(patchIdx[r[1]])
		if rd >= 0 && wr >= 0 && rd != wr {
			readers[wr] = append(readers[wr], rd)
		}
	}
	return readers
}

// closure returns, for each chunk's direct patches, the sorted set of
// patches to restore: the direct ones and, transitively, their readers.
func closure(direct [][]int, readers map[int][]int) [][]uint32 {
	out := make([][]uint32, len(direct))
	for k, d := range direct {
		seen := map[int]bool{}
		work := append([]int(nil), d...)
		for len(work) > 0 {
			x := work[len(work)-1]
			work = work[:len(work)-1]
			if seen[x] {
				continue
			}
			seen[x] = true
			work = append(work, readers[x]...)
		}
		for x := range seen {
			out[k] = append(out[k], uint32(x))
		}
		slices.Sort(out[k])
	}
	return out
}

// runtimeChunks returns the chunk table and the dependency list the
// chunks slice.
func runtimeChunks(chunks []chunkOut) ([]runtime.Chunk, []uint32) {
	out := make([]runtime.Chunk, len(chunks))
	var deps []uint32
	for k, co := range chunks {
		out[k] = runtime.Chunk{Vaddr: co.r.Lo, Size: co.r.Hi - co.r.Lo, SrcOff: co.src, Flags: co.flags,
			NDeps: uint32(len(co.deps)), DepsOff: uint32(len(deps))}
		deps = append(deps, co.deps...)
	}
	return out, deps
}

// stubPages counts the pages of the stub area that hold stubs (sorted by
// offset): the memory the chunks cost.
func stubPages(stubs []runtime.Stub) int {
	n := 0
	for k := range stubs {
		if k == 0 || stubs[k].Off/elfout.PageSize != stubs[k-1].Off/elfout.PageSize {
			n++
		}
		if (stubs[k].Off+place.StubLen-1)/elfout.PageSize != stubs[k].Off/elfout.PageSize {
			n++
		}
	}
	return n
}
