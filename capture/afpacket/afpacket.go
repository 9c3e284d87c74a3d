// Package afpacket captures cache traffic with AF_PACKET sockets and
// TPACKET_V3 memory-mapped rings, in pure Go. It is the fallback when eBPF is
// not available: it needs only CAP_NET_RAW, and a classic BPF port filter
// keeps every other packet in the kernel.
//
// AF_PACKET gets a clone of each packet; the original goes on untouched, so
// capture never drops or delays traffic. When the ring is full the kernel
// drops the clone and counts it (Counters.KernelDrops).
package afpacket

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hotsniff/hotsniff/capture"
	"github.com/hotsniff/hotsniff/internal/fdpoll"
)

// Config configures a Source. Zero values take the defaults.
type Config struct {
	Ifaces []string
	Ports  []uint16
	// BlockSize is the ring block size, a power of two multiple of the
	// page size; default 1 MiB. A packet longer than a block is truncated
	// (the rest shows as Segment.Missing).
	BlockSize int
	// Blocks per interface ring; default 32 (32 MiB with the default
	// block size). The ring is the whole memory bound of the capture.
	Blocks int
	// RetireMs is how long the kernel waits before handing over a partly
	// filled block: the latency bound under light traffic. Default 20.
	RetireMs uint32
	// Decap names the overlay tunnels followed to their inner segment
	// (nil: none); see capture.Decap for why not every one.
	Decap  *capture.Decap
	Logger *slog.Logger
}

// Source reads TCP segments from one ring per interface. Next is meant for
// one goroutine; Stats, Counters and Close may be called from others.
type Source struct {
	mu       sync.Mutex // held by Next and Close: Close must not unmap under Next
	rings    []*ring
	poll     *fdpoll.Poller // parks Next in Go's netpoller; Close ends the wait
	turn     int
	closed   atomic.Bool
	deadline atomic.Int64 // SetDeadline, Unix ns; 0 = none
	decap    atomic.Pointer[capture.Decap]
	fdMu     sync.Mutex // held by SetDecap and closeAll: SetDecap must not use a closed fd
	ports    []uint16
	bsize    int

	packets, segments, skipped, malformed, bytes atomic.Uint64
}

type ring struct {
	iface  string
	fd     int
	mem    []byte
	bsize  int
	blocks int
	cur    int    // block being read
	open   bool   // cur is held by user space
	left   uint32 // packets left in cur
	off    int    // offset of the next packet in cur

	statsMu          sync.Mutex
	kPackets, kDrops uint64 // PACKET_STATISTICS, accumulated (reads reset it)
}

const (
	defaultBlockSize = 1 << 20
	defaultBlocks    = 32
	maxRingBytes     = 1 << 30
)

// Open creates one ring per interface with the port filter attached.
func Open(cfg Config) (*Source, error) {
	if len(cfg.Ifaces) == 0 {
		return nil, errors.New("open afpacket: no interface")
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = defaultBlockSize
	}
	if cfg.Blocks <= 0 {
		cfg.Blocks = defaultBlocks
	}
	if cfg.BlockSize%unix.Getpagesize() != 0 || cfg.BlockSize&(cfg.BlockSize-1) != 0 {
		return nil, fmt.Errorf("open afpacket: block size %d is not a power-of-two multiple of the page size", cfg.BlockSize)
	}
	if cfg.BlockSize*cfg.Blocks > maxRingBytes {
		return nil, fmt.Errorf("open afpacket: ring of %d bytes exceeds %d", cfg.BlockSize*cfg.Blocks, maxRingBytes)
	}
	if cfg.RetireMs == 0 {
		cfg.RetireMs = 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Source{ports: cfg.Ports, bsize: cfg.BlockSize}
	s.decap.Store(cfg.Decap)
	var fds []int
	for _, name := range cfg.Ifaces {
		r, err := openRing(name, cfg)
		if err != nil {
			s.closeAll()
			return nil, err
		}
		s.rings = append(s.rings, r)
		fds = append(fds, r.fd)
		cfg.Logger.Info("capture attached", "component", "afpacket", "iface", name, "mode", "afpacket",
			"ring_bytes", cfg.BlockSize*cfg.Blocks)
	}
	p, err := fdpoll.New(fds...)
	if err != nil {
		s.closeAll()
		return nil, fmt.Errorf("watch packet rings: %w", err)
	}
	s.poll = p
	return s, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openRing(name string, cfg Config) (*ring, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("find interface %s: %w", name, err)
	}
	// Protocol 0: the socket receives nothing until bind, so no packet
	// slips in before the filter is attached.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open packet socket: %w", err)
	}
	r := &ring{iface: name, fd: fd, bsize: cfg.BlockSize, blocks: cfg.Blocks}
	fail := func(err error) (*ring, error) {
		r.close()
		return nil, err
	}
	if err := attachFilter(fd, name, cfg.Ports, cfg.Decap, cfg.BlockSize); err != nil {
		return fail(err)
	}
	if ifi.Flags&net.FlagLoopback != 0 {
		// Loopback hands every packet to packet sockets twice (out and
		// in); one copy is enough.
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			return fail(fmt.Errorf("ignore outgoing on %s: %w", name, err))
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return fail(fmt.Errorf("set TPACKET_V3 on %s: %w", name, err))
	}
	req := unix.TpacketReq3{
		Block_size:     uint32(cfg.BlockSize),
		Block_nr:       uint32(cfg.Blocks),
		Frame_size:     uint32(cfg.BlockSize), // V3 frames are variable; this only has to divide the block
		Frame_nr:       uint32(cfg.Blocks),
		Retire_blk_tov: cfg.RetireMs,
	}
	if err := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail(fmt.Errorf("set up rx ring on %s: %w", name, err))
	}
	r.mem, err = unix.Mmap(fd, 0, cfg.BlockSize*cfg.Blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_LOCKED)
	if err != nil {
		// MAP_LOCKED fails under a low RLIMIT_MEMLOCK; the ring works unlocked.
		r.mem, err = unix.Mmap(fd, 0, cfg.BlockSize*cfg.Blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		return fail(fmt.Errorf("map rx ring on %s: %w", name, err))
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		return fail(fmt.Errorf("bind packet socket to %s: %w", name, err))
	}
	return r, nil
}

// attachFilter attaches (or replaces: the kernel swaps it at once) the
// socket filter of fd.
func attachFilter(fd int, name string, ports []uint16, d *capture.Decap, bsize int) error {
	prog, err := FilterDecap(ports, d, uint32(bsize))
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		return fmt.Errorf("attach port filter on %s: %w", name, err)
	}
	return nil
}

// SetDecap replaces the tunnels followed (nil: none): the socket filters
// first, so no ring receives a tunnel packet it will then reject for nothing.
func (s *Source) SetDecap(d *capture.Decap) error {
	s.fdMu.Lock()
	defer s.fdMu.Unlock()
	if s.closed.Load() {
		return nil
	}
	for _, r := range s.rings {
		if err := attachFilter(r.fd, r.iface, s.ports, d, s.bsize); err != nil {
			return err
		}
	}
	s.decap.Store(d)
	return nil
}

func (r *ring) close() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

// Offsets in the TPACKET_V3 block descriptor and packet header.
const (
	blockStatusOff = 8  // tpacket_block_desc.hdr.bh1.block_status
	numPktsOff     = 12 // .num_pkts
	firstPktOff    = 16 // .offset_to_first_pkt
)

// ready reports whether next would find a packet.
func (r *ring) ready() bool {
	if r.left > 0 {
		return true
	}
	i := r.cur
	if r.open {
		i = (r.cur + 1) % r.blocks
	}
	return atomic.LoadUint32(r.status(r.block(i)))&unix.TP_STATUS_USER != 0
}

func (r *ring) block(i int) []byte { return r.mem[i*r.bsize : (i+1)*r.bsize] }

func (r *ring) status(b []byte) *uint32 {
	return (*uint32)(unsafe.Pointer(&b[blockStatusOff]))
}

// next fills seg with the next packet of the ring, if any. The block holding
// the previous packet is returned to the kernel first: seg.Payload of the
// last call stays valid until this call.
func (r *ring) next(s *Source, seg *capture.Segment) bool {
	for {
		if r.left == 0 {
			if r.open {
				atomic.StoreUint32(r.status(r.block(r.cur)), unix.TP_STATUS_KERNEL)
				r.open = false
				r.cur = (r.cur + 1) % r.blocks
			}
			b := r.block(r.cur)
			if atomic.LoadUint32(r.status(b))&unix.TP_STATUS_USER == 0 {
				return false
			}
			r.open = true
			r.left = *(*uint32)(unsafe.Pointer(&b[numPktsOff]))
			r.off = int(*(*uint32)(unsafe.Pointer(&b[firstPktOff])))
			continue
		}
		b := r.block(r.cur)
		if r.off <= 0 || r.off+int(unsafe.Sizeof(unix.Tpacket3Hdr{})) > len(b) {
			r.left = 0 // corrupt block: give it back
			s.malformed.Add(1)
			continue
		}
		h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&b[r.off]))
		start := r.off + int(h.Mac)
		end := start + int(h.Snaplen)
		pktOff := r.off
		r.left--
		r.off += int(h.Next_offset)
		if end > len(b) || start < pktOff {
			s.malformed.Add(1)
			continue
		}
		s.packets.Add(1)
		s.bytes.Add(uint64(h.Snaplen))
		if err := capture.ParsePacketDecap(capture.LinkEthernet, b[start:end], seg, s.decap.Load()); err != nil {
			if errors.Is(err, capture.ErrNotTCP) {
				s.skipped.Add(1)
			} else {
				s.malformed.Add(1)
			}
			continue
		}
		seg.TS = int64(h.Sec)*1e9 + int64(h.Nsec)
		s.segments.Add(1)
		return true
	}
}

// SetDeadline makes a blocked or later Next return os.ErrDeadlineExceeded
// once t passes with nothing to read, so the caller's loop can do periodic
// work (expiry, metrics) on its own goroutine. The zero time removes it.
func (s *Source) SetDeadline(t time.Time) {
	if t.IsZero() {
		s.deadline.Store(0)
		return
	}
	s.deadline.Store(t.UnixNano())
}

// Next implements capture.Source. It blocks until a segment arrives, the
// deadline passes (os.ErrDeadlineExceeded) or Close is called (io.EOF).
func (s *Source) Next(seg *capture.Segment) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed.Load() {
			return io.EOF
		}
		for range s.rings {
			r := s.rings[s.turn]
			s.turn = (s.turn + 1) % len(s.rings)
			if r.next(s, seg) {
				return nil
			}
		}
		var deadline time.Time
		if d := s.deadline.Load(); d != 0 {
			if time.Now().UnixNano() >= d {
				return os.ErrDeadlineExceeded
			}
			deadline = time.Unix(0, d)
		}
		err := s.poll.Wait(deadline, s.ready)
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, fdpoll.ErrClosed):
			return io.EOF
		default:
			return fmt.Errorf("wait for packet rings: %w", err)
		}
	}
}

// ready reports whether a ring has a packet for Next (for fdpoll.Wait,
// called with mu held).
func (s *Source) ready() bool {
	for _, r := range s.rings {
		if r.ready() {
			return true
		}
	}
	return false
}

// Stats implements capture.Source.
func (s *Source) Stats() capture.Stats {
	return capture.Stats{
		Packets:   s.packets.Load(),
		Segments:  s.segments.Load(),
		Skipped:   s.skipped.Load(),
		Malformed: s.malformed.Load(),
		Bytes:     s.bytes.Load(),
	}
}

// Counters is what the kernel reports for one interface's socket.
type Counters struct {
	Iface string
	// Packets passed the filter; KernelDrops of them found the ring full.
	Packets, KernelDrops uint64
}

// Counters reads PACKET_STATISTICS of every ring.
func (s *Source) Counters() ([]Counters, error) {
	if s.closed.Load() {
		return nil, errors.New("read packet statistics: source closed")
	}
	out := make([]Counters, 0, len(s.rings))
	for _, r := range s.rings {
		r.statsMu.Lock()
		st, err := unix.GetsockoptTpacketStatsV3(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
		if err == nil {
			// The kernel resets the counters on every read.
			r.kPackets += uint64(st.Packets)
			r.kDrops += uint64(st.Drops)
		}
		c := Counters{Iface: r.iface, Packets: r.kPackets, KernelDrops: r.kDrops}
		r.statsMu.Unlock()
		if err != nil {
			return out, fmt.Errorf("read packet statistics of %s: %w", r.iface, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Close wakes a blocked Next, waits for it to return, and frees the rings.
func (s *Source) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	_ = s.poll.Close() // ends a waiting Next
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeAll()
	return nil
}

// closeAll unmaps and closes the rings; the poller, created last in Open,
// is closed by Close.
func (s *Source) closeAll() {
	s.fdMu.Lock()
	defer s.fdMu.Unlock()
	for _, r := range s.rings {
		r.close()
	}
}
