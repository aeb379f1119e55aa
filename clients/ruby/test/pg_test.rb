# frozen_string_literal: true

require "test_helper"

# Notifyd on a PG::Connection, as a role that holds only notifyd_app.
class PGTest < Minitest::Test
  include TestEnv

  def setup
    @conn = PG.connect(TestEnv::APP_URL)
  end

  def teardown
    @conn.close
  end

  def comment(key, **kw)
    { notifier: "comment.created", key: key, params: TestEnv::PARAMS }.merge(kw)
  end

  def test_rollback_takes_back_the_row_and_the_send
    @conn.transaction do |c|
      c.exec("INSERT INTO comments (id, body) VALUES (3001, 'rolled back')")
      res = Notifyd.notify(c, **comment("rb-rollback", recipients: ["rb-u1"]))
      refute res.duplicate?
      @id = res.id
      raise PG::Error, "roll back" # PG::Connection#transaction rolls back and re-raises
    end
  rescue PG::Error => e
    assert_equal "roll back", e.message
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM comments WHERE id = 3001")
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE id = $1", @id)
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM river_job WHERE args->>'notification_id' = $1", @id)
  end

  def test_commit_duplicate_and_a_token_that_reads_the_inbox
    res = nil
    @conn.transaction do |c|
      c.exec("INSERT INTO comments (id, body) VALUES (3002, 'committed')")
      res = Notifyd.notify(c, **comment("rb-commit", recipients: [{ id: "rb-u2", reason: "author" }, "rb-u3"], actor: "rb-u9"))
    end
    assert_match(/\A\h{8}-\h{4}-7/, res.id)
    assert_equal "1", TestEnv.scalar("SELECT count(*) FROM comments WHERE id = 3002")
    assert_equal ["Ada commented on Hello", "author"],
                 TestEnv.wait_for("SELECT title, reason FROM notify_inbox WHERE recipient = $1 AND key = $2", "rb-u2", "rb-commit")

    again = @conn.transaction { |c| Notifyd.notify(c, **comment("rb-commit", recipients: ["rb-u4"])) }
    assert_equal Notifyd::Result.new(id: res.id, duplicate: true), again
    assert_equal "1", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'rb-commit'")

    status, body = TestEnv.inbox(Notifyd.recipient_token(TestEnv::TOKEN_SECRET, "rb-u2", 600))
    assert_equal 200, status
    assert_equal [["rb-commit", "Ada commented on Hello"]], body["items"].map { |i| [i["key"], i["title"]] }
    assert_equal 401, TestEnv.inbox(Notifyd.recipient_token("#{TestEnv::TOKEN_SECRET}x", "rb-u2", 600))[0]
    assert_equal 401, TestEnv.inbox(Notifyd.recipient_token(TestEnv::TOKEN_SECRET, "rb-u2", 60, now: Time.now - 3600))[0]
  end

  def test_subscribe_put_recipient_cancel
    assert Notifyd.subscribe(@conn, "rb-topic", "rb-u6")
    refute Notifyd.subscribe(@conn, "rb-topic", "rb-u6", reason: "watching")
    Notifyd.notify(@conn, **comment("rb-topic-1", topics: ["rb-topic"]), allow_autocommit: true)
    assert_equal ["watching"], TestEnv.wait_for("SELECT reason FROM notify_inbox WHERE recipient = $1 AND key = $2", "rb-u6", "rb-topic-1")
    assert Notifyd.unsubscribe(@conn, "rb-topic", "rb-u6")
    refute Notifyd.unsubscribe(@conn, "rb-topic", "rb-u6")
    assert_nil Notifyd.cancel(@conn, notifier: "comment.created", key: "rb-never-sent")
    assert_equal 1, Notifyd.cancel(@conn, notifier: "comment.created", key: "rb-topic-1")
    assert_equal 0, Notifyd.cancel(@conn, notifier: "comment.created", key: "rb-topic-1")

    Notifyd.put_recipient(@conn, "rb-p1", { email: "ada@example.com", timezone: "Europe/Paris", data: { plan: "pro" } })
    Notifyd.put_recipient(@conn, "rb-p1", { name: "Ada", timezone: nil })
    assert_equal ["ada@example.com", "Ada", nil, '{"plan": "pro"}'],
                 TestEnv.wait_for("SELECT email, name, timezone, data::text FROM notify_recipients WHERE id = 'rb-p1'")
  end

  def test_outside_a_transaction_is_refused_unless_asked_for
    e = assert_raises(Notifyd::NotInTransactionError) do
      Notifyd.notify(@conn, **comment("rb-autocommit", recipients: ["rb-u1"]))
    end
    assert_match(/conn.transaction do/, e.message)
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'rb-autocommit'")
    refute Notifyd.notify(@conn, **comment("rb-autocommit", recipients: ["rb-u1"]), allow_autocommit: true).duplicate?
    assert_equal "1", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'rb-autocommit'")
  end

  def in_tx(&block)
    @conn.transaction(&block)
  end

  def test_tenant
    in_tx { |c| Notifyd.notify(c, **comment("rb-tenant", recipients: ["rb-u1"], tenant: "acme")) }
    assert_equal "1", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'rb-tenant' AND tenant = 'acme'")
    err = assert_raises(Notifyd::InputError) do
      in_tx { |c| Notifyd.notify(c, **comment("rb-tenant-2", recipients: ["rb-u1"], tenant: "nope")) }
    end
    refute_kind_of Notifyd::UnknownNotifierError, err
    assert_equal ["tenant", "22023"], [err.field, err.sqlstate]
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'rb-tenant-2'")
  end

  def test_errors
    err = assert_raises(Notifyd::UnknownNotifierError) do
      in_tx { |c| Notifyd.notify(c, notifier: "no.such", key: "rb-bad", recipients: ["x"]) }
    end
    assert_equal ["notifier", "22023"], [err.field, err.sqlstate]
    assert_match(/unknown notifier "no.such"/, err.message)
    assert_kind_of PG::InvalidParameterValue, err.cause

    [
      [-> { in_tx { |c| Notifyd.notify(c, **comment("rb-bad", recipients: ["x", { id: "" }])) } }, "recipients[1].id", "recipients[1].id: is required", ""],
      [-> { in_tx { |c| Notifyd.notify(c, **comment("rb-bad", recipients: ["x"], params: { post_title: "x" })) } }, "params",
       "comment.created: params /author_name: missing required property", "/author_name"],
      [-> { in_tx { |c| Notifyd.notify(c, **comment("rb-bad")) } }, "recipients", "recipients: give at least one recipient or topic", ""],
      [-> { Notifyd.subscribe(@conn, "rb-topic", "x", reason: "two words") }, "reason", nil, ""],
      [-> { Notifyd.put_recipient(@conn, "rb-p2", { email: "nope" }) }, "email", nil, ""],
      [-> { Notifyd.put_recipient(@conn, "rb-p2", { nickname: "x" }) }, "nickname", "nickname: unknown field", ""],
    ].each do |call, field, message, detail|
      e = assert_raises(Notifyd::InputError, field, &call)
      refute_kind_of Notifyd::UnknownNotifierError, e
      assert_equal [field, "22023", detail], [e.field, e.sqlstate, e.detail]
      assert_equal message, e.message if message
    end
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'rb-bad'")
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_recipients WHERE id = 'rb-p2'")
  end

  def test_a_tenant_token_reads_only_its_tenant
    TestEnv.scalar("INSERT INTO notify_tenants (id, name) VALUES ('globex', 'Globex') ON CONFLICT (id) DO NOTHING")
    in_tx do |c|
      Notifyd.notify(c, **comment("rb-tt-acme", recipients: ["rb-tt"], tenant: "acme"))
      Notifyd.notify(c, **comment("rb-tt-globex", recipients: ["rb-tt"], tenant: "globex"))
    end
    %w[rb-tt-acme rb-tt-globex].each { |k| TestEnv.wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'rb-tt' AND key = $1", k) }
    token = Notifyd.recipient_token(TestEnv::TOKEN_SECRET, "rb-tt", 600, tenant: "acme")
    status, body = TestEnv.inbox(token)
    assert_equal 200, status
    assert_equal ["rb-tt-acme"], body["items"].map { |i| i["key"] }
    assert_equal 403, TestEnv.inbox(token, "tenant=globex")[0]
    # Without the claim the token reads every tenant's items.
    _, body = TestEnv.inbox(Notifyd.recipient_token(TestEnv::TOKEN_SECRET, "rb-tt", 600))
    assert_equal %w[rb-tt-acme rb-tt-globex], body["items"].map { |i| i["key"] }.sort
  end

  def test_recipient_token_refuses_what_notifyd_would
    [[["", "u1", 60], "secret"], [["s", "", 60], "recipient"], [["s", "x" * 256, 60], "recipient"], [["s", "u1", 0], "ttl"]].each do |args, field|
      e = assert_raises(Notifyd::InputError) { Notifyd.recipient_token(*args) }
      assert_equal [field, ""], [e.field, e.sqlstate]
    end
    ["", "a\nb", "x" * 256, 7].each do |tenant|
      e = assert_raises(Notifyd::InputError) { Notifyd.recipient_token("s", "u1", 60, tenant: tenant) }
      assert_equal "tenant", e.field
    end
    claims = JSON.parse(Base64.urlsafe_decode64(Notifyd.recipient_token("s", "u1", 90).split(".")[1]))
    assert_equal ["u1", 90], [claims["sub"], claims["exp"] - claims["iat"]]
  end
end
