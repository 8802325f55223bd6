package front

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
)

// Fields says which top-level request fields a route takes beyond those
// its request struct declares (every json-tagged field of the struct,
// embedded ones included, is implemented and so accepted): fields clients
// send that change nothing here (Ignored) and fields refused with a
// reason (Refused). Any other field is refused as unknown, so a parameter
// is never accepted and silently ignored.
type Fields struct {
	// Ignored: accepted, no effect (name → why that is harmless).
	Ignored map[string]string
	// Refused: name → why (the 400's message).
	Refused map[string]string
	// Nested checks the keys of struct-typed fields too, by their own
	// rows (e.g. /generate's sampling_params).
	Nested map[string]*Fields
	// Values: a field accepted only with some values (whether the struct
	// declares it or not); any other value is refused by name with the
	// row's reason (/v1/responses' background: true).
	Values map[string]Allowed
}

// Allowed is a Values row: the JSON values accepted (compact, e.g.
// `false`, `"auto"`; null is always accepted: it asks for nothing) and
// why any other is refused.
type Allowed struct {
	Values []string
	Why    string
}

func (a Allowed) admits(raw json.RawMessage) bool {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return false
	}
	if b.String() == "null" {
		return true
	}
	for _, v := range a.Values {
		if b.String() == v {
			return true
		}
	}
	return false
}

// Decode parses a JSON body into v (a pointer to struct), checks its
// top-level fields against fields, and turns every failure into a 400
// naming the field in the client's terms, never Go's.
func Decode(r *http.Request, v any, fields *Fields) *Error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return ReadError(err)
	}
	return DecodeBytes(b, v, fields)
}

// ReadError is a failed body read as the client's error: 413 past a
// MaxBytesReader's limit, else 400.
func ReadError(err error) *Error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "", "request body over %d bytes", mb.Limit).because(err)
	}
	return BadRequest("", "read request body: %w", err)
}

// DecodeBytes is Decode on a body in memory.
func DecodeBytes(b []byte, v any, fields *Fields) *Error {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return BadRequest("", "empty request body; send a JSON object")
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return syntaxError(trimmed)
		}
		return Errorf(http.StatusBadRequest, "invalid_request", "", "the request body must be a JSON object")
	}
	// One Unmarshal decodes a good body in one pass over it; a body it
	// refuses goes the Decoder's way, whose errors name the field or
	// the trailing data (Unmarshal checks the syntax before it decodes
	// anything, and a type error the Decoder reports the same).
	if json.Unmarshal(trimmed, v) != nil {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		if err := dec.Decode(v); err != nil {
			return decodeError(trimmed, reflect.TypeOf(v), err)
		}
		if dec.More() {
			return BadRequest("", "trailing data after the JSON body")
		}
	}
	if fields != nil {
		if e := checkFields(trimmed, reflect.TypeOf(v), fields); e != nil {
			return e
		}
	}
	return nil
}

func syntaxError(b []byte) *Error {
	var x any
	err := json.Unmarshal(b, &x)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return Errorf(http.StatusBadRequest, "invalid_json", "", "invalid JSON body: malformed JSON at byte %d: %w", se.Offset, se)
	}
	if err != nil {
		return Errorf(http.StatusBadRequest, "invalid_json", "", "invalid JSON body: malformed JSON: %s", clean(err.Error())).because(err)
	}
	return Errorf(http.StatusBadRequest, "invalid_json", "", "invalid JSON body: malformed JSON")
}

func decodeError(b []byte, t reflect.Type, err error) *Error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := clientPath(t, te.Field)
		if field == "" {
			return BadRequest("", "invalid type: expected %s, got %s", jsonKind(te.Type), te.Value).because(err)
		}
		return BadRequest(field, "invalid type for field '%s': expected %s, got %s", field, jsonKind(te.Type), te.Value).because(err)
	case errors.As(err, &se):
		return Errorf(http.StatusBadRequest, "invalid_json", "", "invalid JSON body: malformed JSON at byte %d: %w", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, "invalid_json", "", "invalid JSON body: malformed JSON: the body ends early").because(err)
	}
	if !json.Valid(b) {
		return syntaxError(b)
	}
	return BadRequest("", "invalid request body: %s", clean(err.Error())).because(err)
}

// clientPath drops the embedded structs' Go names from a decode error's
// field path ("common.max_tokens" is the client's "max_tokens").
func clientPath(t reflect.Type, path string) string {
	if path == "" {
		return ""
	}
	var out []string
	for _, seg := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t != nil && t.Kind() == reflect.Struct {
			if ft, ok := jsonFields(t)[seg]; ok {
				out = append(out, seg)
				t = ft
				continue
			}
			if f, ok := t.FieldByName(seg); ok && f.Anonymous {
				continue // an embedded struct: its fields are the parent's
			}
		}
		out = append(out, seg)
		t = nil
	}
	return strings.Join(out, ".")
}

// clean keeps Go's type vocabulary out of a message that reaches a client.
func clean(msg string) string {
	msg = strings.ReplaceAll(msg, "json: ", "")
	if i := strings.Index(msg, " into Go "); i >= 0 {
		msg = msg[:i]
	}
	return strings.ReplaceAll(msg, "cannot unmarshal", "cannot read")
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(json.RawMessage(nil)) {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "a value"
}

// checkFields refuses the top-level keys (and those of Strict fields) the
// struct does not declare and fields do not list as ignored.
func checkFields(b []byte, t reflect.Type, fields *Fields) *Error {
	known := jsonFields(t)
	if keysClean(b, known, fields) {
		return nil
	}
	top, ok := objectMembers(b)
	if !ok {
		top = nil
		if err := json.Unmarshal(b, &top); err != nil {
			return syntaxError(b)
		}
	}
	if e := unknownKeys(top, known, fields, ""); e != nil {
		return e
	}
	for name, sf := range fields.Nested {
		raw, ok := top[name]
		ft, ok2 := known[name]
		if !ok || !ok2 || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		sub, ok := objectMembers(raw)
		if !ok {
			sub = nil
			if json.Unmarshal(raw, &sub) != nil {
				continue // the struct decode already named a type error
			}
		}
		if e := unknownKeys(sub, jsonFields(ft), sf, name+"."); e != nil {
			return e
		}
	}
	return nil
}

// objectMembers is what json.Unmarshal into a map[string]json.RawMessage
// gives for b, a JSON object the struct decode has read already (so its
// syntax is known good), without the second validating parse and the
// copy of every value: the values are b's own bytes, a later duplicate
// key wins. ok false (the caller falls back to json.Unmarshal) for
// anything it does not take apart itself: not an object, a key with
// escapes, bytes after the object.
func objectMembers(b []byte) (map[string]json.RawMessage, bool) {
	it := members{b: b}
	out := make(map[string]json.RawMessage, 16)
	for it.next() {
		out[string(it.key)] = it.val
	}
	if !it.ok() {
		return nil, false
	}
	return out, true
}

// members walks the top-level members of b, a JSON object whose syntax
// the struct decode has checked, without allocating: next moves to the
// following member (key and val are b's own bytes), ok says after the
// last whether the walk understood all of b (objectMembers' rules).
type members struct {
	b        []byte
	i        int
	started  bool
	done     bool
	bad      bool
	key, val []byte
}

func (m *members) fail() bool { m.bad, m.done = true, true; return false }

func (m *members) next() bool {
	b := m.b
	if m.done {
		return false
	}
	if !m.started {
		m.started = true
		i := skipSpace(b, 0)
		if i >= len(b) || b[i] != '{' {
			return m.fail()
		}
		m.i = skipSpace(b, i+1)
		if m.i < len(b) && b[m.i] == '}' {
			m.done = true
			m.bad = skipSpace(b, m.i+1) != len(b)
			return false
		}
	}
	i := m.i
	if i >= len(b) || b[i] != '"' {
		return m.fail()
	}
	end := skipString(b, i)
	if end < 0 || bytes.IndexByte(b[i+1:end-1], '\\') >= 0 {
		return m.fail()
	}
	m.key = b[i+1 : end-1]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return m.fail()
	}
	vs := skipSpace(b, i+1)
	ve := skipValue(b, vs)
	if ve < 0 {
		return m.fail()
	}
	m.val = b[vs:ve:ve]
	i = skipSpace(b, ve)
	if i >= len(b) {
		return m.fail()
	}
	switch b[i] {
	case '}':
		// Anything after the object (the Decoder leaves a stray '}')
		// is Unmarshal's to refuse.
		m.done = true
		m.bad = skipSpace(b, i+1) != len(b)
	case ',':
		m.i = skipSpace(b, i+1)
	default:
		return m.fail()
	}
	return true
}

func (m *members) ok() bool { return m.done && !m.bad }

// keysClean reports, without allocating, that every key of the object b
// (and of its Nested fields) passes unknownKeys: the common request, a
// body with nothing to refuse, is done in one walk over its bytes. false
// is not a verdict: checkFields then takes its full pass, which names
// the first offender in a stable order (and sees a duplicate key's last
// value, as the struct decode does; any occurrence failing here sends a
// body there).
func keysClean(b []byte, known map[string]reflect.Type, fields *Fields) bool {
	it := members{b: b}
	for it.next() {
		k := it.key
		if a, ok := fields.Values[string(k)]; ok {
			if !a.admits(it.val) {
				return false
			}
		} else if _, ok := known[string(k)]; !ok {
			if _, ok := fields.Ignored[string(k)]; !ok {
				if _, ok := fields.Refused[string(k)]; !ok || !isNull(it.val) {
					return false
				}
			}
		}
		if sf, ok := fields.Nested[string(k)]; ok && !isNull(it.val) {
			ft, ok := known[string(k)]
			if ok && !keysClean(it.val, jsonFields(ft), sf) {
				return false
			}
		}
	}
	return it.ok()
}

func isNull(v []byte) bool { return string(bytes.TrimSpace(v)) == "null" }

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString is the index just past the string starting at b[i] ('"'),
// -1 when it does not end.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue is the index just past the JSON value starting at b[i], -1
// when it does not end.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				if j = skipString(b, j); j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

func unknownKeys(obj map[string]json.RawMessage, known map[string]reflect.Type, fields *Fields, prefix string) *Error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first offender named is the same every time
	for _, k := range keys {
		if a, ok := fields.Values[k]; ok {
			if a.admits(obj[k]) {
				continue
			}
			return Errorf(http.StatusBadRequest, "unsupported_value", prefix+k, "'%s%s' %s is not supported: %s", prefix, k, bytes.TrimSpace(obj[k]), a.Why)
		}
		if _, ok := known[k]; ok {
			continue
		}
		if _, ok := fields.Ignored[k]; ok {
			continue
		}
		if why, ok := fields.Refused[k]; ok {
			if string(bytes.TrimSpace(obj[k])) == "null" {
				continue // an explicit null asks for nothing
			}
			return Errorf(http.StatusBadRequest, "unsupported_parameter", prefix+k, "'%s%s' is not supported: %s", prefix, k, why)
		}
		return Errorf(http.StatusBadRequest, "unknown_parameter", prefix+k, "unrecognized request argument '%s%s'", prefix, k)
	}
	return nil
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps a struct's JSON names (embedded structs flattened) to
// their types (pointers removed).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return map[string]reflect.Type{}
	}
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		m[name] = ft
	}
	fieldCache.Store(t, m)
	return m
}
