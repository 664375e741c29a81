package server

import (
	"net"
	"os"
)

// sdNotify tells systemd the service state (etcd's units use Type=notify).
// It does nothing when NOTIFY_SOCKET is unset.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}

// NotifySystemd is sdNotify for the other commands of the strata binary
// (the gateway).
func NotifySystemd(state string) error { return sdNotify(state) }
