package redrive

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrive/redrive/retry"
)

// engine is a started client: a claimer, workers, a completer, a
// heartbeat, a rescuer and a run monitor.
type engine struct {
	c         *Client
	store     Store
	cfg       Config
	log       *slog.Logger
	tracer    trace.Tracer // nil when tracing is off (trace.go)
	pipelines map[string]*Pipeline
	paceSums  paceSums // waits on the stages' flows, for the store (pacewaits.go)
	names     []string

	claimCtx    context.Context // ends when Stop begins: no more claims
	stopClaim   context.CancelFunc
	workCtx     context.Context // ends at Stop's deadline: handlers are interrupted
	stopWork    context.CancelFunc
	bgCtx       context.Context // ends when everything is flushed
	flushCtx    context.Context // bounds writing completions: ends soon after Stop's deadline
	stopFlush   context.CancelFunc
	stopBG      context.CancelFunc
	work        chan *task
	completions chan *task
	wakeCh      chan struct{}
	// writing counts the completers writing a batch; wrote tells a
	// gathering completer that a write ended (complete.go).
	writing atomic.Int64
	wrote   chan struct{}

	// Leases only for work that can start (claim.go): unstarted counts
	// the leased items no worker has taken yet, busy the workers with an
	// item (pacing, running, or handing it to the completer), starts the
	// handlers started, from which the claimer estimates the start rate.
	unstarted atomic.Int64
	busy      atomic.Int64
	starts    atomic.Int64

	// retainBacklog and retainNoteBacklog are the backlogs the last
	// retention pass left (RetentionPassed.Backlog and
	// NotificationBacklog); only the retention loop uses them.
	retainBacklog, retainNoteBacklog int

	mu sync.Mutex
	// current holds, by item ID, the newest lease of each item that this
	// process holds and has not yet completed: the one that heartbeats
	// extend. One process may hold an old and a new lease of one item (the
	// claimer took the item's next stage while the completer still does
	// the bookkeeping of the last one, or the rescuer took over a lease
	// that expired); each is settled on its own, through the completer's
	// batch, and the old one, no longer current, is not tracked here (it
	// was kept in a second map by lease, which cost each item a map entry
	// made and deleted for nothing the current leases do not give).
	current map[int64]*task
	// running counts this process's leases by stage. A task holds its
	// stage's counter, so that tracking a lease costs no lookup here; a
	// counter stays once made, so there are as many as stages met.
	running map[StageKey]*int
	aborted map[int64]string // run ID -> abort reason
	// abortedRuns is len(aborted), read without e.mu by every decision:
	// while no run is aborted, a decision takes no lock to learn so.
	abortedRuns atomic.Int64
	breakers    map[StageKey]retry.BreakerState
	paused      pausedStages // stages paused by operators (pause.go)

	// ext holds the leases handed out to external workers (external.go).
	ext externals

	// flows is the flow control of each stage (see flow.go); built at Start and
	// read without a lock afterwards.
	flows    map[StageKey]*flow
	flowList []*flow

	stopOnce sync.Once
	stopped  chan struct{} // closed when a Stop has finished
	stopErr  error

	claimers  sync.WaitGroup
	workers   sync.WaitGroup
	completer sync.WaitGroup
	bg        sync.WaitGroup
}

// task is one leased item on its way through a worker and the completer.
type task struct {
	// lease is the task's lease, in the slice that the claim returned
	// (not copied: a lease is about 400 bytes, and an item's task is most
	// of what the engine allocates for it).
	lease    *Lease
	pipeline *Pipeline
	stage    int // index in pipeline.Stages, -1 when unknown
	comp     Completion
	release  bool // return the lease without an attempt
	// unstarted marks a release of a lease that expired before its
	// attempt was recorded as started: it counts a lease loss.
	unstarted bool
	probe     bool // a half-open breaker's probe: its failure is the dependency's
	events    []Event
	// Flow control (flow.go): the stage's flow, the permit the call started
	// with, and whether a rate-limited result was the whole stage's.
	flow         *flow
	running      *int // the stage's count of leases (engine.running)
	permit       retry.Permit
	started      time.Time
	stageLimited bool
	stageDelay   time.Duration
	// cancel interrupts the running handler; lost records that the lease
	// was taken over; completing that the completion or release is being
	// written, so that the lease may end without having been lost. All
	// are guarded by engine.mu.
	cancel     context.CancelFunc
	lost       bool
	completing bool
	marked     bool // see startedAt
	// startedAt is when the handler started (zero before); marked that
	// the store knows it (startmark.go). Guarded by engine.mu.
	startedAt time.Time
}

func (t *task) key() StageKey {
	return StageKey{Pipeline: t.lease.Item.Pipeline, Stage: t.lease.Item.Stage}
}

// Start starts working the registered pipelines' items. It returns at once;
// the work goes on until Stop. ctx bounds the start itself and, when it
// ends, stops the client as Stop would with no grace period.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.eng != nil {
		return ErrStarted
	}
	e := &engine{
		c: c, store: c.store, cfg: c.cfg, log: c.cfg.Logger, tracer: newTracer(c.cfg.TracerProvider),
		pipelines: map[string]*Pipeline{},
		current:   map[int64]*task{},
		running:   map[StageKey]*int{},
		aborted:   map[int64]string{},
		breakers:  map[StageKey]retry.BreakerState{},
		wakeCh:    make(chan struct{}, 1),
		wrote:     make(chan struct{}, 1),
		stopped:   make(chan struct{}),
	}
	for n, p := range c.pipelines {
		e.pipelines[n] = p
		e.names = append(e.names, n)
	}
	if err := e.buildFlows(); err != nil {
		return err
	}
	e.claimCtx, e.stopClaim = context.WithCancel(context.WithoutCancel(ctx))
	e.workCtx, e.stopWork = context.WithCancel(context.WithoutCancel(ctx))
	// Each stage's attempts carry its flow as their retry.Pacer, so that a client
	// inside the handler with a flow control of its own (retryhttp.Transport) leaves
	// the pacing to the stage, which waits before the attempt and its timeout start
	// (workerCtx).
	for _, f := range e.flowList {
		f.paces = true
	}
	e.bgCtx, e.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	e.flushCtx, e.stopFlush = context.WithCancel(e.bgCtx)
	// Room for the most items leased and not started (the workers' own
	// and the prefetch, at most 2 × ClaimBatch: claim.go), and as many
	// completions waiting to be written, so that the completers write one
	// batch while the next accumulates.
	capacity := c.cfg.Workers + 2*c.cfg.ClaimBatch
	e.work = make(chan *task, capacity)
	e.completions = make(chan *task, capacity)

	for range c.cfg.Writers {
		e.completer.Add(1)
		go e.completeLoop()
	}
	for range c.cfg.Workers {
		e.workers.Add(1)
		go e.workLoop()
	}
	if len(e.names) > 0 {
		e.claimers.Add(1)
		go e.claimLoop()
		e.bg.Add(3)
		go e.heartbeatLoop()
		go e.markLoop()
		go e.rescueLoop()
	}
	e.bg.Add(3)
	go e.monitorLoop()
	go e.retentionLoop()
	go e.paceLoop()
	e.startWorkerHeartbeat()
	if n, ok := c.store.(Notifier); ok {
		ch := n.Notifications(e.claimCtx)
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			for range ch {
				e.wake()
			}
		}()
	}
	c.eng = e
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				sctx, cancel := context.WithCancel(context.Background())
				cancel()
				_ = c.Stop(sctx)
			case <-e.bgCtx.Done():
			}
		}()
	}
	return nil
}

// Stop stops claiming, lets running attempts finish until ctx ends, then
// interrupts them and returns the leases of whatever did not finish to
// pending, so nothing waits for a lease to expire. Items claimed but not
// started are returned at once.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	if e == nil {
		return ErrNotStarted
	}
	// Concurrent calls (say, Start's context ending while the program
	// stops the client) stop it once; the others wait for that stop.
	first := false
	e.stopOnce.Do(func() {
		first = true
		e.stopErr = e.stop(ctx)
		c.mu.Lock()
		c.eng = nil
		c.mu.Unlock()
		close(e.stopped)
	})
	if !first {
		select {
		case <-e.stopped:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.stopErr
}

func (e *engine) stop(ctx context.Context) error {
	e.stopClaim()
	// Completions still being written when ctx ends get a short grace;
	// after it, an unreachable store cannot hold Stop: those items' leases
	// expire and the rescuer repeats their attempts.
	stopFlushLater := context.AfterFunc(ctx, func() { time.AfterFunc(stopFlushGrace, e.stopFlush) })
	defer stopFlushLater()
	e.claimers.Wait()
	close(e.work)
	done := make(chan struct{})
	go func() { e.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		e.stopWork()
		<-done
	}
	e.stopWork()
	close(e.completions)
	e.completer.Wait()
	e.stopBG()
	e.bg.Wait()
	// Any lease still held (a completion that could not be written) is
	// released so another worker takes it at once; an item's older lease
	// has ended already.
	e.mu.Lock()
	var refs []LeaseRef
	for _, t := range e.current {
		refs = append(refs, t.lease.Ref())
	}
	e.mu.Unlock()
	var err error
	if len(refs) > 0 {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = e.store.Release(rctx, refs, e.cfg.Now())
		cancel()
	}
	if err != nil {
		return fmt.Errorf("redrive: stop: release leases: %w", err)
	}
	return nil
}

func (e *engine) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
	e.ext.broadcast() // external workers waiting for items (external.go)
}

// stopFlushGrace is how long Stop waits for completions to be written
// after its context ended.
const stopFlushGrace = 2 * time.Second

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
