package openai

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tsd-project/tsd/gateway/tokenizer"
)

// tokenize serves POST /v1/tokenize: {"prompt": "..."} or {"messages": [...]}
// (rendered through the chat template) -> {"tokens": [...], "count": n}.
// Handy to see exactly what the engines receive.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt              *string         `json:"prompt"`
		Text                *string         `json:"text"`
		Messages            json.RawMessage `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
		AddGenerationPrompt *bool           `json:"add_generation_prompt"`
		AddSpecialTokens    *bool           `json:"add_special_tokens"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	var text string
	addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Text != nil:
		text = *req.Text
	case len(req.Messages) > 0:
		msgs, _, e := normalizeMessages(req.Messages)
		if e != nil {
			writeError(w, e)
			return
		}
		agp := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		var err error
		text, err = s.tok.ApplyChatTemplate(tokenizer.ChatInput{Messages: msgs, Tools: req.Tools, Kwargs: req.ChatTemplateKwargs, AddGenerationPrompt: agp})
		if err != nil {
			writeError(w, badRequest("messages", "process messages: "+err.Error()))
			return
		}
		addSpecial = false
	default:
		writeError(w, badRequest("prompt", "prompt or messages is required"))
		return
	}
	if e := s.checkTextLen(text, "prompt"); e != nil {
		writeError(w, e)
		return
	}
	ids, err := s.promptCache.Encode(text, addSpecial)
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, "tokenization_failed", "", err.Error()))
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, map[string]any{"tokens": ids, "count": len(ids)})
}

// detokenize serves POST /v1/detokenize: {"tokens": [...]} -> {"text": "..."}.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens            []int32 `json:"tokens"`
		SkipSpecialTokens bool    `json:"skip_special_tokens"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	for _, id := range req.Tokens {
		if id < 0 || int(id) >= s.tok.VocabSize() {
			writeError(w, badRequest("tokens", fmt.Sprintf("token id %d out of range", id)))
			return
		}
	}
	writeJSON(w, map[string]any{"text": s.tok.Decode(req.Tokens, req.SkipSpecialTokens)})
}
