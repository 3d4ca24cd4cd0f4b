package ignition

import "errors"

// Errors Render wraps; errors.Is tells a caller which kind of problem it was.
var (
	// ErrInvalid: the options are wrong (unknown variant, bad version,
	// unparsable store URL, missing hash, unreadable input file, ...).
	ErrInvalid = errors.New("ignition: invalid render options")
	// ErrTranslate: Butane or Ignition reported a problem with what we
	// produced. Strict: a warning counts. This is a bug in the renderer.
	ErrTranslate = errors.New("ignition: translation not clean")
)
