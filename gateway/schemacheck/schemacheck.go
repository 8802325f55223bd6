// Package schemacheck compiles the JSON Schemas a request carries
// (response_format's json_schema, each tool's parameters, the schema a
// constrained tool_choice derives) before anything reaches an engine, so a
// schema the engine's grammar backend would choke on is a 400 naming the
// place inside the schema (`response_format.json_schema.schema.properties.x.type`)
// instead of an empty answer or an engine abort the client retries.
//
// Compiling is bounded (schema bytes, nesting depth, JSON values), never
// touches the network (a remote $ref or an unknown $schema is refused by
// name), and remembers recent verdicts: agents resend the same tools on
// every turn.
package schemacheck

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Limits bound what one schema may cost to compile.
type Limits struct {
	MaxBytes int // the schema's JSON text
	MaxDepth int // nesting of JSON objects and arrays
	MaxNodes int // JSON values in all
}

// DefaultLimits fit real schemas (OpenAI's structured outputs allow 5000
// properties and 10 levels of nesting: about 110 KiB with short names,
// 16 000 values, depth 22). Compiling costs about half a microsecond per
// schema byte (BenchmarkCheckLargest), so one schema costs at most about
// 70 ms of a core; RequestBudget bounds a request's schemas together.
var DefaultLimits = Limits{MaxBytes: 128 << 10, MaxDepth: 64, MaxNodes: 16_384}

// RequestBudget is the schema bytes one request may ask to compile in all
// (its tools, response_format and the schema tool_choice derives).
const RequestBudget = 256 << 10

// Budget checks a request's schemas against RequestBudget together.
type Budget struct{ left int }

// NewBudget starts a request's budget.
func NewBudget() *Budget { return &Budget{left: RequestBudget} }

// Check is the package's Check, after charging the schema's bytes.
func (b *Budget) Check(schema []byte, param string) *Error {
	if b.left -= len(schema); b.left < 0 {
		return &Error{Path: param, Message: fmt.Sprintf("the request's JSON schemas (tools, response_format, tool_choice) are over %d bytes together, the gateway's limit", RequestBudget)}
	}
	return Check(schema, param)
}

// Error is a schema refused: Path is where, in the request's terms (the
// param Check was given, then the path inside the schema).
type Error struct {
	Path    string
	Message string
}

func (e *Error) Error() string { return e.Path + ": " + e.Message }

// base is the URL the schema is compiled under. It names nothing real:
// the loader refuses every URL, so a reference outside the schema fails
// instead of being fetched.
const base = "https://schema.tsd.invalid/schema.json"

// verdict is a check's outcome relative to the schema's root ("" path: the
// schema itself).
type verdict struct {
	ok      bool
	path    string // e.g. ".properties.x.type" or "[0]"
	message string
}

// Check compiles schema (JSON text) under DefaultLimits; param is where
// the request holds it. nil: the schema compiles.
func Check(schema []byte, param string) *Error {
	key := sha256.Sum256(schema)
	v, ok := cache.get(key)
	if !ok {
		v = check(schema, DefaultLimits)
		cache.put(key, v)
	}
	return v.at(param)
}

func (v verdict) at(param string) *Error {
	if v.ok {
		return nil
	}
	return &Error{Path: param + v.path, Message: v.message}
}

func fail(path []string, doc any, format string, args ...any) verdict {
	return verdict{path: formatPath(doc, path), message: fmt.Sprintf(format, args...)}
}

func check(schema []byte, l Limits) verdict {
	if len(schema) > l.MaxBytes {
		return fail(nil, nil, "the schema is %d bytes, over the gateway's limit of %d", len(schema), l.MaxBytes)
	}
	doc, err := decode(schema, l)
	if err != nil {
		return fail(nil, nil, "%v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return fail(nil, nil, "a JSON schema must be an object")
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseAll{})
	c.UseRegexpEngine(ecmaRegexp)
	if err := c.AddResource(base, doc); err != nil {
		return fail(nil, nil, "%s", strip(err.Error()))
	}
	if _, err := c.Compile(base); err != nil {
		return explain(doc, err)
	}
	return verdict{ok: true}
}

// explain turns a compile error into the place and words a client needs.
func explain(doc any, err error) verdict {
	var (
		sv  *jsonschema.SchemaValidationError
		le  *jsonschema.LoadURLError
		pn  *jsonschema.JSONPointerNotFoundError
		an  *jsonschema.AnchorNotFoundError
		ip  *jsonschema.InvalidJsonPointerError
		ire *jsonschema.InvalidRegexError
	)
	switch {
	case errors.As(err, &sv):
		var ve *jsonschema.ValidationError
		if errors.As(sv.Err, &ve) {
			leaf := deepest(ve)
			return fail(leaf.InstanceLocation, doc, "%s", leaf.ErrorKind.LocalizedString(printer))
		}
	case errors.As(err, &le):
		if p, ok := findKey(doc, "$schema", le.URL); ok {
			return fail(p, doc, "$schema %q is not a JSON Schema draft the gateway knows (draft-04, -06, -07, 2019-09, 2020-12); schemas are never fetched", le.URL)
		}
		if p, v, ok := findRef(doc, le.URL); ok {
			return fail(p, doc, "%q is a reference outside the schema; the gateway never fetches schemas (no network): put the definition under $defs and refer to it as \"#/$defs/...\"", v)
		}
		return fail(nil, doc, "the schema refers to %q outside itself; the gateway never fetches schemas (no network)", strip(le.URL))
	case errors.As(err, &pn):
		if p, v, ok := findRef(doc, pn.URL); ok {
			return fail(p, doc, "%q points to nothing in the schema (no such definition)", v)
		}
		return fail(nil, doc, "a reference points to nothing in the schema: %s", strip(pn.URL))
	case errors.As(err, &an):
		if p, v, ok := findRef(doc, an.Reference); ok {
			return fail(p, doc, "%q names an anchor the schema does not define", v)
		}
	case errors.As(err, &ip):
		if p, v, ok := findRef(doc, ip.URL); ok {
			return fail(p, doc, "%q is not a valid JSON pointer", v)
		}
	case errors.As(err, &ire):
		return fail(pointer(ire.URL), doc, "%q is not a valid regular expression: %v", ire.Regex, ire.Err)
	}
	return fail(nil, doc, "%s", strip(err.Error()))
}

var printer = message.NewPrinter(language.English)

// deepest is the innermost cause that sits deepest in the schema (the
// first such): the most specific thing to tell the client.
func deepest(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	best := ve
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			if len(e.InstanceLocation) > len(best.InstanceLocation) || len(best.Causes) > 0 {
				best = e
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return best
}

// strip keeps the invented base URL out of messages.
func strip(s string) string {
	s = strings.ReplaceAll(s, base+"#", "#")
	return strings.ReplaceAll(s, base, "the schema")
}

// pointer turns base#/a/b into its path segments.
func pointer(u string) []string {
	_, frag, ok := strings.Cut(u, "#")
	if !ok || !strings.HasPrefix(frag, "/") {
		return nil
	}
	var out []string
	for _, seg := range strings.Split(frag[1:], "/") {
		if s, err := url.PathUnescape(seg); err == nil {
			seg = s
		}
		out = append(out, strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~"))
	}
	return out
}

// refuseAll is the loader: nothing outside the schema is ever fetched.
type refuseAll struct{}

func (refuseAll) Load(u string) (any, error) {
	return nil, fmt.Errorf("%s is outside the schema; the gateway never fetches schemas", u)
}

// ecmaRegexp compiles pattern and patternProperties as ECMA-262 (what
// JSON Schema specifies; Go's RE2 would refuse lookaheads that are valid
// there). Only compiled, never matched: nothing here validates instances.
func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(s, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	return (*ecma)(re), nil
}

type ecma regexp2.Regexp

func (re *ecma) MatchString(s string) bool {
	ok, err := (*regexp2.Regexp)(re).MatchString(s)
	return err == nil && ok
}

func (re *ecma) String() string { return (*regexp2.Regexp)(re).String() }

// decode reads the schema as the compiler wants it (objects, arrays,
// json.Number, strings, bools, nil), refusing it as soon as it passes the
// depth or value limits, before it costs more.
func decode(b []byte, l Limits) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	nodes := 0
	var value func(depth int) (any, error)
	value = func(depth int) (any, error) {
		if nodes++; nodes > l.MaxNodes {
			return nil, fmt.Errorf("the schema has more than %d values, over the gateway's limit", l.MaxNodes)
		}
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("the schema is not valid JSON: %w", err)
		}
		d, ok := t.(json.Delim)
		if !ok {
			return t, nil
		}
		if depth >= l.MaxDepth {
			return nil, fmt.Errorf("the schema nests deeper than %d levels, over the gateway's limit", l.MaxDepth)
		}
		if d == '[' {
			arr := []any{}
			for dec.More() {
				v, err := value(depth + 1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		}
		obj := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("the schema is not valid JSON: %w", err)
			}
			v, err := value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj[kt.(string)] = v
		}
		_, err = dec.Token()
		return obj, err
	}
	v, err := value(0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the schema is not valid JSON: data after the schema")
	}
	return v, nil
}

// findKey finds the first key (in sorted order, depth first) whose string
// value is want, ignoring a trailing "#" on either side.
func findKey(doc any, key, want string) ([]string, bool) {
	p, _, ok := find(doc, nil, func(k string, v string) bool {
		return k == key && strings.TrimSuffix(v, "#") == strings.TrimSuffix(want, "#")
	})
	return p, ok
}

// findRef finds the $ref (or $dynamicRef) that resolves, against the
// schema's base, to target; it returns the path of the reference and its
// value as written.
func findRef(doc any, target string) ([]string, string, bool) {
	baseURL, _ := url.Parse(base)
	return find(doc, nil, func(k string, v string) bool {
		if k != "$ref" && k != "$dynamicRef" {
			return false
		}
		u, err := url.Parse(v)
		if err != nil {
			return v == target
		}
		abs := baseURL.ResolveReference(u).String()
		if !strings.Contains(target, "#") {
			// A document the loader was asked for: any fragment of it.
			abs, _, _ = strings.Cut(abs, "#")
		}
		return abs == target || strings.TrimSuffix(abs, "#") == strings.TrimSuffix(target, "#") || v == target
	})
}

func find(v any, path []string, match func(k, v string) bool) ([]string, string, bool) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s, ok := t[k].(string); ok && match(k, s) {
				return append(append([]string{}, path...), k), s, true
			}
		}
		for _, k := range keys {
			if p, s, ok := find(t[k], append(path, k), match); ok {
				return p, s, true
			}
		}
	case []any:
		for i, x := range t {
			if p, s, ok := find(x, append(path, strconv.Itoa(i)), match); ok {
				return p, s, true
			}
		}
	}
	return nil, "", false
}

// formatPath writes segments the way clients name fields: ".key" in an
// object, "[i]" in an array (doc tells which).
func formatPath(doc any, segs []string) string {
	var b strings.Builder
	cur := doc
	for _, s := range segs {
		switch t := cur.(type) {
		case []any:
			b.WriteString("[" + s + "]")
			if i, err := strconv.Atoi(s); err == nil && i >= 0 && i < len(t) {
				cur = t[i]
			} else {
				cur = nil
			}
		case map[string]any:
			b.WriteString("." + s)
			cur = t[s]
		default:
			b.WriteString("." + s)
			cur = nil
		}
	}
	return b.String()
}

// verdicts remembers recent outcomes by the schema's hash. It is a leaf
// cache touched only inside its methods, so a mutex guards it.
type verdicts struct {
	max   int
	mu    sync.Mutex
	order *list.List // front: most recent; values *entry
	byKey map[[32]byte]*list.Element
}

type entry struct {
	key [32]byte
	v   verdict
}

var cache = &verdicts{max: 512, order: list.New(), byKey: map[[32]byte]*list.Element{}}

func (c *verdicts) get(k [32]byte) (verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		return verdict{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*entry).v, true
}

func (c *verdicts) put(k [32]byte, v verdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		el.Value.(*entry).v = v
		c.order.MoveToFront(el)
		return
	}
	c.byKey[k] = c.order.PushFront(&entry{key: k, v: v})
	for c.order.Len() > c.max {
		el := c.order.Back()
		delete(c.byKey, el.Value.(*entry).key)
		c.order.Remove(el)
	}
}
