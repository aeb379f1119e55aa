// Package httpapi is notifyd's HTTP API (openapi.json; docs/http-api.md):
// JSON over net/http with Go 1.22 method patterns. The daemon builds it with New and serves Handler.
//
// # Routes
//
// The routes, who may call each, and every request and response shape are in
// openapi.json, served at GET /v1/openapi.json and described for users in
// docs/http-api.md. TestOpenAPIRoutes fails when a mounted route is missing
// from the document or the document names one that is not mounted, and
// TestOpenAPIResponses checks the shapes against the handlers, so the
// document is the route table; this comment does not restate it.
//
// More routes are mounted through Options.Extra, Options.AdminExtra and
// Server.Handle (the stream, metrics, River UI).
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
// other 422s (invalid_params, too_many_recipients, too_many_topics). A query
// string that does not parse is a 400 too, never read as absent. An empty
// token bucket (http.rate, per recipient and for the admin token) is 429
// rate_limited with Retry-After. A refused request writes nothing.
//
// Admin responses, refusals included, carry X-Frame-Options: DENY,
// Content-Security-Policy: frame-ancestors 'none' and Cache-Control:
// no-store (AdminPage).
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
// destinations are refused at send time, not here), phone an E.164 number
// ("+14155550123": a +, 8 to 15 digits, no spaces), data a JSON object. A new
// webhook_url clears webhook_gone_at. The read-only fields of a GET response
// are accepted and ignored, so a profile can be read, edited and written back.
//
// # Preferences
//
// A rule set is {"rules":[{"scope","channel","mode"}]}: scope "*",
// "category:<c>" or "notifier:<n>"; channel "*" or a registered
// per-recipient channel (built in: in_app, email, webhook); mode
// "immediate", "digest" (on a channel that can digest, or "*" where it reads
// as immediate on the others) or "off". GET lists the rules least specific
// scope first (byte order of scope, then channel), the registered
// per-recipient channels with their modes under "channels", and adds
//
//	"effective": {
//	  "comment.created": {"category": "comments", "required": false, "muted": false,
//	                      "channels": {"in_app": "immediate", "teams": "off"}},
//	  ...
//	}
//
// with one entry per configured notifier and, under channels, one per
// per-recipient channel the notifier uses, resolved by the registry — the
// resolution the fan-out applies — with the recipient's rules and active
// notifier mutes. category is "" for a notifier without one. muted reports an
// active "notifier:<name>" mute; a required notifier ignores it (and reads
// "off" as its default), so its channels still show what is sent. Topic mutes
// do not show here: they depend on the topics a notification is sent to.
//
// PUT replaces the whole set in one transaction ("rules": [] clears it;
// "rules" missing or null is a 400) and answers like GET; the effective map
// of a GET response is accepted and ignored, so a response can be written
// back. At most 200 rules, each (scope, channel) once. Every rule is checked
// with notifyd.Rule.Validate before anything is written; a refused set is a
// 422 invalid_preferences whose details name every problem
// ({"field":"rules[3].mode",...}; a duplicate names the later rule). Rules
// naming a notifier or category the config does not have are accepted and
// match nothing, so removing a notifier from config never makes a stored
// rule set unwritable. Concurrent PUTs of one recipient serialise; the last
// to commit wins whole.
//
// # Mutes
//
// A mute is {"target":"notifier:<name>"|"topic:<topic>","until":RFC3339|null}.
// PUT /v1/mutes creates or replaces the mute of a target: the notifier must be
// configured, a topic is 1 to 255 bytes, until must be in the future by the
// database's clock (null or absent: until removed); an invalid target or a
// past until is a 422 invalid_request naming the field, an unparsable until
// a 400. A recipient has at most 1000 active mutes. GET lists the active
// mutes in target byte order; expired ones are neither listed nor applied
// (the fan-out reads "until IS NULL OR until > now()") and are deleted by the
// recipient's next PUT. DELETE takes the target as ?target= or as a body
// {"target"} and answers {"deleted":true} when an active mute was removed,
// false otherwise; any well-formed target can be removed, including a
// notifier no longer configured. A notifier mute silences every
// notification of that notifier; a topic mute silences a notification only
// when every way it reached the recipient is a muted topic (being addressed
// directly is never silenced by a topic mute). Required notifiers ignore
// mutes. Muted deliveries are recorded as skipped, "muted by the recipient".
//
// # Topics
//
// PUT /v1/topics/{topic}/subscribers/{recipient} subscribes (an upsert: a
// new reason replaces the old one and created_at is kept); the body
// {"reason"} is optional, default "subscribed"; a reason is one word of
// letters, digits, '-', '_' or '.', at most 64 bytes (422 invalid_request
// otherwise). Topics and ids are 1 to 255 bytes; escape '/' as %2F. The
// subscribers list is paged in recipient byte order (the fan-out's order):
// ?limit=1..1000 (default 100), ?cursor= the previous page's next_cursor
// (opaque; a mangled one is 400 bad_cursor); a subscriber who stays
// subscribed is listed exactly once however the set changes while paging.
// GET /v1/subscriptions lets a recipient read their own subscriptions, paged
// the same way in topic byte order; changing them is the application's (a
// recipient silences a topic with a mute).
//
// # Push subscriptions
//
// POST /v1/push-subscriptions takes the browser's PushSubscription JSON
// {"endpoint", "expirationTime", "keys": {"p256dh", "auth"}}. The endpoint is
// checked by the web push channel (Options.Push: https, no credentials, not
// a loopback, private or reserved address literal); p256dh must be the
// base64url of an uncompressed P-256 point and auth of 16 bytes. A
// refusal is a 422 naming the field ("keys.p256dh") and writes nothing. The
// endpoint is unique per recipient, and a recipient has at most
// stores.MaxPushSubscriptions. Every route answers 404 when Options.Push is
// nil (no channels.web_push).
//
// # Devices
//
// POST /v1/devices takes {"platform", "token", "app"}: the platform one of
// the registry's (Registry.Platforms: built in, "ios" through APNs and
// "android" through FCM), and the token and app checked by that platform's
// channel (Plugin.Device) whether or not the channel is configured, so an
// app can register before the operator sets the channel up. A refusal is a
// 422 naming the field and writes nothing. The token is unique per
// recipient: registering it again answers 200 with the same id. A
// recipient has at most stores.MaxDevices; the count is taken under the
// recipient lock, so registrations racing for the last place cannot pass
// it together. The same token may be registered by two recipients (a
// shared device whose app did not DELETE its device at sign-out).
//
// # Erasure
//
// DELETE /v1/recipients/{id} erases a recipient in one transaction
// (stores.EraseRecipient): their profile, inbox items, inbox change-log rows,
// preferences, subscriptions, push subscriptions, devices and mutes are deleted. Delivery rows are kept
// for the audit trail with the recipient replaced by the pseudonym
// "erased:" + hex(SHA-256(id)) (stable, so an audit can still group them;
// whoever knows an id can compute it) and last_error cleared, since it may
// quote an address; rows not yet sent (pending, failed, rate_limited) become
// cancelled and digest_pending rows digest_dropped, with last_error
// "recipient erased", so nothing is sent to them afterwards. Notifications
// not yet fanned out drop the id from their inline recipients (a fan-out in
// flight finishes its current chunk first; its later chunks see the erasure,
// topic subscriptions gone included); finished ones carry the pseudonym, as
// does any notification the id was the actor of. The answer
// is {"erased":true,"profile":bool,"inbox":n,"changes":n,"deliveries":n,
// "cancelled":n,"preferences":n,"subscriptions":n,"mutes":n,"devices":n,
// "notifications":n,"pseudonym":"erased:..."}; a 404 when nothing of the id
// existed. No change-log row is written (the recipient's log is gone): an
// open stream of theirs receives nothing more about the erased items and
// should be closed by the application. Not covered: a send already claimed
// (sending) completes and settles on the pseudonymised row; what other
// recipients' inbox items say about the id (their denormalised title, body
// and params) stays until retention; and the application sending to the id
// again starts a new inbox. The request log line carries the path, and with
// it the id.
//
// Suppressed addresses are kept by an erasure unless ?suppressions=true is
// given (they are lifted first, while the profile still names them; the
// answer's "suppressions" counts them): keeping them is what stops notifyd
// mailing a dead or complaining mailbox again when the application
// re-creates the recipient.
//
// # Deliverability
//
// POST /v1/unsubscribe/{token} is the one-click unsubscribe of RFC 8058; the
// token (channels/unsubscribe) is its only authority and names the
// recipient, the channel and the preference scopes it turns off. GET shows a
// confirm page and never writes (link scanners follow GETs). Both forbid
// framing and caching, and a bad token is the same 404 whatever is wrong
// with it. The suppression list (GET/PUT/DELETE /v1/suppressions) and POST
// /v1/bounces are admin endpoints; POST /v1/bounces also takes
// http.bounce_token, which authorises nothing else. See
// docs/deliverability.md.
package httpapi
