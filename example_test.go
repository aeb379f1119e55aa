package notifyd_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
)

// exampleConfig is the daemon's config in the examples: `notifyd migrate`
// and every daemon start publish its notifiers to the catalog notify_send
// (and so SendTx) checks.
const exampleConfig = `
notifiers:
  comment.created:
    params:
      type: object
      required: [post_title, author_name]
      properties: {post_title: {type: string}, author_name: {type: string}}
    channels:
      in_app: {title: "New comment on {{.post_title}}"}
`

// exampleDB is a fresh database as `notifyd migrate` leaves it with
// exampleConfig.
func exampleDB() (*pgxpool.Pool, func()) {
	pool, _, cleanup := pgtest.ExampleDB()
	cfg, err := config.Parse("config.yaml", []byte(exampleConfig))
	if err != nil {
		panic(err)
	}
	if err := server.PublishCatalog(context.Background(), pool, cfg, nil); err != nil {
		panic(err)
	}
	return pool, cleanup
}

// An application enqueues a notification in the same transaction as its own
// write: both commit, or neither does.
func ExampleClient_SendTx() {
	pool, cleanup := exampleDB() // your application's *pgxpool.Pool
	defer cleanup()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE comments (id text PRIMARY KEY, body text)`); err != nil {
		panic(err)
	}

	client, err := notifyd.NewClient(pool, notifyd.ClientConfig{})
	if err != nil {
		panic(err)
	}
	var res notifyd.SendResult
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO comments VALUES ('comment-123', 'Nice post!')`); err != nil {
			return err
		}
		res, err = client.SendTx(ctx, tx, notifyd.Notification{
			Notifier:   "comment.created",
			Key:        "comment-123",
			Actor:      "u1",
			Recipients: []notifyd.Recipient{{ID: "u2", Reason: "author"}},
			Topics:     []string{"post-9"},
			Params:     map[string]any{"post_title": "Hello", "author_name": "Ada"},
		})
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("duplicate:", res.Duplicate)

	// Sending the same (notifier, key) again (a retry) is the same notification.
	again, err := client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "comment-123",
		Recipients: []notifyd.Recipient{{ID: "u2"}}, Params: map[string]any{"post_title": "Hello", "author_name": "Ada"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("duplicate:", again.Duplicate, "same id:", again.ID == res.ID)
	// Output:
	// duplicate: false
	// duplicate: true same id: true
}

// With a Config, SendTx refuses params that fail the notifier's JSON Schema
// before anything is written.
func ExampleClient_SendTx_validation() {
	pool, _, cleanup := pgtest.ExampleDB()
	defer cleanup()
	cfg, err := config.Parse("config.yaml", []byte(`
notifiers:
  comment.created:
    params:
      type: object
      required: [post_title]
      properties: {post_title: {type: string}}
    channels:
      in_app: {title: "New comment on {{.post_title}}"}
`))
	if err != nil {
		panic(err)
	}
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	_, err = client.Send(context.Background(), notifyd.Notification{Notifier: "comment.created", Key: "c-1",
		Recipients: []notifyd.Recipient{{ID: "u2"}}, Params: map[string]any{"post_title": 42}})
	fmt.Println(err)
	_, err = client.Send(context.Background(), notifyd.Notification{Notifier: "comment.deleted", Key: "c-1",
		Recipients: []notifyd.Recipient{{ID: "u2"}}})
	fmt.Println(err)
	// Output:
	// invalid params: /post_title: got number, want string
	// unknown notifier "comment.deleted"
}

// CancelTx withdraws whatever of a notification has not been sent yet.
func ExampleClient_CancelTx() {
	pool, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{})
	if _, err := client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: "comment-123",
		Recipients: []notifyd.Recipient{{ID: "u2"}}, Params: map[string]any{"post_title": "Hi", "author_name": "Bo"}}); err != nil {
		panic(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // e.g. delete the comment
			return err
		}
		withdrawn, err := client.CancelTx(ctx, tx, "comment.created", "comment-123") // last in the transaction
		fmt.Println("withdrawn before fan-out:", withdrawn)
		return err
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// withdrawn before fan-out: 0
}

// RecipientToken mints the token a browser uses for /v1/inbox and the stream.
func ExampleRecipientToken() {
	tok, err := notifyd.RecipientToken("the-http.token_secret", "u2", time.Hour)
	if err != nil {
		panic(err)
	}
	recipient, err := notifyd.ParseRecipientToken("the-http.token_secret", tok)
	fmt.Println(recipient, err)
	// Output:
	// u2 <nil>
}

// SubscribeTx subscribes someone to a topic in the application's own
// transaction; notifications sent to the topic then reach them.
func ExampleClient_SubscribeTx() {
	pool, _, cleanup := pgtest.ExampleDB()
	defer cleanup()
	ctx := context.Background()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... INSERT the comment ...
		return client.SubscribeTx(ctx, tx, "post-9", "u3", "commented")
	})
	fmt.Println(err)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return client.SubscribeTx(ctx, tx, "post-9", "u3", "two words")
	})
	fmt.Println(err)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		removed, err := client.UnsubscribeTx(ctx, tx, "post-9", "u3")
		fmt.Println("removed:", removed)
		return err
	})
	fmt.Println(err)
	// Output:
	// <nil>
	// reason: want one word of letters, digits, '-', '_' or '.', at most 64 bytes
	// removed: true
	// <nil>
}

// PutRecipientTx writes a recipient's profile in the application's own
// transaction: the account and the address notifications reach commit
// together. A profile that breaks a rule is refused before anything is
// written; EraseRecipient is the right to erasure.
func ExampleClient_PutRecipientTx() {
	pool, _, cleanup := pgtest.ExampleDB()
	defer cleanup()
	ctx := context.Background()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... INSERT the user's account ...
		return client.PutRecipientTx(ctx, tx, "u2", notifyd.Profile{Email: "ada@example.com", Name: "Ada",
			Timezone: "Europe/Paris", Data: map[string]any{"plan": "pro"}})
	})
	fmt.Println(err)
	p, err := client.GetRecipient(ctx, "u2")
	fmt.Println(p.Email, p.Timezone, p.Data["plan"], err)

	err = client.PutRecipient(ctx, "u2", notifyd.Profile{Email: "Ada <ada@example.com>"})
	fmt.Println(err)

	e, err := client.EraseRecipient(ctx, "u2")
	fmt.Println("profile erased:", e.Profile, err)
	_, err = client.GetRecipient(ctx, "u2")
	fmt.Println(errors.Is(err, notifyd.ErrRecipientNotFound))
	// Output:
	// <nil>
	// ada@example.com Europe/Paris pro <nil>
	// email: want a bare email address such as ada@example.com
	// profile erased: true <nil>
	// true
}
