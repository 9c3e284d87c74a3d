package stream

// A flow sits on up to two intrusive lists at once, one per slot: slot 0 is
// the open-flow LRU or the closed-marker FIFO, slot 1 the list of flows
// holding buffers. Intrusive links make every move O(1) and allocation free.
const (
	slotAge  = 0
	slotHeld = 1
)

type link struct {
	prev, next *flow
	list       *flowList
}

// flowList is a doubly linked list of flows, most recent at the head.
type flowList struct {
	head, tail *flow
	len        int
	slot       int
}

func (l *flowList) contains(f *flow) bool { return f.links[l.slot].list == l }

func (l *flowList) pushFront(f *flow) {
	lk := &f.links[l.slot]
	lk.list = l
	lk.prev = nil
	lk.next = l.head
	if l.head != nil {
		l.head.links[l.slot].prev = f
	} else {
		l.tail = f
	}
	l.head = f
	l.len++
}

func (l *flowList) remove(f *flow) {
	lk := &f.links[l.slot]
	if lk.list != l {
		return
	}
	if lk.prev != nil {
		lk.prev.links[l.slot].next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		lk.next.links[l.slot].prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	*lk = link{}
	l.len--
}

func (l *flowList) moveToFront(f *flow) {
	if l.head == f {
		return
	}
	l.remove(f)
	l.pushFront(f)
}

// prev returns the flow after f towards the head (more recent), or nil.
func (l *flowList) prev(f *flow) *flow { return f.links[l.slot].prev }
