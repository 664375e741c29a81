package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"
)

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
