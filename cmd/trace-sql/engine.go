//go:build cgo

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/spf13/pflag"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/cli"
)

// exitNoArrow is the exit status of --arrow in a build without DuckDB's
// Arrow interface: trace sql then exports Parquet instead.
const exitNoArrow = 3

// defaultMemoryLimit bounds DuckDB's memory: the rows --arrow loads
// into its table beyond it spill to a temporary directory, so a trace of
// any length is queried in bounded memory (10 M events took 838 MB
// without a bound).
const defaultMemoryLimit = 1 << 30

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("trace-sql", pflag.ContinueOnError)
	format := fs.String("format", "table", "")
	arrowIn := fs.Bool("arrow", false, "")
	limit := uint64(defaultMemoryLimit)
	fs.Var(cli.Bytes{N: &limit}, "memory-limit", "")
	if err := cli.ParseFlags(fs, "trace-sql", args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			_, err = io.WriteString(stdout, help)
		}
		return err
	}
	if fs.NArg() != 2 {
		return cli.Usagef("want EVENTS.parquet and a query (run 'trace-sql --help')")
	}
	w, ok := writers[*format]
	if !ok {
		return cli.Usagef("--format %q: want table, csv or json (run 'trace-sql --help')", *format)
	}
	if *arrowIn && !arrowSupported {
		return &cli.ExitStatus{Code: exitNoArrow, Msg: "--arrow: built without DuckDB's Arrow interface (build tag duckdb_arrow)"}
	}
	events, query := fs.Arg(0), fs.Arg(1)
	conn, done, err := open(ctx, limit)
	if err != nil {
		return err
	}
	defer done()
	base := strings.TrimSuffix(events, ".parquet")
	rows := []string{"CREATE VIEW rows AS SELECT * FROM read_parquet(" + lit(events) + ")"}
	if *arrowIn {
		if rows, err = loadArrow(ctx, conn, os.Stdin, base+".names.parquet"); err != nil {
			return fmt.Errorf("--arrow: %w", err)
		}
	}
	for _, v := range views(rows, base) {
		if _, err := conn.ExecContext(ctx, v); err != nil {
			return fmt.Errorf("%s: %w", events, err)
		}
	}
	res, err := conn.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer res.Close()
	return w(stdout, res)
}

// open opens an in-memory DuckDB that keeps to limit bytes, spilling to
// a temporary directory of its own (not DuckDB's default, ./.tmp);
// done closes it and removes the directory.
func open(ctx context.Context, limit uint64) (conn *sql.Conn, done func(), err error) {
	tmp, err := os.MkdirTemp("", "trace-sql-")
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("duckdb", "")
	if err == nil {
		conn, err = db.Conn(ctx)
		if err != nil {
			db.Close()
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, nil, err
	}
	done = func() {
		conn.Close()
		db.Close()
		os.RemoveAll(tmp)
	}
	for _, set := range []string{
		fmt.Sprintf("SET memory_limit = '%dB'", limit),
		"SET temp_directory = " + lit(tmp),
	} {
		if _, err := conn.ExecContext(ctx, set); err != nil {
			done()
			return nil, nil, fmt.Errorf("%s: %w", set, err)
		}
	}
	return conn, done, nil
}

func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// views are the statements that make the tables of an export: rows
// (every row: rows's statements, or none for a table loadArrow made),
// events (event rows, kinds by name), periods, and modules and runs from
// the side tables beside base.
func views(rows []string, base string) []string {
	return append(rows,
		fmt.Sprintf(`CREATE VIEW events AS SELECT run, kind_name AS kind, tid, "time", src_module, src, src_func,
			dst_module, dst, dst_func, value FROM rows WHERE kind BETWEEN 1 AND %d`, formats.MaxKind),
		fmt.Sprintf(`CREATE VIEW periods AS SELECT run, src AS period, "time", dst AS granted_ns, value AS used_ns
			FROM rows WHERE kind = %d`, formats.KindPeriod),
		"CREATE VIEW modules AS SELECT * FROM read_parquet("+lit(base+".modules.parquet")+")",
		"CREATE VIEW runs AS SELECT * FROM read_parquet("+lit(base+".runs.parquet")+")",
	)
}
