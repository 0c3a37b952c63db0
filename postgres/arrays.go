package postgres

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters that pgx encodes without an allocation per element.
//
// pgx encodes a []T parameter element by element through an interface:
// each int64 above 255, time.Time and []byte is boxed (a time.Time twice,
// once more to wrap it for its codec), some eight allocations per item of
// a completion batch, which the garbage collector then chases
// (docs/BENCHMARKS.md, "The client's allocations per item"). These types
// hand pgx each element as a struct holding one pointer into the slice;
// such a struct fits in an interface without a copy on the heap, and it
// gives the element's codec its value through the codec's own valuer
// interface. The bytes sent are the same.
type (
	int64Array []int64
	int32Array []int32
	timeArray  []time.Time
	bytesArray [][]byte

	int64Elem struct{ p *int64 }
	int32Elem struct{ p *int32 }
	timeElem  struct{ p *time.Time }
	bytesElem struct{ p *[]byte }
)

// dimensions are an array's dimensions for pgtype.ArrayGetter: nil, a
// NULL array, for a nil slice, as pgtype.FlatArray does.
func dimensions(n int, isNil bool) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

func (a int64Array) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a int64Array) Index(i int) any                     { return int64Elem{&a[i]} }
func (a int64Array) IndexType() any                      { return int64Elem{new(int64)} }

func (a int32Array) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a int32Array) Index(i int) any                     { return int32Elem{&a[i]} }
func (a int32Array) IndexType() any                      { return int32Elem{new(int32)} }

func (a timeArray) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a timeArray) Index(i int) any                     { return timeElem{&a[i]} }
func (a timeArray) IndexType() any                      { return timeElem{new(time.Time)} }

func (a bytesArray) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a bytesArray) Index(i int) any                     { return bytesElem{&a[i]} }
func (a bytesArray) IndexType() any                      { return bytesElem{new([]byte)} }

func (e int64Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: *e.p, Valid: true}, nil
}
func (e int32Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e.p), Valid: true}, nil
}
func (e timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: *e.p, Valid: true}, nil
}

// BytesValue gives nil, which pgx sends as NULL, for a nil slice.
func (e bytesElem) BytesValue() ([]byte, error) { return *e.p, nil }
