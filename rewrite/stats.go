package rewrite

import (
	"encoding/json"
	"strconv"

	"github.com/stint-project/stint/rewrite/place"
	"github.com/stint-project/stint/rewrite/policy"
)

// Hex is an address that marshals to JSON as a "0x..." string.
type Hex uint64

func (h Hex) MarshalText() ([]byte, error) {
	return []byte("0x" + strconv.FormatUint(uint64(h), 16)), nil
}

// Reason aggregates the sites that failed for one reason.
type Reason struct {
	Count int   `json:"count"`
	First []Hex `json:"first"` // the first few addresses (link vaddrs)
}

// maxReasonAddrs is how many addresses a Reason keeps.
const maxReasonAddrs = 5

// Stats count what a rewrite did. Every site is either patched (with one
// tactic), handled by a fallback, or failed with a reason.
type Stats struct {
	Module      string             `json:"module"` // "executable", "pie", "static", "static-pie", "shared"
	Tool        string             `json:"tool"`
	Insts       int                `json:"insts"`       // decoded instructions
	Undecodable int                `json:"undecodable"` // bytes of code that could not be decoded
	Sites       int                `json:"sites"`
	Patched     map[string]int     `json:"patched"` // tactic name -> sites
	Fallback    int                `json:"fallback"`
	Failed      int                `json:"failed"`
	Covered     int                `json:"covered"` // left unpatched: every outcome is in the --skip-covered log
	Retired     int                `json:"retired"` // left unpatched: outcomes logged before --retire-since's log and none added since
	Cold        int                `json:"cold"`    // switchable patches of returns and indirect jumps the --skip-covered log saw: they start off (STINT_PATCH_COLD)
	Reasons     map[string]*Reason `json:"reasons"` // why sites failed
	Evicted     int                `json:"evicted"` // neighbours moved to relocated-instruction trampolines
	Probes      int                `json:"probes"`
	Patches     int                `json:"patches"`
	Stubs       int                `json:"stubs"`
	Chunks      int                `json:"chunks"`      // ranges the runtime maps
	ChunkBytes  uint64             `json:"chunk_bytes"` // bytes of the stub area the chunks map (built at run time)
	StubPages   int                `json:"stub_pages"`  // pages of the stub area that hold stubs: the memory the chunks cost
	Deps        int                `json:"deps"`        // patch indices listed for chunks that fail to map
	Switchable  int                `json:"switchable"`  // patches the off-switch may undo and redo (STINT_PATCH_SWITCH)
	// SwitchableRead counts the switchable patches that other patches'
	// puns read (STINT_PATCH_READ: switched after their readers).
	SwitchableRead int `json:"switchable_read"`
	// CallRets counts the direct calls whose probes carry the list of
	// their callee's ret probes (STINT_MF_RETS).
	CallRets int `json:"call_rets"`
	// OwnSites counts the other direct probes' sites that carry the list
	// of their function's own sites (STINT_MF_RETS).
	OwnSites int `json:"own_sites"`
	// Peeks counts the (reader, readee) pairs left out because the
	// reader's pun reads only bytes the readee's one-store patch wrote
	// with their own values (policy.Plan.KeepPeeks).
	Peeks int `json:"peeks"`
	// EdgeProbes counts the destinations patched to record a jcc outcome
	// there (policy.Plan.AddEdges); EdgeFailed the ones the planner could not patch
	// (their jcc keeps that outcome's probe). Jccs with every outcome
	// probed at its destination are not patched and count in Patched as
	// "edge".
	// PreCalls counts the calls probed at the instruction, or the run of
	// instructions, before them, so that they run in place.
	// Delegated counts the jccs with one outcome probed elsewhere that
	// keep a STINT_PF_DELEG probe for it (policy.Plan.Watch); Probes
	// counts those probes too.
	PreCalls   int `json:"pre_calls"`
	EdgeProbes int `json:"edge_probes"`
	EdgeFailed int `json:"edge_failed"`
	Delegated  int `json:"delegated"`
	// A compact complete trace's jccs and rets the planner could not
	// patch in place (policy/marks.go): PreJccs and PreRets probed from
	// the instruction before them, MarkedJccs told by Marks mark probes,
	// UnknownJccs neither (the decoder loses its place there; a ret
	// without a probe goes where the decoder's call stack says).
	PreJccs     int `json:"pre_jccs,omitempty"`
	PreRets     int `json:"pre_rets,omitempty"`
	Marks       int `json:"marks,omitempty"`
	MarkedJccs  int `json:"marked_jccs,omitempty"`
	UnknownJccs int `json:"unknown_jccs,omitempty"`
	// Predicted counts a compact trace's indirect jmps with a likely
	// destination (tramps.go, predicted).
	Predicted int      `json:"predicted,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// PatchedTotal returns the number of patched sites.
func (s *Stats) PatchedTotal() int {
	n := 0
	for _, v := range s.Patched {
		n += v
	}
	return n
}

func (s *Stats) fail(reason string, addr uint64) {
	s.Failed++
	r := s.Reasons[reason]
	if r == nil {
		r = &Reason{}
		s.Reasons[reason] = r
	}
	r.Count++
	if len(r.First) < maxReasonAddrs {
		r.First = append(r.First, Hex(addr))
	}
}

// JSON returns the stats as indented JSON.
func (s *Stats) JSON() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}

var tacticNames = map[place.Tactic]string{
	place.TacticB1: "B1", place.TacticB2: "B2", place.TacticT1: "T1",
	place.TacticT2: "T2", place.TacticT3: "T3", place.TacticP: "P",
	place.TacticTrap: "trap",
}

// addPlan adds what the plan decided and refused, and the patches'
// switchability.
func (s *Stats) addPlan(plan *policy.Plan, ps *patchSet) {
	for _, f := range plan.Failed {
		s.fail(f.Reason, f.Addr)
	}
	s.Covered, s.Retired = plan.Covered, plan.Retired
	s.PreCalls, s.Delegated, s.Peeks = plan.PreCalls, plan.Delegated, plan.Peeks
	for _, i := range ps.order {
		if pr := ps.rec.Get(i); pr.Switchable {
			s.Switchable++
			if pr.Readee {
				s.SwitchableRead++
			}
		}
	}
}
