package traffic

import (
	"net/http"
	"testing"
)

// TestRoleRowsFollowApply: a renamed role's row keeps its counters under
// the new name, a request that started on the old name ends cleanly, and
// a removed role leaves the rows.
func TestRoleRowsFollowApply(t *testing.T) {
	b := New(Options{Roles: []string{"prefill", "decode"}})
	r := b.Begin(http.MethodPost, "/generate")
	r.Role("decode", "decode")
	b.RenameRole("decode", "decode-0")
	b.AddRole("decode-1")
	r.Tokens("decode", 3)
	r.End(http.StatusOK)
	_, rows := b.Status()
	names := []string{}
	for _, row := range rows {
		names = append(names, row.Role)
	}
	if len(names) != 4 || names[2] != "decode-0" || names[3] != "decode-1" {
		t.Fatalf("rows %v", names)
	}
	b.RemoveRole("decode-1")
	b.RenameRole("decode-0", "decode")
	_, rows = b.Status()
	if len(rows) != 3 || rows[2].Role != "decode" {
		t.Fatalf("rows after scaling back %+v", rows)
	}
}
