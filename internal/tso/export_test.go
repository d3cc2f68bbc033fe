package tso

// waitingForTest returns the count of Allocates blocked on an extension.
func (o *Oracle) waitingForTest() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.waiting
}

// wonForTest returns the bound this Oracle has won in this epoch (0: none).
func (o *Oracle) wonForTest() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.won
}
