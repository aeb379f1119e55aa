-- notifyd's own tables. River's tables are migrated beside them by rivermigrate.
-- Recipient ids are compared with COLLATE "C" everywhere: the fan-out walks its
-- audience in byte order with a keyset cursor, and Go sorts the same way.

-- +goose Up
CREATE TABLE notify_notifications (
    id                uuid PRIMARY KEY,
    notifier          text NOT NULL,
    key               text NOT NULL,
    actor             text COLLATE "C",
    -- Inline recipients as parallel arrays. The fan-out normalises them once
    -- (sorted, one entry per id with its strongest reason, actor removed).
    recipients        text[] COLLATE "C" NOT NULL DEFAULT '{}',
    reasons           text[] NOT NULL DEFAULT '{}',
    topics            text[] NOT NULL DEFAULT '{}',
    params            jsonb NOT NULL DEFAULT '{}',
    send_at           timestamptz,
    status            text NOT NULL,
    error             text,
    -- Fan-out progress: every recipient <= fanout_cursor has been written, and the
    -- first fanout_inline_pos inline entries are behind the cursor.
    fanout_cursor     text COLLATE "C",
    fanout_inline_pos integer NOT NULL DEFAULT 0,
    normalized        boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notify_notifications_notifier_key UNIQUE (notifier, key)
);

CREATE TABLE notify_recipients (
    id          text COLLATE "C" PRIMARY KEY CHECK (octet_length(id) BETWEEN 1 AND 255),
    email       text,
    name        text,
    locale      text,
    timezone    text,
    webhook_url text,
    -- Set when the webhook endpoint answered 410 Gone; cleared when webhook_url changes.
    webhook_gone_at timestamptz,
    data        jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notify_inbox (
    id          uuid PRIMARY KEY,
    recipient   text COLLATE "C" NOT NULL,
    notifier    text NOT NULL,
    key         text NOT NULL,
    category    text NOT NULL DEFAULT '',
    reason      text NOT NULL DEFAULT '',
    actor       text,
    title       text NOT NULL DEFAULT '',
    body        text NOT NULL DEFAULT '',
    url         text NOT NULL DEFAULT '',
    params      jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz,
    read_at     timestamptz,
    archived_at timestamptz,
    CONSTRAINT notify_inbox_recipient_notifier_key UNIQUE (recipient, notifier, key)
);
CREATE INDEX notify_inbox_page_idx ON notify_inbox (recipient, created_at DESC, id);
CREATE INDEX notify_inbox_unread_idx ON notify_inbox (recipient) WHERE read_at IS NULL AND archived_at IS NULL;
CREATE INDEX notify_inbox_notification_idx ON notify_inbox (notifier, key);
CREATE INDEX notify_inbox_created_idx ON notify_inbox (created_at);

-- Every inbox change for the realtime stream, in commit order: writers take
-- pg_advisory_xact_lock(7343) before inserting here, so seq order is commit order.
CREATE TABLE notify_inbox_changes (
    seq        bigserial PRIMARY KEY,
    recipient  text COLLATE "C" NOT NULL,
    kind       text NOT NULL,          -- created | updated | deleted
    item_ids   uuid[] NOT NULL,
    data       jsonb,                  -- for updated: {"read_at": ...} etc.
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notify_inbox_changes_recipient_idx ON notify_inbox_changes (recipient, seq);
CREATE INDEX notify_inbox_changes_created_idx ON notify_inbox_changes (created_at);

CREATE TABLE notify_deliveries (
    id              uuid PRIMARY KEY,
    notification_id uuid NOT NULL,
    notifier        text NOT NULL,
    key             text NOT NULL,
    recipient       text COLLATE "C",     -- null for bulk deliveries
    channel         text NOT NULL,
    reason          text NOT NULL DEFAULT '',
    mode            text NOT NULL,
    status          text NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz,
    claimed_at      timestamptz,
    settled_at      timestamptz,
    -- Digests: a digest is one email covering a set of a recipient's
    -- digest rows. Its id is generated when the rows are first claimed and
    -- stays on them, so every retry and re-drive carries the same Message-ID.
    --   digest_pending, digest_id NULL   fresh: waiting for the next schedule instant
    --   digest_sending, digest_id set    claimed by a notify.digest job (claimed_at is the claim token)
    --   digest_pending, digest_id set    failed for now (or its claim expired), waiting for a retry
    --   digest_sent | digest_failed | digest_dropped   terminal
    digest_id       uuid,
    digest_due_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX notify_deliveries_identity ON notify_deliveries (notification_id, channel, coalesce(recipient, ''));
-- The digest sweep reads fresh rows grouped by recipient, oldest first, as an
-- index-only scan; rows already in a digest are left to that digest.
CREATE INDEX notify_deliveries_digest_idx ON notify_deliveries (recipient, created_at, id)
    WHERE status = 'digest_pending' AND digest_id IS NULL;
-- Digests in flight (claimed, or waiting for a retry): the retry claim, the
-- settle and the re-drive.
CREATE INDEX notify_deliveries_digest_flight_idx ON notify_deliveries (digest_id)
    WHERE digest_id IS NOT NULL AND status IN ('digest_pending', 'digest_sending');
CREATE INDEX notify_deliveries_retry_idx ON notify_deliveries (status, updated_at) WHERE status IN ('sending', 'failed', 'rate_limited', 'pending');
CREATE INDEX notify_deliveries_created_idx ON notify_deliveries (created_at);

CREATE TABLE notify_preferences (
    recipient text COLLATE "C" NOT NULL,
    scope     text NOT NULL,   -- * | category:<c> | notifier:<n>
    channel   text NOT NULL,   -- * | <channel>
    mode      text NOT NULL,   -- immediate | digest | off
    PRIMARY KEY (recipient, scope, channel)
);

CREATE TABLE notify_subscriptions (
    topic      text NOT NULL,
    recipient  text COLLATE "C" NOT NULL,
    reason     text NOT NULL DEFAULT 'subscribed',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, recipient)
);
CREATE INDEX notify_subscriptions_recipient_idx ON notify_subscriptions (recipient);

CREATE TABLE notify_mutes (
    recipient  text COLLATE "C" NOT NULL,
    target     text NOT NULL,  -- notifier:<n> | topic:<t>
    until      timestamptz,    -- null: muted until unmuted
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (recipient, target)
);

-- +goose Down
DROP TABLE notify_mutes;
DROP TABLE notify_subscriptions;
DROP TABLE notify_preferences;
DROP TABLE notify_deliveries;
DROP TABLE notify_inbox_changes;
DROP TABLE notify_inbox;
DROP TABLE notify_recipients;
DROP TABLE notify_notifications;
