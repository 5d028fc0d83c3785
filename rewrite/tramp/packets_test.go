package tramp

import (
	"testing"

	"github.com/stint-project/stint/formats"
)

// The inline appends write formats' packets.
func TestPacketOpcodes(t *testing.T) {
	if pktTNT != formats.PktTNT || pktTIP != formats.PktTIP {
		t.Errorf("pktTNT %#x, pktTIP %#x; formats has %#x and %#x", pktTNT, pktTIP, formats.PktTNT, formats.PktTIP)
	}
}
