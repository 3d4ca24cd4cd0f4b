package volume

import "errors"

var (
	// ErrNoFreeVolume: every volume of the pool is held by another live
	// host.
	ErrNoFreeVolume = errors.New("no free volume: every volume in the pool is claimed by another host whose lease is live")
	// ErrLost: the claim this host held was taken over by another host
	// (its lease expired first). The volume must not be used any more.
	ErrLost = errors.New("claim lost: another host holds this volume now")
	// ErrInUse: the device or the mount point is already in use in a way
	// that could let two hosts (or two mounts) share one volume.
	ErrInUse = errors.New("volume in use")
	// ErrNotExt4: the device holds something other than an ext4 file
	// system (another file system, a partition table); it is never
	// formatted over.
	ErrNotExt4 = errors.New("device holds data that is not an ext4 file system; refusing to format or mount it")
	// ErrFsck: e2fsck left errors uncorrected.
	ErrFsck = errors.New("file system check failed")
	// ErrConfig: the configuration is incomplete or contradictory.
	ErrConfig = errors.New("bad configuration")
	// ErrPaused: 'etcdadm pause' holds the automation; an expired volume
	// waits for 'etcdadm resume' to be taken over.
	ErrPaused = errors.New("the automation is paused")
	// ErrFenced: the claim could not be confirmed long enough; this host
	// stopped its member and unmounted the volume, and comes back when
	// the store confirms the claim again.
	ErrFenced = errors.New("fenced: the claim is not confirmed")
	// ErrStore: the store could not be read or written.
	ErrStore = errors.New("store")
)
