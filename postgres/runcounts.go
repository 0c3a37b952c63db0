package postgres

// countsMoved is a WITH query, rc, that records in run_counts what the
// rows of src (a WITH query) moved between states: per run (the SQL
// expression run over src's columns), -1 for each row in from and +1 in
// to (expressions too), netted. A statement that uses it also has
// countsUnchanged among its UPDATE's conditions, so that the run_counts
// trigger of migration 0029 leaves the statement to it.
//
// The claim and the completion, the statements every item passes through,
// count this way: the trigger read the statement's old and new rows (whole
// items, payload included) from its transition tables to find states this
// statement knows already, and cost 2.2 µs of the server's time per item,
// a twentieth of it (docs/BENCHMARKS.md). Every other statement still
// leaves its counts to the trigger.
func (s *Store) countsMoved(src, run, from, to string) string {
	return `rc AS (INSERT INTO ` + s.q + `.run_counts (run_id, state, n)
		SELECT r, st, sum(n) FROM (
			SELECT ` + run + ` AS r, ` + to + ` AS st, count(*) AS n FROM ` + src + ` GROUP BY 1, 2
			UNION ALL
			SELECT ` + run + `, ` + from + `, -count(*) FROM ` + src + ` GROUP BY 1, 2) d
		GROUP BY r, st HAVING sum(n) <> 0)`
}
