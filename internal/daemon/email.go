package daemon

// buildEmail constructs the email channel when channels.email is configured.
func (d *Daemon) buildEmail() error { return nil }
