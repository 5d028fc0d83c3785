# lib.sh - sourced by oltp.sh and accuracy.sh: a MariaDB server on a
# fresh datadir ($work) and sysbench's OLTP read/write workload on it.
# Needs: work (a directory), threads (sysbench threads).

mariadbd=${MARIADBD:-/usr/sbin/mariadbd}

# install: a fresh datadir with sysbench's tables (4 of 10,000 rows)
install() {
	mariadb-install-db --no-defaults --datadir="$work/data" --user="$(id -un)" --auth-root-authentication-method=normal >"$work/install.log" 2>&1
	serve "$mariadbd"
	mariadb -S "$work/sock" -uroot -e "create database sbtest"
	sb prepare >/dev/null
	stop
}

# serve BIN: start BIN on the datadir, tracing into $work/tr; returns once it answers
serve() {
	STINT_OUT="$work/tr" "$1" --no-defaults --datadir="$work/data" --socket="$work/sock" --skip-networking \
		--user="$(id -un)" --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=0 >"$work/server.log" 2>&1 &
	i=0
	until mariadb -S "$work/sock" -uroot -e "select 1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 300 ] || { cat "$work/server.log" >&2; exit 1; }
		sleep 0.2
	done
}

stop() {
	mariadb-admin -S "$work/sock" -uroot shutdown
	wait
}

sb() { sysbench oltp_read_write --mysql-socket="$work/sock" --mysql-user=root --tables=4 --table-size=10000 --threads="$threads" "$@"; }
