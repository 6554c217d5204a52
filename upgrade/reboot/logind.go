package reboot

import (
	"context"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
)

// DefaultSystemBus is the system bus's socket where slipway dials it when
// DBUS_SYSTEM_BUS_ADDRESS is not set: /run/dbus/system_bus_socket on the
// host, and in the agent's pod, which mounts the host's /run/dbus there
// (its image has no /var/run, the D-Bus library's default).
const DefaultSystemBus = "unix:path=/run/dbus/system_bus_socket"

// Logind asks systemd-logind over the system D-Bus for a reboot, and
// reports logind's answer: a refusal (an inhibitor, polkit) is an error.
// It is the opt-in way for systemd hosts (--reboot-method=logind with the
// manifest's --systemd-hosts, which mounts the host's /run/dbus): it
// honours block inhibitor locks, and it needs the host's system bus, which
// gives root on the host to whoever reaches it.
type Logind struct {
	// Address of the system bus; "" means DBUS_SYSTEM_BUS_ADDRESS when set,
	// else DefaultSystemBus.
	Address string
}

func (l Logind) String() string { return "systemd-logind (" + l.address() + ")" }

func (l Logind) address() string {
	if l.Address != "" {
		return l.Address
	}
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return DefaultSystemBus
}

// Reboot calls org.freedesktop.login1.Manager.Reboot(false) and waits for
// logind's reply.
func (l Logind) Reboot(ctx context.Context) error {
	addr := l.address()
	conn, err := dbus.Dial(addr, dbus.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("connect to the system bus at %s: %w (on a systemd host the agent needs the host's /run/dbus: render its DaemonSet with `slipway ops manifest --systemd-hosts`, or set DBUS_SYSTEM_BUS_ADDRESS; without it, --reboot-method=systemd signals PID 1)", addr, err)
	}
	defer conn.Close()
	if err := conn.Auth(nil); err != nil {
		return fmt.Errorf("authenticate on the system bus at %s: %w", addr, err)
	}
	if err := conn.Hello(); err != nil {
		return fmt.Errorf("hello to the system bus at %s: %w", addr, err)
	}
	call := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1").
		CallWithContext(ctx, "org.freedesktop.login1.Manager.Reboot", 0, false)
	if call.Err != nil {
		return fmt.Errorf("systemd-logind refused the reboot: %w", call.Err)
	}
	return nil
}
