package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds the statement cache. Statements vary only with the
// shape of a request (how many pipelines and stages a claim names, the size
// bucket of a batch), so a small cache holds the working set.
const maxCachedStmts = 128

// stmtCache keeps statements prepared on the write connection, so that hot
// statements are parsed once rather than on every batch.
type stmtCache struct {
	mu sync.Mutex
	db *sql.DB
	m  map[string]*sql.Stmt
}

// get returns q prepared on the write pool, preparing and caching it on
// first use. It must not be called inside a write transaction: the write
// pool has one connection, which the transaction holds. Inside the
// transaction, use tx.StmtContext with the result; it reuses the prepared
// statement of that connection.
func (c *stmtCache) get(ctx context.Context, q string) (*sql.Stmt, error) {
	c.mu.Lock()
	st, ok := c.m[q]
	c.mu.Unlock()
	if !ok {
		var err error
		if st, err = c.db.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
		c.mu.Lock()
		if old, ok := c.m[q]; ok {
			st.Close()
			st = old
		} else {
			if c.m == nil || len(c.m) >= maxCachedStmts {
				for _, s := range c.m {
					s.Close()
				}
				c.m = map[string]*sql.Stmt{}
			}
			c.m[q] = st
		}
		c.mu.Unlock()
	}
	return st, nil
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		s.Close()
	}
	c.m = nil
}
