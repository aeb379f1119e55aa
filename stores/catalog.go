package stores

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
)

// CatalogNotifier is one notifier as the SQL functions see it: notify_send
// refuses a notifier that is not in the catalog, inline recipients beyond
// MaxRecipients, and params that fail Params (the checkable part of the
// notifier's params schema; zero: nothing is checked at enqueue).
type CatalogNotifier struct {
	Name          string
	Category      string
	MaxRecipients int
	Params        ParamsCheck
	// Audience says the notifier reads recipients from an audience query:
	// notify_send accepts it without recipients or topics.
	Audience bool
}

// FanoutJob is the River job every send inserts beside the notification (see
// notify_enqueue): the kind and the insert options the Go code declares for
// the fan-out job, with River's defaults applied.
type FanoutJob struct {
	Kind        string
	Queue       string
	MaxAttempts int
	Priority    int
}

// Limits are the HTTP API's size limits that the SQL functions enforce too
// (notify_send: topics and params; notify_put_recipient: data).
type Limits struct {
	// MaxTopics is http.max_topics: the most topics one send names.
	MaxTopics int
	// MaxBody is http.max_body: the most bytes of a send's params, or of a
	// profile's data, as JSON text.
	MaxBody int64
}

// Catalog is what a daemon publishes for the SQL functions: its config's
// notifiers, the fan-out job's definition and the API's limits. A zero
// Limits leaves the published limits as they are.
type Catalog struct {
	Notifiers []CatalogNotifier
	Fanout    FanoutJob
	Limits    Limits
}

// publishCatalogSQL writes the catalog in one statement. The notifiers are
// upserted in name order, so two replicas publishing at once lock rows in the
// same order; a row is only rewritten when its attributes changed, so
// updated_at says when it last changed. With $8 (prune) it also deletes the
// notifiers absent from this catalog. $9 and $10 are each notifier's params
// check (ParamsCheck's Schema and Check; NULL: none); $11 whether it has an
// audience. $12 and $13 are the limits (NULL: unchanged).
const publishCatalogSQL = `
WITH limits AS (
    UPDATE notify_api_limits AS l
    SET max_topics = $12, max_body = $13, updated_at = now()
    WHERE $12::integer IS NOT NULL AND (l.max_topics, l.max_body) IS DISTINCT FROM ($12::integer, $13::bigint)
    RETURNING 1
), fanout AS (
    INSERT INTO notify_fanout_job AS f (singleton, kind, queue, max_attempts, priority)
    VALUES (true, $1, $2, $3, $4)
    ON CONFLICT (singleton) DO UPDATE
    SET kind = EXCLUDED.kind, queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts,
        priority = EXCLUDED.priority, updated_at = now()
    WHERE (f.kind, f.queue, f.max_attempts, f.priority)
          IS DISTINCT FROM (EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.priority)
    RETURNING 1
), upserted AS (
    INSERT INTO notify_notifiers AS n (name, category, max_recipients, params_schema, params_check, audience)
    SELECT u.name, u.category, u.max_recipients, u.params_schema, u.params_check::jsonpath, u.audience
    FROM unnest($5::text[], $6::text[], $7::integer[], $9::jsonb[], $10::text[], $11::boolean[])
         AS u(name, category, max_recipients, params_schema, params_check, audience)
    ORDER BY u.name COLLATE "C"
    ON CONFLICT (name) DO UPDATE
    SET category = EXCLUDED.category, max_recipients = EXCLUDED.max_recipients,
        params_schema = EXCLUDED.params_schema, params_check = EXCLUDED.params_check,
        audience = EXCLUDED.audience, updated_at = now()
    WHERE (n.category, n.max_recipients, n.params_schema, n.params_check::text, n.audience)
          IS DISTINCT FROM (EXCLUDED.category, EXCLUDED.max_recipients, EXCLUDED.params_schema,
                            EXCLUDED.params_check::text, EXCLUDED.audience)
    RETURNING 1
), removed AS (
    DELETE FROM notify_notifiers
    WHERE $8 AND name <> ALL ($5::text[])
    RETURNING name
)
SELECT (SELECT count(*) FROM upserted), coalesce((SELECT array_agg(name ORDER BY name) FROM removed), '{}')`

// PublishCatalog writes c for the SQL functions, in one statement: it adds
// the notifiers that are new, updates those whose category or max_recipients
// changed, and sets the fan-out job's definition. With prune it also removes
// the notifiers that c does not list (the daemon prunes at `notifyd migrate`,
// not at start: see docs/sql-enqueue.md for what a rolling deploy sees). It
// reports how many notifiers it added or changed and which it removed.
func PublishCatalog(ctx context.Context, db DB, c Catalog, prune bool) (changed int, removed []string, err error) {
	f := c.Fanout
	if f.Kind == "" || f.Queue == "" || f.MaxAttempts <= 0 || f.Priority <= 0 {
		return 0, nil, fmt.Errorf("publish catalog: incomplete fan-out job %+v", f)
	}
	ns := slices.Clone(c.Notifiers)
	slices.SortFunc(ns, func(a, b CatalogNotifier) int { return strings.Compare(a.Name, b.Name) })
	names := make([]string, len(ns))
	categories := make([]string, len(ns))
	maxRecipients := make([]int32, len(ns))
	schemas := make([]*string, len(ns))
	checks := make([]*string, len(ns))
	audiences := make([]bool, len(ns))
	for i, n := range ns {
		if n.Name == "" || n.MaxRecipients <= 0 {
			return 0, nil, fmt.Errorf("publish catalog: notifier %q: a name and a positive max_recipients are required", n.Name)
		}
		if i > 0 && ns[i-1].Name == n.Name {
			return 0, nil, fmt.Errorf("publish catalog: notifier %q listed twice", n.Name)
		}
		names[i], categories[i], maxRecipients[i] = n.Name, n.Category, int32(n.MaxRecipients)
		audiences[i] = n.Audience
		if n.Params.Check != "" {
			schema, check := string(n.Params.Schema), n.Params.Check
			schemas[i], checks[i] = &schema, &check
		}
	}
	var maxTopics *int32
	var maxBody *int64
	switch l := c.Limits; {
	case l == Limits{}:
	case l.MaxTopics <= 0 || l.MaxBody <= 0:
		return 0, nil, fmt.Errorf("publish catalog: limits %+v: both must be positive", l)
	default:
		t := int32(min(l.MaxTopics, math.MaxInt32))
		maxTopics, maxBody = &t, &l.MaxBody
	}
	var n int64
	err = db.QueryRow(ctx, publishCatalogSQL, f.Kind, f.Queue, f.MaxAttempts, f.Priority, names, categories,
		maxRecipients, prune, schemas, checks, audiences, maxTopics, maxBody).Scan(&n, &removed)
	if err != nil {
		return 0, nil, fmt.Errorf("publish catalog: %w", err)
	}
	return int(n), removed, nil
}

const catalogSQL = `
SELECT f.kind, f.queue, f.max_attempts, f.priority,
       coalesce(array_agg(n.name ORDER BY n.name) FILTER (WHERE n.name IS NOT NULL), '{}'),
       coalesce(array_agg(n.category ORDER BY n.name) FILTER (WHERE n.name IS NOT NULL), '{}'),
       coalesce(array_agg(n.max_recipients ORDER BY n.name) FILTER (WHERE n.name IS NOT NULL), '{}'),
       coalesce(array_agg(n.params_schema::text ORDER BY n.name) FILTER (WHERE n.name IS NOT NULL), '{}'),
       coalesce(array_agg(n.params_check::text ORDER BY n.name) FILTER (WHERE n.name IS NOT NULL), '{}'),
       coalesce(array_agg(n.audience ORDER BY n.name) FILTER (WHERE n.name IS NOT NULL), '{}'),
       (SELECT l.max_topics FROM notify_api_limits l), (SELECT l.max_body FROM notify_api_limits l)
FROM notify_fanout_job f
LEFT JOIN notify_notifiers n ON true
GROUP BY f.kind, f.queue, f.max_attempts, f.priority`

// ReadCatalog reads the published catalog back, notifiers in name order.
func ReadCatalog(ctx context.Context, db DB) (Catalog, error) {
	var c Catalog
	var names, categories []string
	var maxRecipients []int32
	var schemas, checks []*string
	var audiences []bool
	err := db.QueryRow(ctx, catalogSQL).Scan(&c.Fanout.Kind, &c.Fanout.Queue, &c.Fanout.MaxAttempts,
		&c.Fanout.Priority, &names, &categories, &maxRecipients, &schemas, &checks, &audiences, &c.Limits.MaxTopics,
		&c.Limits.MaxBody)
	if err != nil {
		return Catalog{}, fmt.Errorf("read catalog: %w", notFound(err))
	}
	c.Notifiers = make([]CatalogNotifier, len(names))
	for i := range names {
		c.Notifiers[i] = CatalogNotifier{Name: names[i], Category: categories[i], MaxRecipients: int(maxRecipients[i]),
			Audience: audiences[i]}
		if schemas[i] != nil && checks[i] != nil {
			c.Notifiers[i].Params = ParamsCheck{Schema: *schemas[i], Check: *checks[i]}
		}
	}
	return c, nil
}
