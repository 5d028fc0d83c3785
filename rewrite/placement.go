package rewrite

import (
	"errors"
	"fmt"

	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/policy"
	"github.com/stint-project/stint/runtime"
)

// placeSites patches the sites ok (sorted instruction indices) with the
// planner: from the highest address down, as E9Patch does, so that a
// site's successor has already been decided when the site is planned. A
// jcc whose outcomes are all probed elsewhere (its destination probes,
// or the --skip-covered log) is not patched; a pre-call site the planner
// cannot patch gives its call back to be probed where it is; with traps,
// a site too short for any jump gets an int3 (place.Planner.Trap), with
// trapAll (testing) every site does. It returns
// the planner and which instructions it patched as sites.
func placeSites(fx *facts.Facts, plan *policy.Plan, tt *trampTable, space *place.AddrSpace, ok []int, shortJumps, traps, trapAll bool, st *Stats) (*place.Planner, []bool, error) {
	c := fx.Code
	p := &place.Planner{Insts: c.Insts, Space: space, Near: tt.near, ShortJumps: shortJumps, Run: plan.PreRunEnd, NoHops: fx.Module.Go}
	// The planner must know every site before the first patch, or a
	// lower site's bytes may be locked by a higher site's pun.
	if err := p.MarkSites(ok); err != nil {
		return nil, nil, fmt.Errorf("plan: %w", err)
	}
	patched := make([]bool, len(c.Insts))
	for k := len(ok) - 1; k >= 0; k-- {
		i := ok[k]
		if _, edge := plan.EdgeOf(i); edge {
			if _, err := p.Patch(i); err != nil {
				st.EdgeFailed++
				tt.isSite[i] = false // evicted later, it is a plain relocation
				continue
			}
			st.EdgeProbes++
			patched[i] = true
			continue
		}
		// Its destination probes lie above it, so they are decided.
		if plan.Delegate(i, patched) {
			st.Patched["edge"]++
			tt.isSite[i] = false
			continue
		}
		patch := p.Patch
		if trapAll {
			patch = p.Trap
		}
		t, err := patch(i)
		if _, pre := plan.PreSiteOf(i); err != nil && pre {
			tt.isSite[i] = false
			// a call is probed where it is after all; a jcc, which
			// nothing kept the sites above from using, is not
			j := plan.UnPreSite(i)
			if (c.Kinds[j] == facts.IndCall || c.Kinds[j] == facts.Call) && tt.sizeSite(plan.Tool(), j) == nil {
				i = j
				t, err = p.Patch(i)
			}
		}
		// (a site with its trampoline sized: not a pre-site given up)
		if err != nil && traps && tt.isSite[i] && errors.Is(err, place.ErrTooShort) {
			if _, terr := p.Trap(i); terr == nil {
				t, err = place.TacticTrap, nil
			}
		}
		if err != nil {
			st.fail(reasonOf(err), c.Insts[i].Addr)
			continue
		}
		name, known := tacticNames[t]
		if !known {
			st.fail("planner returned no tactic", c.Insts[i].Addr)
			continue
		}
		st.Patched[name]++
		patched[i] = true
	}
	st.Evicted = len(p.Evicted)
	return p, patched, nil
}

// reasonOf aggregates planner errors by their innermost cause (the
// outer layers name the instruction).
func reasonOf(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

// trapTable lists the int3 sites (place.TacticTrap) with their
// trampolines, as link vaddrs (the runtime adds the load bias), and
// their patches (patchIdx: by instruction), in address order (the
// runtime's SIGTRAP handler searches it).
func trapTable(fx *facts.Facts, p *place.Planner, tt *trampTable, patchIdx []int32) []runtime.Trap {
	var out []runtime.Trap
	for i, t := range p.Tactics {
		if t == place.TacticTrap {
			out = append(out, runtime.Trap{Site: fx.Code.Insts[i].Addr, Tramp: tt.tramp(i).addr, Patch: uint32(patchIdx[i])})
		}
	}
	return out
}
