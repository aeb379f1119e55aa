package config

// The IANA time zone database is compiled in (time/tzdata, about 450 KB), so
// that a zone name means the same in every process that uses notifyd: the
// client that checks a recipient profile's timezone, this package reading
// digest.timezone, and the workers that hold deliveries through quiet hours
// and schedule digests in the recipient's zone. Without it, a daemon in a
// container without /usr/share/zoneinfo would refuse digest.timezone, and a
// profile's "Asia/Tokyo", accepted by an application whose machine has the
// database, would silently be read as digest.timezone. Go reads the system's
// database first and this copy only for a zone it cannot find there.
import _ "time/tzdata"
