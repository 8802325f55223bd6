package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ErrNoChatTemplate is returned by ApplyChatTemplate when none was found.
var ErrNoChatTemplate = errors.New("the model has no chat template")

// ChatInput is what a chat template renders. JSON stays raw so the
// template sees keys in the client's order: `tojson` output (tool schemas
// in Qwen's system prompt) must match Python's, which keeps dict order.
type ChatInput struct {
	Messages            json.RawMessage // JSON array of messages
	Tools               json.RawMessage // JSON array, or empty for none
	Kwargs              json.RawMessage // JSON object (chat_template_kwargs), or empty
	AddGenerationPrompt bool
}

// HasChatTemplate reports whether a template was loaded.
func (t *Tokenizer) HasChatTemplate() bool { return t.chatTemplate != nil }

// SetChatTemplate compiles and installs src, replacing the loaded one.
func (t *Tokenizer) SetChatTemplate(src string) error {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return err
	}
	t.chatTemplate = tmpl
	t.chatTemplateText = src
	return nil
}

// ChatTemplateUses reports whether the chat template reads the variable
// name (a chat_template_kwargs switch such as enable_thinking or
// reasoning_effort): the identifier appears in its source as a whole word.
func (t *Tokenizer) ChatTemplateUses(name string) bool {
	src := t.chatTemplateText
	for i := 0; name != "" && i <= len(src)-len(name); {
		j := strings.Index(src[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !identByte(src[j-1])) && (end == len(src) || !identByte(src[end])) {
			return true
		}
		i = j + 1
	}
	return false
}

func identByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ApplyChatTemplate renders a conversation to prompt text the way
// transformers' apply_chat_template(tokenize=False) does.
func (t *Tokenizer) ApplyChatTemplate(in ChatInput) (string, error) {
	if t.chatTemplate == nil {
		return "", ErrNoChatTemplate
	}
	msgs, err := jsonToValue(in.Messages)
	if err != nil {
		return "", fmt.Errorf("decode messages: %w", err)
	}
	if !msgs.IsList() {
		return "", errors.New("messages must be a JSON array")
	}
	tools := jinja.None()
	if len(bytes.TrimSpace(in.Tools)) > 0 {
		if tools, err = jsonToValue(in.Tools); err != nil {
			return "", fmt.Errorf("decode tools: %w", err)
		}
	}
	data := map[string]jinja.Value{
		"messages":              msgs,
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(in.AddGenerationPrompt),
	}
	for k, v := range map[string]string{"bos_token": t.BOSToken, "eos_token": t.EOSToken, "unk_token": t.UnkToken, "pad_token": t.PadToken} {
		if v != "" {
			data[k] = jinja.NewString(v)
		}
	}
	if len(bytes.TrimSpace(in.Kwargs)) > 0 {
		kw, err := jsonToValue(in.Kwargs)
		if err != nil {
			return "", fmt.Errorf("decode chat_template_kwargs: %w", err)
		}
		if !kw.IsDict() && !kw.IsNone() {
			return "", errors.New("chat_template_kwargs must be a JSON object")
		}
		if kw.IsDict() {
			d := kw.AsDict()
			for _, k := range d.Keys {
				data[k] = d.Data[k]
			}
		}
	}
	out, err := t.chatTemplate.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}

// jsonToValue decodes JSON into jinja values keeping object key order.
func jsonToValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return v, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			dd := d.AsDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return v, err
				}
				dd.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", x)
	case nil:
		return jinja.None(), nil
	default:
		return jinja.FromGoValue(x), nil
	}
}
