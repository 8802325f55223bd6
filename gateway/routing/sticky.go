package routing

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Bounds of manual's sticky map: a client choosing its own keys must not
// be able to grow the gateway's memory without end.
const (
	// MaxStickyKeys is how many routing keys a pool remembers; past it the
	// least recently seen key is forgotten (it is assigned again if it
	// returns).
	MaxStickyKeys = 1 << 18
	// MaxKeyLen: longer routing keys are remembered by their SHA-256.
	MaxKeyLen = 256
	// maxSticky is how many workers a key remembers (SMG keeps two, so a
	// key whose worker went away can return to it when it comes back).
	maxSticky = 2
)

// stickyMap is manual's key → workers map with SMG's idle expiry, owned by
// the Router's goroutine.
type stickyMap struct {
	lru   *list.List // of *stickyEntry, most recent first
	byKey map[string]*list.Element
	// keys counts, per candidate name, the keys whose latest worker it is
	// (min_group's metric).
	keys map[string]int
	max  int
}

type stickyEntry struct {
	key   string
	names []string
	seen  time.Time
}

func newStickyMap(max int) *stickyMap {
	return &stickyMap{lru: list.New(), byKey: map[string]*list.Element{}, keys: map[string]int{}, max: max}
}

// stickyKey is how a routing key is stored: scoped (the pool level, or a
// worker for its ranks) and bounded in length.
func stickyKey(scope, key string) string {
	if len(key) > MaxKeyLen {
		s := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(s[:])
	}
	return scope + "\x00" + key
}

// get returns key's workers, most recent last, and marks it seen.
func (m *stickyMap) get(key string, now time.Time) []string {
	el, ok := m.byKey[key]
	if !ok {
		return nil
	}
	e := el.Value.(*stickyEntry)
	e.seen = now
	m.lru.MoveToFront(el)
	return e.names
}

// assign records name as key's newest worker.
func (m *stickyMap) assign(key, name string, now time.Time) {
	el, ok := m.byKey[key]
	if !ok {
		for m.lru.Len() >= m.max {
			m.remove(m.lru.Back())
		}
		m.byKey[key] = m.lru.PushFront(&stickyEntry{key: key, names: []string{name}, seen: now})
		m.keys[name]++
		return
	}
	e := el.Value.(*stickyEntry)
	m.release(e)
	if len(e.names) >= maxSticky {
		e.names = append(e.names[:0:0], e.names[len(e.names)-maxSticky+1:]...)
	}
	e.names = append(e.names, name)
	e.seen = now
	m.keys[name]++
	m.lru.MoveToFront(el)
}

// expire forgets keys not seen for maxIdle.
func (m *stickyMap) expire(now time.Time, maxIdle time.Duration) {
	for el := m.lru.Back(); el != nil; el = m.lru.Back() {
		if now.Sub(el.Value.(*stickyEntry).seen) < maxIdle {
			return
		}
		m.remove(el)
	}
}

func (m *stickyMap) remove(el *list.Element) {
	e := m.lru.Remove(el).(*stickyEntry)
	delete(m.byKey, e.key)
	m.release(e)
}

func (m *stickyMap) release(e *stickyEntry) {
	if n := len(e.names); n > 0 {
		last := e.names[n-1]
		if m.keys[last]--; m.keys[last] <= 0 {
			delete(m.keys, last)
		}
	}
}
