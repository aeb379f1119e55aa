package httpapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores/uuidv7"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores"
)

type inboxResponse struct {
	Items      []wire.InboxItem `json:"items"`
	NextCursor *string          `json:"next_cursor"`
}

// listInbox is GET /v1/inbox (and, for an admin, /v1/recipients/{id}/inbox):
// ?limit=1..200 (default 50), ?cursor= from the previous page's next_cursor,
// ?filter=all|unread|archived (default all, which leaves archived items out).
// Items are newest first; ties on created_at are broken by id, ascending.
// ?tenant= lists only that tenant's items; a token with a tenant claim
// lists only its tenant's, and asking for another is a 403.
func (s *Server) listInbox(w http.ResponseWriter, r *http.Request, recipient string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	tenant, err := requestTenant(r, q)
	if err != nil {
		return err
	}
	limit := stores.DefaultInboxLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > stores.MaxInboxLimit {
			return fieldError("limit", "want an integer from 1 to %d", stores.MaxInboxLimit)
		}
		limit = n
	}
	filter := stores.InboxAll
	switch v := q.Get("filter"); v {
	case "", "all":
	case "unread":
		filter = stores.InboxUnread
	case "archived":
		filter = stores.InboxArchived
	default:
		return fieldError("filter", "want all, unread or archived")
	}
	var after *stores.InboxCursor
	if v := q.Get("cursor"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			return &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeBadCursor,
				Message: "cursor: not a cursor this API issued; start again without one",
				Details: []any{wire.FieldDetail{Field: "cursor", Message: err.Error()}}}
		}
		after = c
	}
	page, err := stores.ListTenantInbox(r.Context(), s.read(), recipient, tenant, filter, after, limit)
	if err != nil {
		return err
	}
	resp := inboxResponse{Items: make([]wire.InboxItem, len(page.Items))}
	for i, it := range page.Items {
		resp.Items[i] = wire.InboxItemOf(it)
	}
	if page.Next != nil {
		c := encodeCursor(*page.Next)
		resp.NextCursor = &c
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// Cursor format: base64url (no padding) of
//
//	version (1 byte) | created_at in Unix microseconds (8) | item id (16) | check (4)
//
// where check is the first 4 bytes of SHA-256 over what precedes it. The check
// catches a mangled or hand-edited cursor; it is not a secret. A cursor grants
// nothing: every page query is scoped by the recipient, so a cursor forged to
// point elsewhere only reads the caller's own items from another position.
const cursorVersion = 1

const cursorLen = 1 + 8 + 16 + 4

func encodeCursor(c stores.InboxCursor) string {
	var b [cursorLen]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(c.CreatedAt.UnixMicro()))
	id, err := hex.DecodeString(stripHyphens(c.ID))
	if err != nil || len(id) != 16 {
		// Ids come from the database's uuid column: this cannot happen.
		panic(fmt.Sprintf("inbox cursor: bad item id %q", c.ID))
	}
	copy(b[9:25], id)
	sum := sha256.Sum256(b[:25])
	copy(b[25:], sum[:4])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeCursor(s string) (*stores.InboxCursor, error) {
	// Strict: one cursor has one spelling (no stray padding bits).
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64url")
	}
	if len(b) != cursorLen || b[0] != cursorVersion {
		return nil, fmt.Errorf("wrong length or version")
	}
	sum := sha256.Sum256(b[:25])
	if !bytes.Equal(sum[:4], b[25:]) {
		return nil, fmt.Errorf("checksum mismatch")
	}
	micros := int64(binary.BigEndian.Uint64(b[1:9]))
	// Years 1 to 9999: a cursor outside them was not made by us (and pgx
	// would overflow encoding it).
	const minMicros, maxMicros = -62135596800000000, 253402300799999999
	if micros < minMicros || micros > maxMicros {
		return nil, fmt.Errorf("time out of range")
	}
	h := hex.EncodeToString(b[9:25])
	id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	return &stores.InboxCursor{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}, nil
}

func stripHyphens(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			out = append(out, s[i])
		}
	}
	return string(out)
}

// inboxCounts is GET /v1/inbox/counts: {"unread","unseen","unread_capped",
// "unseen_capped"}. ?max=1..10000 (default 99) caps each count: a count is
// exact up to max, and above it reads max with its _capped flag set. A count
// is derived from the items at every request, and costs at most max + 1
// index entries however large the inbox.
func (s *Server) inboxCounts(w http.ResponseWriter, r *http.Request, recipient string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	tenant, err := requestTenant(r, q)
	if err != nil {
		return err
	}
	max := stores.DefaultInboxCountsMax
	if v := q.Get("max"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > stores.MaxInboxCountsMax {
			return fieldError("max", "want an integer from 1 to %d", stores.MaxInboxCountsMax)
		}
		max = n
	}
	c, err := stores.CountTenantInbox(r.Context(), s.read(), recipient, tenant, max)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, wire.CountsOf(c))
	return nil
}

// markRequest is the body of the /v1/inbox/{read,unread,seen,archive} posts.
type markRequest struct {
	IDs []string `json:"ids"`
	// All is a pointer so that {"all": false} is told from an absent all: it
	// is refused rather than read as "no ids given".
	All *bool `json:"all"`
}

type markResponse struct {
	Marked int `json:"marked"`
}

// markRead is POST /v1/inbox/read: {"ids":[...]} or {"all":true} (every
// unread, unarchived item). Reading an item also marks it seen.
func (s *Server) markRead(w http.ResponseWriter, r *http.Request, recipient string) error {
	return s.mark(w, r, recipient, stores.InboxOpRead, false, true)
}

// markUnread is POST /v1/inbox/unread: {"ids":[...]}.
func (s *Server) markUnread(w http.ResponseWriter, r *http.Request, recipient string) error {
	return s.mark(w, r, recipient, stores.InboxOpUnread, false, false)
}

// markSeen is POST /v1/inbox/seen: {} (or no body, or {"all":true}) marks
// every unseen item seen; {"ids":[...]} only those.
func (s *Server) markSeen(w http.ResponseWriter, r *http.Request, recipient string) error {
	return s.mark(w, r, recipient, stores.InboxOpSeen, true, true)
}

// archive is POST /v1/inbox/archive: {"ids":[...]}.
func (s *Server) archive(w http.ResponseWriter, r *http.Request, recipient string) error {
	return s.mark(w, r, recipient, stores.InboxOpArchive, false, false)
}

// mark applies op for recipient. emptyIsAll makes a body without ids mean
// every item (seen); allowAll accepts {"all":true}. The response counts the
// items whose state changed: ids of items already in that state, or of
// somebody else's items, count nothing.
func (s *Server) mark(w http.ResponseWriter, r *http.Request, recipient string, op stores.InboxOp, emptyIsAll, allowAll bool) error {
	var req markRequest
	if err := s.DecodeJSON(w, r, &req, emptyIsAll); err != nil {
		return err
	}
	all := req.All != nil && *req.All
	// A token with a tenant claim marks only its tenant's items; ?tenant=
	// does the same for a token without one.
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	tenant, err := requestTenant(r, q)
	if err != nil {
		return err
	}
	m := stores.InboxMark{Recipient: recipient, Op: op, IDs: req.IDs, All: all, At: s.clock(), Tenant: tenant}
	switch {
	case req.All != nil && !allowAll:
		return fieldError("all", "not supported for %s: give ids", op)
	case req.All != nil && !all:
		return fieldError("all", `must be true when given (or give "ids")`)
	case all && req.IDs != nil:
		return fieldError("all", "give either ids or all, not both")
	case !all && req.IDs == nil:
		if !emptyIsAll {
			if allowAll {
				return fieldError("ids", `is required (or "all": true)`)
			}
			return fieldError("ids", "is required")
		}
		m.All = true
	}
	if len(req.IDs) > stores.MaxInboxMarkIDs {
		return fieldError("ids", "%d ids; at most %d per request", len(req.IDs), stores.MaxInboxMarkIDs)
	}
	for i, id := range req.IDs {
		if !uuidv7.Valid(id) {
			return fieldError(fmt.Sprintf("ids[%d]", i), "not a UUID")
		}
	}
	var changed []string
	err = stores.RetryDeadlock(func() error {
		return pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
			var err error
			changed, err = stores.MarkInbox(r.Context(), tx, m)
			return err
		})
	})
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, markResponse{Marked: len(changed)})
	return nil
}

// inboxClickedJSON is the answer of POST /v1/inbox/{id}/clicked.
type inboxClickedJSON struct {
	// Recorded is false when the item's click was recorded before.
	Recorded bool `json:"recorded"`
}

// inboxClicked is POST /v1/inbox/{id}/clicked: the recipient followed the
// item (its url), recorded once as a `clicked` event of the item's
// delivery, as a tracked email link is. Another recipient's item, or one
// of another tenant than the token's, is a 404.
func (s *Server) inboxClicked(w http.ResponseWriter, r *http.Request, recipient string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	tenant, err := requestTenant(r, q)
	if err != nil {
		return err
	}
	found, recorded, err := stores.InboxClicked(r.Context(), s.pool, recipient, r.PathValue("id"), tenant, s.reg.Inbox(), s.clock())
	if err != nil {
		return err
	}
	if !found {
		return notFoundError("no inbox item %q", r.PathValue("id"))
	}
	wire.WriteJSON(w, http.StatusOK, inboxClickedJSON{Recorded: recorded})
	return nil
}
