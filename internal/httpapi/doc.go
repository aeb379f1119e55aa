// Package httpapi is notifyd's HTTP API (SPEC §10): JSON over net/http with
// Go 1.22 method patterns. The daemon builds it with New and serves Handler.
//
// # Routes
//
//	GET    /healthz                               none       200 {"status":"ok"}
//	GET    /readyz                                none       200 {"status":"ready"} | 503 not_ready
//	POST   /v1/notifications                      admin      202 {"id","duplicate":false} | 200 {"id","duplicate":true}
//	GET    /v1/notifications/{id}                 admin      200 the notification and its ledger
//	DELETE /v1/notifications/{notifier}/{key...}  admin      200 {"cancelled":n}
//	PUT    /v1/recipients/{id}                    admin      200 the stored profile
//	GET    /v1/recipients/{id}                    admin      200 the profile | 404
//	GET    /v1/recipients/{id}/inbox              admin      200 as /v1/inbox, for that recipient
//	GET    /v1/inbox                              recipient  200 {"items":[...],"next_cursor":"..."|null}
//	GET    /v1/inbox/counts                       recipient  200 {"unread":n,"unseen":n}
//	POST   /v1/inbox/read                         recipient  200 {"marked":n}
//	POST   /v1/inbox/unread                       recipient  200 {"marked":n}
//	POST   /v1/inbox/seen                         recipient  200 {"marked":n}
//	POST   /v1/inbox/archive                      recipient  200 {"marked":n}
//
// More routes are mounted through Options.Extra, Options.AdminExtra and
// Server.Handle (the stream, preferences, topics, metrics, River UI).
//
// # Errors
//
// Every error, including an unknown route (404 not_found) and a wrong method
// (405 method_not_allowed, with Allow), is
//
//	{"error":{"code":"...","message":"...","details":[...]}}
//
// details is always an array. For request problems each detail is
// {"field","message"} naming the body field ("recipients[2].id") or query
// parameter ("limit"); for invalid_params each is {"pointer","message"}, an
// RFC 6901 pointer into params ("/post_title"). The codes are the Code*
// constants. Malformed JSON, wrong types, unknown fields, trailing data,
// invalid UTF-8, NUL characters and bad query values are 400 bad_request;
// well-formed input that breaks a rule of the Go API (a missing key, an id
// over 255 bytes, no recipients or topics) is 422 invalid_request, like the
// other 422s (invalid_params, too_many_recipients). A refused request writes
// nothing.
//
// # Authorisation
//
// Admin routes take "Authorization: Bearer <http.admin_token>", compared in
// constant time; with no admin_token configured they answer 401 to everyone.
// Recipient routes take a recipient JWT (notifyd.RecipientToken: HS256 with
// http.token_secret, exp required) in the same header; only the stream,
// through Server.Recipient, also reads ?access_token=. A recipient token is
// not an admin token. Every recipient query is scoped by the token's subject:
// another recipient's item id is simply not found and not changed.
//
// # Inbox semantics
//
// Pages are newest first in the total order (created_at DESC, id ASC), the
// order of the notify_inbox_page_idx index; the cursor is opaque (base64url of
// the last item's created_at and id with a check sum; a mangled one is 400
// bad_cursor). filter=all leaves archived items out, unread is neither read
// nor archived, archived is only archived. Reading an item also marks it seen
// (unseen is therefore always a subset of unread, and both counts come from
// the partial unread index); unread keeps seen_at. read {"all":true} and seen
// {} reach every unread (unseen), unarchived item. "marked" counts the items
// whose state changed. Each request that changes something appends one
// "updated" row to notify_inbox_changes in the same transaction, with
// data {"read_at": t | null}, {"seen_at": t} or {"archived_at": t}.
//
// # Recipient profiles
//
// PUT replaces the whole profile: absent, null or "" fields are cleared and
// data defaults to {}. email is a bare address, locale a BCP 47-like tag,
// timezone an IANA name, webhook_url an absolute http(s) URL (private
// destinations are refused at send time, not here), data a JSON object. A new
// webhook_url clears webhook_gone_at. The read-only fields of a GET response
// are accepted and ignored, so a profile can be read, edited and written back.
package httpapi
