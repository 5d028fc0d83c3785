package place

import "sort"

// pageSet is the sorted set of the stub pages in use: blocks of up to
// 2*pageBlock sorted page numbers, the blocks in order. Placement adds
// and drops pages anywhere in the order (a punned jump's window lies
// where its bytes say), and a single sorted slice moved half of itself
// at each (cc1plus: 94 K pages, 0.7 s of memmove).
type pageSet struct {
	blocks [][]int64 // each sorted and not empty; blocks[k]'s last < blocks[k+1]'s first
	n      int
}

const pageBlock = 256

// Len returns the number of pages.
func (s *pageSet) Len() int { return s.n }

// at returns the block holding the first page >= pn and that page's
// index in it (b == len(s.blocks): every page is < pn).
func (s *pageSet) at(pn int64) (b, i int) {
	b = sort.Search(len(s.blocks), func(b int) bool { blk := s.blocks[b]; return blk[len(blk)-1] >= pn })
	if b < len(s.blocks) {
		blk := s.blocks[b]
		i = sort.Search(len(blk), func(i int) bool { return blk[i] >= pn })
	}
	return b, i
}

// Insert adds pn (present: no change).
func (s *pageSet) Insert(pn int64) {
	b, i := s.at(pn)
	switch {
	case len(s.blocks) == 0:
		s.blocks = append(s.blocks, []int64{pn})
		s.n++
		return
	case b == len(s.blocks):
		b--
		i = len(s.blocks[b])
	case s.blocks[b][i] == pn:
		return
	}
	blk := append(s.blocks[b], 0)
	copy(blk[i+1:], blk[i:])
	blk[i] = pn
	s.blocks[b] = blk
	s.n++
	if len(blk) > 2*pageBlock {
		hi := append([]int64(nil), blk[pageBlock:]...)
		s.blocks[b] = blk[:pageBlock:pageBlock]
		s.blocks = append(s.blocks, nil)
		copy(s.blocks[b+2:], s.blocks[b+1:])
		s.blocks[b+1] = hi
	}
}

// Delete removes pn (absent: no change).
func (s *pageSet) Delete(pn int64) {
	b, i := s.at(pn)
	if b == len(s.blocks) || s.blocks[b][i] != pn {
		return
	}
	s.blocks[b] = append(s.blocks[b][:i], s.blocks[b][i+1:]...)
	s.n--
	if len(s.blocks[b]) == 0 {
		s.blocks = append(s.blocks[:b], s.blocks[b+1:]...)
	}
}

// Ceil returns the smallest page >= pn.
func (s *pageSet) Ceil(pn int64) (int64, bool) {
	b, i := s.at(pn)
	if b == len(s.blocks) {
		return 0, false
	}
	return s.blocks[b][i], true
}

// Floor returns the largest page <= pn.
func (s *pageSet) Floor(pn int64) (int64, bool) {
	b, i := s.at(pn)
	switch {
	case b < len(s.blocks) && s.blocks[b][i] == pn:
		return pn, true
	case b < len(s.blocks) && i > 0:
		return s.blocks[b][i-1], true
	case b > 0:
		blk := s.blocks[b-1]
		return blk[len(blk)-1], true
	}
	return 0, false
}

// Each calls fn with the pages >= from in ascending order until fn
// returns false. fn must not change the set.
func (s *pageSet) Each(from int64, fn func(pn int64) bool) {
	b, i := s.at(from)
	for ; b < len(s.blocks); b, i = b+1, 0 {
		for _, pn := range s.blocks[b][i:] {
			if !fn(pn) {
				return
			}
		}
	}
}
