package openai

import (
	"fmt"
	"net/http"
)

// registerAgentRoutes mounts the routes agents use beside chat:
// GET /v1/models/{id} and the Responses API (responses.go).
func (s *Server) registerAgentRoutes(mux *http.ServeMux) {
	// {id...}: model ids hold slashes (Qwen/Qwen3-8B).
	mux.HandleFunc("GET /v1/models/{id...}", s.modelByID)
	mux.Handle("POST /v1/responses", s.generation(s.createResponse))
	mux.HandleFunc("GET /v1/responses/{id}", s.getResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", s.deleteResponse)
}

// modelByID answers OpenAI's model retrieval: the served model, or 404
// model_not_found in OpenAI's error shape.
func (s *Server) modelByID(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || (s.opts.Model != "" && id != s.opts.Model) {
		writeError(w, errorf(http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("The model '%s' does not exist", id)))
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "tsd"})
}
