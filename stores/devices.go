package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/stores/uuidv7"
)

// Device is a mobile device a recipient registered: the push token of one
// app install on a platform.
type Device struct {
	ID        string
	Recipient string
	// Tenant is the tenant the device was registered under (a recipient
	// token's tenant claim): it receives only that tenant's notifications.
	// "" is a registration without a tenant, which receives every
	// notification of the recipient.
	Tenant        string
	Platform      string
	Token         string
	App           string
	CreatedAt     time.Time
	LastSuccessAt *time.Time
	Failures      int
}

// MaxDevices is how many devices a recipient may register; PutDevice
// refuses more.
const MaxDevices = 20

// ErrTooManyDevices is returned by PutDevice when the recipient has
// MaxDevices already.
var ErrTooManyDevices = fmt.Errorf("a recipient has at most %d devices", MaxDevices)

// putDeviceSQL registers a device, or updates the platform and app of the
// recipient's device with the same token (an app that registered again)
// and clears its failures. A new one is refused (no row) when the recipient
// has $6 already. The count is only safe under the recipient lock taken
// before it in the same transaction (see PutDevice).
const putDeviceSQL = `
INSERT INTO notify_devices AS d (id, recipient, platform, token, app, tenant)
SELECT $1, $2, $3, $4, $5, $7
WHERE (SELECT count(*) FROM notify_devices WHERE recipient = $2) < $6
   OR EXISTS (SELECT 1 FROM notify_devices
              WHERE recipient = $2 AND token = $4 AND coalesce(tenant, '') = coalesce($7, ''))
ON CONFLICT (recipient, token, (coalesce(tenant, ''))) DO UPDATE
SET platform = EXCLUDED.platform, app = EXCLUDED.app, failures = 0
RETURNING d.id::text, d.id = $1::uuid`

// PutDevice registers recipient's device (platform, token, app) under
// tenant ("" for none) and returns its id, and whether it is new (false:
// the recipient had registered the token under the same tenant already; its
// platform and app are replaced, its failures cleared). The same token
// registered under another tenant, or without one, is another device.
// It returns ErrTooManyDevices when recipient has MaxDevices other devices.
// Validating the values is the caller's.
//
// Its two statements go in one batch, which is one transaction of its own
// unless db is one already: the recipient lock (RecipientLockClass) first,
// so that two registrations at once count one after the other and cannot
// pass the limit together, then the insert, which reads the count after
// the lock is granted (a statement's snapshot is taken when it starts).
func PutDevice(ctx context.Context, db DB, recipient, tenant, platform, token, app string) (string, bool, error) {
	var id string
	var created, found bool
	b := &pgx.Batch{}
	b.Queue(lockRecipientSQL, RecipientLockClass, recipient)
	b.Queue(putDeviceSQL, uuidv7.String(), recipient, platform, token, app, MaxDevices, nullIfEmpty(tenant)).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&id, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return "", false, fmt.Errorf("put device of %s: %w", recipient, err)
	}
	if !found {
		return "", false, ErrTooManyDevices
	}
	return id, created, nil
}

const listDevicesSQL = `
SELECT id::text, recipient, coalesce(tenant, ''), platform, token, app, created_at, last_success_at, failures
FROM notify_devices
WHERE recipient = $1 AND ($2 = '' OR tenant = $2)
ORDER BY created_at, id`

// ListDevices returns recipient's devices, oldest first: every one for
// tenant "", else only those registered under tenant.
func ListDevices(ctx context.Context, db DB, recipient, tenant string) ([]Device, error) {
	rows, err := db.Query(ctx, listDevicesSQL, recipient, tenant)
	if err != nil {
		return nil, fmt.Errorf("list devices of %s: %w", recipient, err)
	}
	return scanDevices(rows)
}

const listDevicesOfSQL = `
SELECT id::text, recipient, coalesce(tenant, ''), platform, token, app, created_at, last_success_at, failures
FROM notify_devices
WHERE recipient = ANY($1::text[]) AND platform = $2
ORDER BY recipient, created_at, id`

// ListDevicesOf returns the devices on platform of each of recipients, each
// recipient's oldest first, of every tenant, in one statement (a send
// batch's, whose deliveries may be of several tenants: the channel keeps
// those a notification's tenant may reach); a recipient with none is
// absent from the map.
func ListDevicesOf(ctx context.Context, db DB, platform string, recipients []string) (map[string][]Device, error) {
	rows, err := db.Query(ctx, listDevicesOfSQL, recipients, platform)
	if err != nil {
		return nil, fmt.Errorf("list %s devices of %d recipients: %w", platform, len(recipients), err)
	}
	devices, err := scanDevices(rows)
	if err != nil {
		return nil, err
	}
	return byRecipient(devices, func(d Device) string { return d.Recipient }), nil
}

func scanDevices(rows pgx.Rows) ([]Device, error) {
	defer rows.Close()
	out := []Device{}
	for rows.Next() {
		var d Device
		if err := rows.Scan(&d.ID, &d.Recipient, &d.Tenant, &d.Platform, &d.Token, &d.App, &d.CreatedAt, &d.LastSuccessAt,
			&d.Failures); err != nil {
			return nil, err
		}
		d.CreatedAt, d.LastSuccessAt = d.CreatedAt.UTC(), utcPtr(d.LastSuccessAt)
		out = append(out, d)
	}
	return out, rows.Err()
}

const deleteDeviceSQL = `
DELETE FROM notify_devices WHERE recipient = $1 AND id = $2::uuid AND ($3 = '' OR tenant = $3)`

// DeleteDevice deletes recipient's device id; ErrNotFound when recipient
// has none with that id (another recipient's id included; id must be a
// UUID), or, for a tenant other than "", none registered under tenant.
func DeleteDevice(ctx context.Context, db DB, recipient, tenant, id string) error {
	return deleteRegistration(ctx, db, deleteDeviceSQL, "device", recipient, tenant, id)
}

const (
	devicesSucceededSQL = `
UPDATE notify_devices SET last_success_at = now(), failures = 0
WHERE id = ANY($1::text[]::uuid[])`
	devicesFailedSQL = `
UPDATE notify_devices SET failures = failures + 1
WHERE id = ANY($1::text[]::uuid[])`
	devicesRemoveSQL = `DELETE FROM notify_devices WHERE id = ANY($1::text[]::uuid[])`
)

// DevicesSucceeded records a successful push to each device of ids.
func DevicesSucceeded(ctx context.Context, db DB, ids []string) error {
	if _, err := db.Exec(ctx, devicesSucceededSQL, ids); err != nil {
		return fmt.Errorf("record the success of %d devices: %w", len(ids), err)
	}
	return nil
}

// DevicesFailed counts a failed push against each device of ids.
func DevicesFailed(ctx context.Context, db DB, ids []string) error {
	if _, err := db.Exec(ctx, devicesFailedSQL, ids); err != nil {
		return fmt.Errorf("record the failure of %d devices: %w", len(ids), err)
	}
	return nil
}

// RemoveDevices deletes the devices of ids (their push service said the
// token is no longer registered).
func RemoveDevices(ctx context.Context, db DB, ids []string) error {
	if _, err := db.Exec(ctx, devicesRemoveSQL, ids); err != nil {
		return fmt.Errorf("remove %d devices: %w", len(ids), err)
	}
	return nil
}
