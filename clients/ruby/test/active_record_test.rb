# frozen_string_literal: true

require "test_helper"
require "active_record"

# Notifyd on ActiveRecord's connection (Debian's ruby-activerecord), as a
# role that holds only notifyd_app: the send commits and rolls back with the
# models' writes.
class ActiveRecordTest < Minitest::Test
  class Comment < ActiveRecord::Base
    self.table_name = "comments"
  end

  def setup
    ActiveRecord::Base.establish_connection(TestEnv.ar_config(TestEnv::APP_URL)) unless ActiveRecord::Base.connected?
  end

  def n(key)
    { notifier: "comment.created", key: key, recipients: ["ar-u1"], params: TestEnv::PARAMS }
  end

  def test_transaction_rollback_and_commit
    ActiveRecord::Base.transaction do
      Comment.create!(id: 3101, body: "rolled back")
      Notifyd.notify(ActiveRecord::Base.connection, **n("ar-send"))
      raise ActiveRecord::Rollback
    end
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM comments WHERE id = 3101")
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'ar-send'")

    # The send first: ActiveRecord begins its transactions lazily, and the
    # send must still be inside this one.
    res = nil
    ActiveRecord::Base.transaction do
      res = Notifyd.notify(ActiveRecord::Base.connection, **n("ar-send"))
      Comment.create!(id: 3102, body: "committed")
    end
    refute res.duplicate?
    assert_equal "1", TestEnv.scalar("SELECT count(*) FROM comments WHERE id = 3102")
    TestEnv.wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'ar-u1' AND key = 'ar-send'")

    assert_raises(RuntimeError) do
      ActiveRecord::Base.transaction do
        Notifyd.notify(ActiveRecord::Base.connection, **n("ar-lazy"))
        raise "the request failed after the send"
      end
    end
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'ar-lazy'")

    ActiveRecord::Base.transaction do
      conn = ActiveRecord::Base.connection
      assert_equal Notifyd::Result.new(id: res.id, duplicate: true), Notifyd.notify(conn, **n("ar-send"))
      assert Notifyd.subscribe(conn, "ar-topic", "ar-u2")
      assert Notifyd.unsubscribe(conn, "ar-topic", "ar-u2")
      Notifyd.put_recipient(conn, "ar-p1", { locale: "en", tokens_valid_after: Time.utc(2026, 1, 1) })
      assert_equal 1, Notifyd.cancel(conn, notifier: "comment.created", key: "ar-send")
    end
    assert_equal "en", TestEnv.scalar("SELECT locale FROM notify_recipients WHERE id = 'ar-p1'")
  end

  def test_notify_outside_a_transaction_is_refused
    e = assert_raises(Notifyd::NotInTransactionError) do
      Notifyd.notify(ActiveRecord::Base.connection, **n("ar-autocommit"))
    end
    assert_match(/transaction do/, e.message)
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM notify_notifications WHERE key = 'ar-autocommit'")
  end

  def test_errors
    assert_raises(Notifyd::UnknownNotifierError) do
      ActiveRecord::Base.transaction do
        Comment.create!(id: 3103, body: "lost")
        Notifyd.notify(ActiveRecord::Base.connection, notifier: "no.such", key: "ar-bad", recipients: ["x"])
      end
    end
    assert_equal "0", TestEnv.scalar("SELECT count(*) FROM comments WHERE id = 3103")
    e = assert_raises(Notifyd::InputError) do
      ActiveRecord::Base.transaction do
        Notifyd.put_recipient(ActiveRecord::Base.connection, "ar-p2", { quiet_hours: { start: "25:00", end: "07:00" } })
      end
    end
    assert_equal "quiet_hours", e.field
    # The connection is usable again after the rollback.
    assert_equal 0, Comment.where(id: 3103).count
  end
end
