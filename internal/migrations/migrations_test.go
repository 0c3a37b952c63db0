package migrations_test

import (
	"testing"
	"testing/fstest"

	"github.com/redrive/redrive/internal/migrations"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("B")},
		"m/0001_init.sql": {Data: []byte("A")},
		"m/README":        {Data: []byte("ignored")},
	}
	fs, err := migrations.Load(fsys, "m")
	if err != nil || len(fs) != 2 || fs[0] != (migrations.File{Version: 1, Name: "init", SQL: "A"}) || fs[1].Version != 2 {
		t.Fatalf("Load = %+v, %v", fs, err)
	}
	for _, bad := range []fstest.MapFS{
		{"m/init.sql": {}},
		{"m/x_init.sql": {}},
		{"m/0001_a.sql": {}, "m/1_b.sql": {}},
	} {
		if _, err := migrations.Load(bad, "m"); err == nil {
			t.Errorf("Load(%v) succeeded", bad)
		}
	}
}
