package store

import "errors"

// Sentinel errors every backend maps its own failures to, so callers and
// operators see one vocabulary whatever the store.
var (
	ErrNotFound     = errors.New("not found in the store")
	ErrPrecondition = errors.New("precondition failed: the object was created or changed by someone else")
	ErrBadKey       = errors.New("invalid store key")
	ErrTooLarge     = errors.New("object too large for a conditional write")
	// ErrAccessDenied: wrong or missing credentials, or a policy that does
	// not allow the operation.
	ErrAccessDenied = errors.New("access denied: check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_SHARED_CREDENTIALS_FILE) and the bucket policy")
	// ErrNoBucket: the bucket in the store URL does not exist.
	ErrNoBucket = errors.New("bucket does not exist: create it or fix the bucket name in the store URL")
	// ErrUnreachable: the store could not be contacted at all.
	ErrUnreachable = errors.New("store unreachable: check the endpoint in the store URL and the network")
)
