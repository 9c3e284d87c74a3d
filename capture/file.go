package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Errors a File reports, each wrapped in a one-line message naming the file.
var (
	ErrNotCapture = errors.New("not a pcap or pcapng file")
	ErrTruncated  = errors.New("truncated")
	ErrCorrupt    = errors.New("corrupt")
)

const (
	// DefaultMaxPacket is libpcap's MAXIMUM_SNAPLEN: no capture tool writes
	// longer records, so a longer one means a corrupt file.
	DefaultMaxPacket = 262144
	// DefaultReadBuffer is the read-ahead buffer size.
	DefaultReadBuffer = 256 << 10
	// maxBlockSlack is what a pcapng packet block may carry beyond its
	// packet (header, options such as comments and hashes).
	maxBlockSlack = 64 << 10
)

// Options bound what a File reads into memory. Zero values take defaults.
type Options struct {
	// MaxPacket is the largest capture length accepted; a record claiming
	// more is reported as corrupt instead of being allocated.
	MaxPacket int
	// ReadBuffer is the read-ahead buffer size. It is raised to
	// MaxPacket+64KiB so a whole pcapng block fits and can be decoded in
	// place. A gzipped file uses two such buffers.
	ReadBuffer int
	// BeforeRead, when set, is called before every read from the file
	// itself, which on a pipe may block: everything buffered has been
	// consumed by then, so it is the moment to flush output for a reader
	// downstream (decode - in a pipeline).
	BeforeRead func()
}

func (o Options) withDefaults() Options {
	if o.MaxPacket <= 0 {
		o.MaxPacket = DefaultMaxPacket
	}
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = DefaultReadBuffer
	}
	if o.ReadBuffer < o.MaxPacket+maxBlockSlack {
		o.ReadBuffer = o.MaxPacket + maxBlockSlack
	}
	return o
}

// File reads TCP segments from a pcap or pcapng file, gzipped or not. It
// implements Source. Like every Source it is used from one goroutine:
// Stats and Size may be called between Next calls.
type File struct {
	name  string
	size  int64
	osf   *os.File // closed by Close; nil for OpenReader
	count countingReader
	gz    *gzip.Reader
	// Exactly one of pcap and ng is set.
	pcap *pcapReader
	ng   *ngReader

	maxPacket int
	stats     Stats
	err       error // sticky: once Next failed it keeps failing the same way
}

// OpenFile opens a capture file; "-" reads standard input.
func OpenFile(path string) (*File, error) {
	return OpenFileOptions(path, Options{})
}

// OpenFileOptions is OpenFile with explicit bounds.
func OpenFileOptions(path string, opt Options) (*File, error) {
	if path == "-" {
		return OpenReaderOptions("-", os.Stdin, opt)
	}
	osf, err := os.Open(path)
	if err != nil {
		return nil, err // already "open PATH: reason"
	}
	f, err := OpenReaderOptions(path, osf, opt)
	if err != nil {
		osf.Close()
		return nil, err
	}
	f.osf = osf
	if st, err := osf.Stat(); err == nil && st.Mode().IsRegular() {
		f.size = st.Size()
	}
	return f, nil
}

// OpenReader reads a capture from r; name is used in error messages.
func OpenReader(name string, r io.Reader) (*File, error) {
	return OpenReaderOptions(name, r, Options{})
}

// OpenReaderOptions is OpenReader with explicit bounds.
func OpenReaderOptions(name string, r io.Reader, opt Options) (*File, error) {
	opt = opt.withDefaults()
	f := &File{name: name, size: -1, maxPacket: opt.MaxPacket}
	f.count.r = r
	f.count.before = opt.BeforeRead
	br := bufio.NewReaderSize(&f.count, opt.ReadBuffer)
	// gzip is recognised by content, whatever the file is called.
	if m, _ := br.Peek(2); len(m) == 2 && m[0] == 0x1f && m[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("open %s: read gzip header: %w", name, err)
		}
		f.gz = gz
		br = bufio.NewReaderSize(gz, opt.ReadBuffer)
	}
	m, err := br.Peek(4)
	if len(m) < 4 {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		return nil, fmt.Errorf("open %s: %w", name, ErrNotCapture)
	}
	if _, ok := pcapMagic(m); ok {
		return f, f.openPcap(br)
	}
	switch binary.LittleEndian.Uint32(m) {
	case ngBlockSHB:
		ng, err := newNgReader(br, opt.MaxPacket, opt.MaxPacket+maxBlockSlack)
		if err != nil {
			return nil, f.blockError(err, true)
		}
		f.ng = ng
		return f, nil
	}
	return nil, fmt.Errorf("open %s: %w", name, ErrNotCapture)
}

func (f *File) openPcap(br *bufio.Reader) error {
	pr, err := newPcapReader(br, f.maxPacket)
	var he *pcapHeaderError
	switch {
	case errors.As(err, &he):
		return fmt.Errorf("open %s: %w pcap header: %s", f.name, ErrCorrupt, he.msg)
	case err != nil:
		return fmt.Errorf("open %s: %w pcap file header", f.name, ErrTruncated)
	case !pr.link.Supported():
		return fmt.Errorf("%s: %w %d (%s)", f.name, ErrUnsupportedLink, uint16(pr.link), pr.link)
	}
	f.pcap = pr
	return nil
}

// Name returns the name the file was opened with.
func (f *File) Name() string { return f.name }

// Size returns the file's size on disk, or -1 when unknown (a pipe). Compare
// it with Stats().Bytes for progress: both count the file as stored, before
// any gunzipping.
func (f *File) Size() int64 { return f.size }

// Stats reports what has been read so far.
func (f *File) Stats() Stats {
	s := f.stats
	s.Bytes = f.count.n
	return s
}

// Close releases the file.
func (f *File) Close() error {
	var err error
	if f.gz != nil {
		err = f.gz.Close()
	}
	if f.osf != nil {
		if cerr := f.osf.Close(); err == nil {
			err = cerr
		}
		f.osf = nil
	}
	return err
}

// Next fills seg with the next TCP segment. Packets that are not TCP, or
// whose headers do not parse, are counted and skipped. At the end it returns
// io.EOF; on a truncated or corrupt file it first delivers every complete
// packet, then returns an error naming the file and the packet number, and
// keeps returning it. seg.Payload is valid until the next call.
func (f *File) Next(seg *Segment) error {
	if f.err != nil {
		return f.err
	}
	for {
		var (
			data []byte
			link LinkType
			ts   int64
			err  error
		)
		if f.pcap != nil {
			data, ts, err = f.nextPcap()
			link = f.pcap.link
		} else {
			data, link, ts, err = f.ng.next()
			if err != nil {
				err = f.blockError(err, false)
			}
		}
		if err != nil {
			f.err = err
			return err
		}
		f.stats.Packets++
		switch err := ParsePacket(link, data, seg); {
		case err == nil:
			seg.TS = ts
			f.stats.Segments++
			return nil
		case errors.Is(err, ErrMalformed):
			f.stats.Malformed++
		default:
			f.stats.Skipped++
		}
	}
}

func (f *File) nextPcap() ([]byte, int64, error) {
	data, ts, err := f.pcap.next()
	if err == nil || err == io.EOF {
		return data, ts, err
	}
	n := f.stats.Packets + 1
	switch {
	case errors.Is(err, errRecordTooLong):
		return nil, 0, fmt.Errorf("%s: %w at packet %d: capture length %d exceeds limit %d",
			f.name, ErrCorrupt, n, f.pcap.caplen, f.maxPacket)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, 0, fmt.Errorf("%s: %w at packet %d", f.name, ErrTruncated, n)
	}
	return nil, 0, fmt.Errorf("read %s: packet %d: %w", f.name, n, err)
}

// blockError turns a pcapng reader error into the File's one-line message.
func (f *File) blockError(err error, opening bool) error {
	n := f.stats.Packets + 1
	var fe *formatError
	switch {
	case err == io.EOF:
		if opening {
			return fmt.Errorf("open %s: %w pcapng section header", f.name, ErrTruncated)
		}
		return io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		if opening {
			return fmt.Errorf("open %s: %w pcapng section header", f.name, ErrTruncated)
		}
		return fmt.Errorf("%s: %w at packet %d", f.name, ErrTruncated, n)
	case errors.As(err, &fe):
		if fe.unsupported {
			return fmt.Errorf("%s: %w %d (%s) on interface %d", f.name, ErrUnsupportedLink, uint16(fe.link), fe.link, fe.iface)
		}
		if opening {
			return fmt.Errorf("open %s: %w pcapng: %s", f.name, ErrCorrupt, fe.msg)
		}
		return fmt.Errorf("%s: %w at packet %d: %s", f.name, ErrCorrupt, n, fe.msg)
	}
	if opening {
		return fmt.Errorf("open %s: %w", f.name, err)
	}
	return fmt.Errorf("read %s: packet %d: %w", f.name, n, err)
}

// countingReader counts the bytes read from the file for Stats().Bytes.
type countingReader struct {
	r      io.Reader
	n      uint64
	before func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.before != nil {
		c.before()
	}
	n, err := c.r.Read(p)
	c.n += uint64(n)
	return n, err
}
