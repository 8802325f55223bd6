package delta

// OpenAIToolCall is a tool call as OpenAI's chat API writes it: a
// non-streaming message's tool_calls[i], or a streaming delta's, where the
// first delta of a call carries id, type and name and later ones only
// argument fragments (the empty fields are then left out).
type OpenAIToolCall struct {
	Index    *int           `json:"index,omitempty"` // streaming only
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function OpenAIFunction `json:"function"`
}

// OpenAIFunction is the function part of an OpenAIToolCall.
type OpenAIFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// OpenAI is the streaming `tool_calls` entry for this delta.
func (c CallDelta) OpenAI() OpenAIToolCall {
	i := c.Index
	t := OpenAIToolCall{Index: &i, ID: c.ID, Function: OpenAIFunction{Name: c.Name, Arguments: c.Arguments}}
	if c.ID != "" || c.Name != "" {
		t.Type = "function"
	}
	return t
}

// OpenAI is the non-streaming `tool_calls` entry for this call.
func (c Call) OpenAI() OpenAIToolCall {
	return OpenAIToolCall{ID: c.ID, Type: "function", Function: OpenAIFunction{Name: c.Name, Arguments: c.Arguments}}
}
