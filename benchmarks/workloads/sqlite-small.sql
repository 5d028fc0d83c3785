-- The small sqlite3 workload (for --every): 5k rows, otherwise as sqlite.sql;
-- Joins, aggregates and updates. Deterministic output.
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000)
INSERT INTO t SELECT x, x % 97, printf('name-%08d', (x * 7919) % 1000003), (x * 31 % 1000) / 7.0 FROM c;
CREATE INDEX t_grp ON t(grp);
CREATE INDEX t_name ON t(name);
SELECT grp, count(*), round(sum(val), 3), min(name), max(name) FROM t GROUP BY grp ORDER BY grp LIMIT 10;
SELECT count(*) FROM t a JOIN t b ON a.grp = b.grp AND a.id = b.id + 97 WHERE a.val > 50;
UPDATE t SET val = val * 1.5 WHERE grp IN (3, 5, 7, 11, 13);
SELECT round(avg(val), 4) FROM t;
SELECT name FROM t WHERE name LIKE 'name-0000%' ORDER BY name LIMIT 5;
DELETE FROM t WHERE id % 3 = 0;
SELECT count(*), round(total(val), 2) FROM t;
