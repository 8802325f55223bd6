package fakemodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SchemaInstance is a small deterministic instance of a JSON schema, as
// compact JSON: what ts-fake answers a request constrained by json_schema
// (a grammar-constrained engine must answer something the schema accepts).
// It covers the schemas tool_choice enforcement builds: objects with their
// required properties (in `required` order), enum and const (the first
// value), anyOf/oneOf (the first branch, merged with its parent), allOf
// (merged), arrays of minItems items (prefixItems honoured), strings of
// minLength (a few formats), numbers and integers at their minimum,
// booleans, null, and $ref to #, #/$defs/… or #/definitions/…. `pattern`
// is not honoured.
func SchemaInstance(schema string) (string, error) {
	d := json.NewDecoder(strings.NewReader(schema))
	d.UseNumber()
	var root any
	if err := d.Decode(&root); err != nil {
		return "", fmt.Errorf("json_schema: %w", err)
	}
	var b bytes.Buffer
	if err := instance(&b, root, root, 0); err != nil {
		return "", fmt.Errorf("json_schema: %w", err)
	}
	return b.String(), nil
}

const maxSchemaDepth = 32

func instance(b *bytes.Buffer, s, root any, depth int) error {
	if depth > maxSchemaDepth {
		return fmt.Errorf("nested deeper than %d (recursive $ref?)", maxSchemaDepth)
	}
	m, ok := s.(map[string]any)
	if !ok {
		// `true` or any other non-object schema accepts anything.
		b.WriteString("{}")
		return nil
	}
	if ref, ok := m["$ref"].(string); ok {
		t, err := resolveRef(root, ref)
		if err != nil {
			return err
		}
		return instance(b, merge(without(m, "$ref"), t), root, depth+1)
	}
	if c, ok := m["const"]; ok {
		return writeJSON(b, c)
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return writeJSON(b, e[0])
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := m[k].([]any); ok && len(alts) > 0 {
			return instance(b, merge(without(m, k), alts[0]), root, depth+1)
		}
	}
	if all, ok := m["allOf"].([]any); ok {
		merged := without(m, "allOf")
		for _, a := range all {
			for range maxSchemaDepth {
				am, ok := a.(map[string]any)
				ref, isRef := am["$ref"].(string)
				if !ok || !isRef {
					break
				}
				t, err := resolveRef(root, ref)
				if err != nil {
					return err
				}
				a = merge(without(am, "$ref"), t)
			}
			merged = merge(merged, a)
		}
		return instance(b, merged, root, depth+1)
	}
	switch schemaType(m) {
	case "object":
		return object(b, m, root, depth)
	case "array":
		return array(b, m, root, depth)
	case "string":
		return writeJSON(b, stringValue(m))
	case "integer":
		b.WriteString(strconv.FormatInt(int64(math.Ceil(numberValue(m, true))), 10))
	case "number":
		b.WriteString(strconv.FormatFloat(numberValue(m, false), 'g', -1, 64))
	case "boolean":
		b.WriteString("false")
	case "null":
		b.WriteString("null")
	default:
		b.WriteString("{}")
	}
	return nil
}

// schemaType is the schema's type (the first non-null one of a list), or
// what its keywords imply.
func schemaType(m map[string]any) string {
	switch t := m["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
		if len(t) > 0 {
			return "null"
		}
	}
	switch {
	case m["properties"] != nil || m["required"] != nil:
		return "object"
	case m["items"] != nil || m["prefixItems"] != nil:
		return "array"
	}
	return "object"
}

func object(b *bytes.Buffer, m, root any, depth int) error {
	mm := m.(map[string]any)
	props, _ := mm["properties"].(map[string]any)
	req, _ := mm["required"].([]any)
	b.WriteByte('{')
	seen := map[string]bool{}
	n := 0
	for _, r := range req {
		k, ok := r.(string)
		if !ok || seen[k] {
			continue
		}
		seen[k] = true
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		_ = writeJSON(b, k)
		b.WriteByte(':')
		ps, ok := props[k]
		if !ok {
			ps = map[string]any{"type": "string"}
		}
		if err := instance(b, ps, root, depth+1); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	b.WriteByte('}')
	return nil
}

func array(b *bytes.Buffer, m map[string]any, root any, depth int) error {
	minItems := 0
	if n, ok := m["minItems"].(json.Number); ok {
		if v, err := n.Int64(); err == nil && v > 0 {
			minItems = int(min(v, 64))
		}
	}
	prefix, _ := m["prefixItems"].([]any)
	b.WriteByte('[')
	for i := 0; i < max(minItems, len(prefix)); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		item := m["items"]
		if i < len(prefix) {
			item = prefix[i]
		}
		if item == nil {
			item = map[string]any{"type": "string"}
		}
		if err := instance(b, item, root, depth+1); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	b.WriteByte(']')
	return nil
}

func stringValue(m map[string]any) string {
	s := ""
	switch m["format"] {
	case "date-time":
		s = "2024-01-01T00:00:00Z"
	case "date":
		s = "2024-01-01"
	case "time":
		s = "00:00:00"
	case "email":
		s = "user@example.com"
	case "uri", "url":
		s = "https://example.com"
	case "uuid":
		s = "00000000-0000-0000-0000-000000000000"
	}
	if n, ok := m["minLength"].(json.Number); ok {
		if v, err := n.Int64(); err == nil && int64(len(s)) < v {
			s += strings.Repeat("a", int(min(v, 4096))-len(s))
		}
	}
	return s
}

func numberValue(m map[string]any, integer bool) float64 {
	num := func(k string) (float64, bool) {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0, false
		}
		f, err := n.Float64()
		return f, err == nil
	}
	v := 0.0
	if lo, ok := num("minimum"); ok {
		v = lo
	}
	if lo, ok := num("exclusiveMinimum"); ok {
		step := 1.0
		if !integer {
			step = 0.5
		}
		v = max(v, lo+step)
	}
	if hi, ok := num("maximum"); ok && v > hi {
		v = hi
	}
	return v
}

func resolveRef(root any, ref string) (any, error) {
	if ref == "#" {
		return root, nil
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q: only local references are supported", ref)
	}
	cur := root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q: no such definition", ref)
		}
		if cur, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %q: no such definition", ref)
		}
	}
	return cur, nil
}

func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// merge overlays schema o on m; properties merge and required lists join.
func merge(m map[string]any, o any) map[string]any {
	om, ok := o.(map[string]any)
	if !ok {
		return m
	}
	out := without(m, "")
	for k, v := range om {
		switch k {
		case "properties":
			p := map[string]any{}
			if old, ok := out[k].(map[string]any); ok {
				for pk, pv := range old {
					p[pk] = pv
				}
			}
			if nv, ok := v.(map[string]any); ok {
				for pk, pv := range nv {
					p[pk] = pv
				}
			}
			out[k] = p
		case "required":
			old, _ := out[k].([]any)
			nv, _ := v.([]any)
			out[k] = append(append([]any{}, old...), nv...)
		default:
			out[k] = v
		}
	}
	return out
}

func writeJSON(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}
