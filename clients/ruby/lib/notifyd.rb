# frozen_string_literal: true

require "base64"
require "json"
require "openssl"
require "time"
require "pg"

require_relative "notifyd/version"

# Notifyd enqueues notifyd notifications inside your own PostgreSQL
# transaction, on a pg connection or an ActiveRecord connection. Each call is
# one statement running a SQL function that `notifyd migrate` installs
# (notify_send, notify_cancel, notify_subscribe, notify_unsubscribe,
# notify_put_recipient), so it commits or rolls back with your transaction:
#
#   ActiveRecord::Base.transaction do
#     comment = Comment.create!(post: post, body: body)
#     Notifyd.notify(ActiveRecord::Base.connection,
#                    notifier: "comment.created", key: "comment-#{comment.id}",
#                    recipients: ["u2", { id: "u3", reason: "author" }],
#                    params: { post_title: post.title, author_name: "Ada" })
#   end
module Notifyd
  # Result is what notify reports: the notification's id (a UUIDv7, the same
  # for every send of the same notifier and key) and whether it already
  # existed (then nothing new was enqueued).
  Result = Struct.new(:id, :duplicate, keyword_init: true) do
    alias_method :duplicate?, :duplicate
  end

  # Error is the base of notifyd's errors.
  class Error < StandardError; end

  # InputError: notifyd refused malformed input (SQLSTATE 22023). Nothing was
  # written, but PostgreSQL has aborted the transaction: roll it back, or
  # wrap the call in a savepoint (transaction(requires_new: true)) to go on.
  # field names the offending field ("key", "recipients[1].id", "params",
  # "email"); detail is PostgreSQL's DETAIL (for params, the JSON pointer);
  # cause is the driver's error.
  class InputError < Error
    attr_reader :field, :sqlstate, :detail

    def initialize(message, field:, sqlstate: "22023", detail: "")
      super(message)
      @field = field
      @sqlstate = sqlstate
      @detail = detail
    end
  end

  # UnknownNotifierError: the notifier is not in the catalog notifyd
  # publishes from its config.
  class UnknownNotifierError < InputError
    def initialize(message, sqlstate: "22023", detail: "")
      super(message, field: "notifier", sqlstate: sqlstate, detail: detail)
    end
  end

  # NotInTransactionError: notify was given a connection outside a
  # transaction (a PG::Connection with no BEGIN, an ActiveRecord connection
  # outside transaction do ... end), where the notification would commit on
  # its own whatever happens to the rest of the caller's work.
  class NotInTransactionError < Error; end

  ARRAY_ENCODER = PG::TextEncoder::Array.new
  private_constant :ARRAY_ENCODER

  module_function

  # notify enqueues one notification in the transaction conn is in (a
  # PG::Connection or an ActiveRecord PostgreSQL connection, inside a
  # transaction: outside one it raises NotInTransactionError, unless
  # allow_autocommit). Sending the same notifier and key again returns the
  # first id with duplicate true and changes nothing. Raises InputError
  # (UnknownNotifierError for a notifier notifyd does not declare).
  def notify(conn, notifier:, key:, recipients: [], topics: [], params: {}, actor: nil, send_at: nil, tenant: nil, schema: nil,
             allow_autocommit: false)
    recipients = recipients.map do |r|
      next r if r.is_a?(String)

      r = r.transform_keys(&:to_s)
      r.delete("reason") if r["reason"].nil? || r["reason"] == ""
      r
    end
    row = run(conn, "SELECT id::text, duplicate FROM #{fn("notify_send", schema)}" \
                    "($1, $2, $3::jsonb, $4::jsonb, $5::text[], $6, $7::timestamptz, $8)",
              [notifier, key, JSON.generate(recipients), JSON.generate(params || {}),
               ARRAY_ENCODER.encode(Array(topics)), actor, send_at&.iso8601(6), tenant],
              need_transaction: !allow_autocommit)
    Result.new(id: row[0], duplicate: bool(row[1]))
  end

  # cancel cancels the notification: unsent deliveries become cancelled and
  # inbox items are removed. Returns how many were withdrawn (0 when already
  # cancelled), or nil when it was never sent. Call it last in the
  # transaction: it serialises with other inbox writers until commit.
  def cancel(conn, notifier:, key:, schema: nil)
    n = run(conn, "SELECT #{fn("notify_cancel", schema)}($1, $2)", [notifier, key])[0]
    n&.to_i
  end

  # subscribe subscribes recipient to topic (again: changes the reason);
  # true when the subscription is new.
  def subscribe(conn, topic, recipient, reason: "subscribed", schema: nil)
    bool(run(conn, "SELECT #{fn("notify_subscribe", schema)}($1, $2, $3)", [topic, recipient, reason])[0])
  end

  # unsubscribe removes the subscription; true when there was one.
  def unsubscribe(conn, topic, recipient, schema: nil)
    bool(run(conn, "SELECT #{fn("notify_unsubscribe", schema)}($1, $2)", [topic, recipient])[0])
  end

  # put_recipient creates or changes the recipient's profile in conn's
  # transaction: keys absent from profile are kept, nil clears. Fields:
  # email, name, locale, timezone, webhook_url, phone, data, quiet_hours
  # ({ start: "22:00", end: "07:00" }), tokens_valid_after (a Time).
  def put_recipient(conn, id, profile, schema: nil)
    body = profile.to_h { |k, v| [k.to_s, v.respond_to?(:iso8601) ? v.iso8601(6) : v] }
    run(conn, "SELECT 1 FROM #{fn("notify_put_recipient", schema)}($1, $2::jsonb)", [id, JSON.generate(body)])
    nil
  end

  # recipient_token mints the token a recipient's browser presents to
  # GET /v1/inbox (and the stream and preferences): an HS256 JWT signed with
  # notifyd's http.token_secret, subject the recipient id, iat now and exp
  # now + ttl seconds, which must not exceed notifyd's http.max_token_ttl
  # (24 hours by default). With tenant, the token carries the tenant claim
  # and reads, marks and streams only that tenant's inbox items and
  # preferences; without it, it has no claim.
  def recipient_token(secret, recipient, ttl, now: Time.now, tenant: nil)
    raise InputError.new("secret: is required (notifyd's http.token_secret)", field: "secret", sqlstate: "") if !secret.is_a?(String) || secret.empty?
    if !recipient.is_a?(String) || recipient.empty? || recipient.bytesize > 255
      raise InputError.new("recipient: want a recipient id of 1 to 255 bytes", field: "recipient", sqlstate: "")
    end
    raise InputError.new("ttl: want a positive number of seconds", field: "ttl", sqlstate: "") if !ttl.is_a?(Numeric) || !ttl.positive?

    check_tenant(tenant) unless tenant.nil?
    iat = now.to_i
    claims = { sub: recipient, iat: iat, exp: iat + ttl.ceil }
    claims[:tenant] = tenant unless tenant.nil?
    header = b64(JSON.generate({ alg: "HS256", typ: "JWT" }))
    body = b64(JSON.generate(claims))
    "#{header}.#{body}.#{b64(OpenSSL::HMAC.digest("SHA256", secret, "#{header}.#{body}"))}"
  end

  # check_tenant applies the daemon's rule for a tenant id: 1 to 255 bytes
  # of UTF-8 text without control characters. An empty string is refused
  # rather than read as "no claim": a token meant for one tenant must never
  # reach them all.
  def check_tenant(tenant)
    ok = tenant.is_a?(String) && !tenant.empty? && tenant.bytesize <= 255 &&
         tenant.dup.force_encoding(Encoding::UTF_8).valid_encoding? &&
         !tenant.dup.force_encoding(Encoding::UTF_8).match?(/\p{Cc}/)
    return if ok

    raise InputError.new("tenant: want a tenant id of 1 to 255 bytes without control characters", field: "tenant", sqlstate: "")
  end

  # bool reads a boolean column: "t"/"f" from a plain PG::Connection, true
  # or false from one with a type map (ActiveRecord sets one).
  def bool(v)
    [true, "t"].include?(v)
  end

  def b64(s)
    Base64.urlsafe_encode64(s, padding: false)
  end

  def fn(name, schema)
    return name if schema.nil? || schema.empty?

    "\"#{schema.gsub('"', '""')}\".#{name}"
  end

  # GUARD_SQL asks the server whether the session is inside an explicit
  # transaction block: SAVEPOINT is refused with SQLSTATE 25P01 outside one
  # (also in the implicit block of a multi-statement query, which commits on
  # its own) and is released at once inside one, leaving nothing behind. Not
  # now() <> statement_timestamp(): that is false for the first statement
  # after a BEGIN sent in the same round trip. Not txid_current_if_assigned():
  # that is null in a transaction that has not written yet.
  GUARD_SQL = "SAVEPOINT notifyd_in_transaction; RELEASE SAVEPOINT notifyd_in_transaction"

  NOT_IN_TRANSACTION = "Notifyd.notify: the connection is not in a transaction, so the notification would commit " \
                       "on its own: call it inside conn.transaction do ... end (ActiveRecord::Base.transaction do ... end), " \
                       "or pass allow_autocommit: true to send on its own"
  private_constant :GUARD_SQL, :NOT_IN_TRANSACTION

  # in_transaction? tells whether raw (a PG::Connection) is inside a
  # transaction block: libpq's status when it knows, the server (GUARD_SQL)
  # when it does not (a command in progress, a broken connection).
  def in_transaction?(raw)
    case raw.transaction_status
    when PG::PQTRANS_INTRANS, PG::PQTRANS_INERROR then true
    when PG::PQTRANS_IDLE then false
    else
      begin
        raw.exec(GUARD_SQL)
        true
      rescue PG::NoActiveSqlTransaction
        false
      end
    end
  end

  # pg returns the PG::Connection for conn: conn itself, or an
  # ActiveRecord connection's raw connection after its (lazily begun)
  # transaction has been sent, so the call is part of it. With
  # need_transaction it raises NotInTransactionError outside a transaction.
  def pg(conn, need_transaction)
    raw = nil
    if conn.is_a?(PG::Connection)
      raw = conn
    elsif conn.respond_to?(:raw_connection) && conn.respond_to?(:transaction_open?)
      raise NotInTransactionError, NOT_IN_TRANSACTION if need_transaction && !conn.transaction_open?

      conn.materialize_transactions if conn.respond_to?(:materialize_transactions)
      raw = conn.raw_connection
    end
    unless raw.is_a?(PG::Connection)
      raise ArgumentError, "Notifyd: want a PG::Connection or an ActiveRecord PostgreSQL connection, got #{conn.class}"
    end
    raise NotInTransactionError, NOT_IN_TRANSACTION if need_transaction && !in_transaction?(raw)

    raw
  end

  def run(conn, sql, args, need_transaction: false)
    pg(conn, need_transaction).exec_params(sql, args).values.first
  rescue PG::Error => e
    mapped = map_error(e)
    raise mapped if mapped

    raise
  end

  def map_error(err)
    result = err.respond_to?(:result) ? err.result : nil
    return nil if result.nil? || result.error_field(PG::PG_DIAG_SQLSTATE) != "22023"

    message = result.error_field(PG::PG_DIAG_MESSAGE_PRIMARY).to_s
    column = result.error_field(PG::PG_DIAG_COLUMN_NAME).to_s
    detail = result.error_field(PG::PG_DIAG_MESSAGE_DETAIL).to_s
    if column == "notifier" && message.start_with?("unknown notifier")
      UnknownNotifierError.new(message, detail: detail)
    else
      InputError.new(message, field: column, detail: detail)
    end
  end

  private_class_method :bool, :b64, :fn, :pg, :run, :map_error, :in_transaction?, :check_tenant
end
