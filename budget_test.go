package redrive_test

import (
	"math/rand/v2"
	"testing"

	"github.com/redrive/redrive"
)

// The failure budget is judged at every look the monitor takes, so these
// tests check every prefix of a run's finishing order.

// simulate finishes total items in a random order in which the items listed
// in early finish first, and reports the number of finished items at which
// the run would abort, or 0 when it never does. dead[i] says item i dies.
func simulate(rng *rand.Rand, total int, dead func(i int) bool, early int, opts redrive.RunOptions) int {
	order := rng.Perm(total - early)
	var c redrive.Counts
	c.Total, c.Pending = total, total
	finish := func(i int) bool {
		c.Pending--
		if dead(i) {
			c.Dead++
		} else {
			c.Succeeded++
		}
		_, over := redrive.BudgetExceeded(c, opts)
		return over
	}
	for i := range early {
		if finish(i) {
			return c.Succeeded + c.Dead
		}
	}
	for _, j := range order {
		if finish(early + j) {
			return c.Succeeded + c.Dead
		}
	}
	return 0
}

// A run of 3,000 items whose 4 bad inputs fail in milliseconds, among the
// first 100 finished, and whose other items die at 1 %, ends with a dead
// rate near 1 % and must never abort at a 5 % budget. The finished-ratio
// rule aborted it at 6 dead of 102 finished.
func TestBudgetIgnoresEarlyFastFailures(t *testing.T) {
	opts := redrive.RunOptions{FailureBudget: 0.05, MinItems: 100}
	c := redrive.Counts{Total: 3000, Succeeded: 96, Dead: 6, Pending: 2898}
	if reason, over := redrive.BudgetExceeded(c, opts); over {
		t.Fatalf("6 dead of 102 finished, 3,000 in all: aborted (%s)", reason)
	}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 19))
		late := map[int]bool{}
		for i := 4; i < 3000; i++ {
			if rng.Float64() < 0.01 {
				late[i] = true
			}
		}
		// The 4 bad inputs and 2 unlucky items finish first.
		late[4], late[5] = true, true
		dead := func(i int) bool { return i < 4 || late[i] }
		if at := simulate(rng, 3000, dead, 100, opts); at != 0 {
			t.Fatalf("seed %d: a run with %d dead of 3,000 aborted after %d finished", seed, len(late)+4, at)
		}
	}
}

// Seed 000's 10 % budget keeps its meaning: a run whose items die at 30 %
// aborts within its first hundred finished items, one at 20 % within a few
// hundred (600 in the worst of these seeds), and a run at 5 % never aborts.
func TestBudgetAbortsARunOverIt(t *testing.T) {
	opts := redrive.RunOptions{FailureBudget: 0.10, MinItems: 50}
	for _, tc := range []struct {
		rate   float64
		within int // 0: must never abort
	}{{0.30, 100}, {0.20, 600}, {0.05, 0}} {
		for seed := range uint64(100) {
			rng := rand.New(rand.NewPCG(seed, 0))
			dies := make([]bool, 3000)
			for i := range dies {
				dies[i] = rng.Float64() < tc.rate
			}
			at := simulate(rng, 3000, func(i int) bool { return dies[i] }, 0, opts)
			switch {
			case tc.within == 0 && at != 0:
				t.Fatalf("rate %.2f, seed %d: aborted after %d finished items", tc.rate, seed, at)
			case tc.within > 0 && (at == 0 || at > tc.within):
				t.Fatalf("rate %.2f, seed %d: aborted after %d finished items, want within %d", tc.rate, seed, at, tc.within)
			}
		}
	}
}

// Once more items are dead than the budget allows of the whole run, the
// run aborts whatever has finished: the final rate can only be over it.
func TestBudgetAbortsWhenTheTotalIsLost(t *testing.T) {
	opts := redrive.RunOptions{FailureBudget: 0.05, MinItems: 100}
	c := redrive.Counts{Total: 100, Dead: 6, Pending: 94}
	reason, over := redrive.BudgetExceeded(c, opts)
	if !over {
		t.Fatalf("6 dead of 100 at a 5 %% budget: not aborted")
	}
	t.Log(reason)
	c = redrive.Counts{Total: 100, Dead: 5, Pending: 95}
	if _, over := redrive.BudgetExceeded(c, opts); over {
		t.Fatalf("5 dead of 100 at a 5 %% budget: aborted, though the run can still end at 5 %%")
	}
}
