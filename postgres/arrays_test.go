package postgres

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestArraysEncodeAsPgx checks that each array parameter type sends the
// bytes pgx sends for the plain slice, NULL elements and arrays included,
// with no allocation per element.
func TestArraysEncodeAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	now := time.Date(2026, 12, 5, 12, 30, 1, 123456789, time.UTC)
	cases := []struct {
		name  string
		oid   uint32
		plain any
		ours  any
	}{
		{"bigint[]", pgtype.Int8ArrayOID, []int64{0, 1, 256, -7, 1 << 62}, int64Array{0, 1, 256, -7, 1 << 62}},
		{"int[]", pgtype.Int4ArrayOID, []int32{0, 300, -1 << 31}, int32Array{0, 300, -1 << 31}},
		{"timestamptz[]", pgtype.TimestamptzArrayOID, []time.Time{now, now.Add(time.Hour).In(time.FixedZone("x", 3600)), {}},
			timeArray{now, now.Add(time.Hour).In(time.FixedZone("x", 3600)), {}}},
		{"bytea[]", pgtype.ByteaArrayOID, [][]byte{[]byte("a"), nil, {}}, bytesArray{[]byte("a"), nil, {}}},
		{"empty", pgtype.Int8ArrayOID, []int64{}, int64Array{}},
		{"NULL", pgtype.Int8ArrayOID, []int64(nil), int64Array(nil)},
	}
	for _, c := range cases {
		want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.plain, nil)
		if err != nil {
			t.Fatalf("%s: plain: %v", c.name, err)
		}
		got, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.ours, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%s: encoded\n%x\nwant\n%x", c.name, got, want)
		}
	}
	// A thousand elements: the allocations must not grow with them (the
	// plain []time.Time makes about three per element).
	ts := make(timeArray, 1000)
	ids := make(int64Array, 1000)
	for i := range ts {
		ts[i], ids[i] = now.Add(time.Duration(i)*time.Millisecond), int64(1000+i)
	}
	buf := make([]byte, 0, 64<<10)
	for _, c := range []struct {
		oid uint32
		v   any
	}{{pgtype.TimestamptzArrayOID, ts}, {pgtype.Int8ArrayOID, ids}} {
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.v, buf[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 10 {
			t.Errorf("%T: %.0f allocations for 1,000 elements", c.v, allocs)
		}
	}
}
