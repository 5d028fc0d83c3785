//go:build cgo

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	_ "github.com/duckdb/duckdb-go/v2"
	"github.com/spf13/pflag"

	"github.com/stint-project/stint/formats"
	"github.com/stint-project/stint/internal/cli"
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("trace-sql", pflag.ContinueOnError)
	format := fs.String("format", "table", "")
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
	events, query := fs.Arg(0), fs.Arg(1)
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, v := range views(events) {
		if _, err := db.ExecContext(ctx, v); err != nil {
			return fmt.Errorf("%s: %w", events, err)
		}
	}
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	return w(stdout, rows)
}

// views are the statements that make the tables of an export: events
// (event rows, kinds by name), rows (every row), periods, modules, runs.
func views(events string) []string {
	base := strings.TrimSuffix(events, ".parquet")
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return []string{
		"CREATE VIEW rows AS SELECT * FROM read_parquet(" + lit(events) + ")",
		fmt.Sprintf(`CREATE VIEW events AS SELECT run, kind_name AS kind, tid, "time", src_module, src, src_func,
			dst_module, dst, dst_func, value FROM rows WHERE kind BETWEEN 1 AND %d`, formats.MaxKind),
		fmt.Sprintf(`CREATE VIEW periods AS SELECT run, src AS period, "time", dst AS granted_ns, value AS used_ns
			FROM rows WHERE kind = %d`, formats.KindPeriod),
		"CREATE VIEW modules AS SELECT * FROM read_parquet(" + lit(base+".modules.parquet") + ")",
		"CREATE VIEW runs AS SELECT * FROM read_parquet(" + lit(base+".runs.parquet") + ")",
	}
}
