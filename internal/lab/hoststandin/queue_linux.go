package hoststandin

import "golang.org/x/sys/unix"

// acceptQueueLen is the length of a listening socket's accept queue:
// TCP_INFO's unacked, for a listener.
func acceptQueueLen(fd uintptr) (int, error) {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, err
	}
	return int(info.Unacked), nil
}
