package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/gateway"
	"github.com/tsd-project/tsd/profiles"
)

type gatewayCmd struct {
	Profile string `arg:"" help:"Profile YAML file."`
	Debug   bool   `help:"Log lane connection events too."`
}

// Run serves the embedded gateway alone, for engines started by hand with
// the commands `tsd plan` prints: bind every socket and rendezvous, serve
// until Ctrl-C, then shut down cleanly (drain, unbind, remove ipc files).
func (c gatewayCmd) Run() error {
	_, plan, errs := profiles.LoadPlan(c.Profile, profiles.LocalHostFacts())
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	level := slog.LevelInfo
	if c.Debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	for _, w := range plan.Warnings {
		log.Warn(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// TODO(integrator): mount the OpenAI front end (gateway/openai) through
	// gateway.Options.Mount once it lands.
	g, err := gateway.New(plan, gateway.Options{Logger: log})
	if err != nil {
		return err
	}
	if err := g.Bind(ctx); err != nil {
		return fmt.Errorf("bind gateway: %w", err)
	}
	// Nobody supervises hand-started engines: treat them as alive so a
	// rendezvous the gateway hosts answers their decode's /health.
	for _, w := range plan.Gateway.Workers {
		g.SetAlive(w.Role, true)
	}
	for _, w := range g.Lane().Workers() {
		in, out := w.Endpoints()
		log.Info("worker bound", "role", w.Role(), "kind", w.Kind(), "handshake", w.HandshakeEndpoint(), "input", in, "output", out, "bootstrap", w.Plan().Bootstrap)
	}
	log.Info("gateway listening", "url", "http://"+g.Addr(), "mode", plan.Gateway.Mode)

	cur, ranks, cancel := g.SubscribeRanks()
	defer cancel()
	go func() {
		_ = cur // the bound workers were just logged
		for ev := range ranks {
			attrs := []any{"role", ev.Role, "identity", ev.Rank.Identity, "dp_rank", ev.Rank.DPRank, "state", ev.Rank.State}
			if ev.Err != "" {
				log.Warn("rank", append(attrs, "err", ev.Err)...)
				continue
			}
			log.Info("rank", attrs...)
		}
	}()

	serveErr := g.Serve(ctx)
	sctx, done := context.WithTimeout(context.Background(), 15*time.Second)
	defer done()
	if err := g.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	if serveErr != nil {
		return serveErr
	}
	log.Info("gateway stopped")
	return nil
}
