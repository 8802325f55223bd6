package lane

import "testing"

// The ZMTP watcher sees every byte a peer sends before zmq4 does; no input
// may make it panic, and whatever it accepts as READY must be well formed.
func FuzzZMTPParser(f *testing.F) {
	good := append(greeting(), readyCmd("\x01\x00")...)
	good = append(good, 0x00, 0x02, 'h', 'i')
	f.Add(good, uint8(7))
	f.Add(append(greeting(), flagLong, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), uint8(1))
	f.Add(append(greeting(), flagCommand, 3, 5, 'R', 'E'), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		p := zmtpParser{maxFrame: 1 << 20}
		step := int(chunk%16) + 1
		for i := 0; i < len(data); i += step {
			if err := p.feed(data[i:min(i+step, len(data))]); err != nil {
				return
			}
		}
		if p.ready {
			if _, err := parseReady(p.cmd); err != nil && len(p.cmd) > 0 {
				t.Fatalf("accepted READY that does not parse: %v", err)
			}
		}
	})
}
