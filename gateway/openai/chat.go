package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
)

type chatRequest struct {
	common
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	// ReasoningEffort maps onto the chat template's own switch
	// (effortKwargs); chat_template_kwargs win over it.
	ReasoningEffort *string `json:"reasoning_effort"`
	agentFields             // tools.go: tool_choice, response_format, grammars
}

// errImage answers an image part that reached the text-only flattening
// (messageContent routes messages with images elsewhere).
var errImage = errorf(http.StatusBadRequest, "multimodal_not_supported", "messages", "image parts cannot be flattened into text")

// normalizeMessages checks roles and flattens text content parts into one
// string (what string-content templates such as Qwen's expect), keeping
// every message's key order for the template.
// Image parts are kept as parts (messageContent); their URLs are returned
// in prompt order.
func normalizeMessages(raw json.RawMessage) (json.RawMessage, []string, *apiError) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return nil, nil, badRequest("messages", "messages must be a non-empty array")
	}
	var urls []string
	var out bytes.Buffer
	out.WriteByte('[')
	for i, m := range msgs {
		var head struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID json.RawMessage `json:"tool_call_id"`
		}
		if err := json.Unmarshal(m, &head); err != nil {
			return nil, nil, badRequest(fmt.Sprintf("messages[%d]", i), "each message must be an object")
		}
		switch head.Role {
		case "system", "developer", "user", "assistant", "tool":
		case "function":
			// OpenAI's deprecated role: answered with a 400 there too, and
			// a template renders it as nothing the model knows.
			return nil, nil, badRequest(fmt.Sprintf("messages[%d].role", i), "the 'function' role is not supported: send a 'tool' message with the tool_call_id of the call it answers")
		default:
			return nil, nil, badRequest(fmt.Sprintf("messages[%d].role", i), fmt.Sprintf("unknown role %q", head.Role))
		}
		switch c := bytes.TrimSpace(head.Content); {
		case head.Role != "user" && head.Role != "system" && head.Role != "developer":
		case len(c) == 0 || string(c) == "null":
			// An assistant turn may carry only tool calls; a user's, a
			// system's or a developer's is its content (OpenAI: 400).
			param := fmt.Sprintf("messages[%d].content", i)
			return nil, nil, badRequest(param, fmt.Sprintf("invalid type for '%s': a %s message needs content (a string or an array of content parts), got null", param, head.Role))
		}
		if head.Role == "tool" {
			if e := checkToolCallID(head.ToolCallID, i); e != nil {
				return nil, nil, e
			}
		}
		content, imgs, aerr := messageContent(head.Content, i)
		if aerr != nil {
			return nil, nil, aerr
		}
		urls = append(urls, imgs...)
		nm := []byte(m)
		if !contentKept(m, head.Content, content) {
			var err error
			if nm, err = setKey(m, "content", content); err != nil {
				return nil, nil, badRequest(fmt.Sprintf("messages[%d]", i), err.Error())
			}
		}
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(nm)
	}
	out.WriteByte(']')
	return out.Bytes(), urls, nil
}

// contentKept reports that message m already carries content as its
// one content value (string content, the common message), so setKey's
// re-encoding of the whole object would give the same JSON: it is
// skipped. The count is conservative: "content" appearing anywhere else
// in m (a duplicate key, or inside a string) takes setKey's way.
func contentKept(m, raw, content json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '"' && bytes.Equal(t, content) && bytes.Count(m, []byte(`"content"`)) == 1
}

// checkToolCallID refuses a tool message without the id of the call it
// answers, as OpenAI does: the template would render a result no call
// asked for, and the model could not tell which call it belongs to.
func checkToolCallID(raw json.RawMessage, i int) *apiError {
	param := fmt.Sprintf("messages[%d].tool_call_id", i)
	var id string
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0 || string(t) == "null":
		return errorf(http.StatusBadRequest, "missing_required_parameter", param, fmt.Sprintf("Missing required parameter: '%s': a tool message answers the call with that id.", param))
	case json.Unmarshal(t, &id) != nil:
		return badRequest(param, fmt.Sprintf("invalid type for field '%s': expected string", param))
	case id == "":
		return badRequest(param, fmt.Sprintf("'%s' must not be empty", param))
	}
	return nil
}

func flattenContent(raw json.RawMessage, i int) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage(`""`), nil
	}
	if raw[0] == '"' {
		return raw, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "content must be a string or an array of content parts")
	}
	var texts []string
	for j, p := range parts {
		switch p.Type {
		case "text", "input_text":
			if p.Text == nil {
				return nil, missingText(i, j)
			}
			texts = append(texts, *p.Text)
		case "image_url", "input_image", "image":
			return nil, errImage
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), fmt.Sprintf("content part type %q is not supported", p.Type))
		}
	}
	b, _ := json.Marshal(strings.Join(texts, "\n"))
	return b, nil
}

// missingText refuses a text part without its text, as OpenAI does
// (dropped, the message would silently lose what the client meant).
func missingText(i, j int) *apiError {
	param := fmt.Sprintf("messages[%d].content[%d].text", i, j)
	return errorf(http.StatusBadRequest, "missing_required_parameter", param, fmt.Sprintf("Missing required parameter: '%s'.", param))
}

// setKey replaces (or appends) key in a JSON object without reordering it.
func setKey(obj json.RawMessage, key string, val json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out bytes.Buffer
	out.WriteByte('{')
	found, first := false, true
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := kt.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if k == key {
			v, found = val, true
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		kb, _ := json.Marshal(k)
		out.Write(kb)
		out.WriteByte(':')
		out.Write(v)
	}
	if !found {
		if !first {
			out.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		out.Write(kb)
		out.WriteByte(':')
		out.Write(val)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// chatPrompt is a chat's prompt: the ids of its rendered text and the
// image URLs in it. A chat the tokenizer cache has seen with the
// same inputs (tokenizer.RenderKey) is served from the cache without
// normalizing its messages again, rendering or encoding: its messages
// passed normalizeMessages' checks when it was stored, and those read
// nothing but the messages. Chats with images are not stored (their
// ids are spliced with the images' later).
func (s *Server) chatPrompt(req *chatRequest, ag *agent, model string) ([]int32, []string, *apiError) {
	agp := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	kwargs, e := s.chatKwargs(req)
	var key string
	if e == nil && s.promptCache.Stats().Enabled {
		key = tokenizer.RenderKey(model, req.Messages, ag.renderTools, kwargs, agp)
		if text, ids, ok := s.promptCache.Rendered(key); ok {
			if e := s.checkTextLen(text, "messages"); e != nil {
				return nil, nil, e
			}
			ag.promptRendered(text, func() (string, error) {
				msgs, _, e := normalizeMessages(req.Messages)
				if e != nil {
					return "", e
				}
				return s.tok.ApplyChatTemplate(tokenizer.ChatInput{Messages: msgs, Tools: ag.renderTools, Kwargs: kwargs})
			})
			return ids, nil, nil
		}
	}
	msgs, urls, ne := normalizeMessages(req.Messages)
	if ne != nil {
		return nil, nil, ne
	}
	if len(urls) > 0 {
		if e := s.checkImageSupport(); e != nil {
			return nil, nil, e
		}
	}
	if e != nil {
		return nil, nil, e
	}
	in := tokenizer.ChatInput{Messages: msgs, Tools: ag.renderTools, Kwargs: kwargs, AddGenerationPrompt: agp}
	text, err := s.tok.ApplyChatTemplate(in)
	if err != nil {
		if errors.Is(err, tokenizer.ErrNoChatTemplate) {
			return nil, nil, badRequest("messages", "the model has no chat template; use /v1/completions")
		}
		return nil, nil, badRequest("messages", "process messages: "+err.Error())
	}
	if e := s.checkTextLen(text, "messages"); e != nil {
		return nil, nil, e
	}
	ag.promptRendered(text, func() (string, error) {
		if !agp {
			return text, nil // no generation prompt: nothing of the template's opens a block
		}
		in.AddGenerationPrompt = false
		return s.tok.ApplyChatTemplate(in)
	})
	ids, err := s.promptCache.Encode(text, false)
	if err != nil {
		return nil, nil, errorf(http.StatusInternalServerError, "tokenization_failed", "", err.Error())
	}
	if key != "" && len(urls) == 0 {
		s.promptCache.PutRendered(key, text, ids)
	}
	return ids, urls, nil
}

// chatKwargs are the chat template's kwargs: chat_template_kwargs over
// what reasoning_effort maps to.
func (s *Server) chatKwargs(req *chatRequest) (json.RawMessage, *apiError) {
	kwargs := req.ChatTemplateKwargs
	if req.ReasoningEffort == nil {
		return kwargs, nil
	}
	kw, err := effortKwargs(*req.ReasoningEffort, s.tok.ChatTemplateUses)
	if err != nil {
		return nil, badRequest("reasoning_effort", err.Error())
	}
	if kwargs, err = mergeKwargs(kwargs, kw); err != nil {
		return nil, badRequest("chat_template_kwargs", err.Error())
	}
	return kwargs, nil
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	p, e := s.plan(&req.common)
	if e != nil {
		writeError(w, e)
		return
	}
	p.routingKey = r.Header.Get(tokenapi.RoutingKeyHeader)
	ag, e := s.planAgent(&req.agentFields, req.Tools, req.Messages, p)
	if e != nil {
		writeError(w, e)
		return
	}
	p.logprobs = req.Logprobs
	if req.TopLogprobs != nil {
		switch {
		case *req.TopLogprobs < 0 || *req.TopLogprobs > maxTopLogprobs:
			writeError(w, badRequest("top_logprobs", fmt.Sprintf("top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *req.TopLogprobs)))
			return
		case !req.Logprobs && *req.TopLogprobs > 0:
			writeError(w, badRequest("top_logprobs", "top_logprobs needs logprobs=true"))
			return
		}
		p.topLogprobs = *req.TopLogprobs
	}
	ids, urls, e := s.chatPrompt(&req, ag, p.model)
	if e != nil {
		writeError(w, e)
		return
	}
	reqtime.Mark(r.Context(), reqtime.Tokenized)
	ids, images, e := s.prepareImages(r.Context(), ids, urls)
	if e != nil {
		writeError(w, e)
		return
	}
	if e := s.checkContext(len(ids), p, "messages"); e != nil {
		writeError(w, e)
		return
	}
	id := newID("chatcmpl-")
	reqs := make([]tokenapi.Request, p.n)
	idx := make([]int, p.n)
	for i := range reqs {
		reqs[i] = p.request(id, ids, i)
		reqs[i].Images = images
		idx[i] = i
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	created := s.opts.Now().Unix()
	if p.stream && p.n == 1 {
		s.streamOne(ctx, w, cancel, p, ag, id, created, reqs[0])
		return
	}
	pieces := s.runAll(ctx, p, reqs, idx)
	if p.stream {
		s.streamChat(w, cancel, p, ag, id, created, pieces)
		return
	}
	states, u, aerr := collect(cancel, pieces, p.n, func(int) int { return 0 })
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	resp := ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: p.model, Usage: u}
	var reasoning strings.Builder
	for i, st := range states {
		m, finish, aerr := ag.parseWhole(st.text, st.finish)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if m.ReasoningContent != nil {
			reasoning.WriteString(*m.ReasoningContent)
		}
		c := ChatChoice{Index: i, Message: m, FinishReason: finish, MatchedStop: st.matched}
		if p.logprobs {
			c.Logprobs = s.chatLogprobs(st.logprobs, p.topLogprobs)
		}
		resp.Choices = append(resp.Choices, c)
	}
	resp.Usage.CompletionTokensDetails = &CompletionTokensDetails{ReasoningTokens: s.reasoningTokens(reasoning.String(), u.CompletionTokens)}
	writeJSON(w, resp)
}

// ChatCompletion is a non-streaming chat reply (OpenAI's chat.completion
// object): what the chat route writes, and the one shape a client of the
// gateway reads it with.
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   Usage        `json:"usage"`
}

// ChatChoice is one of a ChatCompletion's n choices.
type ChatChoice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	Logprobs     any     `json:"logprobs"`
	FinishReason string  `json:"finish_reason"`
	MatchedStop  any     `json:"matched_stop"`
}

type chatLP struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []altLP `json:"top_logprobs"`
}

// altLP is one of a token's most likely alternatives.
type altLP struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func (s *Server) chatLogprobs(lps []tokenLogprob, top int) map[string][]chatLP {
	return map[string][]chatLP{"content": s.logprobEntries(lps, top)}
}

// logprobEntries are tokens' logprobs in chat's (and Responses') shape.
func (s *Server) logprobEntries(lps []tokenLogprob, top int) []chatLP {
	out := make([]chatLP, 0, len(lps))
	for _, lp := range lps {
		t, b := s.tokenText(lp.id)
		e := chatLP{Token: t, Logprob: lp.logprob, Bytes: b, TopLogprobs: []altLP{}}
		for _, alt := range lp.top[:min(top, len(lp.top))] {
			at, ab := s.tokenText(alt.ID)
			e.TopLogprobs = append(e.TopLogprobs, altLP{Token: at, Logprob: alt.Logprob, Bytes: ab})
		}
		out = append(out, e)
	}
	return out
}

type chunkDelta struct {
	Role             string                 `json:"role,omitempty"`
	Content          *string                `json:"content,omitempty"`
	ReasoningContent *string                `json:"reasoning_content,omitempty"`
	Reasoning        *string                `json:"reasoning,omitempty"`
	ToolCalls        []delta.OpenAIToolCall `json:"tool_calls,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
	MatchedStop  any        `json:"matched_stop,omitempty"`
}

type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *Usage        `json:"usage,omitempty"`
}

// chatStream writes one chat stream: a piece at a time, from the
// handler goroutine only.
type chatStream struct {
	s        *Server
	out      *sse
	enc      *chatChunkEnc
	cancel   context.CancelFunc
	p        *plan
	ag       *agent
	id       string
	created  int64
	roleSent []bool
	finished []bool         // the choices whose finish went out
	replies  []*replyParser // tools.go; nil: content as generated
	u        Usage
	ps       prompts
	failed   bool
	// reasoning is the text the choices' parsers split off as reasoning
	// (usage's completion_tokens_details.reasoning_tokens).
	reasoning strings.Builder
}

func (s *Server) newChatStream(w http.ResponseWriter, cancel context.CancelFunc, p *plan, ag *agent, id string, created int64) *chatStream {
	return &chatStream{s: s, out: newSSE(w), enc: newChatChunkEnc(id, created, p.model), cancel: cancel, p: p, ag: ag, id: id, created: created,
		roleSent: make([]bool, p.n), finished: make([]bool, p.n), replies: make([]*replyParser, p.n)}
}

// streamChat writes the stream of the pieces of n > 1 samples, each
// from its own runner.
func (s *Server) streamChat(w http.ResponseWriter, cancel context.CancelFunc, p *plan, ag *agent, id string, created int64, pieces <-chan piece) {
	cs := s.newChatStream(w, cancel, p, ag, id, created)
	for pc := range pieces {
		cs.take(pc, len(pieces) > 0)
	}
	cs.end()
}

// streamOne writes the stream of one sample read in the handler's own
// goroutine: the engine's output reaches this writer with one wake-up
// and no goroutine between (docs/architecture.md §14).
func (s *Server) streamOne(ctx context.Context, w http.ResponseWriter, cancel context.CancelFunc, p *plan, ag *agent, id string, created int64, req tokenapi.Request) {
	cs := s.newChatStream(w, cancel, p, ag, id, created)
	emit := func(pc piece) bool {
		cs.take(pc, pc.more)
		return !cs.failed && !cs.out.failed
	}
	func() {
		// The runner's boundary, as runAll's goroutine has it: a panic in
		// the engine's stream or the stop decoder fails this request.
		defer s.recoverRunner(0, emit)
		s.runSample(ctx, p, req, 0, emit)
	}()
	cs.end()
}

// take writes one piece; more: another is already waiting, so the write
// is left unflushed (one flush covers them all).
func (cs *chatStream) take(pc piece, more bool) {
	if cs.failed {
		return
	}
	out, enc, p := cs.out, cs.enc, cs.p
	chunk := func(c chunkChoice) chatChunk {
		return chatChunk{ID: cs.id, Object: "chat.completion.chunk", Created: cs.created, Model: p.model, Choices: []chunkChoice{c}}
	}
	if pc.err != nil {
		cs.failed = true
		cs.cancel()
		out.failChoices(pc.err, cs.finished, enc.finish)
		return
	}
	if pc.flush {
		if !more {
			out.flush()
		}
		return
	}
	// Events go out through enc (no json.Marshal, no allocation) and
	// unflushed; one flush covers every piece already waiting, so a
	// burst of tokens costs one write, not one per token.
	if !cs.roleSent[pc.index] {
		cs.roleSent[pc.index] = true
		out.write(enc.role(pc.index))
	}
	rp := cs.replies[pc.index]
	if rp == nil && cs.ag.active {
		var aerr *apiError
		if rp, aerr = cs.ag.newReply(); aerr != nil {
			cs.failed = true
			cs.cancel()
			out.fail(aerr)
			return
		}
		cs.replies[pc.index] = rp
	}
	if rp != nil {
		ds := rp.push(pc.text)
		if pc.finish != "" {
			ds = append(ds, rp.finish()...)
		}
		for _, d := range ds {
			if d.Kind == delta.Reasoning {
				cs.reasoning.WriteString(d.Text)
			}
		}
		deltas := streamDeltas(ds)
		if len(deltas) == 0 && len(pc.logprobs) > 0 {
			deltas = []chunkDelta{{}}
		}
		for k, d := range deltas {
			c := chunkChoice{Index: pc.index, Delta: d}
			if k == 0 && p.logprobs {
				c.Logprobs = cs.s.chatLogprobs(pc.logprobs, p.topLogprobs)
			}
			out.send(chunk(c))
		}
	} else if pc.text != "" || len(pc.logprobs) > 0 {
		if p.logprobs {
			text := pc.text
			c := chunkChoice{Index: pc.index, Delta: chunkDelta{Content: &text}}
			c.Logprobs = cs.s.chatLogprobs(pc.logprobs, p.topLogprobs)
			out.send(chunk(c))
		} else {
			out.write(enc.content(pc.index, pc.text))
		}
	}
	if pc.finish != "" {
		cs.finished[pc.index] = true
		if rp != nil {
			// A parsed reply may end in tool_calls (tools.go).
			f := rp.finishReason(pc.finish)
			out.send(chunk(chunkChoice{Index: pc.index, Delta: chunkDelta{}, FinishReason: &f, MatchedStop: pc.matched}))
		} else {
			out.write(enc.finish(pc.index, pc.finish, pc.matched))
		}
		cs.u.CompletionTokens += pc.completion
		cs.ps.add(0, pc) // n samples of one prompt
	}
	if !more {
		out.flush()
	}
	if out.failed {
		// Client went away: abort every sample.
		cs.cancel()
	}
}

// end closes the stream: the usage chunk when asked, then [DONE].
func (cs *chatStream) end() {
	out, p := cs.out, cs.p
	if out.failed && !out.started {
		return
	}
	if p.includeUsage && !cs.failed {
		u := cs.u
		cs.ps.into(&u)
		u.CompletionTokensDetails = &CompletionTokensDetails{ReasoningTokens: cs.s.reasoningTokens(cs.reasoning.String(), u.CompletionTokens)}
		out.send(chatChunk{ID: cs.id, Object: "chat.completion.chunk", Created: cs.created, Model: p.model, Choices: []chunkChoice{}, Usage: &u})
	}
	out.done()
}
