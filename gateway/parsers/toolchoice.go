package parsers

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Tool is one function the request offers: its name and JSON-schema
// parameters (nil: any object).
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// ToolChoice is the request's tool_choice reduced to what enforcement
// needs: Mode is "auto", "none", "required" or "function" (Name set).
type ToolChoice struct {
	Mode string
	Name string
}

// ParseToolChoice reads an OpenAI tool_choice value: "auto", "none",
// "required", {"type":"function","function":{"name":N}}, or
// {"type":"allowed_tools","allowed_tools":{"mode":M,...}} (SMG treats
// mode "required" as required). Absent (nil) is "auto".
func ParseToolChoice(raw json.RawMessage) (ToolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ToolChoice{Mode: "auto"}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return ToolChoice{Mode: s}, nil
		}
		return ToolChoice{}, fmt.Errorf("tool_choice: %q is not auto, none or required", s)
	}
	var o struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
		Mode         string `json:"mode"`
		AllowedTools *struct {
			Mode string `json:"mode"`
		} `json:"allowed_tools"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return ToolChoice{}, fmt.Errorf("tool_choice: %w", err)
	}
	switch o.Type {
	case "function":
		if o.Function == nil || o.Function.Name == "" {
			return ToolChoice{}, fmt.Errorf("tool_choice.function.name: missing")
		}
		return ToolChoice{Mode: "function", Name: o.Function.Name}, nil
	case "allowed_tools":
		mode := o.Mode
		if o.AllowedTools != nil && o.AllowedTools.Mode != "" {
			mode = o.AllowedTools.Mode
		}
		if mode == "required" {
			return ToolChoice{Mode: "required"}, nil
		}
		return ToolChoice{Mode: "auto"}, nil
	}
	return ToolChoice{}, fmt.Errorf("tool_choice.type: %q is not function or allowed_tools", o.Type)
}

// Constrained reports whether the choice is enforced by a json_schema.
func (c ToolChoice) Constrained() bool { return c.Mode == "required" || c.Mode == "function" }

var anyObject = json.RawMessage(`{"type":"object"}`)

// ToolChoiceSchema is the json_schema (sampling param) that makes the
// model's output valid call(s) for a constrained tool_choice, as SMG
// builds it (crates/tool_parser/src/factory.rs): for a named function, that
// function's parameters schema (the output is its arguments); for
// "required", an array of at least one {"name": <enum of one tool>,
// "parameters": <its schema>} object, with every tool's $defs (and
// draft-07 definitions) hoisted to the top (conflicting definitions are
// an error). ok is false when the choice is not constrained (auto, none,
// or no tools).
func ToolChoiceSchema(tools []Tool, c ToolChoice) (schema string, ok bool, err error) {
	if !c.Constrained() || len(tools) == 0 {
		return "", false, nil
	}
	if c.Mode == "function" {
		for _, t := range tools {
			if t.Name == c.Name {
				p := t.Parameters
				if len(bytes.TrimSpace(p)) == 0 || string(bytes.TrimSpace(p)) == "null" {
					p = anyObject
				}
				var b bytes.Buffer
				if err := json.Compact(&b, p); err != nil {
					return "", false, fmt.Errorf("tool %q parameters: %w", t.Name, err)
				}
				return b.String(), true, nil
			}
		}
		return "", false, fmt.Errorf("tool_choice names function %q, which tools does not list", c.Name)
	}
	type nameProp struct {
		Type string   `json:"type"`
		Enum []string `json:"enum"`
	}
	type props struct {
		Name       nameProp        `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	type item struct {
		Properties props    `json:"properties"`
		Required   []string `json:"required"`
	}
	var schemaDoc struct {
		Type     string `json:"type"`
		MinItems int    `json:"minItems"`
		Items    struct {
			Type  string `json:"type"`
			AnyOf []item `json:"anyOf"`
		} `json:"items"`
		Defs map[string]json.RawMessage `json:"$defs,omitempty"`
		// Definitions: draft-07's name for $defs, which many tool
		// schemas still use ("#/definitions/x" must resolve at the top).
		Definitions map[string]json.RawMessage `json:"definitions,omitempty"`
	}
	schemaDoc.Type, schemaDoc.MinItems, schemaDoc.Items.Type = "array", 1, "object"
	for _, t := range tools {
		p := t.Parameters
		if len(bytes.TrimSpace(p)) == 0 || string(bytes.TrimSpace(p)) == "null" {
			p = anyObject
		}
		if !json.Valid(p) {
			return "", false, fmt.Errorf("tool %q parameters: not valid JSON", t.Name)
		}
		schemaDoc.Items.AnyOf = append(schemaDoc.Items.AnyOf, item{
			Properties: props{Name: nameProp{Type: "string", Enum: []string{t.Name}}, Parameters: p},
			Required:   []string{"name", "parameters"},
		})
		var top struct {
			Defs        map[string]json.RawMessage `json:"$defs"`
			Definitions map[string]json.RawMessage `json:"definitions"`
		}
		_ = json.Unmarshal(p, &top)
		for _, h := range []struct {
			from map[string]json.RawMessage
			to   *map[string]json.RawMessage
		}{{top.Defs, &schemaDoc.Defs}, {top.Definitions, &schemaDoc.Definitions}} {
			for k, v := range h.from {
				if old, ok := (*h.to)[k]; ok {
					if !sameJSON(old, v) {
						return "", false, fmt.Errorf("tool %q: definition %q conflicts with another tool's", t.Name, k)
					}
					continue
				}
				if *h.to == nil {
					*h.to = map[string]json.RawMessage{}
				}
				(*h.to)[k] = v
			}
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(schemaDoc); err != nil {
		return "", false, fmt.Errorf("encode tool_choice schema: %w", err)
	}
	return string(bytes.TrimSpace(b.Bytes())), true, nil
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x) // maps marshal with sorted keys: a canonical form
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
