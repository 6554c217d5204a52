package testenv

import (
	"fmt"
	"strings"
)

// K3osNode is a fake k3os node's boot, for Options.NodeCommand: install v1
// from a mirror on the first boot, at each boot (not at an agent's restart
// within one) write the kernel command line slipway's loader passes, then
// run `slipway ops agent`. Each field is a shell word put into the script
// as it is (quote it; "$VAR" reads the node's environment).
type K3osNode struct {
	Mirror     string // the release mirror v1 is installed from
	Kubeconfig string // the agent's --kubeconfig
	Image      string // the agent's --image
	Lease      string // --lease-duration
	Backoff    string // --retry-backoff
	Upgrade    string // --upgrade-command
	Reboot     string // --reboot-command
	// Loader boots through `slipway ops boot --no-kexec` as slipway's
	// stage-0 would: a swap a power cut left half done is finished, the
	// try-once record kept (with attempts enough never to fall back: no
	// one confirms a boot here), and the versions it chose written to the
	// command line (rootfs and kernel) and to the node's boots log
	// (BootsLog). Without it the command line names `current`'s rootfs.
	Loader bool
}

// The files a K3osNode writes in its node's directory.
const (
	// K3osSystemDir is the node's k3os system directory.
	K3osSystemDir = "k3os/system"
	// BootsLog has one line per boot (with K3osNode.Loader):
	// "<boot> rootfs=<v> kernel=<v> k3s=<v>" (k3s: what k3s/current named,
	// empty when there is none).
	BootsLog = "boots.log"
)

// Script is the node's command, for /bin/sh -c.
func (k K3osNode) Script() string {
	boot := `  echo "slipway.rootfs=$(basename "$(readlink "$sys/k3os/current")")" > "$SLIPWAY_NODE_DIR/cmdline"`
	if k.Loader {
		boot = `  out=$(slipway ops boot --system-dir "$sys" --no-kexec --cmdline sim --max-attempts 1000000)
  set -- $(echo "$out" | sed -n 's/^slipway boot: [^ ]* rootfs \([^ ]*\) kernel \([^ ]*\) (.*/\1 \2/p')
  [ -n "$2" ] || { echo "the loader chose nothing: $out" >&2; exit 1; }
  k3s=$(basename "$(readlink "$sys/k3s/current" 2>/dev/null)" 2>/dev/null || true)
  echo "slipway.rootfs=$1 slipway.kernel=$2" > "$SLIPWAY_NODE_DIR/cmdline"
  echo "$SLIPWAY_NODE_BOOT rootfs=$1 kernel=$2 k3s=$k3s" >> "$SLIPWAY_NODE_DIR/` + BootsLog + `"`
	}
	return strings.Join([]string{
		`set -e`,
		`sys="$SLIPWAY_NODE_DIR/` + K3osSystemDir + `"`,
		`mkdir -p "$sys" "$SLIPWAY_NODE_DIR/run/k3os"`,
		`if [ ! -e "$sys/k3os/current" ]; then`,
		fmt.Sprintf(`  slipway ops upgrade --system-dir "$sys" --source %s --version v1 --rootfs --kernel \`, k.Mirror),
		`    --reboot=false --lock-file "$SLIPWAY_NODE_DIR/run/k3os/upgrade.lock"`,
		`fi`,
		`if [ "$(cat "$SLIPWAY_NODE_DIR/cmdline.boot" 2>/dev/null)" != "$SLIPWAY_NODE_BOOT" ]; then`,
		boot,
		`  echo "$SLIPWAY_NODE_BOOT" > "$SLIPWAY_NODE_DIR/cmdline.boot"`,
		`fi`,
		`exec slipway ops agent --cmdline-file "$SLIPWAY_NODE_DIR/cmdline" --node-name "$NODE_NAME" --namespace slipway-system --system-dir "$sys" \`,
		fmt.Sprintf(`  --host-system-dir /k3os/system --host-lock-dir /run/k3os --image %s \`, k.Image),
		`  --reboot-method command --boot-id-from-node \`,
		fmt.Sprintf(`  --metrics-addr "" --kubeconfig %s --lease-duration %s --resync 10s --retry-backoff %s \`, k.Kubeconfig, k.Lease, k.Backoff),
		fmt.Sprintf(`  --upgrade-command %s \`, k.Upgrade),
		fmt.Sprintf(`  --reboot-command %s`, k.Reboot),
		``,
	}, "\n")
}
