// Package crashpoint names the steps that change state, so that the
// crash-point sweep (docs/reliability.md, test/e2e/crash_test.go) can kill
// a process exactly there and prove the step safe to re-run.
//
// Here is a no-op in what ships. A build with -tags crashpoints reads
// ArmFile (ETCDADM_CRASHPOINT_FILE overrides the path) at every point. Each
// line is "HOST POINT [hang]" (HOST: the short hostname, or *): when one
// names this host and point, the process writes "CRASHPOINT <point>" to
// stderr (the journal) and kills itself with SIGKILL; with "hang" it
// blocks instead, for the test to cut the host's power right there. The
// test disarms a point by rewriting the file without its line.
package crashpoint

// ArmFile is where a test build looks for the armed point.
const ArmFile = "/etc/etcdadm-test/crashpoint"

// The points, each right after the state change it names.
const (
	FoundPlan      = "found.plan"           // the founding plan is in the store
	EnvWritten     = "member.env"           // etcd.env written, etcd not started
	EtcdStarted    = "member.started"       // etcd started, nothing recorded yet
	FoundCreated   = "found.created"        // the cluster is marked created
	LearnerAdded   = "join.learner"         // added as a learner, etcd not started
	Promoted       = "join.promoted"        // promoted to a voting member
	ReplaceBackup  = "replace.backup"       // the backup before a replacement is taken
	ReplaceRemoved = "replace.removed"      // the old incarnation is removed
	ReconcileGone  = "reconcile.removed"    // reconcile removed a member
	BackupData     = "backup.data"          // the backup's data is stored
	BackupRecord   = "backup.integrity"     // its integrity record is stored
	BackupMeta     = "backup.meta"          // its meta is stored: it is listed
	RetentionGone  = "retention.deleted"    // retention removed one backup
	LocalStaged    = "restore-local.staged" // restore-local built the data, not moved in
	RestoreStaged  = "restore.staged"       // the cluster restore's backup is checked on this host
	RestoreAside   = "restore.aside"        // this member's data is moved aside
	RestoreData    = "restore.data"         // the restored data is in place, not marked
	RestoreStarted = "restore.started"      // etcd runs on the restored data, not recorded
	VolumeClaimed  = "volume.claimed"       // a volume's lease is taken
	VolumeFormat   = "volume.formatted"     // a blank volume is formatted
	VolumeMounted  = "volume.mounted"       // the volume is mounted
	VolumeIdentity = "volume.identity"      // the volume's identity is written
	SwitchBinary   = "switch.binary"        // /opt/etcd/current points at the new version
	SwitchDone     = "switch.done"          // switched and ready, its in-flight record not yet cleared
	RecoverForced  = "recover.forced"       // the survivor runs alone (forced), the recovery not recorded
)
