package dns

import "errors"

// Errors.
var (
	ErrInvalid = errors.New("invalid configuration")
	// ErrStore: the store could not be read or written.
	ErrStore = errors.New("store")
	// ErrProvider: the DNS server or the hosts file could not be updated.
	ErrProvider = errors.New("dns provider")
)
