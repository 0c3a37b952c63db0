package postgres

import (
	"time"

	"github.com/redrive/redrive"
)

// completionRef is a completion's (item, token) pair: of several
// completions with one pair, Complete sends the first.
type completionRef struct{ id, token int64 }

// successKey is what the successes of a batch mostly share: the item's
// next state and stage, its counters there, and the attempt's stage,
// pipeline, delay and configuration hash. completeSuccessSQL gets each
// distinct key once and a key number per completion, not ten parallel
// arrays of mostly the same values.
type successKey struct {
	state          redrive.State
	stage, aStage  string
	stageIdx, aIdx int
	attempt, rlw   int
	pipeline, hash string
	delay          time.Duration
}

// maxSuccessKeys bounds the distinct keys of one success statement: the
// statement reads a key's fields by array subscript, which walks a text
// array from its start, so the keys stay few (a batch's pipelines times
// their stages). A completion that would add more goes in the full
// statement.
const maxSuccessKeys = 64

// successArgs gathers the parameters of completeSuccessSQL; room is how
// many completions it may carry at most, the capacity of its arrays.
type successArgs struct {
	room                 int
	ids, tokens, runs    []int64
	ords, keys, numbers  []int32
	failed               []int32
	payloads             [][]byte
	started, nows        []time.Time
	index                map[successKey]int32
	last                 successKey
	lastN                int32
	kStates, kStages     []string
	kAStages, kPipelines []string
	kHashes              []string
	kStageIdx, kAttempts []int32
	kRLWs, kAIdx         []int32
	kDelays              []int64
}

// add appends c, the completion at index ord of the caller's slice, and
// reports whether the success statement can carry it: a succeeded attempt
// with no class or error, finished at the completion's time, that
// leaves the item succeeded or pending at once (a move to the next stage)
// and records its attempt on the completed item. Every other completion,
// failures and whatever carries a reason or a fingerprint, needs the full
// statement, which stores each of those columns.
func (a *successArgs) add(c *redrive.Completion, ord int32) bool {
	r := &c.Record
	if r.Outcome != redrive.OutcomeSucceeded || r.Class != "" || r.Error != "" ||
		!c.Now.Equal(r.FinishedAt) || (r.ItemID != 0 && r.ItemID != c.ItemID) {
		return false
	}
	switch c.State {
	case redrive.StateSucceeded:
	case redrive.StatePending:
		// A retry waits; only a move that is due at once sets next_at
		// to the completion's time, which the statement assumes.
		if !c.NextAt.Equal(c.Now) {
			return false
		}
	default:
		return false
	}
	k := successKey{state: c.State, stage: c.Stage, aStage: r.Stage, stageIdx: c.StageIndex, aIdx: r.StageIndex,
		attempt: c.Attempt, rlw: c.RateLimitWaits, pipeline: r.Pipeline, hash: r.ConfigHash, delay: r.Delay}
	n := a.lastN
	if len(a.kStates) == 0 || k != a.last {
		var ok bool
		n, ok = a.index[k]
		if !ok {
			if len(a.kStates) == maxSuccessKeys {
				return false
			}
			if a.index == nil {
				a.index = make(map[successKey]int32)
			}
			a.kStates = append(a.kStates, string(k.state))
			a.kStages = append(a.kStages, k.stage)
			a.kStageIdx = append(a.kStageIdx, int32(k.stageIdx))
			a.kAttempts = append(a.kAttempts, int32(k.attempt))
			a.kRLWs = append(a.kRLWs, int32(k.rlw))
			a.kAStages = append(a.kAStages, k.aStage)
			a.kAIdx = append(a.kAIdx, int32(k.aIdx))
			a.kPipelines = append(a.kPipelines, k.pipeline)
			a.kDelays = append(a.kDelays, int64(k.delay))
			a.kHashes = append(a.kHashes, k.hash)
			// PostgreSQL's arrays start at 1.
			n = int32(len(a.kStates))
			a.index[k] = n
		}
		a.last, a.lastN = k, n
	}
	if a.ids == nil {
		a.ids, a.tokens, a.runs = make([]int64, 0, a.room), make([]int64, 0, a.room), make([]int64, 0, a.room)
		a.ords, a.keys = make([]int32, 0, a.room), make([]int32, 0, a.room)
		a.numbers, a.failed = make([]int32, 0, a.room), make([]int32, 0, a.room)
		a.payloads = make([][]byte, 0, a.room)
		a.started, a.nows = make([]time.Time, 0, a.room), make([]time.Time, 0, a.room)
	}
	a.ids = append(a.ids, c.ItemID)
	a.tokens = append(a.tokens, c.Token)
	a.ords = append(a.ords, ord)
	a.keys = append(a.keys, n)
	a.payloads = append(a.payloads, c.Payload)
	a.started = append(a.started, r.StartedAt)
	a.nows = append(a.nows, c.Now)
	a.numbers = append(a.numbers, int32(r.Number))
	a.failed = append(a.failed, int32(c.FailedAttempts))
	a.runs = append(a.runs, r.RunID)
	return true
}

// args are the parameters of completeSuccessSQL, in its order.
func (a *successArgs) args() []any {
	// The per-item arrays go as the array types of arrays.go, which pgx
	// encodes without boxing each element; the per-key ones are few.
	return []any{int64Array(a.ids), int64Array(a.tokens), int32Array(a.ords), int32Array(a.keys), bytesArray(a.payloads),
		timeArray(a.started), timeArray(a.nows), int32Array(a.numbers), int32Array(a.failed), int64Array(a.runs),
		a.kStates, a.kStageIdx, a.kStages, a.kAttempts, a.kRLWs, a.kAStages, a.kAIdx, a.kPipelines, a.kDelays, a.kHashes}
}

// completeSuccessSQL is completeFullSQL for completions that successArgs
// carries: ten arrays per completion instead of 33, and the reason and
// fingerprint columns cleared as the full statement clears them for a
// success. A key's fields are read as $N[u.k]: a join with the keys could
// put them first in the plan's nested loop and lock the items out of ID
// order.
func (s *Store) completeSuccessSQL() string {
	return `WITH upd AS (
		UPDATE ` + s.q + `.items i SET state = ($11::text[])[u.k], stage_index = ($12::int[])[u.k],
			stage = ($13::text[])[u.k], attempt = ($14::int[])[u.k], rate_limit_waits = ($15::int[])[u.k],
			next_at = CASE WHEN ($11::text[])[u.k] = 'pending' THEN u.now ELSE i.next_at END,
			ready = ($11::text[])[u.k] = 'pending',
			payload = coalesce(u.payload, i.payload), lease_token = i.lease_token + 1,
			lease_owner = '', lease_expires_at = NULL, updated_at = u.now,
			reason_stage = NULL, reason_class = NULL, reason_error = NULL, reason_attempts = NULL,
			reason_at = NULL, reason_fingerprint = NULL, failed_attempts = u.failed
		FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::int[], $5::bytea[], $6::timestamptz[],
			$7::timestamptz[], $8::int[], $9::int[], $10::bigint[])
		AS u(id, token, ord, k, payload, started, now, number, failed, run)
		WHERE i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1 AND i.id = ANY($1::bigint[])
			AND ` + countsUnchanged + `
		RETURNING i.id, u.token, u.ord, u.k, coalesce(nullif(u.run, 0), i.run_id) AS a_run, i.run_id AS c_run, i.state AS c_state,
			coalesce(nullif(($18::text[])[u.k], ''), i.pipeline) AS a_pipeline, u.number, u.started, u.now,
			CASE WHEN i.stage_index > ($17::int[])[u.k] THEN i.stage END AS next_stage,
			CASE WHEN i.stage_index > ($17::int[])[u.k] THEN i.stage_index END AS next_stage_index,
			CASE WHEN i.stage_index > ($17::int[])[u.k] THEN i.payload END AS next_input,
			i.ready, i.priority, i.order_at),
	ins AS (
		INSERT INTO ` + s.q + `.attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, class, error,
			started_at, finished_at, delay_ns, config_hash, next_stage, next_stage_index, next_input, fingerprint)
		SELECT id, a_run, a_pipeline, ($16::text[])[k], ($17::int[])[k], number, 'succeeded', '', '',
			started, now, ($19::bigint[])[k], ($20::text[])[k], next_stage, next_stage_index, next_input, NULL
		FROM upd ORDER BY ord),
	` + s.countOff("upd") + `,
	` + s.countsMoved("upd", "c_run", "'running'", "c_state") + `
	SELECT id, token, ready, priority, order_at FROM upd`
}

// completeFullSQL applies any completions, with the parameters of
// completeFullArgs.
//
// Fencing is by token: an item's token is odd exactly while it is
// running (Claim and ClaimExpired give it their batch's token, 2 * batch
// + 1, above every token before; every way out of running, Complete and
// Release, adds 1), so "the token is current and odd" is "the token is
// current and the item running". Both count the leases they end off
// their batches (leasebatches.go). The statement has no
// condition on the items' state (not state = 'running'): with statistics
// taken while nothing ran, the planner estimated such a scan at one row;
// its only condition on the items alone, id = ANY(the completions' IDs),
// bounds any scan of items to the batch, and a hash join of it with the
// completions is the plan (see completePlan). The UPDATE returns what the attempts need, so they
// are inserted without a second join; a completion that moves the item
// on a stage also stores that stage and its input (the item's new
// payload) on its attempt, for RedriveFrom (see migration 0010).
//
// With counted (see countsCompletionFailures), the statement also writes
// the failure_counts rows of the items it leaves dead or canceled and of
// the failed attempts it inserts, one per group, and tells the row
// triggers to skip them (failuresCounted, migration 0028). Every item it
// updates was running, so none leaves a failure group.
func (s *Store) completeFullSQL(counted bool) string {
	counts, countCols := ``, ``
	if counted {
		counts = `, ` + s.itemFailuresCome("upd") + `, ` + s.attemptFailuresCome("upd")
		countCols = `, i.state, i.pipeline, i.stage, i.reason_class, i.reason_fingerprint, i.run_id`
	}
	return `WITH upd AS (
		UPDATE ` + s.q + `.items i SET state = u.state, stage_index = u.stage_index, stage = u.stage,
			attempt = u.attempt, rate_limit_waits = u.rlw,
			next_at = CASE WHEN u.state = 'pending' THEN u.next_at ELSE i.next_at END,
			ready = u.state = 'pending' AND u.next_at <= u.now,
			payload = coalesce(u.payload, i.payload), lease_token = i.lease_token + 1,
			lease_owner = '', lease_expires_at = NULL, updated_at = u.now,
			reason_stage = CASE WHEN u.r_has THEN u.r_stage END,
			reason_class = CASE WHEN u.r_has THEN u.r_class END,
			reason_error = CASE WHEN u.r_has THEN u.r_error END,
			reason_attempts = CASE WHEN u.r_has THEN u.r_attempts END,
			reason_at = CASE WHEN u.r_has THEN u.r_at END,
			reason_fingerprint = CASE WHEN u.r_has THEN u.r_fp END,
			failed_attempts = u.failed
		FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::int[], $7::int[],
			$8::timestamptz[], $9::bytea[], $10::timestamptz[], $11::bool[], $12::text[], $13::text[], $14::text[],
			$15::int[], $16::timestamptz[], $17::text[], $18::int[], $19::int[], $20::text[], $21::text[], $22::text[],
			$23::timestamptz[], $24::timestamptz[], $25::bigint[], $26::bigint[], $27::bigint[], $28::text[],
			$29::int[], $30::text[], $31::text[], $32::text[], $33::int[])
		AS u(id, token, state, stage_index, stage, attempt, rlw, next_at, payload, now, r_has, r_stage, r_class, r_error,
			r_attempts, r_at, a_stage, a_stage_index, a_number, a_outcome, a_class, a_error, a_started, a_finished, a_delay,
			a_item, a_run, a_pipeline, failed, a_hash, r_fp, a_fp, ord)
		WHERE i.id = u.id AND i.lease_token = u.token AND u.token % 2 = 1 AND i.id = ANY($1::bigint[])
			AND ` + countsUnchanged + countedCond(counted) + `
		RETURNING i.id, u.token, u.ord, coalesce(nullif(u.a_item, 0), i.id) AS a_item, coalesce(nullif(u.a_run, 0), i.run_id) AS a_run,
			coalesce(nullif(u.a_pipeline, ''), i.pipeline) AS a_pipeline, u.a_stage, u.a_stage_index, u.a_number, u.a_outcome,
			u.a_class, u.a_error, u.a_started, u.a_finished, u.a_delay, u.a_hash,
			CASE WHEN u.a_outcome <> 'succeeded' THEN u.a_fp END AS a_fp,
			CASE WHEN i.stage_index > u.a_stage_index THEN i.stage END AS next_stage,
			CASE WHEN i.stage_index > u.a_stage_index THEN i.stage_index END AS next_stage_index,
			CASE WHEN i.stage_index > u.a_stage_index THEN i.payload END AS next_input,
			i.ready, i.priority, i.order_at, i.run_id AS c_run, i.state AS c_state` + countCols + `),
	ins AS (
		INSERT INTO ` + s.q + `.attempts (item_id, run_id, pipeline, stage, stage_index, number, outcome, class, error,
			started_at, finished_at, delay_ns, config_hash, next_stage, next_stage_index, next_input, fingerprint)
		SELECT a_item, a_run, a_pipeline, a_stage, a_stage_index, a_number, a_outcome, a_class, a_error,
			a_started, a_finished, a_delay, a_hash, next_stage, next_stage_index, next_input, a_fp
		FROM upd ORDER BY ord)` + counts + `,
	` + s.countOff("upd") + `,
	` + s.countsMoved("upd", "c_run", "'running'", "c_state") + `
	SELECT id, token, ready, priority, order_at FROM upd`
}

// completeFullArgs are the parameters of completeFullSQL for the
// completions cs[i] for i in which, in that order, and about how many
// failure groups they fall in: the rows a counting statement adds to
// failure_counts (an item's pipeline and run, when a completion leaves
// them to the item, are not told apart).
func completeFullArgs(cs []redrive.Completion, which []int) ([]any, int) {
	n := len(which)
	type group struct {
		kind, pipeline, stage, class, fp string
		run                              int64
	}
	var groups map[group]struct{}
	count := func(g group) {
		if groups == nil {
			groups = make(map[group]struct{})
		}
		groups[g] = struct{}{}
	}
	var (
		ids, tokens, delays                       = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		states, stages, rStages, rClasses, rErrs  []string
		aStages, aOutcomes, aClasses, aErrs       []string
		stageIdx, attempts, rlws, rAttempts, aIdx []int32
		aNumbers, failed, ords                    []int32
		nextAts, nows, rAts, aStarted, aFinished  []time.Time
		payloads                                  [][]byte
		aItems, aRuns                             []int64
		aPipelines                                []string
		rHas                                      []bool
		aHashes, rFPs, aFPs                       []string
	)
	for _, i := range which {
		c := &cs[i]
		ords = append(ords, int32(i))
		ids = append(ids, c.ItemID)
		tokens = append(tokens, c.Token)
		states = append(states, string(c.State))
		stageIdx = append(stageIdx, int32(c.StageIndex))
		stages = append(stages, c.Stage)
		attempts = append(attempts, int32(c.Attempt))
		rlws = append(rlws, int32(c.RateLimitWaits))
		nextAts = append(nextAts, c.NextAt)
		payloads = append(payloads, c.Payload)
		nows = append(nows, c.Now)
		// Dead and canceled items carry a reason, by default the
		// recorded attempt's; other states carry none.
		final := c.State == redrive.StateDead || c.State == redrive.StateCanceled
		r := c.Reason
		if !final || r == nil {
			r = &redrive.Reason{Stage: c.Stage, Class: c.Record.Class, Error: c.Record.Error,
				Attempts: c.Attempt, At: c.Now}
		}
		rHas = append(rHas, final)
		rStages = append(rStages, r.Stage)
		rClasses = append(rClasses, r.Class)
		rErrs = append(rErrs, r.Error)
		rAttempts = append(rAttempts, int32(r.Attempts))
		rAts = append(rAts, r.At)
		rFP := ""
		if final {
			rFP = redrive.Fingerprint(r.Error)
			count(group{string(c.State), c.Record.Pipeline, c.Stage, r.Class, rFP, c.Record.RunID})
		}
		rFPs = append(rFPs, rFP)
		rec := &c.Record
		aItems = append(aItems, rec.ItemID)
		aRuns = append(aRuns, rec.RunID)
		aPipelines = append(aPipelines, rec.Pipeline)
		aStages = append(aStages, rec.Stage)
		aIdx = append(aIdx, int32(rec.StageIndex))
		aNumbers = append(aNumbers, int32(rec.Number))
		aOutcomes = append(aOutcomes, string(rec.Outcome))
		aClasses = append(aClasses, rec.Class)
		aErrs = append(aErrs, rec.Error)
		aStarted = append(aStarted, rec.StartedAt)
		aFinished = append(aFinished, rec.FinishedAt)
		delays = append(delays, int64(rec.Delay))
		failed = append(failed, int32(c.FailedAttempts))
		aHashes = append(aHashes, rec.ConfigHash)
		aFP := ""
		if rec.Outcome != redrive.OutcomeSucceeded {
			aFP = rFP
			if !final || rec.Error != r.Error {
				aFP = redrive.Fingerprint(rec.Error)
			}
			count(group{"failed", rec.Pipeline, rec.Stage, rec.Class, aFP, rec.RunID})
		}
		aFPs = append(aFPs, aFP)
	}
	return []any{ids, tokens, states, stageIdx, stages, attempts, rlws, nextAts, payloads, nows, rHas, rStages, rClasses, rErrs,
		rAttempts, rAts, aStages, aIdx, aNumbers, aOutcomes, aClasses, aErrs, aStarted, aFinished, delays, aItems, aRuns, aPipelines,
		failed, aHashes, rFPs, aFPs, ords}, len(groups)
}
