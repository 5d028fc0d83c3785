package policy

import (
	"github.com/stint-project/stint/rewrite/facts"
	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/runtime"
)

// ToolSites returns the indices of the instructions tool t probes, in
// address order.
func ToolSites(c *facts.Code, t runtime.Tool) []int {
	var out []int
	for i, k := range c.Kinds {
		var take bool
		switch t {
		case runtime.ToolBranch:
			take = k.IsBranch()
		case runtime.ToolCall:
			take = k == facts.Call || k == facts.IndCall || k == facts.Ret
		case runtime.ToolSyscall:
			take = k == facts.Syscall
		case runtime.ToolBlock:
			if k == facts.Bad || c.Insts[i].Flags&place.InstPadding != 0 {
				break
			}
			if c.Insts[i].Flags&place.InstTarget != 0 {
				take = true
			} else if i > 0 && c.Kinds[i-1].IsBranch() &&
				c.Insts[i-1].Addr+uint64(c.Insts[i-1].Len()) == c.Insts[i].Addr {
				take = true
			}
		}
		if take {
			out = append(out, i)
		}
	}
	return out
}

// WithoutRets returns sites without its rets (in place).
func WithoutRets(c *facts.Code, sites []int) []int {
	w := 0
	for _, i := range sites {
		if c.Kinds[i] != facts.Ret {
			sites[w] = i
			w++
		}
	}
	return sites[:w]
}

// Sites returns the candidate sites among the tool's sites (sorted
// instruction indices): those the --skip-covered log covers or
// --retire-since retires are left out (counted), an indirect call is
// replaced by the instruction before it where it can be probed there
// (precall.go), and sites no trampoline may take over (reserved for the
// exit hook, running before the module's initializer, untouchable, or a
// block that cannot run elsewhere) are refused (Failed).
func (p *Plan) Sites(sites []int) []int {
	c := p.fx.Code
	if p.cov != nil {
		w := 0
		for _, i := range sites {
			if p.covered(i) {
				p.Covered++
				continue
			}
			if p.retired(i) {
				p.Retired++
				continue
			}
			sites[w] = i
			w++
		}
		sites = sites[:w]
	}
	sites = p.planPreCalls(sites)
	p.FiniSite = p.finiSite(sites)
	var out []int
	for _, i := range sites {
		in := &c.Insts[i]
		switch {
		case p.fx.Fini.Reserved(i):
			p.fail("reserved for the exit hook (a static executable's .fini)", in.Addr)
		case p.fx.AfterEnd(in.Addr) && i != p.FiniSite:
			p.fail("runs after the run's end (.fini, which the module's finaliser calls after the runtime's)", in.Addr)
		case p.fx.Early[i]:
			p.fail("runs before the module's initializer (an IFUNC resolver or __libc_early_init, or code they call)", in.Addr)
		case in.Flags&place.InstRemapped != 0:
			p.fail("untouchable: V8's embedded builtins, which it maps again from the file elsewhere", in.Addr)
		case in.Flags&place.InstData != 0:
			p.fail("untouchable: a rip-relative operand reads its bytes as data", in.Addr)
		case in.Flags&place.InstUntouchable != 0:
			p.fail("untouchable: a branch lands inside the instruction", in.Addr)
		default:
			if _, paths := p.paths[i]; p.opts.Tool == runtime.ToolBlock || paths {
				if err := facts.Relocatable(in, c.Kinds[i]); err != nil {
					p.fail("cannot relocate: "+err.Error(), in.Addr)
					continue
				}
			}
			out = append(out, i)
		}
	}
	return out
}

// Refuse records that site i could not be given a trampoline.
func (p *Plan) Refuse(i int, err error) {
	p.fail("no trampoline: "+err.Error(), p.fx.Code.Insts[i].Addr)
}

// MarkOpenEnded keeps, under a budget, every other patch from depending
// on the bytes of the open-ended sites among ok (returns, indirect
// branches, pre-call sites): they never run out of outcomes, so the
// off-switch is what keeps their detours to the windows, and a patch that
// read their bytes would keep them patched for good (libsqlite3's hot
// tail call through a function pointer in sqlite3PcacheFetch was one).
func (p *Plan) MarkOpenEnded(ok []int) {
	if !p.opts.Budget || p.opts.Every || p.opts.Context {
		return
	}
	c := p.fx.Code
	for _, i := range ok {
		_, pre := p.preCallOf(i)
		if k := c.Kinds[i]; k == facts.Ret || k == facts.IndJmp || k == facts.IndCall || pre {
			c.Insts[i].Flags |= place.InstNoRead
		}
	}
}

// finiSite returns .fini's one site among sites when the runtime's
// finaliser can record it (facts.FiniStraight), -1 otherwise: a mode
// that records each outcome once, where an outcome recorded before the
// code runs is the same event (an every-occurrence mode would record it
// again when .fini runs; a sampled one counts what runs).
func (p *Plan) finiSite(sites []int) int {
	if p.opts.Every || p.opts.Context || p.opts.Countdown || !p.fx.FiniStraight() {
		return -1
	}
	site := -1
	for _, i := range sites {
		if p.fx.AfterEnd(p.fx.Code.Insts[i].Addr) {
			if site >= 0 {
				return -1
			}
			site = i
		}
	}
	return site
}
