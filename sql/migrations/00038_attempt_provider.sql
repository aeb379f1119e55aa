-- The id the provider gave a message it accepted (an SES MessageId, a
-- SendGrid X-Message-Id; for SMTP, the message's own Message-ID), beside the
-- provider that took it: the key a provider's delivery events (bounces,
-- complaints) name the message by. Written by the settle of a sent
-- delivery; null when the channel gives none.

-- +goose Up
ALTER TABLE notify_deliveries ADD COLUMN provider_message_id text;

-- +goose Down
ALTER TABLE notify_deliveries DROP COLUMN provider_message_id;
