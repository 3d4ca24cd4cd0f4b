package pki

import "errors"

// Errors callers and operators tell apart. Each says what to do.
var (
	// ErrNoCA: the store holds neither ca.crt nor ca.key.
	ErrNoCA = errors.New("the store holds no cluster CA: run 'etcdadm pki init --store URL' first")
	// ErrIncompleteCA: ca.key without ca.crt, what an interrupted init
	// leaves; init finishes it from the stored key.
	ErrIncompleteCA = errors.New("the store holds a CA key (" + CAKeyKey + ") but no certificate: an earlier 'etcdadm pki init' was interrupted; run it again to finish it")
	// ErrCAKeyMissing: ca.crt without ca.key. init never leaves this (it
	// writes the key first), so the key was removed or never copied.
	ErrCAKeyMissing = errors.New("the store holds a CA certificate (" + CACertKey + ") but no key (" + CAKeyKey + "): put the key back from where it was saved; only if no member uses this CA yet, delete " + CACertKey + " and run 'etcdadm pki init' again")
	// ErrCAMismatch: no certificate in ca.crt belongs to ca.key.
	ErrCAMismatch = errors.New("no certificate in " + CACertKey + " matches " + CAKeyKey + ": the two were changed separately; put back the pair that belongs together")
	// ErrCAExpired: the signing CA certificate is no longer valid.
	ErrCAExpired = errors.New("the cluster CA certificate has expired: certificates it signs would not verify; roll the CA over (add a new CA to " + CACertKey + " and replace " + CAKeyKey + ")")
	// ErrInvalid: bad input (options, names, files that are not what they
	// claim to be).
	ErrInvalid = errors.New("invalid PKI request")
)
