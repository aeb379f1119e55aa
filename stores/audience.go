package stores

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// An audience (a notifier's `audience` query over the application's tables,
// docs/audiences.md) reaches the fan-out in three steps, none of which moves
// a recipient through the daemon's memory:
//
//  1. StageAudience runs the query, deduplicated (strongest reason) and
//     without the actor, and writes its rows once, straight into
//     notify_audience_members, by one INSERT … SELECT in a transaction of
//     its own under a statement timeout. The query part runs READ ONLY:
//     notify_audience_rows (sql/functions) sets transaction_read_only for
//     the query alone, so PostgreSQL refuses a write in it as it would in a
//     READ ONLY transaction.
//  2. The normalisation counts and splits the members with the rest of the
//     audience (NormalizeAudience), after LockAudienceStaging.
//  3. Each chunk reads its lane's next window of members along the primary
//     key from the lane's cursor, like a topic's subscribers
//     (FanoutCandidates); the members are deleted in one statement when the
//     notification is fanned out, rejected or cancelled (DropAudience).

// AudienceQuery is an audience query as StageAudience runs it.
type AudienceQuery struct {
	// Query is the operator's SELECT, returning id and optionally reason.
	Query string
	// Args are the values of $1…, JSON-shaped (as decoded with UseNumber):
	// each is sent as text and PostgreSQL reads it as the type the query
	// gives its placeholder (AudienceArg).
	Args []any
	// Timeout is the statement timeout (zero: none).
	Timeout time.Duration
	// Actor is left out of the audience unless NotifyActor.
	Actor       string
	NotifyActor bool
	// Reasons is the reason precedence, strongest first: of an id the query
	// returns twice, the strongest reason is kept.
	Reasons []string
	// DefaultReason is the reason of rows without one (no reason column, or
	// NULL or "").
	DefaultReason string
}

// AudienceShape is what PostgreSQL says about an audience query without
// running it (DescribeAudience).
type AudienceShape struct {
	// Columns are the names and type names of the result's columns.
	Columns []AudienceColumn
	// Params are the type names PostgreSQL gave $1….
	Params []string
}

// AudienceColumn is one column of an audience query's result.
type AudienceColumn struct {
	Name string
	Type string
}

// Has reports whether the result has a column named name.
func (s *AudienceShape) Has(name string) bool {
	for _, c := range s.Columns {
		if c.Name == name {
			return true
		}
	}
	return false
}

// DescribeAudience prepares query (unnamed, on conn's session) as the
// fan-out runs it, a subquery, and returns its result columns and parameter
// types: a missing table or column, a syntax error, or a statement that is
// not a query (INSERT … RETURNING, a data-modifying WITH) is the
// *pgconn.PgError PostgreSQL answers with.
func DescribeAudience(ctx context.Context, conn *pgx.Conn, query string) (*AudienceShape, error) {
	sd, err := conn.PgConn().Prepare(ctx, "", "SELECT * FROM (\n"+query+"\n) q", nil)
	if err != nil {
		return nil, err
	}
	oids := make([]uint32, 0, len(sd.Fields)+len(sd.ParamOIDs))
	for _, f := range sd.Fields {
		oids = append(oids, f.DataTypeOID)
	}
	oids = append(oids, sd.ParamOIDs...)
	var names []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(format_type(o, NULL) ORDER BY i), '{}')
		FROM unnest($1::oid[]) WITH ORDINALITY AS u(o, i)`, oids).Scan(&names); err != nil {
		return nil, fmt.Errorf("describe audience query types: %w", err)
	}
	s := &AudienceShape{}
	for i, f := range sd.Fields {
		s.Columns = append(s.Columns, AudienceColumn{Name: f.Name, Type: names[i]})
	}
	s.Params = names[len(sd.Fields):]
	return s, nil
}

// stageAudienceSQL wraps the operator's query (%[1]s, its reason expression
// %[2]s) so that it returns one row per id, the strongest reason by
// precedence $%[3]d, the actor $%[4]d left out unless $%[5]d, in id order
// (the order of notify_audience_members' primary key). Ids are read as
// text; an empty or NULL id, or one longer than a recipient id may be (255
// bytes), is not a recipient.
const stageAudienceSQL = `
SELECT DISTINCT ON (a.id) a.id, a.reason
FROM (SELECT q.id::text COLLATE "C" AS id, left(%[2]s, 64) AS reason
      FROM (
%[1]s
      ) q) a
WHERE octet_length(a.id) BETWEEN 1 AND 255 AND ($%[5]d OR a.id <> $%[4]d)
ORDER BY a.id, coalesce(array_position($%[3]d::text[], a.reason), 2147483647), a.reason`

// writeAudienceSQL writes the rows of the prepared audience query $2 (its
// parameters $3, as text) as notification $1's audience members, in one
// statement: notify_audience_rows runs the query READ ONLY.
const writeAudienceSQL = `
INSERT INTO notify_audience_members (notification_id, recipient, reason)
SELECT $1, a.id, a.reason FROM notify_audience_rows($2, $3::text[]) a`

// audienceStagingLockSQL takes the transaction-scoped lock that makes the
// staging of notification $1's audience and its normalisation one at a time
// (two runs of its fan-out job), and says whether it is normalised already.
const audienceStagingLockSQL = `
SELECT pg_advisory_xact_lock(hashtextextended('notify_audience_members ' || $1::uuid::text, 0)),
       coalesce((SELECT normalized FROM notify_notifications WHERE id = $1::uuid), false)`

// ErrAudienceShape is returned (wrapped) by StageAudience for a query that
// does not return a column id.
var ErrAudienceShape = errors.New("the audience query returns no column id")

// ErrAudienceArg is wrapped by StageAudience's error when a param cannot be
// bound to its placeholder: anything but a JSON array (or null) for a
// placeholder the query reads as an array, whose text PostgreSQL would
// otherwise parse as an array literal (the string "{u1,u2}" becoming two
// recipients), or an array of arrays. The notification is refused, not
// retried.
var ErrAudienceArg = errors.New("an audience param does not fit its placeholder")

// StageAudience runs q on conn and writes its rows as notification id's
// audience members (notify_audience_members, replacing any a run that did
// not normalise left), each once, in one INSERT … SELECT of a transaction of
// its own under q's statement timeout; the query itself runs READ ONLY
// (notify_audience_rows). It returns how many members it wrote; nothing
// when the notification is normalised already (another run staged it and
// goes on from there). conn must not be in a transaction. An error from the
// query itself (a missing table, a timeout, a write the read-only guard
// refused) is a *pgconn.PgError, or wraps ErrAudienceShape.
func StageAudience(ctx context.Context, conn *pgx.Conn, id string, q AudienceQuery) (int64, error) {
	shape, err := DescribeAudience(ctx, conn, q.Query)
	if err != nil {
		return 0, err
	}
	if !shape.Has("id") {
		return 0, fmt.Errorf("%w (its columns: %s)", ErrAudienceShape, columnNames(shape))
	}
	reason := "$" + strconv.Itoa(len(shape.Params)+4)
	if shape.Has("reason") {
		reason = fmt.Sprintf("coalesce(nullif(q.reason::text, ''), %s)", reason)
	}
	n := len(shape.Params)
	sql := fmt.Sprintf(stageAudienceSQL, q.Query, reason, n+1, n+2, n+3)
	args := make([]*string, 0, n+4)
	for i := range n {
		var v any
		if i < len(q.Args) {
			v = q.Args[i]
		}
		if _, list := v.([]any); strings.HasSuffix(shape.Params[i], "[]") && v != nil && !list {
			// The binding is text: a scalar or an object read as an array
			// would be parsed as an array literal, one the sender wrote.
			return 0, fmt.Errorf("%w: $%d is read as %s, and only a JSON array binds to it (got %s)",
				ErrAudienceArg, i+1, shape.Params[i], jsonKind(v))
		}
		a, err := AudienceArg(v)
		if err != nil {
			return 0, fmt.Errorf("%w: $%d: %w", ErrAudienceArg, i+1, err)
		}
		args = append(args, textArg(a))
	}
	reasons := make([]any, len(q.Reasons))
	for i, r := range q.Reasons {
		reasons[i] = r
	}
	reasonList, _ := AudienceArg(reasons)
	args = append(args, textArg(reasonList), textArg(q.Actor),
		textArg(strconv.FormatBool(q.NotifyActor || q.Actor == "")), textArg(q.DefaultReason))
	// A named statement of the session, which EXECUTE in
	// notify_audience_rows reaches; PostgreSQL types its placeholders as for
	// any bound query. The name follows the text: prepared once per session.
	sum := sha256.Sum256([]byte(sql))
	stmt := "notify_audience_" + hex.EncodeToString(sum[:8])
	if _, err := conn.Prepare(ctx, stmt, sql); err != nil {
		return 0, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var normalized bool
	b := &pgx.Batch{}
	if q.Timeout > 0 {
		b.Queue(fmt.Sprintf("SET LOCAL statement_timeout = %d", q.Timeout.Milliseconds()))
	}
	b.Queue(audienceStagingLockSQL, id).QueryRow(func(row pgx.Row) error { return row.Scan(nil, &normalized) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("stage audience of %s: %w", id, err)
	}
	if normalized {
		return 0, tx.Commit(ctx)
	}
	var tag pgconn.CommandTag
	b = &pgx.Batch{}
	b.Queue(dropAudienceSQL, id)
	b.Queue(writeAudienceSQL, id, stmt, args).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// textArg is a text parameter: nil (SQL NULL) or the string AudienceArg
// made.
func textArg(v any) *string {
	if v == nil {
		return nil
	}
	s := v.(string)
	return &s
}

func columnNames(s *AudienceShape) string {
	if len(s.Columns) == 0 {
		return "none"
	}
	names := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// AudienceArg is the text a JSON-shaped param value is bound as: a string
// as it is, a number as written, a boolean as true or false, an array as a
// PostgreSQL array literal of its elements (for = ANY($1)), an object as
// JSON (for a jsonb placeholder); nil is NULL. PostgreSQL parses the text as
// the type the query gives the placeholder, so the value is never part of
// the statement's text.
func AudienceArg(v any) (any, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case bool:
		return strconv.FormatBool(v), nil
	case []any:
		var sb strings.Builder
		sb.WriteByte('{')
		for i, e := range v {
			if i > 0 {
				sb.WriteByte(',')
			}
			if e == nil {
				sb.WriteString("NULL")
				continue
			}
			if _, nested := e.([]any); nested {
				return nil, errors.New("an array of arrays is not supported")
			}
			s, err := AudienceArg(e)
			if err != nil {
				return nil, err
			}
			sb.WriteByte('"')
			sb.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s.(string)))
			sb.WriteByte('"')
		}
		sb.WriteByte('}')
		return sb.String(), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return string(b), nil
	}
}

// jsonKind names the JSON type of a decoded param value, for errors.
func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number, float64, int, int64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}

const dropAudienceSQL = `DELETE FROM notify_audience_members WHERE notification_id = $1`

// LockAudienceStaging waits, in tx (a normalisation), for any staging of
// notification id's audience under way (StageAudience of another run of its
// job) and keeps the next from starting until tx ends, so the normalisation
// reads one staging whole.
func LockAudienceStaging(ctx context.Context, tx DB, id string) error {
	if _, err := tx.Exec(ctx, audienceStagingLockSQL, id); err != nil {
		return fmt.Errorf("lock audience staging of %s: %w", id, err)
	}
	return nil
}

// DropAudience deletes notification id's audience members: it is fanned
// out, rejected or cancelled. (One statement at the end costs a twentieth
// of deleting each chunk's members as it is written.)
func DropAudience(ctx context.Context, tx DB, id string) error {
	if _, err := tx.Exec(ctx, dropAudienceSQL, id); err != nil {
		return fmt.Errorf("drop audience of %s: %w", id, err)
	}
	return nil
}
