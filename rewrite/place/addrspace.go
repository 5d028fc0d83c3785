package place

import (
	"math"
	"sort"
)

// Range is a half-open address range [Lo, Hi).
//
// Addresses are compared as signed 64-bit numbers: for a position-independent
// file linked at 0, stubs may lie below 0 (they wrap, like the rel32 that
// reaches them), so Range{Lo: uint64(-1 << 31), Hi: 0x1000} is a valid range
// of 2 GiB + 4 KiB. A range with int64(Hi) <= int64(Lo) is empty.
type Range struct{ Lo, Hi uint64 }

// StubLen is the size of a stub: jmp rel32.
const StubLen = 5

// StubPage is the granule in which stub space is handed out: a page that
// holds a stub must lie entirely in free space (it will be mapped whole).
const StubPage = 4096

// DefaultChunkGap is the default for [AddrSpace.ChunkGap]. Chunks are
// virtual ranges over a shared stub area ([AddrSpace.Layout]), so merging
// pages costs no file bytes; but pages of one chunk cannot share physical
// pages with each other, only with other chunks, so larger chunks cost
// stub memory (gdb: 64 KiB gives 9721 chunks and 41 MiB of stub pages,
// 1 MiB 299 chunks and 100 MiB, 1 GiB 2 chunks and about 170 MiB).
const DefaultChunkGap = 1 << 20

// maxScan bounds the pages one allocation looks at, so that planning stays
// linear in the number of sites whatever the number of stub pages.
const maxScan = 256

// span is a signed half-open range.
type span struct{ lo, hi int64 }

// constraint restricts stub addresses s to ((s - base) mod period) in
// [off, off+unit). period == 0 means no constraint. It describes rel32
// values of which some low bytes are fixed (successor eviction, T1/T2).
type constraint struct {
	base, period, off, unit int64
}

func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}

// ok reports whether s satisfies c.
func (c constraint) ok(s int64) bool {
	if c.period == 0 {
		return true
	}
	r := mod(s-c.base, c.period)
	return r >= c.off && r < c.off+c.unit
}

// next returns the smallest s' >= s that satisfies c.
func (c constraint) next(s int64) int64 {
	if c.period == 0 {
		return s
	}
	r := mod(s-c.base, c.period)
	switch {
	case r >= c.off && r < c.off+c.unit:
		return s
	case r < c.off:
		return s + c.off - r
	default:
		return s + c.period - r + c.off
	}
}

type stubPage struct {
	stubs []int64 // sorted start addresses of the stubs in this page
}

// AddrSpace tracks free address space (allowed minus reserved) and the
// stubs handed out in it. It prefers pages that already hold stubs, then
// pages next to them, so that the runtime has few ranges to map
// ([AddrSpace.Chunks]).
type AddrSpace struct {
	// ChunkGap: Chunks merges two stub pages into one mapping when the
	// free gap between them is at most this many bytes. 0 means
	// DefaultChunkGap. Larger values mean fewer mappings, more bytes.
	ChunkGap uint64
	// TightGap, when nonzero, replaces ChunkGap for pages below
	// TightBelow (a signed address): space where something else may
	// already be mapped, so that a chunk that clashes there is small.
	TightGap   uint64
	TightBelow uint64

	allowed  []span
	reserved []span
	free     []span // allowed minus reserved, page aligned, sorted
	pages    map[int64]*stubPage
	used     pageSet // page numbers of pages
	nstubs   int
}

// NewAddrSpace returns a space where stubs may go anywhere in allowed
// (page-aligned inward).
func NewAddrSpace(allowed []Range) *AddrSpace {
	s := &AddrSpace{pages: map[int64]*stubPage{}}
	for _, r := range allowed {
		if int64(r.Hi) > int64(r.Lo) {
			s.allowed = append(s.allowed, span{int64(r.Lo), int64(r.Hi)})
		}
	}
	s.recompute()
	return s
}

// Reserve marks r as occupied. Reserve before the first stub is handed
// out: stubs already placed in r are not moved.
func (s *AddrSpace) Reserve(r Range) {
	if int64(r.Hi) > int64(r.Lo) {
		s.reserved = append(s.reserved, span{int64(r.Lo), int64(r.Hi)})
		s.recompute()
	}
}

// Free returns the free ranges (allowed minus reserved, page aligned),
// sorted by signed address.
func (s *AddrSpace) Free() []Range {
	out := make([]Range, len(s.free))
	for i, f := range s.free {
		out[i] = Range{uint64(f.lo), uint64(f.hi)}
	}
	return out
}

// Stubs returns the number of stubs handed out.
func (s *AddrSpace) Stubs() int { return s.nstubs }

// Pages returns the number of StubPage pages that hold stubs.
func (s *AddrSpace) Pages() int { return s.used.Len() }

func mergeSpans(in []span) []span {
	sort.Slice(in, func(i, j int) bool { return in[i].lo < in[j].lo })
	var out []span
	for _, r := range in {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi {
			if r.hi > out[n-1].hi {
				out[n-1].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (s *AddrSpace) recompute() {
	al := mergeSpans(append([]span(nil), s.allowed...))
	rs := mergeSpans(append([]span(nil), s.reserved...))
	var out []span
	for _, a := range al {
		cur := a.lo
		for _, r := range rs {
			if r.hi <= cur || r.lo >= a.hi {
				continue
			}
			if r.lo > cur {
				out = append(out, span{cur, r.lo})
			}
			if r.hi > cur {
				cur = r.hi
			}
		}
		if cur < a.hi {
			out = append(out, span{cur, a.hi})
		}
	}
	s.free = s.free[:0]
	for _, f := range out {
		lo := floorDiv(f.lo+StubPage-1, StubPage) * StubPage
		hi := floorDiv(f.hi, StubPage) * StubPage
		if hi > lo {
			s.free = append(s.free, span{lo, hi})
		}
	}
}

// freeIndex returns the index of the free span holding [lo, hi), or -1.
func (s *AddrSpace) freeIndex(lo, hi int64) int {
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].hi > lo })
	if i < len(s.free) && s.free[i].lo <= lo && hi <= s.free[i].hi {
		return i
	}
	return -1
}

func (s *AddrSpace) pageFree(pn int64) bool {
	return s.freeIndex(pn*StubPage, pn*StubPage+StubPage) >= 0
}

// fitInPage finds a stub start in page pn within [lo, hi) satisfying c that
// overlaps no stub. The page must be free space.
func (s *AddrSpace) fitInPage(pn, lo, hi int64, c constraint) (int64, bool) {
	pLo, pHi := pn*StubPage, pn*StubPage+StubPage
	if lo < pLo {
		lo = pLo
	}
	if hi > pHi-StubLen+1 {
		hi = pHi - StubLen + 1
	}
	if lo >= hi {
		return 0, false
	}
	var stubs []int64
	if pg := s.pages[pn]; pg != nil {
		if len(pg.stubs) >= StubPage/StubLen {
			return 0, false
		}
		stubs = pg.stubs
	} else if !s.pageFree(pn) {
		return 0, false
	}
	x := c.next(lo)
	j := sort.Search(len(stubs), func(j int) bool { return stubs[j]+StubLen > x })
	for x < hi {
		for j < len(stubs) && stubs[j]+StubLen <= x {
			j++
		}
		if j == len(stubs) || stubs[j] >= x+StubLen {
			return x, true
		}
		x = c.next(stubs[j] + StubLen)
	}
	return 0, false
}

// take records a stub at x.
func (s *AddrSpace) take(x int64) {
	pn := floorDiv(x, StubPage)
	pg := s.pages[pn]
	if pg == nil {
		pg = &stubPage{}
		s.pages[pn] = pg
		s.used.Insert(pn)
	}
	i := sort.Search(len(pg.stubs), func(i int) bool { return pg.stubs[i] >= x })
	pg.stubs = append(pg.stubs, 0)
	copy(pg.stubs[i+1:], pg.stubs[i:])
	pg.stubs[i] = x
	s.nstubs++
}

// release forgets the stub at x (a tentative allocation that was not kept).
func (s *AddrSpace) release(x int64) {
	pn := floorDiv(x, StubPage)
	pg := s.pages[pn]
	if pg == nil {
		return
	}
	i := sort.Search(len(pg.stubs), func(i int) bool { return pg.stubs[i] >= x })
	if i == len(pg.stubs) || pg.stubs[i] != x {
		return
	}
	pg.stubs = append(pg.stubs[:i], pg.stubs[i+1:]...)
	s.nstubs--
	if len(pg.stubs) == 0 {
		delete(s.pages, pn)
		s.used.Delete(pn)
	}
}

// alloc hands out a stub start x in [lo, hi) satisfying c. With reuseOnly
// it only looks at pages that already hold stubs.
func (s *AddrSpace) alloc(lo, hi int64, c constraint, reuseOnly bool) (int64, bool) {
	if x, ok := s.find(lo, hi, c, reuseOnly); ok {
		s.take(x)
		return x, true
	}
	return 0, false
}

func (s *AddrSpace) find(lo, hi int64, c constraint, reuseOnly bool) (int64, bool) {
	if hi <= lo {
		return 0, false
	}
	pnLo, pnHi := floorDiv(lo, StubPage), floorDiv(hi-1, StubPage)
	// 1. Pages already in use.
	var x int64
	n, found := 0, false
	s.used.Each(pnLo, func(pn int64) bool {
		if pn > pnHi || n >= maxScan {
			return false
		}
		n++
		if c.period != 0 {
			// Skip pages with no address satisfying c.
			if x := c.next(max(lo, pn*StubPage)); x >= min(hi, pn*StubPage+StubPage) {
				return true
			}
		}
		x, found = s.fitInPage(pn, lo, hi, c)
		return !found
	})
	if found || reuseOnly {
		return x, found
	}
	// 2. A new page: right after the closest used page below hi (so that
	// pages cluster and chunks stay few), else from lo upwards.
	var starts []int64
	if below, ok := s.used.Floor(pnHi); ok {
		if x := (below + 1) * StubPage; x > lo && x < hi {
			starts = append(starts, x)
		}
	}
	if above, ok := s.used.Ceil(pnHi + 1); ok {
		// Below the closest used page above the window.
		if x := (above - 1) * StubPage; x > lo && x < hi {
			starts = append(starts, x)
		}
	}
	starts = append(starts, lo)
	for _, x := range starts {
		if y, ok := s.scanUp(x, hi, c); ok {
			return y, true
		}
	}
	return 0, false
}

// distance returns how far x's page is from the closest other page in
// use, in bytes (0 for a page in use).
func (s *AddrSpace) distance(x int64) int64 {
	pn := floorDiv(x, StubPage)
	d := int64(math.MaxInt64)
	if above, ok := s.used.Ceil(pn); ok {
		d = (above - pn) * StubPage
	}
	if below, ok := s.used.Floor(pn - 1); ok {
		d = min(d, (pn-below)*StubPage)
	}
	return d
}

// scanUp looks for a stub start in [x, hi) satisfying c, in free pages,
// lowest first, with bounded effort.
func (s *AddrSpace) scanUp(x, hi int64, c constraint) (int64, bool) {
	for n := 0; n < maxScan && x < hi; n++ {
		x = c.next(x)
		if x >= hi {
			break
		}
		fi := sort.Search(len(s.free), func(i int) bool { return s.free[i].hi > x })
		if fi == len(s.free) {
			break
		}
		if s.free[fi].lo > x {
			x = s.free[fi].lo
			continue
		}
		pn := floorDiv(x, StubPage)
		if y, ok := s.fitInPage(pn, x, hi, c); ok {
			return y, true
		}
		x = (pn + 1) * StubPage
	}
	return 0, false
}

// Chunks returns the page-aligned ranges that must be mapped to hold every
// stub handed out. Pages (of pageSize, a multiple of StubPage, or 0 for
// StubPage) are merged into one range when the gap between them is free
// space of at most ChunkGap bytes, which trades a few unused pages for
// fewer mappings (E9Patch's unmerged pages needed more mappings than the
// kernel's default vm.max_map_count on large binaries).
func (s *AddrSpace) Chunks(pageSize uint64) []Range {
	ps := int64(pageSize)
	if ps < StubPage {
		ps = StubPage
	}
	gap := int64(s.ChunkGap)
	if gap == 0 {
		gap = DefaultChunkGap
	}
	var pages []int64
	s.used.Each(math.MinInt64, func(pn int64) bool {
		p := floorDiv(pn*StubPage, ps)
		if n := len(pages); n == 0 || pages[n-1] != p {
			pages = append(pages, p)
		}
		return true
	})
	var out []Range
	var cur span
	for k, p := range pages {
		lo, hi := p*ps, p*ps+ps
		g := gap
		if s.TightGap != 0 && lo < int64(s.TightBelow) {
			g = int64(s.TightGap)
		}
		if k > 0 && (lo == cur.hi || lo-cur.hi <= g && s.freeIndex(cur.hi, lo) >= 0) {
			cur.hi = hi
			continue
		}
		if k > 0 {
			out = append(out, Range{uint64(cur.lo), uint64(cur.hi)})
		}
		cur = span{lo, hi}
	}
	if len(pages) > 0 {
		out = append(out, Range{uint64(cur.lo), uint64(cur.hi)})
	}
	return out
}

// Chunk is one range the runtime maps, and where its bytes come from.
type Chunk struct {
	Range
	Src uint64 // offset of the chunk's bytes in the source area (page aligned)
}

// Layout places the contents of the chunks in one shared source area.
type Layout struct {
	Chunks  []Chunk // as returned by Chunks, in the same order
	SrcSize uint64  // bytes of the source area (a multiple of the page size)
}

// Src returns the offset in the source area of the byte at addr, which must
// lie in a chunk.
func (l *Layout) Src(addr uint64) (uint64, bool) {
	a := int64(addr)
	k := sort.Search(len(l.Chunks), func(k int) bool { return int64(l.Chunks[k].Hi) > a })
	if k == len(l.Chunks) || int64(l.Chunks[k].Lo) > a {
		return 0, false
	}
	return l.Chunks[k].Src + uint64(a-int64(l.Chunks[k].Lo)), true
}

// Layout groups stub pages into chunks as Chunks does, and packs the
// chunks' contents into one source area in which chunks overlap wherever
// their stubs do not collide: the area holds every stub once (at
// Layout.Src(stub address)) and stays a few pages even when the chunks
// span gigabytes. Copying a chunk from the area brings along other chunks'
// stubs at offsets nothing jumps to, which is harmless. A runtime that maps
// each chunk from the area (MAP_PRIVATE of a file or memfd at its Src)
// shares the physical pages between chunks, as E9Patch's page grouping
// does; one that copies pays the chunks' full size in memory.
func (s *AddrSpace) Layout(pageSize uint64) *Layout {
	ps := int64(pageSize)
	if ps < StubPage {
		ps = StubPage
	}
	per := ps / StubPage // StubPage pages per page
	chunks := s.Chunks(pageSize)
	l := &Layout{}
	// Occupancy bitmaps of the area's StubPage pages that hold stubs
	// (sparse: a chunk of gigabytes with a few stubs costs a few maps).
	src := map[int64]*[StubPage / 64]uint64{}
	var srcLen int64 // StubPage pages in the area
	const maxTries = 4096
	for _, c := range chunks {
		lo, hi := int64(c.Lo), int64(c.Hi)
		// The chunk's stubs, as (page index in chunk, offset) pairs.
		type at struct{ page, off int64 }
		var stubs []at
		s.used.Each(floorDiv(lo+StubPage-1, StubPage), func(pn int64) bool {
			if pn*StubPage >= hi {
				return false
			}
			for _, x := range s.pages[pn].stubs {
				stubs = append(stubs, at{pn - lo/StubPage, x - pn*StubPage})
			}
			return true
		})
		fits := func(o int64) bool {
			for _, st := range stubs {
				bm := src[o+st.page]
				if bm == nil {
					continue
				}
				for b := st.off; b < st.off+StubLen; b++ {
					if bm[b/64]&(1<<(b%64)) != 0 {
						return false
					}
				}
			}
			return true
		}
		o := int64(0)
		for tries := 0; o < srcLen && !fits(o); tries++ {
			o += per
			if tries == maxTries {
				o = (srcLen + per - 1) / per * per
				break
			}
		}
		npages := (hi - lo) / StubPage
		srcLen = max(srcLen, o+npages)
		for _, st := range stubs {
			bm := src[o+st.page]
			if bm == nil {
				bm = &[StubPage / 64]uint64{}
				src[o+st.page] = bm
			}
			for b := st.off; b < st.off+StubLen; b++ {
				bm[b/64] |= 1 << (b % 64)
			}
		}
		l.Chunks = append(l.Chunks, Chunk{Range: c, Src: uint64(o * StubPage)})
	}
	l.SrcSize = uint64((srcLen + per - 1) / per * ps)
	return l
}
