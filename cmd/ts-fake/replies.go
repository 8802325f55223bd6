package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/wire"
)

// replyRule answers a prompt containing match with reply (--fake-replies).
type replyRule struct {
	match, reply string
}

// loadReplies reads a --fake-replies file. JSON: an array of
// {"match": S, "reply": R} tried in order, or an object {S: R, ...} tried
// longest match first. Text: one rule per line, `MATCH<TAB>REPLY`, where
// \n, \t and \\ are escapes; blank lines and lines starting with # are
// skipped. An empty match answers every prompt.
func loadReplies(path string) ([]replyRule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--fake-replies: %w", err)
	}
	trimmed := bytes.TrimSpace(b)
	switch {
	case bytes.HasPrefix(trimmed, []byte("[")):
		var rules []struct {
			Match *string `json:"match"`
			Reply *string `json:"reply"`
		}
		if err := json.Unmarshal(trimmed, &rules); err != nil {
			return nil, fmt.Errorf("--fake-replies %s: %w", path, err)
		}
		out := make([]replyRule, 0, len(rules))
		for i, r := range rules {
			if r.Match == nil || r.Reply == nil {
				return nil, fmt.Errorf("--fake-replies %s: rule %d: needs both \"match\" and \"reply\"", path, i)
			}
			out = append(out, replyRule{*r.Match, *r.Reply})
		}
		return out, nil
	case bytes.HasPrefix(trimmed, []byte("{")):
		var m map[string]string
		if err := json.Unmarshal(trimmed, &m); err != nil {
			return nil, fmt.Errorf("--fake-replies %s: %w", path, err)
		}
		out := make([]replyRule, 0, len(m))
		for k, v := range m {
			out = append(out, replyRule{k, v})
		}
		sort.Slice(out, func(i, j int) bool {
			if len(out[i].match) != len(out[j].match) {
				return len(out[i].match) > len(out[j].match)
			}
			return out[i].match < out[j].match
		})
		return out, nil
	}
	var out []replyRule
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
			continue
		}
		match, reply, ok := strings.Cut(t, "\t")
		if !ok {
			return nil, fmt.Errorf("--fake-replies %s:%d: want MATCH<TAB>REPLY", path, line)
		}
		out = append(out, replyRule{unescape(match), unescape(reply)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--fake-replies %s: %w", path, err)
	}
	return out, nil
}

func unescape(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t").Replace(s)
}

// pickReply is the first rule whose match the prompt contains.
func pickReply(rules []replyRule, prompt string) (string, bool) {
	for _, r := range rules {
		if strings.Contains(prompt, r.match) {
			return r.reply, true
		}
	}
	return "", false
}

// vocabulary is the model's token spelling, loaded on first use (only the
// scheduler goroutine calls it): --tokenizer, else the model directory's
// tokenizer.json, else ByteVocab.
func (e *engine) vocabulary() *fakemodel.Vocab {
	if e.vocab != nil {
		return e.vocab
	}
	for _, p := range []string{e.cfg.tokenizer, e.cfg.model} {
		if p == "" {
			continue
		}
		v, err := fakemodel.LoadVocab(p)
		if err == nil {
			e.vocab = v
			return v
		}
		if p == e.cfg.tokenizer {
			e.r.log.warn("ts-fake.py:1", "fake: %v; spelling replies byte by byte", err)
		}
	}
	e.vocab = fakemodel.ByteVocab()
	return e.vocab
}

// scriptedReply is what the request must spell, if anything: an instance
// of its json_schema (a constrained request; in json_object mode a
// matching rule's reply that is a JSON object), else the --fake-replies
// rule its prompt matches. A schema that cannot be satisfied is an
// invalid request, as a grammar backend would refuse it.
func (e *engine) scriptedReply(g wire.GenerateRequest, sp wire.SamplingParams) (ids []int, invalid string) {
	text, ok := "", false
	if sp.JSONSchema != nil && isAnyObject(*sp.JSONSchema) && len(e.cfg.replies) > 0 {
		// json_object mode (response_format json_object: any object): a
		// matching rule whose reply is a JSON object is a valid answer,
		// and lets a test script what a client's schema-in-the-prompt wants.
		if r, hit := pickReply(e.cfg.replies, e.vocabulary().Decode(g.InputIDs)); hit && isJSONObject(r) {
			text, ok = r, true
		}
	}
	switch {
	case ok:
	case sp.JSONSchema != nil:
		inst, err := fakemodel.SchemaInstance(*sp.JSONSchema)
		if err != nil {
			return nil, err.Error()
		}
		text, ok = inst, true
	case len(e.cfg.replies) > 0:
		text, ok = pickReply(e.cfg.replies, e.vocabulary().Decode(g.InputIDs))
	}
	if !ok {
		return nil, ""
	}
	ids, err := e.vocabulary().Encode(text)
	if err != nil {
		return nil, err.Error()
	}
	if ids == nil {
		ids = []int{}
	}
	return ids, ""
}

// isAnyObject reports the schema of json_object mode, {"type":"object"}.
func isAnyObject(schema string) bool {
	var m map[string]any
	return json.Unmarshal([]byte(schema), &m) == nil && len(m) == 1 && m["type"] == "object"
}

func isJSONObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil
}
