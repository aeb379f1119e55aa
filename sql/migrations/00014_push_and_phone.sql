-- A recipient's phone number (E.164, "+14155550123") for text messages, and
-- the browser push subscriptions a recipient registered (POST
-- /v1/push-subscriptions). A subscription belongs to one recipient and its
-- endpoint is unique per recipient: registering the same endpoint again
-- replaces its keys. The send job reads a recipient's subscriptions by
-- recipient when it sends, records the last success, counts consecutive
-- failures, and deletes a subscription its push service answered 404 or 410
-- for. Erasing the recipient deletes them.

-- +goose Up
ALTER TABLE notify_recipients ADD COLUMN phone text;

CREATE TABLE notify_push_subscriptions (
    id              uuid PRIMARY KEY,
    recipient       text NOT NULL CHECK (octet_length(recipient) BETWEEN 1 AND 255),
    endpoint        text NOT NULL CHECK (octet_length(endpoint) BETWEEN 1 AND 2048),
    p256dh          text NOT NULL,
    auth            text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_success_at timestamptz,
    failures        integer NOT NULL DEFAULT 0,
    UNIQUE (recipient, endpoint)
);

-- +goose Down
DROP TABLE notify_push_subscriptions;
ALTER TABLE notify_recipients DROP COLUMN phone;
