package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

// cpuMeter measures the CPU time a phase of a benchmark costs: this
// process's, and on PostgreSQL on the same host, the server backends'
// that serve this process (its store's pool, the store's own VACUUMs and
// retention included). It reads /proc, so it measures on Linux only and
// reports 0 elsewhere.
type cpuMeter struct {
	conn   *pgx.Conn // apart from the store's pool, so as not to count itself
	pg     *postgres.Store
	schema string
	self   time.Duration
	server map[int]time.Duration // every client backend of the database, by PID
	// The process's heap allocations so far, objects and bytes
	// (runtime.MemStats.Mallocs and TotalAlloc).
	mallocs, bytes uint64
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ,
// 100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// procCPU is the user and system CPU time of process pid ("self" for this
// one), or false when it cannot be read.
func procCPU(pid string) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted are those after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+k) * clockTick, true
}

// backend is a client backend of the store's database.
type backend struct {
	pid  int
	ours bool // it serves this process
}

// backends returns the client backends of the store's database but the
// meter's own, and which of them serve this process: those whose client
// port is the local port of one of this process's TCP sockets, or, for a
// connection over a Unix socket, which has no port, those whose last
// statement named schema.
//
// The last statement alone, which this meter went by before, misses a
// pool connection whose last statement was a COMMIT or a setting, and
// counted the whole life of such a backend in the phase at whose end it
// next named the schema: with one store across the rounds of --rounds,
// a round's server CPU per item read twice and three times the others'.
func (m *cpuMeter) backends(ctx context.Context) []backend {
	if m.conn == nil {
		return nil
	}
	rows, err := m.conn.Query(ctx, `SELECT pid, coalesce(client_port, -1), position($1 in coalesce(query, '')) > 0
		FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, m.schema)
	if err != nil {
		return nil
	}
	defer rows.Close()
	ports := ownPorts()
	var bs []backend
	for rows.Next() {
		var pid, port int
		var named bool
		if rows.Scan(&pid, &port, &named) == nil {
			bs = append(bs, backend{pid: pid, ours: ports[port] || (port < 0 && named)})
		}
	}
	return bs
}

// ownPorts returns the local ports of this process's TCP sockets, read
// from /proc: the sockets among its open files, found by inode in the
// network namespace's tables of TCP sockets.
func ownPorts() map[int]bool {
	ports := map[int]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return ports
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") && strings.HasSuffix(l, "]") {
			inodes[l[len("socket:["):len(l)-1]] = true
		}
	}
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		// Each line after the header: sl, local address:port (hex),
		// remote address:port, state, queues, timer, retransmits, uid,
		// timeout, inode.
		lines := strings.Split(string(b), "\n")
		for _, line := range lines[min(1, len(lines)):] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			i := strings.LastIndexByte(f[1], ':')
			if p, err := strconv.ParseUint(f[1][i+1:], 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
	}
	return ports
}

// heapAllocs are the heap allocations this process made so far: objects
// and bytes.
func heapAllocs() (mallocs, bytes uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs, ms.TotalAlloc
}

// allocs sets c's allocations per item, of n items, from those made since
// startCPU.
func (m *cpuMeter) allocs(c *Cost, n int) {
	mallocs, bytes := heapAllocs()
	if n > 0 {
		c.Allocs, c.Bytes = float64(mallocs-m.mallocs)/float64(n), float64(bytes-m.bytes)/float64(n)
	}
}

// startCPU starts measuring.
func startCPU(ctx context.Context, store redrive.Store, schema string) *cpuMeter {
	m := &cpuMeter{schema: schema, server: map[int]time.Duration{}}
	m.self, _ = procCPU("self")
	m.mallocs, m.bytes = heapAllocs()
	if pg, ok := store.(*postgres.Store); ok {
		m.pg = pg
		if c, err := pgx.ConnectConfig(ctx, pg.Pool().Config().ConnConfig.Copy()); err == nil {
			m.conn = c
		}
		// Every backend, not only this process's: which serve it is
		// asked at the end, when the pool may have connected others.
		for _, b := range m.backends(ctx) {
			if d, ok := procCPU(strconv.Itoa(b.pid)); ok {
				m.server[b.pid] = d
			}
		}
	}
	return m
}

// stop returns the CPU time this process and the backends serving it
// spent since startCPU. A backend that connected in between counts from
// its start; one that disconnected is not counted.
func (m *cpuMeter) stop(ctx context.Context) (self, server time.Duration) {
	now, _ := procCPU("self")
	self = now - m.self
	if m.pg == nil {
		return self, 0
	}
	defer func() {
		if m.conn != nil {
			_ = m.conn.Close(ctx)
		}
	}()
	for _, b := range m.backends(ctx) {
		if !b.ours {
			continue
		}
		if d, ok := procCPU(strconv.Itoa(b.pid)); ok {
			server += d - m.server[b.pid]
		}
	}
	return self, server
}

// perItem is d per item in microseconds.
func perItem(d time.Duration, n int) float64 {
	return float64(d) / float64(time.Microsecond) / float64(n)
}

// Cost is where a benchmark's time per item went, in microseconds per
// item worked: CPU time of this process and of the PostgreSQL backends
// serving the benchmark (0 on SQLite, whose work is this process's), and
// the wall time spent in claim and complete calls (summed over the
// goroutines making them, so that together they may exceed the elapsed
// time per item).
type Cost struct {
	ProcessCPU   float64 `json:"process_cpu_us"`
	ServerCPU    float64 `json:"server_cpu_us,omitempty"`
	ClaimWall    float64 `json:"claim_wall_us"`
	CompleteWall float64 `json:"complete_wall_us"`
	// ClaimBatch and CompleteBatch are the mean items per claim call that
	// leased any and per complete call.
	ClaimBatch    float64 `json:"mean_claim_batch"`
	CompleteBatch float64 `json:"mean_complete_batch"`
	// Allocs and Bytes are this process's heap allocations per item, in
	// objects and bytes: what its garbage collector has to chase.
	Allocs float64 `json:"allocs_per_item,omitempty"`
	Bytes  float64 `json:"alloc_bytes_per_item,omitempty"`
}

// callTimer is a store that sums the wall time of its Claim and Complete
// calls.
type callTimer struct {
	redrive.Store
	claim, complete atomic.Int64 // nanoseconds
	// Calls that leased items, and complete calls.
	claims, completes atomic.Int64
}

// cost is the timer's part of a Cost of n items.
func (s *callTimer) cost(n int) Cost {
	c := Cost{ClaimWall: perItem(time.Duration(s.claim.Load()), n), CompleteWall: perItem(time.Duration(s.complete.Load()), n)}
	if k := s.claims.Load(); k > 0 {
		c.ClaimBatch = float64(n) / float64(k)
	}
	if k := s.completes.Load(); k > 0 {
		c.CompleteBatch = float64(n) / float64(k)
	}
	return c
}

// Claim is the store's Claim, timed.
func (s *callTimer) Claim(ctx context.Context, req redrive.ClaimRequest) ([]redrive.Lease, error) {
	start := time.Now()
	ls, err := s.Store.Claim(ctx, req)
	s.claim.Add(int64(time.Since(start)))
	if len(ls) > 0 {
		s.claims.Add(1)
	}
	return ls, err
}

// Complete is the store's Complete, timed.
func (s *callTimer) Complete(ctx context.Context, cs []redrive.Completion) ([]bool, error) {
	start := time.Now()
	applied, err := s.Store.Complete(ctx, cs)
	s.complete.Add(int64(time.Since(start)))
	s.completes.Add(1)
	return applied, err
}

// Notifications passes the store's notifications on, so that the wrapper
// keeps LISTEN/NOTIFY wake-ups.
func (s *callTimer) Notifications(ctx context.Context) <-chan struct{} {
	if n, ok := s.Store.(redrive.Notifier); ok {
		return n.Notifications(ctx)
	}
	ch := make(chan struct{})
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}
