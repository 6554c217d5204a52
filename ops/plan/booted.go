package plan

// Versions are the versions of a node's three components.
type Versions struct{ Rootfs, Kernel, K3s string }

// BootEvidence is what an agent knows about the boot its node runs.
type BootEvidence struct {
	// BootID identifies the running boot.
	BootID string
	// Current is what the system directory's `current` links name now:
	// what the next boot starts.
	Current Versions
	// RecordedBoot and Recorded are the boot ID and versions published on
	// the Node (by this or an earlier agent): the versions a boot runs are
	// recorded the first time an agent sees that boot.
	RecordedBoot string
	Recorded     Versions
	// CmdlineRootfs is the rootfs the boot loader chose for this boot
	// (slipway.rootfs= on the kernel command line), "" when not booted by
	// slipway's loader.
	CmdlineRootfs string
}

// Running decides the versions the node runs, and says from what:
//   - a boot already recorded (same boot ID) runs what was recorded: an
//     upgrade Job swaps `current` during a boot, the running system does
//     not change until the next one;
//   - a boot seen for the first time runs what `current` names (nothing
//     swaps before the agent starts on a boot), except that the loader's
//     own word for the rootfs (the command line) beats the links: a boot
//     that fell back runs `previous`, whatever `current` says.
func Running(e BootEvidence) (Versions, string) {
	if e.RecordedBoot != "" && e.RecordedBoot == e.BootID && e.Recorded.Rootfs != "" {
		return e.Recorded, "recorded for this boot"
	}
	v := e.Current
	if e.CmdlineRootfs != "" && e.CmdlineRootfs != v.Rootfs {
		v.Rootfs = e.CmdlineRootfs
		return v, "the kernel command line"
	}
	return v, "the system directory at the first sight of this boot"
}

// Staged is the part of current that differs from running: what the next
// boot starts that this one does not run (zero when nothing is staged).
func Staged(running, current Versions) Versions {
	var s Versions
	if current.Rootfs != running.Rootfs {
		s.Rootfs = current.Rootfs
	}
	if current.Kernel != running.Kernel {
		s.Kernel = current.Kernel
	}
	if current.K3s != running.K3s {
		s.K3s = current.K3s
	}
	return s
}

// ComponentsBehind names the k3s the channel moves (moves.K3s) when
// running runs it from another release than its rootfs: releaseOf is the
// release a component's version folder came from (its marker), "" when not
// known (a folder installed by other means than slipway, not judged). The
// rootfs is the reference: its version is the release's name. An upgrade
// that moves k3s always leaves the release's marker in the k3s folder it
// makes current (a folder of another release is staged again); the kernel
// is not judged so: a release whose kernel did not change keeps the folder,
// and its marker, of the release that brought it. "" when nothing is behind.
func ComponentsBehind(moves Components, running Versions, releaseOf func(component, version string) string) string {
	if !moves.K3s || running.K3s == "" {
		return ""
	}
	if r := releaseOf("k3s", running.K3s); r != "" && r != running.Rootfs {
		return "k3s " + running.K3s + " is release " + r + "'s"
	}
	return ""
}
