// Package migrations reads the embedded, versioned SQL migrations of a
// store: files named NNNN_name.sql, applied in version order.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// File is one migration.
type File struct {
	Version int
	Name    string
	SQL     string
}

// Load reads the *.sql files of dir in fsys, sorted by version.
func Load(fsys fs.FS, dir string) ([]File, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	out := make([]File, 0, len(names))
	seen := map[int]string{}
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: the name must be NNNN_name.sql", n)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s have the same version %d", other, n, v)
		}
		seen[v] = n
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		out = append(out, File{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
