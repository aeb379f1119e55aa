package jobs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server/servertest"
)

// localesDir writes the catalogs of the test's three languages.
func localesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"en.yaml": `review.done:
  in_app:
    title: "{author} left {count, plural, one {# comment} other {# comments}}"
  email:
    subject: "{count, plural, one {# new comment} other {# new comments}} by {author}"
    body: "Total: {total, number}"
`,
		"fr.yaml": `review.done:
  in_app:
    title: "{author} a laissé {count, plural, one {# commentaire} other {# commentaires}}"
  email:
    subject: "{count, plural, one {# nouveau commentaire} other {# nouveaux commentaires}} de {author}"
    body: "Total : {total, number}"
`,
		"pl.yaml": `review.done:
  in_app:
    title: "{author} dodał {count, plural, one {# komentarz} few {# komentarze} many {# komentarzy} other {# komentarza}}"
  email:
    subject: "{count, plural, one {# nowy komentarz} few {# nowe komentarze} many {# nowych komentarzy} other {# komentarza}} od {author}"
    body: "Razem: {total, number}"
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestNotificationRendersInEachRecipientsLocale: one notification to three
// recipients whose profiles say en, fr and pl writes each one's inbox item
// and sends each one's email in their language, with the plural form their
// language needs for the count and numbers grouped as it writes them.
func TestNotificationRendersInEachRecipientsLocale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := smtpcapture.Start(t)
	b.cfg = servertest.Config(t, servertest.BaseConfig+`  review.done:
    params: {type: object, properties: {author: {type: string}, count: {type: number}, total: {type: number}}}
    example: {author: Ada, count: 2, total: 1234.5}
    channels:
      in_app: {title: '{{t "review.done.in_app.title"}}'}
      email: {subject: '{{t "review.done.email.subject"}}', text: '{{t "review.done.email.body"}}'}
locales: `+localesDir(t)+`
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: `+fmt.Sprint(srv.Port())+`, tls: none}
    timeout: 2s
`)
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	b.client = servertest.Client(t, b.pool, b.cfg)
	ctx := context.Background()
	for _, p := range []struct{ id, locale string }{{"u-en", "en"}, {"u-fr", "fr-CA"}, {"u-pl", "pl"}} {
		if _, err := b.pool.Exec(ctx, `INSERT INTO notify_recipients (id, email, locale) VALUES ($1, $2, $3)`,
			p.id, p.id+"@example.test", p.locale); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "review.done", Key: "r-1",
		Recipients: []notifyd.Recipient{{ID: "u-en"}, {ID: "u-fr"}, {ID: "u-pl"}},
		Params:     map[string]any{"author": "Ada", "count": 3, "total": 1234.5}})
	if err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, res.ID, "fanned_out")

	rows, err := b.pool.Query(ctx, `SELECT recipient || ': ' || title FROM notify_inbox WHERE notification_id = $1 ORDER BY recipient`, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	inbox, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"u-en: Ada left 3 comments", "u-fr: Ada a laissé 3 commentaires", "u-pl: Ada dodał 3 komentarze"}
	if !slices.Equal(inbox, want) {
		t.Errorf("inbox:\n%s\nwant\n%s", strings.Join(inbox, "\n"), strings.Join(want, "\n"))
	}

	// A notification over 100 recipients is fanned out by its own job, in
	// chunks: the same texts, and only as many renders as locales.
	big := []notifyd.Recipient{{ID: "u-en"}, {ID: "u-fr"}, {ID: "u-pl"}}
	for i := range 150 {
		big = append(big, notifyd.Recipient{ID: fmt.Sprintf("x-%03d", i)})
	}
	res2, err := b.client.Send(ctx, notifyd.Notification{Notifier: "review.done", Key: "r-2", Recipients: big,
		Params: map[string]any{"author": "Bo", "count": 1, "total": 1}})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b, res2.ID, "fanned_out")
	rows, err = b.pool.Query(ctx, `SELECT title || ' ×' || count(*) FROM notify_inbox WHERE notification_id = $1
		GROUP BY title ORDER BY title`, res2.ID)
	if err != nil {
		t.Fatal(err)
	}
	inbox, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"Bo a laissé 1 commentaire ×1", "Bo dodał 1 komentarz ×1", "Bo left 1 comment ×151"}
	if !slices.Equal(inbox, want) {
		t.Errorf("inbox of the chunked fan-out:\n%s\nwant\n%s", strings.Join(inbox, "\n"), strings.Join(want, "\n"))
	}

	var mails []string
	servertest.Eventually(t, 20*time.Second, "three emails", func() bool {
		mails = mails[:0]
		for _, m := range srv.Messages() {
			if strings.Contains(m.Subject, "Ada") { // the first notification's
				mails = append(mails, m.To[0]+": "+m.Subject+" / "+strings.TrimSpace(m.Text))
			}
		}
		return len(mails) == 3
	})
	slices.Sort(mails)
	want = []string{
		"u-en@example.test: 3 new comments by Ada / Total: 1,234.5",
		"u-fr@example.test: 3 nouveaux commentaires de Ada / Total : 1\u00a0234,5",
		"u-pl@example.test: 3 nowe komentarze od Ada / Razem: 1\u00a0234,5",
	}
	if !slices.Equal(mails, want) {
		t.Errorf("emails:\n%s\nwant\n%s", strings.Join(mails, "\n"), strings.Join(want, "\n"))
	}
}
