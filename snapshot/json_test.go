package snapshot

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var durationType = reflect.TypeOf(time.Duration(0))

// TestJSONDurationsAreMillis: every time.Duration field reachable from a
// Snapshot is left out of the default encoding (json:"-") and its struct
// has its own MarshalJSON and UnmarshalJSON (which write it as a *_ms key),
// so no raw nanoseconds reach `tsd status --json`. A field added later
// without that fails here.
func TestJSONDurationsAreMillis(t *testing.T) {
	marshaler := reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	unmarshaler := reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map || ty.Kind() == reflect.Array {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() != reflect.TypeOf(Snapshot{}).PkgPath() {
			return
		}
		seen[ty] = true
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Type == durationType {
				if f.Tag.Get("json") != "-" {
					t.Errorf("%s.%s is a time.Duration encoded as nanoseconds: tag it json:\"-\" and write it as a _ms key in %s's MarshalJSON (json.go)", path, f.Name, ty.Name())
				}
				if !ty.Implements(marshaler) || !reflect.PointerTo(ty).Implements(unmarshaler) {
					t.Errorf("%s has the duration %s but no MarshalJSON/UnmarshalJSON writing it in ms", ty.Name(), f.Name)
				}
				continue
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeOf(Snapshot{}), "Snapshot")
}

// fill sets every exported field reachable from v to a non-zero value
// (slices and maps get one element), so an encoding test covers fields
// added after it was written.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2025, 1, 2, 3, 4, 5, *n*1000, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), n)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", *n%3))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == durationType {
			v.SetInt(int64(*n)*int64(time.Millisecond) + 250*int64(time.Microsecond))
			return
		}
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	}
}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestJSONKeysSnakeCase: with every field set, every key of the encoded
// Snapshot is snake_case (no Go field names such as ReqPerS), every
// duration key ends in _ms, and the Snapshot decodes back to itself
// (the remote dashboard and `tsd status` read this encoding).
func TestJSONKeysSnakeCase(t *testing.T) {
	var s Snapshot
	n := 0
	fill(reflect.ValueOf(&s).Elem(), &n)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(any, string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snakeKey.MatchString(k) {
					t.Errorf("key %s.%s is not snake_case", path, k)
				}
				if (strings.Contains(k, "ttft") || strings.Contains(k, "itl")) && !strings.HasSuffix(k, "_ms") {
					t.Errorf("latency key %s.%s names no unit", path, k)
				}
				walk(e, path+"."+k)
			}
		case []any:
			for _, e := range v {
				walk(e, path+"[]")
			}
		}
	}
	walk(doc, "$")
	for _, k := range []string{`"ttft_p50_ms":`, `"itl_p99_ms":`, `"req_per_sec":`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("no %s in %s", k, b)
		}
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("the Snapshot does not survive its JSON:\n got %+v\nwant %+v", back.Gateway, s.Gateway)
	}
}

func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ms float64
	}{
		{0, 0},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 1.5},
		{12345678 * time.Nanosecond, 12.345678},
		{3 * time.Second, 3000},
	} {
		if got := Millis(c.d); got != c.ms {
			t.Errorf("Millis(%v) = %v, want %v", c.d, got, c.ms)
		}
		if got := FromMillis(c.ms); got != c.d {
			t.Errorf("FromMillis(%v) = %v, want %v", c.ms, got, c.d)
		}
	}
}

// TestJSONOptionalTimesOmitZero: an optional time (a breaker's until, a
// role's started_at, a rank's hello_at…) is left out when unset, never
// written as "0001-01-01T00:00:00Z" (omitempty keeps a zero time.Time;
// omitzero drops it).
func TestJSONOptionalTimesOmitZero(t *testing.T) {
	timeType := reflect.TypeOf(time.Time{})
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, path string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map || ty.Kind() == reflect.Array {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] || ty.PkgPath() != reflect.TypeOf(Snapshot{}).PkgPath() {
			return
		}
		seen[ty] = true
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			if f.Type == timeType && strings.Contains(f.Tag.Get("json"), ",omitempty") {
				t.Errorf("%s.%s: a time.Time tagged omitempty is written as 0001-01-01T00:00:00Z when unset; tag it omitzero", path, f.Name)
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeOf(Snapshot{}), "Snapshot")
	b, err := json.Marshal(GatewayStatus{Breakers: []BreakerStatus{{Role: "decode", State: BreakerClosed, Since: time.Unix(1, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "0001-01-01") || strings.Contains(string(b), `"until"`) {
		t.Fatalf("a closed breaker: %s", b)
	}
}
