package benchmarks

import "context"

// countsVariants are the rewrites the block-count benchmark times: exact
// counts (plain and locked increments), each of INS-OP's passes off
// (pcs: the flags saved at every block; ppi: every block calls the
// runtime, which counts; dpc: a trampoline per block, no runs) and, for
// comparison, the same counts taken from a complete block trace (a row
// per block executed, name "rows").
var countsVariants = []benchVariant{
	{"counts", "stint --tool block --counts", "--tool block --counts"},
	{"nopcs", "stint --tool block --counts --no-opt pcs", "--tool block --counts --no-opt pcs"},
	{"noppi", "stint --tool block --counts --no-opt ppi", "--tool block --counts --no-opt ppi"},
	{"nodpc", "stint --tool block --counts --no-opt dpc", "--tool block --counts --no-opt dpc"},
	{"atomic", "stint --tool block --counts --counts-atomic", "--tool block --counts --counts-atomic"},
	{"rows", "stint --tool block --every (a row per block)", "--tool block --every"},
}

// counts measures exact block execution counts (issue 40, INS-OP's block
// profiler): gzip -c on 4 MiB and the sqlite3 workload on 5,000 rows,
// natively, with each of countsVariants and under callgrind (which
// counts every basic block's executions), in one invocation each; then
// redis-server's throughput with --counts, in pairs with native.
func (s *Suite) counts(ctx context.Context, rep *Report) error {
	if err := s.profile(ctx, rep, "exact block counts", countsVariants, callgrindDefault); err != nil {
		return err
	}
	return s.redisPairs(ctx, rep, "exact block counts", countsVariants[:1])
}

// callsVariants: every call and return (INS-OP's call-chain profiler):
// the compact call chain (calls and rets append their own addresses),
// the same with every probe calling the runtime, without pre-sites from
// runs of instructions (a direct call after a short instruction then
// runs emulated in its trampoline), and a row per event (the previous
// engine).
var callsVariants = []benchVariant{
	{"calls", "stint --tool call --every (compact)", "--tool call --every"},
	{"noppi", "stint --tool call --every --no-opt=ppi", "--tool call --every --no-opt ppi"},
	{"nopre", "stint --tool call --every --no-opt=pre", "--tool call --every --no-opt pre"},
	{"rows", "stint --tool call --every --rows (previous engine)", "--tool call --every --rows"},
}

// calls measures every call and return the same way as counts, then
// the traces' bytes per event and decoding speed (compactSizes).
func (s *Suite) calls(ctx context.Context, rep *Report) error {
	if err := s.profile(ctx, rep, "every call and return", callsVariants, callgrindDefault); err != nil {
		return err
	}
	for _, name := range []string{"gzip", "sqlite"} {
		if err := s.compactSizes(rep, name, "calls", "call chain"); err != nil {
			return err
		}
	}
	return s.redisPairs(ctx, rep, "every call and return", callsVariants[:1])
}
