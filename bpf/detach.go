package bpf

// Remove detaches one attachment made by Attach or AttachCgroup and forgets
// it: its programs and counters are freed, and Counters no longer lists it.
// Interfaces that come and go (pods) are attached and removed this way for
// the whole life of a Capture. Removing an interface that was deleted
// already is fine: the kernel dropped the attachments with the device, and
// this frees the programs.
func (c *Capture) Remove(a *Attachment) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.ifaces {
		if x == a {
			c.ifaces = append(c.ifaces[:i], c.ifaces[i+1:]...)
			break
		}
	}
	// Closed under the lock: Counters may be reading this attachment's map.
	return a.close()
}
