package openai

import (
	"container/list"
	"encoding/json"
	"sync"
)

// storedResponse is what previous_response_id continues from: the whole
// conversation as chat messages (input, then the response's output), and
// the response object GET /v1/responses/{id} returns.
type storedResponse struct {
	id       string
	messages []json.RawMessage
	body     []byte
}

func (r *storedResponse) size() int64 {
	n := int64(len(r.body) + len(r.id))
	for _, m := range r.messages {
		n += int64(len(m))
	}
	return n
}

// responseStore keeps recent responses in memory, least recently used
// dropped first once it holds more than maxCount of them or maxBytes in
// all: a deployment that runs for days must not grow without bound. A
// response is lost on restart (the API's store is best effort here).
// It is a leaf cache touched only inside its methods, so a mutex guards it.
type responseStore struct {
	maxCount int
	maxBytes int64

	mu    sync.Mutex
	order *list.List // front: most recently used; values *storedResponse
	byID  map[string]*list.Element
	bytes int64
}

func newResponseStore(maxCount int, maxBytes int64) *responseStore {
	return &responseStore{maxCount: maxCount, maxBytes: maxBytes, order: list.New(), byID: map[string]*list.Element{}}
}

// put stores r (replacing one of the same id) and evicts down to the
// bounds; a response larger than maxBytes alone is not kept.
func (s *responseStore) put(r *storedResponse) {
	if s == nil || s.maxCount <= 0 || r.size() > s.maxBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byID[r.id]; ok {
		s.removeLocked(el)
	}
	s.byID[r.id] = s.order.PushFront(r)
	s.bytes += r.size()
	for s.order.Len() > s.maxCount || s.bytes > s.maxBytes {
		s.removeLocked(s.order.Back())
	}
}

func (s *responseStore) removeLocked(el *list.Element) {
	r := el.Value.(*storedResponse)
	s.order.Remove(el)
	delete(s.byID, r.id)
	s.bytes -= r.size()
}

// get returns the response and marks it used.
func (s *responseStore) get(id string) (*storedResponse, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	s.order.MoveToFront(el)
	return el.Value.(*storedResponse), true
}

func (s *responseStore) delete(id string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if ok {
		s.removeLocked(el)
	}
	return ok
}
