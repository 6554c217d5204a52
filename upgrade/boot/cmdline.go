package boot

import (
	"strings"

	"slipway.dev/slipway/upgrade/bootstate"
)

// NextCmdline builds the next kernel's command line: base without its
// slipway.* keys and BOOT_IMAGE, then the chosen versions.
func NextCmdline(base string, v bootstate.Versions, a bootstate.Action, device string) string {
	var out []string
	for _, f := range strings.Fields(base) {
		if strings.HasPrefix(f, "slipway.") || strings.HasPrefix(f, "BOOT_IMAGE=") {
			continue
		}
		out = append(out, f)
	}
	out = append(out, ArgRootfs+"="+v.Rootfs, ArgKernel+"="+v.Kernel, ArgAction+"="+string(a))
	if device != "" {
		out = append(out, ArgState+"="+device)
	}
	return strings.Join(out, " ")
}

// CmdlineValue returns the value of key in a kernel command line, "" if absent.
func CmdlineValue(cmdline, key string) string {
	for _, f := range strings.Fields(cmdline) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}
