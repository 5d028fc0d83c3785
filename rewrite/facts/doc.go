// Package facts is the rewriter's first stage: what it knows of its input
// before it decides anything. [Compute] decodes the executable code with
// a linear sweep from the function starts (symbols, .eh_frame), marks
// what placement must respect (branch targets, untouchable bytes,
// padding, what can run from a trampoline), classifies the module, and
// reserves code that must stay as it is (a shared object's code that runs
// before its initializer, a static executable's .fini). Tables derived
// from the code — the FDE ranges, PLT callees, indirect branch targets,
// the rets a call may return through — are computed once, on first use.
//
// Later stages add their own flags to [Code.Insts]; nothing else in a
// [Facts] value changes after Compute.
package facts
