package rewrite

import (
	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/policy"
)

// pathMap is a compact trace's branch map of the module (section
// .stint.paths): every control transfer the decoder walks through, and
// whether its site runs a probe; the marks, and the jccs without a probe
// they resolve (policy/marks.go). An indirect call probed from the
// instruction before it (a pre-call site) counts as probed.
func pathMap(fx *facts.Facts, plan *policy.Plan, tt *trampTable, st *Stats) *formats.PathMap {
	c := fx.Code
	numbered := func(i int) bool { t := tt.tramp(i); return t != nil && t.site && t.probe0 >= 0 }
	probed := make(map[int]bool)
	for i := range c.Insts {
		if !numbered(i) {
			continue
		}
		if j, ok := plan.PreSiteOf(i); ok {
			probed[j] = true
			switch c.Kinds[j] {
			case facts.Jcc, facts.Jcxz:
				st.PreJccs++
			case facts.Ret:
				st.PreRets++
			}
		} else if _, paths := plan.PathsProbe(i); !paths {
			probed[i] = true
		}
	}
	m := &formats.PathMap{TextLo: fx.Module.TextLo, TextHi: fx.Module.TextHi}
	for i, k := range c.Kinds {
		if bit, ok := plan.MarkBit(i); ok && numbered(i) {
			in := &c.Insts[i]
			br := formats.Branch{Addr: in.Addr, Len: uint8(in.Len()), Kind: formats.BrMark, Flags: formats.BranchProbed}
			if bit {
				br.Flags |= formats.BranchBit
			}
			m.Branches = append(m.Branches, br)
			st.Marks++
			continue
		}
		bk, ok := mapKind(k)
		if !ok {
			continue
		}
		in := &c.Insts[i]
		br := formats.Branch{Addr: in.Addr, Len: uint8(in.Len()), Kind: bk}
		if bk <= formats.BrCall {
			br.Target = c.Targets[i]
		}
		if facts.SwitchesStack(c, i) {
			br.Flags |= formats.BranchSwitch
		}
		if tt.noPush(i) && probed[i] {
			br.Flags |= formats.BranchNoPush
		}
		if probed[i] {
			br.Flags |= formats.BranchProbed
			if pred := tt.predicted(i); pred != 0 && numbered(i) {
				br.Target = pred
				br.Flags |= formats.BranchPredicted
				st.Predicted++
			}
		} else if bit, ok := plan.MarkedJcc(i, numbered); ok && bk == formats.BrJcc {
			br.Flags |= formats.BranchMarked
			if bit {
				br.Flags |= formats.BranchBit
			}
			st.MarkedJccs++
		} else if bk == formats.BrJcc {
			st.UnknownJccs++
		}
		m.Branches = append(m.Branches, br)
	}
	return m
}

// mapKind is the branch map's kind of an instruction of kind k; false
// for one the map leaves out.
func mapKind(k facts.Kind) (formats.BranchKind, bool) {
	switch k {
	case facts.Jcc, facts.Jcxz:
		return formats.BrJcc, true
	case facts.Jmp:
		return formats.BrJmp, true
	case facts.Call:
		return formats.BrCall, true
	case facts.Ret:
		return formats.BrRet, true
	case facts.IndJmp:
		return formats.BrIndJmp, true
	case facts.IndCall:
		return formats.BrIndCall, true
	}
	return 0, false
}
