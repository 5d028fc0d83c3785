package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/stint-project/stint/internal/cli"
)

const sqlHelp = `Usage: trace sql [--format table|csv|json] [--no-symbols] [--memory-limit SIZE] QUERY TRACE...

Run an SQL query over traces (trace files or merged traces) with an
embedded DuckDB. The traces stream to it as 'trace export -f arrow
--name-table' writes them, names as numbers into a table of names (a
trace-sql built without DuckDB's Arrow interface, build tag
duckdb_arrow, gets a Parquet export in a temporary directory instead),
seen as these tables:

  events   one row per event: run, kind (jcc-taken, call, syscall, ...),
           tid, time (CLOCK_MONOTONIC ns), src_module, src, src_func,
           dst_module, dst, dst_func, value (a syscall's number)
  rows     every row, the runtime's own too (period, run-end, ...):
           the trace's columns with kind a number, and kind_name
  periods  a budgeted run's periods: run, period, time, granted_ns,
           used_ns
  modules  id (as in src_module, dst_module), path, name, build_id,
           size, rewritten
  runs     run (as in the events' run), file, binary, build_id, tool,
           options, pid, ppid, start_ns, mono_start_ns, budget_ns,
           period_ns, log_policy

Addresses are module-relative (link addresses), functions named from
the modules' symbols (sub_<hex> from .eh_frame in stripped files).

DuckDB is C++ and needs cgo, so the query runs in a command of its own,
trace-sql (go install github.com/stint-project/stint/cmd/trace-sql with
a C compiler), looked for at $STINT_TRACE_SQL, beside this trace, then
on PATH; the other commands stay free of cgo. trace-sql also runs the
same queries over a Parquet export made earlier:
  trace export -f parquet -o run.parquet run.arrow
  trace-sql run.parquet "SELECT ..."

Flags:
      --format F     table (default), csv or json (one object a line)
      --no-symbols   addresses only: read no module files
      --memory-limit SIZE
                     DuckDB's memory (default 1G; K, M, G suffixes): the
                     rows beyond it spill to a temporary directory, so a
                     trace of any length is queried in bounded memory;
                     below about 64M a large trace fails to load

Examples:
  trace sql "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY n DESC" run.arrow
  trace sql "SELECT dst_func, count(*) AS calls FROM events WHERE kind = 'call'
             GROUP BY dst_func ORDER BY calls DESC LIMIT 10" $STINT_OUT/*.arrow
  trace sql "SELECT m.name, count(*) AS n FROM events e JOIN modules m ON e.src_module = m.id
             GROUP BY m.name ORDER BY n DESC" $STINT_OUT/*.arrow

Exit status: 0 ok, 1 error (the query's too), 2 usage error.
`

// sqlEngineEnv names the trace-sql command to run, when set.
const sqlEngineEnv = "STINT_TRACE_SQL"

func runSQLCmd(ctx context.Context, args []string, stdout io.Writer) error {
	return runSQL(ctx, args, stdout, os.Stderr)
}

func runSQL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("sql", pflag.ContinueOnError)
	format := fs.String("format", "table", "")
	noSyms := fs.Bool("no-symbols", false, "")
	var limit uint64
	fs.Var(cli.Bytes{N: &limit}, "memory-limit", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// the engine's own flags (its default limit unless given)
	eng := []string{"--format", *format}
	if fs.Changed("memory-limit") {
		eng = append(eng, "--memory-limit", fmt.Sprint(limit))
	}
	switch {
	case fs.NArg() < 2:
		return usagef("sql: want a query and at least one trace (run 'trace sql --help')")
	case *format != "table" && *format != "csv" && *format != "json":
		return usagef("sql: --format %q: want table, csv or json (run 'trace sql --help')", *format)
	}
	engine, err := sqlEngine()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "stint-sql-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	events := filepath.Join(dir, "events.parquet")
	traces := fs.Args()[1:]
	ok, err := sqlArrow(ctx, engine, eng, events, fs.Arg(0), traces, *noSyms, stdout, stderr)
	if ok || err != nil {
		return err
	}
	// a trace-sql without DuckDB's Arrow interface: over a Parquet export
	eargs := []string{"-f", "parquet", "-o", events}
	if *noSyms {
		eargs = append(eargs, "--no-symbols")
	}
	if err := runExport(ctx, append(eargs, traces...), io.Discard, stderr); err != nil {
		return err
	}
	return sqlQuery(exec.CommandContext(ctx, engine, append(eng, events, fs.Arg(0))...), engine, stdout, stderr)
}

// sqlArrow runs query with the engine over the traces streamed to it as
// Arrow IPC (trace export -f arrow), the module and run tables written
// beside events; ok is false when the engine has no Arrow interface
// (it exits at once with status 3).
func sqlArrow(ctx context.Context, engine string, eng []string, events, query string, traces []string, noSyms bool, stdout, stderr io.Writer) (ok bool, err error) {
	src, err := openSources(traces)
	if err != nil {
		return false, err
	}
	err = writeSideTables(events, src)
	src.close()
	if err != nil {
		return false, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return false, err
	}
	cmd := exec.CommandContext(ctx, engine, append(append([]string{"--arrow"}, eng...), events, query)...)
	var engErr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, stdout, &engErr
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return false, fmt.Errorf("sql: %w", err)
	}
	pr.Close()
	// the names as numbers, their table beside events before the
	// stream ends (the engine reads it once the rows are in)
	eargs := []string{"-f", "arrow", "-o", "-", "--name-table", strings.TrimSuffix(events, ".parquet") + ".names.parquet"}
	if noSyms {
		eargs = append(eargs, "--no-symbols")
	}
	// its summary and notes go where the Parquet path's go: nowhere
	xerr := runExport(ctx, append(eargs, traces...), pw, io.Discard)
	pw.Close()
	werr := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() == 3 {
		return false, nil
	}
	if xerr != nil && werr == nil {
		return true, xerr
	}
	stderr.Write(engErr.Bytes())
	return true, engineErr(engine, werr)
}

// sqlQuery runs the engine's command, its output to stdout and stderr.
func sqlQuery(cmd *exec.Cmd, engine string, stdout, stderr io.Writer) error {
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return engineErr(engine, cmd.Run())
}

// engineErr is the error of a trace-sql run that ended with err.
func engineErr(engine string, err error) error {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return fmt.Errorf("sql: the query failed (%s exited %d)", filepath.Base(engine), ee.ExitCode())
	}
	return fmt.Errorf("sql: %w", err)
}

// sqlEngine finds the trace-sql command: $STINT_TRACE_SQL, beside this
// executable, or on PATH.
func sqlEngine() (string, error) {
	if p := os.Getenv(sqlEngineEnv); p != "" {
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "trace-sql")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("trace-sql"); err == nil {
		return p, nil
	}
	return "", errors.New("sql: no trace-sql command (DuckDB, which needs cgo): install it with a C compiler, " +
		"go install github.com/stint-project/stint/cmd/trace-sql@latest, or name it in $" + sqlEngineEnv)
}
