package kvevents

// The subscriber's tests run against ts-fake's real publisher
// (cmd/ts-fake/kvpub, on go-zeromq/zmq4), the peer the gateway meets in
// every end-to-end test. kvpub imports this package, so a test file of
// this package cannot import it back; pubhook_test.go, an external test
// file of the same test binary, plugs it in before any test runs.

// TestPublisher is what these tests need of one rank's publisher.
type TestPublisher interface {
	Publish(Batch)
	PublishUnsent(Batch)
	Subscribed() bool
	Endpoints() (pub, replay string)
	Close()
}

// StartTestPublisher starts rank's publisher for cfg (set by
// pubhook_test.go to kvpub.New).
var StartTestPublisher func(cfg Config, rank int, onErr func(error)) (TestPublisher, error)

// Publisher is the tests' handle on a running publisher.
type Publisher struct{ TestPublisher }

// NewPublisher starts rank's publisher for cfg through the hook.
func NewPublisher(cfg Config, rank int, onErr func(error)) (*Publisher, error) {
	p, err := StartTestPublisher(cfg, rank, onErr)
	if err != nil {
		return nil, err
	}
	return &Publisher{p}, nil
}
