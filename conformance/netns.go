package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"unsafe"
)

// hostIP is the test namespace's stand-in for the machine's own address
// (192.0.2.1, TEST-NET-1: never routed): an address on lo with the default
// route through it. Some tests find "the node IP" as the source address of
// a UDP socket connected to 8.8.8.8 (TestEtcdPeerLocalAddr) and need one
// besides 127.0.0.1; etcd's default-host detection also looks for the
// default route.
var hostIP = net.IPv4(192, 0, 2, 1).To4()

// nsExecArg, as the first argument, makes the runner the first process of
// a test's new PID and network namespaces: it brings the namespace's
// loopback up and replaces itself with the test binary (os.Args[2:]).
const nsExecArg = "__ns-exec"

// nsProbeArg checks that namespaces work here: the same set-up, then exit.
const nsProbeArg = "__ns-probe"

func nsMain(args []string) {
	if err := loopbackUp(); err != nil {
		fmt.Fprintf(os.Stderr, "etcd-e2e: bringing up lo in the test's network namespace: %v\n", err)
		os.Exit(125)
	}
	if err := addHostAddress(); err != nil {
		fmt.Fprintf(os.Stderr, "etcd-e2e: adding %v and a default route in the test's network namespace: %v\n", hostIP, err)
		os.Exit(125)
	}
	if args[0] == nsProbeArg {
		os.Exit(0)
	}
	err := syscall.Exec(args[1], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "etcd-e2e: exec %s: %v\n", args[1], err)
	os.Exit(126)
}

// loopbackUp sets IFF_UP on lo (a new network namespace starts with its
// loopback down), as `ip link set lo up` does.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// struct ifreq: a 16-byte name, then a union whose first member for
	// SIOC[GS]IFFLAGS is a short.
	var ifr [40]byte
	copy(ifr[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return fmt.Errorf("SIOCGIFFLAGS: %w", e)
	}
	flags := (*uint16)(unsafe.Pointer(&ifr[16]))
	*flags |= syscall.IFF_UP | syscall.IFF_RUNNING
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return fmt.Errorf("SIOCSIFFLAGS: %w", e)
	}
	return nil
}

// namespacesWork runs the probe in new namespaces; the error says why they
// cannot be used (typically: not root, or a container without
// CAP_SYS_ADMIN).
func namespacesWork() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, nsProbeArg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v %s", err, out)
	}
	return nil
}

// becomeSubreaper makes processes orphaned by a test (members whose test
// binary died) children of the runner, so the fallback can find and kill
// them and their exit status is collected.
func becomeSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// addHostAddress adds hostIP/32 to lo and a default route out of lo with
// hostIP as its source, as `ip addr add 192.0.2.1/32 dev lo; ip route add
// default dev lo src 192.0.2.1` do, over rtnetlink.
func addHostAddress() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	// struct ifaddrmsg: family, prefixlen, flags, scope, index.
	addr := []byte{syscall.AF_INET, 32, 0, syscall.RT_SCOPE_UNIVERSE, 0, 0, 0, 0}
	binary.NativeEndian.PutUint32(addr[4:], uint32(lo.Index))
	addr = appendAttr(addr, syscall.IFA_LOCAL, hostIP)
	addr = appendAttr(addr, syscall.IFA_ADDRESS, hostIP)
	if err := netlinkDo(fd, syscall.RTM_NEWADDR, addr); err != nil {
		return fmt.Errorf("address: %w", err)
	}
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope,
	// type, flags (u32).
	route := []byte{syscall.AF_INET, 0, 0, 0, syscall.RT_TABLE_MAIN, syscall.RTPROT_BOOT, syscall.RT_SCOPE_LINK, syscall.RTN_UNICAST, 0, 0, 0, 0}
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(lo.Index))
	route = appendAttr(route, syscall.RTA_OIF, oif)
	route = appendAttr(route, syscall.RTA_PREFSRC, hostIP)
	if err := netlinkDo(fd, syscall.RTM_NEWROUTE, route); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

// appendAttr appends a struct rtattr (length, type, value padded to 4).
func appendAttr(b []byte, typ uint16, val []byte) []byte {
	n := syscall.SizeofRtAttr + len(val)
	hdr := make([]byte, syscall.SizeofRtAttr)
	binary.NativeEndian.PutUint16(hdr[0:], uint16(n))
	binary.NativeEndian.PutUint16(hdr[2:], typ)
	b = append(append(b, hdr...), val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// netlinkDo sends one create request and waits for its acknowledgement.
func netlinkDo(fd int, typ uint16, body []byte) error {
	msg := make([]byte, syscall.NLMSG_HDRLEN, syscall.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(syscall.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK|syscall.NLM_F_CREATE|syscall.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg = append(msg, body...)
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == syscall.NLMSG_ERROR && len(m.Data) >= 4 {
			if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
				return syscall.Errno(-e)
			}
			return nil
		}
	}
	return fmt.Errorf("no acknowledgement from the kernel")
}
