package kvevents_test

import (
	"github.com/tsd-project/tsd/cmd/ts-fake/kvpub"
	"github.com/tsd-project/tsd/gateway/kvevents"
)

// The subscriber tests (package kvevents) publish through ts-fake's
// publisher; see publisher_test.go for why it is plugged in from here.
func init() {
	kvevents.StartTestPublisher = func(cfg kvevents.Config, rank int, onErr func(error)) (kvevents.TestPublisher, error) {
		p, err := kvpub.New(cfg, rank, onErr)
		if err != nil {
			return nil, err // not a nil *Publisher inside a non-nil interface
		}
		return p, nil
	}
}
